"""Reading a project's pins of sglang, torch and the mooncake family (issue 5, reading layer):
the files given and their includes, each read by the reader of its kind.

:func:`read_pins` finds every requirement of a tracked distribution (``sglang``, ``torch``
and the ``mooncake-transfer-engine*`` family, compared after
:func:`packaging.utils.canonicalize_name`) in requirements / constraints files,
``pyproject.toml``, Dockerfiles and shell scripts, and in any file through Renovate-style
regex managers. Nothing is evaluated here: compatibility is the resolver's job.

Contract (documented decisions):

* **Lines** are counted like pip counts them (``str.splitlines``), 1-based. ``line`` is the
  physical line where the requirement's own text starts: the first line of a ``\\``
  continuation in a requirements file; in a multi-line ``RUN pip install ... \\`` the line
  of that argument, not of ``RUN``. ``col`` is the 0-based column, in
  decoded characters, where the exact version text starts on physical line
  ``version_line`` (equal to ``line`` unless a continuation put the version on a later
  line), so ``text.splitlines()[version_line - 1][col:col + len(version)] == version``.
  ``col`` is -1 (and ``version_line`` equals ``line``) when there is no exact version.
* **Exact version**: exactly one ``==`` clause without a wildcard, or one ``===`` clause;
  ``version`` is the text as written. Anything else is ``note="range"``; no specifier is
  ``note="unpinned"``. Several notes are joined with ``"; "``.
* **Files** are classified by name: ``pyproject.toml``; ``Dockerfile*`` / ``Containerfile*``
  / ``*.dockerfile`` and ``*.sh`` / ``*.bash``; ``*.txt`` / ``*.in`` or a name containing
  ``requirements`` / ``constraints`` (kind ``"constraints"`` when the name contains
  ``constraint`` or the file was reached through ``-c``). Any other file is only read
  through ``patterns``; with no patterns it is a :class:`PinError`.
* **Errors** never raise for one bad line: they are collected as :class:`PinError`; a
  file-level problem (missing, a folder, a FIFO, not a kind moonpin reads, TOML syntax
  without a line) uses ``line=0`` unless a line is known, and a file given in ``paths``
  that cannot be read at all carries a ``tip``. A file that is not UTF-8 is reported (with
  the line of the first bad byte) and not read at all: it could not be rewritten
  faithfully. A UTF-8 BOM is accepted (it counts as one column of line 1, as
  ``Path.read_text`` keeps it).
* **Includes** (``-r``/``-c``, also ``--requirement=``/``--constraint=``) are relative to the
  including file; ``path`` of an included file is ``including_dir / argument`` as written.
  A cycle or a missing include is a PinError at the including line. A file reached twice
  (diamond includes, or also given on the command line) is read once. ``${VAR}`` in an
  include's path is expanded from the environment as pip does; URLs, and a variable that is
  not set, are not followed.
* **Direct references** (URLs, paths, ``name @ url``, ``-e``) are reported when a tracked
  name can be told (``#egg=``, ``name @``, a wheel file name, or a path component equal
  to a tracked name) with ``note`` ``"editable install"`` / ``"direct reference"``; a wheel
  file name also gives ``version`` and ``col`` (its version field), ``spec`` stays ``""``.
* **Dockerfiles / shell**: ``ARG``/``ENV``/``export``/plain assignments and
  ``--build-arg`` of the variables in :data:`VERSION_VARIABLES` (``${VAR:-default}`` gives
  the default) are kind ``"dockerfile-arg"`` (in ``.sh`` files too) with a synthesised
  ``spec == "==" + value`` (the value itself when it is not a PEP 440 version, e.g. a git
  ref, then ``version`` is None). ``pip install`` / ``pip3 install`` / ``uv pip install`` /
  ``python -m pip install`` arguments are read across ``\\`` continuations, ``&&`` / ``;``
  chains and quotes (``<``/``>`` count as part of a word, so unquoted ``torch>=2.9`` reads
  as written even though a shell would redirect); options are skipped (with their values);
  a requirement whose version is a shell variable is reported with ``version=None`` and a
  note, and the default of ``${VAR:-default}`` as a pin of its own (noted unused when the
  file sets VAR: then it is rewritten with the others, not judged). ``-r FILE`` / ``-c
  FILE`` (and ``uv pip sync FILE``) are followed as includes: a Dockerfile's
  ``COPY``/``ADD`` and ``WORKDIR`` map the image path back to the build context, looked
  for beside the Dockerfile, then in the current folder; a file found nowhere is skipped
  (the image may make it). Comment-only lines inside a continuation are skipped, as Docker
  does.
* **Base images**: ``FROM lmsysorg/sglang:v0.5.18-cu130`` (any registry, ``--platform``
  and ``AS`` allowed) is an sglang pin of kind ``"docker-image"``, its version the tag's as
  :func:`moonpin.resolver.args.manifests.sglang_version_of_image` reads it (``args --file`` reads
  the
  same tag), so an update rewrites the tag's version only. A tag with a variable is not read.
  The CUDA the tag names (``-cu130``) is judged by :mod:`moonpin.resolver.pins.judging.images`; a
  stage's ``--platform`` is each pin's ``platform`` (and of the requirements files the stage
  installs, whatever order the files are given in): :mod:`moonpin.resolver.pins.reading.platforms`.
* **Ranges** are judged over every release of the knowledge base inside them
  (:mod:`moonpin.resolver.pins.judging.ranges`).
* **pyproject.toml** uses :mod:`tomllib` (3.11+) and then locates each requirement string in
  the text, in order, after its table header and key (so duplicates map to successive
  occurrences). On Python 3.10 a small line-based reader (:func:`_toml_arrays_linewise`)
  reads only ``[project] dependencies``, ``[project.optional-dependencies]`` and
  ``[dependency-groups]`` groups and ``[tool.uv] constraint-dependencies`` /
  ``override-dependencies`` written as arrays of single-line strings under their own table
  headers (no dotted keys, inline tables or multi-line strings).
* **Regex managers** ``patterns=[(regex, dep_name)]`` are applied (``re.MULTILINE``) to every
  file given in ``paths`` (not to included files); the regex must have a ``currentValue``
  group (a ``depName`` group is used when ``dep_name`` is empty); a bad pattern raises
  ``ValueError`` up front (a usage error, not a line error).

Not handled (yet): requirement-file options other than ``-r``/``-c``/``-e`` are skipped
without validation; ``-r``/``-c`` inside ``pip install`` command lines are not followed;
percent-encoded wheel names (``torch-2.9.1%2Bcu128-...whl``) give no version; ``uv add``,
Poetry / PDM / Pipfile / conda files, heredocs, Docker's backtick escape directive and
``${VAR}`` expansion in include paths; the build YAML of CI systems is read only through
``patterns``.

Layout: the values and the one-requirement reader are in :mod:`~moonpin.resolver.pins.reading.base`;
one reader per file kind (:mod:`~moonpin.resolver.pins.reading.requirements`,
:mod:`~moonpin.resolver.pins.reading.pyproject`, :mod:`~moonpin.resolver.pins.reading.shell`,
:mod:`~moonpin.resolver.pins.reading.regex`); this module walks the files and their includes.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from moonpin.kb.errors import UsageError
from moonpin.resolver.pins.reading.base import (
    MAX_FILE_BYTES,
    MAX_INCLUDE_DEPTH,
    Found,
    Pin,
    PinError,
    Text,
    cut,
    read_for_rewrite,
)
from moonpin.resolver.pins.reading.regex import Pattern, compile_patterns, regex_pins
from moonpin.resolver.pins.reading.requirements import Include, requirement_lines

if TYPE_CHECKING:  # the readers of a kind load when a file of that kind is read
    from moonpin.resolver.pins.reading.shell import FileArg
    from moonpin.resolver.pins.reading.sources import Source

#: A file given or included (a str, a :class:`pathlib.Path`): read as a path string, in
#: the spelling ``str(pathlib.Path(...))`` gives it (pathlib costs a command ~3 ms).
Where = str | os.PathLike[str]

__all__ = [
    "PinsUnreadable",
    "Where",
    "file_type",
    "index_sources",
    "project_files",
    "project_python",
    "project_pythons",
    "read_pins",
    "read_pins_or_fail",
]

#: What ``moonpin pins`` reads, for tips.
_KINDS_READ = "requirements/constraints files, pyproject.toml, Dockerfiles and shell scripts"


def _shown(path: Where) -> str:
    """``str(pathlib.Path(path))``: empty and ``.`` parts dropped, ``..`` kept, one root
    (two for a path starting with exactly two slashes, as POSIX allows)."""
    text = os.fspath(path)
    root = "//" if text.startswith("//") and not text.startswith("///") else (
        "/" if text.startswith("/") else "")
    parts = [p for p in text.split("/") if p and p != "."]
    return (root + "/".join(parts)) or "."


def _name(path: str) -> str:
    """``pathlib.Path(path).name`` of a :func:`_shown` path."""
    return "" if path in (".", "/", "//") else path.rsplit("/", 1)[-1]


def _parent(path: str) -> str:
    """``str(pathlib.Path(path).parent)`` of a :func:`_shown` path."""
    if path in (".", "/", "//") or "/" not in path:
        return path if path in (".", "/", "//") else "."
    head = path.rsplit("/", 1)[0]
    if not head.strip("/"):  # /a, //a
        return "//" if path.startswith("//") else "/"
    return head


def file_type(path: Where) -> str | None:
    """The kind a file is read as, from its name (``pyproject``, ``shell``, ``constraints``,
    ``requirements``), or None for a file read only through patterns."""
    low = _name(_shown(path)).lower()
    if low == "pyproject.toml":
        return "pyproject"
    if low.startswith(("dockerfile", "containerfile")) or low.endswith(
        (".dockerfile", ".sh", ".bash")
    ):
        return "shell"
    if "constraint" in low and low.endswith((".txt", ".in")):
        return "constraints"
    if low.endswith((".txt", ".in")) or "requirements" in low or "constraints" in low:
        return "requirements"
    return None


#: Folders never searched for a project's pin files (tools' state, environments, caches).
_NOT_PROJECT = frozenset({"node_modules", "site-packages", "venv", "__pycache__", "build",
                          "dist"})


def _project_file(folder: str, name: str) -> bool:
    """A file the pre-commit hook's ``files`` pattern names: ``requirements*.txt|in``,
    ``constraints*.txt``, any ``.txt|.in`` in a ``requirements/`` or ``constraints/`` folder
    (``requirements/base.txt``), ``pyproject.toml``, ``Dockerfile*``."""
    return (name == "pyproject.toml" or name.startswith("Dockerfile")
            or (os.path.basename(folder) in ("requirements", "constraints")
                and name.endswith((".txt", ".in")))
            or (name.startswith("requirements") and name.endswith((".txt", ".in")))
            or (name.startswith("constraints") and name.endswith(".txt")))


def project_files(root: str, *, depth: int = 6, most: int = 200) -> list[str]:
    """The pin files of the project under ``root`` (the names the pre-commit hook matches),
    sorted; hidden folders, environments and caches skipped, at most ``most`` files down to
    ``depth`` folders."""
    out: list[str] = []
    base = root.rstrip(os.sep).count(os.sep)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _NOT_PROJECT
                         and folder.count(os.sep) - base < depth)
        out += [os.path.normpath(os.path.join(folder, f)) for f in sorted(files)
                if _project_file(folder, f)]
        if len(out) >= most:
            break
    return out[:most]


def _resolve(path: Where) -> str:
    """``pathlib.Path(path).resolve()``, or the absolute path when it cannot be resolved (a
    symlink loop: reading it then says so)."""
    try:
        found = os.path.realpath(path)
        try:
            os.stat(found)
        except OSError as e:  # pathlib's resolve() refuses a loop; anything else is kept
            if e.errno == errno.ELOOP:
                raise
        return found
    except OSError:
        return _shown(os.path.abspath(path))


def _tip_for(path: str, exc: OSError) -> str | None:
    """What to do about a file given on the command line that cannot be read at all."""
    reason = str(getattr(exc, "reason", "") or exc.strerror or "")
    if exc.errno == errno.ENOENT:
        return f"check the path; `moonpin pins` reads {_KINDS_READ}"
    if "directory" in reason:
        inside = _pin_files_in(path)
        if inside:
            return "give the files in it, e.g. moonpin pins " + " ".join(inside)
        return f"give a file, not a folder: `moonpin pins` reads {_KINDS_READ}"
    if "FIFO" in reason or "device" in reason or "socket" in reason:
        return ("give a regular file: a pipe, device or socket is not read (save what it "
                "carries to a file first)")
    if "symlink loop" in reason:
        return "fix the symlink, or give the file it should point at"
    if exc.errno == errno.EACCES:
        return "check the file's permissions"
    return getattr(exc, "hint", None)


def _pin_files_in(folder: str, most: int = 4) -> list[str]:
    """Up to ``most`` files in ``folder`` that ``moonpin pins`` reads, sorted."""
    try:
        names = sorted(os.listdir(folder))[:1000]
    except OSError:
        return []
    hits = [_shown(os.path.join(folder, n)) for n in names
            if file_type(n) is not None and os.path.isfile(os.path.join(folder, n))]
    return [cut(h, 120) for h in hits[:most]]


class _Reader:
    """Reads the files given and their includes once each, collecting into ``found``."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self.found = Found()
        self.seen: set[str] = set()
        self.patterns = patterns
        # the Dockerfile stages that install a file (pip install -r), and what each file
        # includes: its pins are installed on those stages' platforms (see stamp_stages)
        self.installed: dict[str, set[tuple[str | None, str, str]]] = {}
        self.includes: dict[str, list[str]] = {}

    def _load(self, path: str, shown: str, parent: tuple[str, int] | None) -> Text | None:
        """The decoded file, or None with the error recorded: at the including line for an
        include (``parent``), as a file-level error with its tip for a file given."""
        from moonpin.kb.files import read_regular

        try:
            data = read_regular(path, cap=MAX_FILE_BYTES, what="pins file")
        # moonpin.kb.errors.ReadRefused: missing, a folder, a FIFO, a loop...
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            if parent is not None:
                self.found.errors.append(PinError(parent[0], parent[1], "cannot read "
                                                  f"included file {cut(shown)}: {reason}"))
            else:
                self.found.errors.append(PinError(shown, 0, f"{cut(shown)} {reason}",
                                                  _tip_for(path, exc)))
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad_line = data[: exc.start].count(b"\n") + 1
            self.found.errors.append(
                PinError(shown, bad_line,
                         f"not UTF-8 (byte 0x{data[exc.start]:02x} on line {bad_line}); "
                         "file not read")
            )
            return None
        if text.startswith("\ufeff"):
            text = " " + text[1:]  # same length: columns stay those of a read with the BOM
        return Text(text)

    def read(self, given: Where) -> None:
        path = shown = _shown(given)
        resolved = _resolve(path)
        if resolved in self.seen:
            return
        ftype = file_type(path)
        if ftype is None and not self.patterns and os.path.isfile(path):
            self.found.errors.append(PinError(
                shown, 0, f"{cut(shown)} is not a requirements or constraints file, "
                "pyproject.toml, Dockerfile or shell script (by its name)",
                "rename it, or give a pattern to read it: --match "
                "'REGEX with (?<currentValue>...)' --dep NAME"))
            return
        text = self._load(path, shown, None)
        if text is None:
            return
        self.seen.add(resolved)
        if ftype in ("requirements", "constraints"):
            self._requirements(path, shown, text, ftype, [resolved])
        elif ftype == "pyproject":
            from moonpin.resolver.pins.reading.pyproject import pyproject_pins

            for res in pyproject_pins(shown, text):
                self.found.add(res)
        elif ftype == "shell":
            from moonpin.resolver.pins.reading.shell import FileArg, shell_pins

            for item in shell_pins(shown, text):
                if isinstance(item, FileArg):
                    self._installed_file(path, shown, item)
                else:
                    self.found.add(item)
        for pin in regex_pins(shown, text, self.patterns):
            self.found.add(pin)

    def stamp_stages(self) -> list[Pin]:
        """The pins read, those of a file a Dockerfile stage installs (and of what it
        includes) with that stage's platform, whichever order the files were given in; a
        file installed by stages of different platforms is installed on each (as a pin
        outside any stage)."""
        if not self.installed:
            return self.found.pins
        stage: dict[str, set[tuple[str | None, str, str]]] = {}
        todo = list(self.installed.items())
        while todo:
            path, stages = todo.pop()
            have = stage.setdefault(path, set())
            if stages <= have:
                continue
            have |= stages
            todo += [(child, set(have)) for child in self.includes.get(path, ())]
        out = []
        for pin in self.found.pins:
            got = stage.get(_resolve(pin.path)) if pin.platform is None else None
            if got is not None and len({(p, t) for p, _, t in got}) == 1:
                platform, at, tag = min(got, key=lambda s: s[1])
                pin = pin._replace(platform=platform, platform_at=at, platform_tag=tag)
            out.append(pin)
        return out

    def _requirements(self, path: str, shown: str, text: Text, kind: str,
                      stack: list[str]) -> None:
        for res in requirement_lines(text, shown, kind):
            if isinstance(res, Include):
                self._include(path, shown, res, stack)
            else:
                self.found.add(res)

    def _installed_file(self, parent: str, parent_shown: str, arg: FileArg) -> None:
        """A requirements file a Dockerfile or script installs (``pip install -r``): read
        from the first place it is at, beside the file (the build context a ``docker
        build`` of its folder has) or in the current folder (``docker build -f
        docker/Dockerfile .``); one found nowhere is left (the image may make it)."""
        here = _shown(os.path.normpath(_parent(parent)))
        for base in dict.fromkeys((here, ".")):
            for rel in arg.paths:
                target = _shown(os.path.normpath(_shown(os.path.join(base, rel))))
                if os.path.isfile(target):
                    if arg.platform is not None:
                        self.installed.setdefault(_resolve(target), set()).add(
                            (arg.platform, arg.platform_at, arg.platform_tag))
                    self._include(parent, parent_shown, Include(arg.line, target,
                                                                arg.kind), [_resolve(parent)],
                                  target=target)
                    return

    def _include(self, parent: str, parent_shown: str, inc: Include,
                 stack: list[str], *, target: str | None = None) -> None:
        value, line = inc.value, inc.line
        if "://" in value or "$" in value or not value:
            return
        target = _shown(os.path.join(_parent(parent), value)) if target is None else target
        shown = target
        resolved = _resolve(target)
        self.includes.setdefault(_resolve(parent), []).append(resolved)
        if len(stack) >= MAX_INCLUDE_DEPTH:
            self.found.errors.append(PinError(parent_shown, line, f"-r/-c includes nest deeper "
                                              f"than {MAX_INCLUDE_DEPTH} files; "
                                              f"{cut(value)} not read"))
            return
        if resolved in stack:
            chain = " -> ".join(_name(p) for p in [*stack, resolved])
            self.found.errors.append(PinError(parent_shown, line, f"include cycle: {chain}"))
            return
        if resolved in self.seen:
            return
        text = self._load(target, shown, (parent_shown, line))
        if text is None:
            return
        self.seen.add(resolved)
        kind = inc.kind
        if kind != "constraints" and "constraint" in _name(target).lower():
            kind = "constraints"
        self._requirements(target, shown, text, kind, [*stack, resolved])


def read_pins(
    paths: Sequence[Where], *, patterns: Sequence[tuple[str, str]] = ()
) -> tuple[list[Pin], list[PinError]]:
    """Every pin of a tracked distribution in ``paths`` (and their includes), and every line
    that could not be read. Raises ``ValueError`` only for a bad ``patterns`` entry."""
    reader = _Reader(compile_patterns(patterns))
    for path in paths:
        reader.read(path)
    return reader.stamp_stages(), reader.found.errors


class PinsUnreadable(UsageError):
    """Files or lines given to ``moonpin pins`` could not be read; nothing was judged.
    ``details`` are the lines to print before the message (``FILE:LINE: why``, or
    ``FILE: why`` for a whole file), empty when the message says it all."""

    def __init__(self, errors: Sequence[PinError]) -> None:
        self.errors = tuple(errors)
        files = [e for e in self.errors if e.line == 0]
        lines = [e for e in self.errors if e.line != 0]
        if len(self.errors) == 1 and files:
            self.details: tuple[str, ...] = ()
            super().__init__(f"{files[0].message}; nothing was judged",
                             hint=files[0].tip or f"`moonpin pins` reads {_KINDS_READ}")
            return
        self.details = tuple(f"{cut(e.path, 300)}:{e.line}: {cut(e.message, 300)}" if e.line
                             else cut(e.message, 300) for e in self.errors)
        said = [f"{len(files)} file(s)" if files else "", f"{len(lines)} line(s)" if lines
                else ""]
        tips = [next((e.tip for e in files if e.tip), "check the paths") if files else "",
                "fix or remove those lines" if lines else ""]
        super().__init__(" and ".join(s for s in said if s) + " could not be read; nothing "
                         "was judged", hint="; ".join(t for t in tips if t))


def read_pins_or_fail(files: Sequence[str], patterns: Sequence[tuple[str, str]] = ()
                      ) -> list[Pin]:
    """:func:`read_pins` for a command: raises :class:`UsageError` for a bad pattern and
    :class:`PinsUnreadable` when anything could not be read."""
    try:
        found, errors = read_pins(list(files), patterns=patterns)
    except ValueError as ex:
        raise UsageError(cut(str(ex), 300),
                         hint="a --match pattern needs a (?<currentValue>...) group "
                         "(Renovate's spelling; Python's (?P<currentValue>...) works too)"
                         ) from None
    if errors:
        raise PinsUnreadable(errors)
    return found


def index_sources(files: Sequence[str]) -> list[Source]:
    """The find-links folders and indexes ``files`` (and their includes) add: see
    :mod:`moonpin.resolver.pins.reading.sources`."""
    from moonpin.resolver.pins.reading.sources import index_sources as sources_of

    return sources_of([(f, file_type(f)) for f in files])


def _requires_python(files: Sequence[str]) -> tuple[str, str, list[int]] | None:
    """The first ``requires-python`` a pyproject.toml among ``files`` states that parses:
    ``(specifier, file, the CPython 3 minors from 3.8 it admits)``; None when none says."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from moonpin.resolver.inputs import CPYTHON_MINORS
    from moonpin.resolver.pins.reading.pyproject import requires_python

    for f in files:
        if file_type(f) != "pyproject":
            continue
        try:
            spec = requires_python(read_for_rewrite(f))
        except (OSError, UnicodeDecodeError):
            continue  # reading its pins said so
        if not spec:
            continue
        try:
            admits = SpecifierSet(spec)
        except InvalidSpecifier:
            continue
        minors = [m for m in CPYTHON_MINORS if (m >= 8 and f"3.{m}" in admits)
                  or (m >= 8 and admits.contains(f"3.{m}.99"))]
        if minors:
            return spec, f, minors
    return None


def project_python(files: Sequence[str]) -> tuple[str, str] | None:
    """The project's Python when ``--python`` is not given: the lowest CPython minor the
    ``requires-python`` of a pyproject.toml among ``files`` admits (uv resolves for that
    lower bound too), and where it comes from; None when no file says."""
    found = _requires_python(files)
    if found is None:
        return None
    spec, f, minors = found
    return f"3.{minors[0]}", (f"python 3.{minors[0]} (the lowest requires-python "
                              f"{cut(spec, 60)!r} admits, {cut(f, 120)})")


def project_pythons(files: Sequence[str]) -> tuple[list[str], str]:
    """Every CPython minor (``3.N``) the project's ``requires-python`` admits (see
    :func:`project_python`), and where that is said; ``([], "")`` when no file says."""
    found = _requires_python(files)
    if found is None:
        return [], ""
    spec, f, minors = found
    return [f"3.{m}" for m in minors], f"requires-python {cut(spec, 60)!r}, {cut(f, 120)}"
