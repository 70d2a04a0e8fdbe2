"""Reading a project's pins of sglang, torch and the mooncake family (issue 5, reading layer).

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
  file-level problem (missing, not UTF-8, TOML syntax without a line) uses ``line=0``
  unless a line is known. A file that is not UTF-8 is reported (with the line of the first
  bad byte) and not read at all: it could not be rewritten faithfully. A UTF-8 BOM is
  accepted (it counts as one column of line 1, as ``Path.read_text`` keeps it).
* **Includes** (``-r``/``-c``, also ``--requirement=``/``--constraint=``) are relative to the
  including file; ``path`` of an included file is ``including_dir / argument`` as written.
  A cycle or a missing include is a PinError at the including line. A file reached twice
  (diamond includes, or also given on the command line) is read once. URLs and
  ``${VAR}`` in include paths are not followed.
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
  note. Comment-only lines inside a continuation are skipped, as Docker does.
* **pyproject.toml** uses :mod:`tomllib` (3.11+) and then locates each requirement string in
  the text, in order, after its table header and key (so duplicates map to successive
  occurrences). On Python 3.10 a small line-based reader (:func:`_toml_arrays_linewise`)
  reads only ``[project] dependencies``, ``[project.optional-dependencies]`` groups and
  ``[tool.uv] constraint-dependencies`` / ``override-dependencies`` written as arrays of
  single-line strings under their own table headers (no dotted keys, inline tables or
  multi-line strings).
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
"""

from __future__ import annotations

import bisect
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from kb.distributions import DISTRIBUTIONS
from resolver.pins_renovate import GROUP_NAME, plan_stack, renovate_fragment

__all__ = [
    "GROUP_NAME",
    "MOONCAKE_FAMILY",
    "TRACKED",
    "VALUE_KINDS",
    "VERSION_VARIABLES",
    "Pin",
    "PinError",
    "PinnedSet",
    "apply_updates",
    "judge",
    "pinned_set",
    "plan_stack",
    "platform_of",
    "read_for_rewrite",
    "read_pins",
    "renovate_fragment",
    "write_keeping",
]

#: The mooncake family (kb.distributions).
MOONCAKE_FAMILY: tuple[str, ...] = DISTRIBUTIONS
TRACKED: frozenset[str] = frozenset(("sglang", "torch", *MOONCAKE_FAMILY))

#: Dockerfile / shell variables read as pins, and the distribution each one names.
VERSION_VARIABLES: dict[str, str] = {
    "SGLANG_VERSION": "sglang",
    "TORCH_VERSION": "torch",
    "PYTORCH_VERSION": "torch",
    "MOONCAKE_VERSION": "mooncake-transfer-engine",
    "MOONCAKE_TRANSFER_ENGINE_VERSION": "mooncake-transfer-engine",
}

HASH_NOTE = "has --hash: a new version needs new hashes"

#: Limits on what a pins file may make moonpin do (issue 19): the size read, how deep
#: ``-r``/``-c`` includes nest, how long a logical line or a version may be, and how deep
#: a pyproject.toml may nest or how many dotted parts a key or header may have before
#: tomllib (which recurses, and is quadratic in dotted parts) sees it.
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_INCLUDE_DEPTH = 64
MAX_LINE_CHARS = 64 * 1024
MAX_VERSION_CHARS = 200
MAX_TOML_DEPTH = 64
MAX_TOML_DOTS = 64


def _cut(text: str, limit: int = 200) -> str:
    """Echoed input cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def _comment_start(text: str) -> int:
    """Where pip's ``(^|\\s+)#.*$`` comment starts in ``text`` (with the whitespace before
    it), or -1; in linear time (the regex is quadratic on a long run of spaces)."""
    i = text.find("#")
    while i >= 0:
        if i == 0 or text[i - 1].isspace():
            j = i
            while j > 0 and text[j - 1].isspace():
                j -= 1
            return j
        i = text.find("#", i + 1)
    return -1


@dataclass(frozen=True)
class Pin:
    name: str
    spec: str
    version: str | None
    path: str
    line: int
    col: int
    raw: str
    kind: str
    extras: tuple[str, ...] = ()
    marker: str | None = None
    note: str | None = None
    #: physical line that ``col`` is on (a continuation can move the version below ``line``);
    #: left at 0 it becomes ``line``.
    version_line: int = field(default=0)

    def __post_init__(self) -> None:
        if self.version_line == 0:
            object.__setattr__(self, "version_line", self.line)


@dataclass(frozen=True)
class PinError:
    path: str
    line: int
    message: str


# --------------------------------------------------------------------------- text helpers

Locate = Callable[[int], tuple[int, int]]  # offset in a string -> (physical line, column)


class _Text:
    """A decoded file with offset <-> (line, col), lines as ``str.splitlines`` counts them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines()
        self.starts: list[int] = []
        pos = 0
        for chunk in text.splitlines(keepends=True):
            self.starts.append(pos)
            pos += len(chunk)

    def locate(self, offset: int) -> tuple[int, int]:
        i = max(bisect.bisect_right(self.starts, offset) - 1, 0)
        return i + 1, offset - (self.starts[i] if self.starts else 0)


@dataclass
class _Logical:
    """One logical line joined from physical lines, remembering where each piece came from."""

    text: str
    first_line: int
    segs: list[tuple[int, int, int]]  # (offset in text, physical line, column on that line)

    def locate(self, offset: int) -> tuple[int, int]:
        starts = [s[0] for s in self.segs]
        i = max(bisect.bisect_right(starts, offset) - 1, 0)
        start, line, col = self.segs[i]
        return line, col + offset - start


def _shifted(locate: Locate, base: int) -> Locate:
    return lambda offset: locate(base + offset)


def _is_url_or_path(text: str) -> bool:
    t = text.strip()
    return (
        "://" in t
        or t.startswith((".", "/", "~", "file:"))
        or "/" in t.split(";")[0]
        or "\\" in t
        or t.endswith((".whl", ".tar.gz", ".zip"))
    )


def _canon(name: str) -> str:
    return str(canonicalize_name(name))


_NAME_RE = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*")
_EXACT_RE = re.compile(r"(===|==)\s*([^\s,;)]+)")


@dataclass
class _Found:
    pins: list[Pin] = field(default_factory=list)
    errors: list[PinError] = field(default_factory=list)


def _join_notes(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(dict.fromkeys(kept)) if kept else None


def _wheel_pin_parts(ref: str) -> tuple[str, str, int] | None:
    """``(name, version as written, offset of version in ref)`` for a wheel file reference."""
    base_start = max(ref.rfind("/"), ref.rfind("\\")) + 1
    base = ref[base_start:].split("#")[0].split("?")[0]
    if not base.endswith(".whl"):
        return None
    try:
        name, _, _, _ = parse_wheel_filename(base)
    except InvalidWheelFilename:
        return None
    parts = base.split("-")
    return _canon(name), parts[1], base_start + len(parts[0]) + 1


def _reference_name(ref: str) -> str | None:
    egg = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", ref)
    if egg:
        return _canon(egg.group(1))
    wheel = _wheel_pin_parts(ref)
    if wheel:
        return wheel[0]
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*@", ref)
    if m:
        return _canon(m.group(1))
    path = ref.split("#")[0].split("[")[0]
    for comp in reversed(re.split(r"[/\\]", path)):
        if comp and _canon(comp) in TRACKED:
            return _canon(comp)
    return None


def _pin_from_requirement(
    req_text: str,
    locate: Locate,
    path: str,
    kind: str,
    *,
    notes: Sequence[str] = (),
    editable: bool = False,
) -> Pin | PinError | None:
    """A Pin for a tracked requirement, None for an untracked one, PinError if unreadable.

    ``req_text`` is the requirement exactly as found; ``locate`` maps an offset in it to the
    physical (line, col) of the file.
    """
    raw = req_text.strip()
    lead = len(req_text) - len(req_text.lstrip())
    line0, _ = locate(lead)
    named_url = re.match(r"\s*[\w.-]+\s*(\[[^\]]*\])?\s*@", raw) is not None
    if editable or (_is_url_or_path(raw) and not named_url):
        name = _reference_name(raw)
        if name is None:
            return None  # a path or URL we cannot name: not one of ours as far as we can tell
        if name not in TRACKED:
            return None
        note = "editable install" if editable else "direct reference"
        wheel = _wheel_pin_parts(raw)
        if wheel and not editable:
            vline, vcol = locate(lead + wheel[2])
            return Pin(name, "", wheel[1], path, line0, vcol, raw, kind,
                       note=_join_notes(note, *notes), version_line=vline)
        return Pin(name, "", None, path, line0, -1, raw, kind, note=_join_notes(note, *notes))
    try:
        req = Requirement(raw)
    except InvalidRequirement as exc:
        return PinError(path, line0, f"invalid requirement {_cut(raw)!r}: {_cut(str(exc))}")
    name = _canon(req.name)
    if name not in TRACKED:
        return None
    extras = tuple(sorted(req.extras))
    marker = str(req.marker) if req.marker is not None else None
    if req.url:
        wheel = _wheel_pin_parts(req.url)
        ref_note = _join_notes("direct reference", *notes)
        if wheel:
            off = raw.find(req.url) + wheel[2]
            vline, vcol = locate(lead + off)
            return Pin(name, "", wheel[1], path, line0, vcol, raw, kind, extras, marker,
                       ref_note, version_line=vline)
        return Pin(name, "", None, path, line0, -1, raw, kind, extras, marker, ref_note)
    m = _NAME_RE.match(raw)
    spec_start = m.end() if m else 0
    semi = raw.find(";", spec_start)
    spec = raw[spec_start : semi if semi >= 0 else len(raw)].strip()
    exact = [
        s for s in req.specifier
        if s.operator == "===" or (s.operator == "==" and not s.version.endswith(".*"))
    ]
    if len(exact) == 1 and len(exact[0].version) > MAX_VERSION_CHARS:
        return PinError(path, line0, f"the version of {name} is {len(exact[0].version):,} "
                        f"characters long (at most {MAX_VERSION_CHARS}): not a version moonpin "
                        "can judge")
    if len(exact) == 1:
        for em in _EXACT_RE.finditer(raw, spec_start):
            if em.group(1) == exact[0].operator and not em.group(2).endswith(".*"):
                vline, vcol = locate(lead + em.start(2))
                return Pin(name, spec, em.group(2), path, line0, vcol, raw, kind, extras,
                           marker, _join_notes(*notes), version_line=vline)
    note = "range" if spec else "unpinned"
    return Pin(name, spec, None, path, line0, -1, raw, kind, extras, marker,
               _join_notes(note, *notes))


def _value_pin(
    name: str, value: str, line: int, col: int, path: str, raw: str, kind: str,
    *, version_line: int = 0, note: str | None = None,
) -> Pin:
    """A pin whose version is a bare value (Docker ARG, regex ``currentValue``)."""
    if value == "":
        return Pin(name, "", None, path, line, -1, raw, kind,
                   note=_join_notes("unpinned", note), version_line=version_line)
    try:
        if len(value) > MAX_VERSION_CHARS:
            raise InvalidVersion(value)
        Version(value)
    except ValueError:  # InvalidVersion, or int()'s limit on a number of 4,300+ digits
        return Pin(name, _cut(value), None, path, line, -1, _cut(raw), kind,
                   note=_join_notes(f"not a PEP 440 version: {_cut(value, 60)!r}", note),
                   version_line=version_line)
    return Pin(name, "==" + value, value, path, line, col, raw, kind, note=note,
               version_line=version_line)


# --------------------------------------------------------------------------- requirements

_INCLUDE_RE = re.compile(
    r"(--requirement|--constraint|--editable|-r|-c|-e)(?:\s*=\s*|\s+|(?=[^\s=-]))(.*)$"
)


def _pip_logical_lines(lines: list[str]) -> Iterator[_Logical]:
    """pip's ``join_lines``: ``\\`` joins lines; a comment line ends a continuation."""
    pieces: list[tuple[str, int, int]] = []
    for number, line in enumerate(lines, start=1):
        is_comment = line.lstrip().startswith("#")
        if not line.endswith("\\") or is_comment:
            if pieces:
                # pip prefixes a comment line with a space that is not in the file
                pieces.append((" " + line, number, -1) if is_comment else (line, number, 0))
                yield _make_logical(pieces)
                pieces = []
            else:
                yield _make_logical([(line, number, 0)])
        else:
            pieces.append((line[:-1], number, 0))
    if pieces:
        yield _make_logical(pieces)


def _make_logical(pieces: list[tuple[str, int, int]]) -> _Logical:
    """Join (text, physical line, column of the text's first character) pieces."""
    text = ""
    segs: list[tuple[int, int, int]] = []
    for piece, number, col in pieces:
        segs.append((len(text), number, col))
        text += piece
    return _Logical(text, pieces[0][1], segs)


class _Reader:
    def __init__(self, patterns: Sequence[tuple[re.Pattern[str], str]]) -> None:
        self.found = _Found()
        self.seen: set[Path] = set()
        self.patterns = patterns

    # -- file access
    def _load(self, path: Path, shown: str, err_line: int, err_path: str) -> _Text | None:
        from kb.files import read_regular

        try:
            data = read_regular(path, cap=MAX_FILE_BYTES, what="pins file")
        except OSError as exc:  # kb.errors.ReadRefused: missing, a folder, a FIFO, a loop...
            where = f"included file {_cut(shown)}" if err_line else _cut(shown)
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            self.found.errors.append(PinError(err_path, err_line, f"cannot read {where}: "
                                              f"{reason}"))
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
        return _Text(text)

    def read(self, path: Path) -> None:
        shown = str(path)
        resolved = _resolve(path)
        if resolved in self.seen:
            return
        ftype = _file_type(path)
        if ftype is None and not self.patterns and path.is_file():
            self.found.errors.append(PinError(shown, 0, "not a requirements, constraints, "
                                              "pyproject.toml, Dockerfile or shell file; "
                                              "give a pattern to read it"))
            return
        text = self._load(path, shown, 0, shown)
        if text is None:
            return
        self.seen.add(resolved)
        if ftype in ("requirements", "constraints"):
            self._requirements(path, shown, text, ftype, [resolved])
        elif ftype == "pyproject":
            self._pyproject(shown, text)
        elif ftype == "shell":
            self._shell(shown, text)
        self._regex(shown, text)

    # -- requirements / constraints
    def _requirements(
        self, path: Path, shown: str, text: _Text, kind: str, stack: list[Path]
    ) -> None:
        for logical in _pip_logical_lines(text.lines):
            if len(logical.text) > MAX_LINE_CHARS:
                self.found.errors.append(PinError(
                    shown, logical.first_line, f"line is {len(logical.text):,} characters "
                    f"long (at most {MAX_LINE_CHARS:,}); not read"))
                continue
            cut = _comment_start(logical.text)
            body = logical.text[:cut] if cut >= 0 else logical.text
            if not body.strip():
                continue
            lead = len(body) - len(body.lstrip())
            stripped = body.strip()
            if stripped.startswith("-"):
                inc = _INCLUDE_RE.match(stripped)
                if inc is None:
                    continue  # a global option (--index-url, --pre, ...): not a pin
                opt, value = inc.group(1), inc.group(2).strip()
                if opt in ("-e", "--editable"):
                    off = lead + inc.start(2) + (len(inc.group(2)) - len(inc.group(2).lstrip()))
                    self._add(_pin_from_requirement(
                        value, _shifted(logical.locate, off), shown, kind,
                        editable=True))
                    continue
                value = value.strip("'\"")
                sub_kind = "constraints" if opt in ("-c", "--constraint") else kind
                self._include(path, shown, logical.first_line, value, sub_kind, stack)
                continue
            opt_m = re.search(r"\s-", stripped)
            req_text = stripped[: opt_m.start()] if opt_m else stripped
            options = stripped[opt_m.start():] if opt_m else ""
            notes = [HASH_NOTE] if re.search(r"(^|\s)--hash\b", options) else []
            self._add(_pin_from_requirement(
                req_text, _shifted(logical.locate, lead), shown, kind,
                notes=notes))

    def _include(
        self, parent: Path, parent_shown: str, line: int, value: str, kind: str,
        stack: list[Path],
    ) -> None:
        if "://" in value or "$" in value or not value:
            return
        target = parent.parent / value
        shown = str(target)
        resolved = _resolve(target)
        if len(stack) >= MAX_INCLUDE_DEPTH:
            self.found.errors.append(PinError(parent_shown, line, f"-r/-c includes nest deeper "
                                              f"than {MAX_INCLUDE_DEPTH} files; "
                                              f"{_cut(value)} not read"))
            return
        if resolved in stack:
            chain = " -> ".join(p.name for p in [*stack, resolved])
            self.found.errors.append(PinError(parent_shown, line, f"include cycle: {chain}"))
            return
        if resolved in self.seen:
            return
        text = self._load(target, shown, line, parent_shown)
        if text is None:
            return
        self.seen.add(resolved)
        if kind != "constraints" and "constraint" in target.name.lower():
            kind = "constraints"
        self._requirements(target, shown, text, kind, [*stack, resolved])

    # -- pyproject.toml
    def _pyproject(self, shown: str, text: _Text) -> None:
        err = _toml_guard(text.text)
        entries: list[_TomlEntry] = []
        if err is None:
            entries, err = _toml_arrays(text.text)
        if err is not None:
            self.found.errors.append(PinError(shown, err[0], err[1]))
            return
        for kind, group, value, lit_start, quote in entries:
            note = f"optional-dependencies group {group!r}" if group else None
            res = _pin_from_requirement(value, _toml_locator(text, value, lit_start, quote),
                                        shown, kind, notes=[note] if note else [])
            if isinstance(res, PinError) and lit_start < 0:
                res = PinError(shown, 0, res.message + " (its line was not found)")
            self._add(res)

    # -- Dockerfiles and shell scripts
    def _shell(self, shown: str, text: _Text) -> None:
        for logical in _shell_logical_lines(text.lines):
            self._assignments(shown, logical)
            self._pip_installs(shown, logical)

    def _assignments(self, shown: str, logical: _Logical) -> None:
        s = logical.text
        for var, name in VERSION_VARIABLES.items():
            for m in re.finditer(rf"(?<![\w$]){var}(=|\s+|$)", s):
                if m.group(1) != "=":
                    if re.fullmatch(rf"\s*ARG\s+{var}\s*", s, re.IGNORECASE):
                        line0, _ = logical.locate(m.start())
                        self._add(_value_pin(name, "", line0, -1, shown, s.strip(),
                                             "dockerfile-arg", note="build arg without default"))
                        continue
                    # legacy ``ENV NAME value``
                    if not re.match(rf"\s*ENV\s+{var}\s+\S", s, re.IGNORECASE):
                        continue
                value, vstart, end = _shell_value(s, m.end())
                dm = re.fullmatch(rf"\$\{{{var}:?-([^}}]*)\}}", value)
                if dm:
                    value, vstart = dm.group(1), vstart + dm.start(1)
                elif "$" in value:
                    continue  # a reference to another variable: not a literal pin
                line0, _ = logical.locate(m.start())
                vline, vcol = logical.locate(vstart)
                raw = s[m.start():end].strip()
                self._add(_value_pin(name, value, line0, vcol, shown, raw, "dockerfile-arg",
                                     version_line=vline))

    def _pip_installs(self, shown: str, logical: _Logical) -> None:
        words: list[_Word] = []
        commands: list[list[_Word]] = []
        for tok in _shell_words(logical.text):
            if tok.op:
                commands.append(words)
                words = []
            else:
                words.append(tok)
        commands.append(words)
        for cmd in commands:
            for j, w in enumerate(cmd):
                if (
                    w.value == "install"
                    and j
                    and re.fullmatch(r"(\S*/)?pip[\d.]*", cmd[j - 1].value)
                    and all(_is_command_prefix(x.value) for x in cmd[: j - 1])
                ):
                    self._pip_args(shown, logical, cmd[j + 1:])
                    break

    def _pip_args(self, shown: str, logical: _Logical, args: list[_Word]) -> None:
        i = 0
        while i < len(args):
            w = args[i]
            i += 1
            if w.value.startswith("-"):
                opt = w.value.split("=", 1)[0]
                if opt in ("-e", "--editable") and "=" not in w.value and i < len(args):
                    ew = args[i]
                    i += 1
                    self._add(_pin_from_requirement(
                        ew.value, _word_locator(logical, ew), shown,
                        "pip-install", editable=True))
                elif opt in _PIP_VALUE_OPTIONS and "=" not in w.value:
                    i += 1
                continue
            if "$" in w.value:
                self._variable_pin(shown, logical, w)
                continue
            self._add(_pin_from_requirement(
                w.value, _word_locator(logical, w), shown, "pip-install"))

    def _variable_pin(self, shown: str, logical: _Logical, w: _Word) -> None:
        m = _NAME_RE.match(w.value)
        if not m or _canon(m.group(1)) not in TRACKED:
            return
        extras = tuple(sorted(e.strip() for e in (m.group(2) or "[]")[1:-1].split(",")
                              if e.strip()))
        spec = w.value[m.end():].split(";")[0].strip()
        line0, _ = logical.locate(w.offset(0))
        self._add(Pin(_canon(m.group(1)), spec, None, shown, line0, -1, w.value, "pip-install",
                      extras, note="version from a shell variable"))

    # -- regex managers
    def _regex(self, shown: str, text: _Text) -> None:
        for rx, dep in self.patterns:
            for m in rx.finditer(text.text):
                name = dep or (m.group("depName") if "depName" in rx.groupindex else "")
                value = m.group("currentValue")
                if not name or value is None:
                    continue
                vstart = m.start("currentValue")
                line0, _ = text.locate(m.start())
                vline, vcol = text.locate(vstart)
                self._add(_value_pin(_canon(name), value, line0, vcol, shown, m.group(0),
                                     "regex", version_line=vline))

    def _add(self, res: Pin | PinError | None) -> None:
        if isinstance(res, Pin):
            self.found.pins.append(res)
        elif isinstance(res, PinError):
            self.found.errors.append(res)


_PREFIX_WORDS = frozenset({"RUN", "sudo", "exec", "env", "time", "command", "nohup", "uv"})


def _is_command_prefix(word: str) -> bool:
    """A word that may come before ``pip`` in a pip command (``RUN``, ``uv``,
    ``python3 -m``, ``sudo -H``, ``VAR=x``, ``--mount=...``), so ``echo pip install`` is not."""
    return (
        word in _PREFIX_WORDS
        or word.startswith("-")
        or "=" in word
        or re.fullmatch(r"(\S*/)?python[\d.]*", word) is not None
    )


def _resolve(path: Path) -> Path:
    """``path.resolve()``, or the absolute path when it cannot be resolved (a symlink loop:
    reading it then says so)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _file_type(path: Path) -> str | None:
    name = path.name
    low = name.lower()
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


# --------------------------------------------------------------------------- shell words

_PIP_VALUE_OPTIONS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "-p", "--python",
    "--index-strategy", "-C", "--config-settings", "--config-setting", "--trusted-host",
    "--platform", "--python-version", "--python-platform", "--implementation", "--abi",
    "--no-binary", "--only-binary", "--progress-bar", "--src", "--upgrade-strategy",
    "--cache-dir", "--log", "--timeout", "--retries", "--torch-backend", "--index",
    "--default-index", "--override", "--build-constraint", "-b", "--resolution",
    "--prerelease", "--keyring-provider", "--link-mode", "--exclude-newer", "--proxy",
    "--cert", "--client-cert", "--global-option", "--install-option", "--report",
    "--root-user-action", "--group", "--extra", "--no-build-isolation-package",
})


@dataclass
class _Word:
    value: str
    offsets: list[int]  # offset in the logical line of each character of value
    op: bool = False

    def offset(self, i: int) -> int:
        if i < len(self.offsets):
            return self.offsets[i]
        return (self.offsets[-1] + 1) if self.offsets else 0


def _shell_words(s: str) -> Iterator[_Word]:
    """Shell-like words with quotes removed, keeping each character's source offset."""
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "#":
            return
        if s.startswith(("&&", "||"), i):
            yield _Word(s[i : i + 2], [i, i + 1], op=True)
            i += 2
            continue
        if c in ";|&":
            yield _Word(c, [i], op=True)
            i += 1
            continue
        chars: list[str] = []
        offs: list[int] = []
        while i < n and s[i] not in " \t\r;|&":
            c = s[i]
            if c == "'":
                j = s.find("'", i + 1)
                j = n if j < 0 else j
                chars.extend(s[i + 1 : j])
                offs.extend(range(i + 1, j))
                i = j + 1
            elif c == '"':
                i += 1
                while i < n and s[i] != '"':
                    if s[i] == "\\" and i + 1 < n and s[i + 1] in '"\\$`':
                        i += 1
                    chars.append(s[i])
                    offs.append(i)
                    i += 1
                i += 1
            elif c == "\\" and i + 1 < n:
                chars.append(s[i + 1])
                offs.append(i + 1)
                i += 2
            else:
                chars.append(c)
                offs.append(i)
                i += 1
        yield _Word("".join(chars), offs)


def _word_locator(logical: _Logical, word: _Word) -> Locate:
    return lambda i: logical.locate(word.offset(i))


def _shell_value(s: str, start: int) -> tuple[str, int, int]:
    """The (unquoted) value of an assignment at ``start``: value, where it starts, where the
    written value (with its quotes) ends."""
    if start < len(s) and s[start] in "'\"":
        q = s[start]
        end = s.find(q, start + 1)
        end = len(s) if end < 0 else end
        return s[start + 1 : end], start + 1, min(end + 1, len(s))
    m = re.match(r"(\$\{[^}$\s]*\}|[^\s;&|'\"])*", s[start:])
    value = m.group(0) if m else ""
    return value, start, start + len(value)


def _shell_logical_lines(lines: list[str]) -> Iterator[_Logical]:
    pieces: list[tuple[str, int]] = []
    for number, line in enumerate(lines, start=1):
        if pieces and (not line.strip() or line.lstrip().startswith("#")):
            continue  # Docker drops comment (and empty) lines inside a continuation
        cont = re.search(r"\\[ \t]*$", line)
        if cont:
            pieces.append((line[: cont.start()], number))
            continue
        pieces.append((line, number))
        yield _Logical("".join(p for p, _ in pieces), pieces[0][1],
                       _segs(pieces))
        pieces = []
    if pieces:
        yield _Logical("".join(p for p, _ in pieces), pieces[0][1], _segs(pieces))


def _segs(pieces: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    pos = 0
    for piece, number in pieces:
        out.append((pos, number, 0))
        pos += len(piece)
    return out


# --------------------------------------------------------------------------- pyproject.toml

# (kind, optional-dependencies group or None, requirement string, offset of its opening
# quote in the file or -1 when not found, quote character)
_TomlEntry = tuple[str, str | None, str, int, str]

_UV_KEYS = {"constraint-dependencies": "uv-constraint", "override-dependencies": "uv-override"}


def _toml_locator(text: _Text, value: str, lit_start: int, quote: str) -> Locate:
    """Offset in a requirement string -> (line, col) of that character in the file."""

    def locate(offset: int) -> tuple[int, int]:
        if lit_start < 0:
            return 0, -1
        return text.locate(lit_start + 1 + len(_toml_escape(value[:offset], quote)))

    return locate


def _toml_escape(value: str, quote: str) -> str:
    if quote == "'":
        return value
    return value.replace("\\", "\\\\").replace('"', '\\"')


if sys.version_info >= (3, 11):
    import tomllib

    def _toml_load(text: str) -> tuple[dict[str, Any], tuple[int, str] | None]:
        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"at line (\d+)", str(exc))
            return {}, (int(m.group(1)) if m else 0, f"invalid TOML: {_cut(str(exc))}")
        except (RecursionError, ValueError) as exc:  # past _toml_guard's limits all the same
            return {}, (0, f"TOML too deeply nested or too large to read: "
                           f"{_cut(type(exc).__name__)}")

else:  # Python 3.10: no tomllib; _toml_arrays uses _toml_arrays_linewise instead

    def _toml_load(text: str) -> tuple[dict[str, Any], tuple[int, str] | None]:
        raise NotImplementedError("tomllib needs Python 3.11")


def _toml_guard(text: str) -> tuple[int, str] | None:
    """A nesting depth or dotted-key length past the limits, found in one linear pass
    before tomllib (recursive; quadratic in dotted parts) runs: (line, message) or None.
    Strings are skipped; multi-line strings are treated as runs of one-line strings, which
    can only over-count brackets inside them."""
    depth = 0
    for number, line in enumerate(text.splitlines(), start=1):
        i, n = 0, len(line)
        dots = 0
        key_part = True
        while i < n:
            c = line[i]
            if c == "#":
                break
            if c in "\"'":
                j = i + 1
                while j < n and line[j] != c:
                    j += 2 if c == '"' and line[j] == "\\" else 1
                i = j + 1
                continue
            if c in "[{":
                depth += 1
                if depth > MAX_TOML_DEPTH:
                    return number, (f"arrays or tables nest deeper than {MAX_TOML_DEPTH}; "
                                    "not read")
            elif c in "]}":
                depth = max(depth - 1, 0)
            elif c == "=":
                key_part = False
            elif c == "." and key_part:
                dots += 1
                if dots > MAX_TOML_DOTS:
                    return number, (f"a key or table header has more than {MAX_TOML_DOTS} "
                                    "dotted parts; not read")
            i += 1
    return None


def _toml_arrays(text: str) -> tuple[list[_TomlEntry], tuple[int, str] | None]:
    if sys.version_info < (3, 11):
        return _toml_arrays_linewise(text), None
    data, err = _toml_load(text)
    if err is not None:
        return [], err
    wanted: list[tuple[str, str | None, str, str, list[object]]] = []
    project = data.get("project", {})
    if isinstance(project, dict):
        wanted.append(("pyproject", None, "project", "dependencies",
                       _as_list(project.get("dependencies"))))
        groups = project.get("optional-dependencies", {})
        if isinstance(groups, dict):
            for group, reqs in groups.items():
                wanted.append(("pyproject", group, "project.optional-dependencies", group,
                               _as_list(reqs)))
    tool = data.get("tool", {})
    uv = tool.get("uv", {}) if isinstance(tool, dict) else {}
    if isinstance(uv, dict):
        for key, kind in _UV_KEYS.items():
            wanted.append((kind, None, "tool.uv", key, _as_list(uv.get(key))))
    out: list[_TomlEntry] = []
    for kind, group, table, key, reqs in wanted:
        cursor = _toml_key_offset(text, table, key)
        for req in reqs:
            if not isinstance(req, str):
                continue
            best: tuple[int, str] | None = None
            for quote in ('"', "'"):
                pos = text.find(quote + _toml_escape(req, quote) + quote, cursor)
                if pos >= 0 and (best is None or pos < best[0]):
                    best = (pos, quote)
            if best is None:
                out.append((kind, group, req, -1, '"'))
                continue
            out.append((kind, group, req, best[0], best[1]))
            cursor = best[0] + len(_toml_escape(req, best[1])) + 2
    return out, None


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _toml_key_offset(text: str, table: str, key: str) -> int:
    header = re.search(
        r"^[ \t]*\[[ \t]*" + r"[ \t]*\.[ \t]*".join(map(re.escape, table.split(".")))
        + r"[ \t]*\][ \t]*(#.*)?$", text, re.MULTILINE)
    start = header.end() if header else 0
    k = re.compile(r"^[ \t]*[\"']?" + re.escape(key) + r"[\"']?[ \t]*=", re.MULTILINE)
    m = k.search(text, start)
    return m.end() if m else start


def _toml_arrays_linewise(text: str) -> list[_TomlEntry]:
    """Python 3.10 fallback: the four arrays, written under their own table headers.

    Reads ``key = [ "req", 'req', ... ]`` (one or many lines, comments allowed) in
    ``[project]`` (``dependencies``), ``[project.optional-dependencies]`` (every key) and
    ``[tool.uv]`` (``constraint-dependencies`` / ``override-dependencies``). Basic strings
    may use ``\\"`` and ``\\\\``; other escapes, multi-line strings, dotted keys and inline
    tables are not read.
    """
    out: list[_TomlEntry] = []
    table = ""
    pos = 0
    n = len(text)
    line_re = re.compile(r"[^\n]*\n?")
    while pos < n:
        m = line_re.match(text, pos)
        assert m is not None
        line = m.group(0)
        header = re.match(r"[ \t]*\[([^\[\]]+)\][ \t]*(#.*)?$", line.rstrip("\r\n"))
        if header:
            table = re.sub(r"\s+", "", header.group(1)).replace('"', "").replace("'", "")
            pos = m.end()
            continue
        km = re.match(r"[ \t]*[\"']?([A-Za-z0-9_.-]+)[\"']?[ \t]*=[ \t]*\[", line)
        place: tuple[str, str | None] | None = None
        if km:
            key = km.group(1)
            if table == "project" and key == "dependencies":
                place = ("pyproject", None)
            elif table == "project.optional-dependencies":
                place = ("pyproject", key)
            elif table == "tool.uv" and key in _UV_KEYS:
                place = (_UV_KEYS[key], None)
        if km is None or place is None:
            pos = m.end()
            continue
        i = pos + km.end()
        while i < n and text[i] != "]":
            c = text[i]
            if c == "#":
                nl = text.find("\n", i)
                i = n if nl < 0 else nl
            elif c in "\"'":
                j = i + 1
                chars: list[str] = []
                while j < n and text[j] != c and text[j] != "\n":
                    if c == '"' and text[j] == "\\" and j + 1 < n:
                        j += 1
                    chars.append(text[j])
                    j += 1
                out.append((place[0], place[1], "".join(chars), i, c))
                i = j + 1
            else:
                i += 1
        pos = i + 1
    return out


# --------------------------------------------------------------------------- entry point


def read_pins(
    paths: Sequence[Path], *, patterns: Sequence[tuple[str, str]] = ()
) -> tuple[list[Pin], list[PinError]]:
    """Every pin of a tracked distribution in ``paths`` (and their includes), and every line
    that could not be read. Raises ``ValueError`` only for a bad ``patterns`` entry."""
    compiled: list[tuple[re.Pattern[str], str]] = []
    for regex, dep in patterns:
        try:
            rx = re.compile(regex, re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"pattern {regex!r}: {exc}") from exc
        if "currentValue" not in rx.groupindex:
            raise ValueError(f"pattern {regex!r} has no (?P<currentValue>...) group")
        if not dep and "depName" not in rx.groupindex:
            raise ValueError(f"pattern {regex!r} needs a dep name or a (?P<depName>...) group")
        compiled.append((rx, dep))
    reader = _Reader(compiled)
    for path in paths:
        reader.read(Path(path))
    return reader.found.pins, reader.found.errors


# ----------------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class PinnedSet:
    """The versions a project pins, and the pins that disagree."""

    sglang: Pin | None
    torch: Pin | None
    mooncake: Pin | None
    conflicts: tuple[tuple[Pin, Pin], ...]
    loose: tuple[Pin, ...]  # tracked dependencies without an exact version
    exact: tuple[Pin, ...] = ()  # every exact pin (an update rewrites each place)

    def places(self, pin: Pin) -> list[Pin]:
        """Every exact pin of the same dependency and version as ``pin``."""
        return [p for p in self.exact if p.name == pin.name and p.version == pin.version]


def _vkey(version: str | None) -> object:
    """Compare as PEP 440 versions where they are (``===`` pins may be any text)."""
    try:
        return Version(version or "")
    except ValueError:  # InvalidVersion, or a number past int()'s digit limit
        return version


def pinned_set(pins: Sequence[Pin]) -> PinnedSet:
    """Pick the exact pin of each of the three (the first found); report disagreements."""
    first: dict[str, Pin] = {}
    conflicts: list[tuple[Pin, Pin]] = []
    loose: list[Pin] = []
    mooncake_key = "mooncake"
    for p in pins:
        if p.version is None:
            loose.append(p)
            continue
        key = mooncake_key if p.name in MOONCAKE_FAMILY else p.name
        have = first.get(key)
        if have is None:
            first[key] = p
        elif (have.name, _vkey(have.version)) != (p.name, _vkey(p.version)):
            conflicts.append((have, p))
    return PinnedSet(first.get("sglang"), first.get("torch"), first.get(mooncake_key),
                     tuple(conflicts), tuple(loose),
                     tuple(p for p in pins if p.version is not None))


#: Pin kinds whose text is a bare version (Renovate's value is then the version itself).
VALUE_KINDS = frozenset({"dockerfile-arg", "regex"})


def _update(pin: Pin, new_name: str, new_version: str, reason: str,
            group: str = GROUP_NAME) -> dict[str, Any]:
    """A Renovate-like update object for one pin (``updateType`` ``pin`` for a pin that had
    no exact version: its ``currentValue`` is the range or ``""``)."""
    try:
        old = Version(pin.version or "0")
    except ValueError:
        old = Version("0")
    new = Version(new_version)
    if new_name != pin.name:
        kind = "replacement"
    elif pin.version is None:
        kind = "pin"
    elif new.major != old.major:
        kind = "major"
    elif new.minor != old.minor:
        kind = "minor"
    else:
        kind = "patch"
    # As Renovate writes them: a requirement's value is its specifier (``==0.3.12``, the
    # pip_requirements/pep621 managers), a bare value's is the version (Docker ARG, regex).
    bare = pin.kind in VALUE_KINDS
    return {"depName": pin.name, "newName": new_name, "packageFile": pin.path,
            "line": pin.version_line,
            "currentValue": (pin.version or "") if bare else pin.spec,
            "newValue": new_version if bare else f"=={new_version}",
            "currentVersion": pin.version, "newVersion": new_version,
            "updateType": kind, "groupName": group, "reason": reason}


_MARKER_ARCH = re.compile(r"platform_machine\s*==\s*[\"']([\w.-]+)[\"']")
_MARKER_PY = re.compile(r"python_version\s*==\s*[\"'](\d+\.\d+)[\"']")


def platform_of(pins: Sequence[Pin], *, python: str | None = None,
                arch: str | None = None) -> tuple[str | None, str | None, str]:
    """The python and arch to judge on, and where they come from: ``--python``/``--arch``
    first, else an ``==`` in the pins' own markers (``platform_machine == "x86_64"``)."""
    said: list[str] = []
    if python is not None:
        said.append(f"python {python} (from --python)")
    if arch is not None:
        said.append(f"{arch} (from --arch)")
    for p in pins:
        if not p.marker:
            continue
        if python is None and (m := _MARKER_PY.search(p.marker)):
            python = m.group(1)
            said.append(f"python {python} (from the marker at {p.path}:{p.line})")
        if arch is None and (m := _MARKER_ARCH.search(p.marker)):
            arch = m.group(1)
            said.append(f"{arch} (from the marker at {p.path}:{p.line})")
    if python is None:
        said.append("every python the wheels cover")
    if arch is None:
        said.append("x86_64 and aarch64")
    return python, arch, "judged for " + ", ".join(said)


def judge(g: Any, pinned: PinnedSet, *, python: str | None = None, arch: str | None = None,
          strategy: str = "minimal", keep: str | None = None) -> dict[str, Any]:
    """The verdict for a pinned set and the updates that make it compatible.

    ``minimal`` keeps SGLang (and the pinned torch where a mooncake fits it) and moves
    mooncake; ``latest`` moves the whole stack to the newest SGLang that has a prebuilt
    compatible mooncake. ``keep`` names the one package that must not move. The platform is
    ``python``/``arch``, else what the pins' markers say (``platform`` says which).
    """
    python, arch, where = platform_of(
        [p for p in (pinned.sglang, pinned.torch, pinned.mooncake) if p is not None]
        + list(pinned.loose), python=python, arch=arch)
    out = _judge_minimal(g, pinned, python=python, arch=arch, keep=keep)
    out["platform"] = where
    if strategy == "latest" or (keep == "mooncake" and out["verdict"] != "compatible"):
        stack = _stack_move(g, pinned, python=python, arch=arch, keep=keep)
        if stack:
            out["updates"] = stack
        elif keep == "mooncake" and pinned.mooncake is not None:
            out["reasons"].append(f"no SGLang release in the knowledge base fits "
                                  f"{pinned.mooncake.name}=={pinned.mooncake.version} here")
    elif keep == "torch":
        out["updates"] = [u for u in out["updates"] if u["depName"] != "torch"]
    return out


def _stack_move(g: Any, pinned: PinnedSet, *, python: str | None, arch: str | None,
                keep: str | None) -> list[dict[str, Any]]:
    """Updates to the newest SGLang with a prebuilt compatible mooncake (and its torch).

    With ``keep="mooncake"`` only SGLang releases that the pinned mooncake fits count."""
    from packaging.version import Version as V

    from resolver import query

    group = GROUP_NAME
    if keep == "mooncake" and pinned.mooncake is not None:
        ans = query.which_sglang(g, f"{pinned.mooncake.name}=={pinned.mooncake.version}",
                                 python=python, arch=arch).to_json()
        if not ans["compatible"] or pinned.sglang is None:
            return []
        best = ans["compatible"][0]
        new_torch = best["wheels"][0]["torch"]
        ups = [_update(p, "sglang", best["version"], f"{best['requirement']} fits "
                       f"{pinned.mooncake.name}=={pinned.mooncake.version}", group)
               for p in pinned.places(pinned.sglang)]
        if pinned.torch is not None and pinned.torch.version != new_torch:
            ups += [_update(p, "torch", new_torch, f"sglang {best['version']} requires torch "
                            f"{new_torch}", group) for p in pinned.places(pinned.torch)]
        return ups
    for sv in sorted(g.sglang, reverse=True):
        s = g.sglang[sv]
        if s.pg.module is None:
            continue
        which = query.which_mooncake(g, str(sv), python=python, arch=arch).to_json()
        plain = [c for c in which["compatible"] if not c.get("notes")]
        if not plain:
            continue
        best = plain[0]
        new_torch = best["wheels"][0]["torch"]
        moves: list[dict[str, Any]] = []
        if pinned.sglang is not None and V(pinned.sglang.version or "0") != sv:
            moves += [_update(p, "sglang", str(sv), f"the newest sglang with a prebuilt "
                            f"compatible mooncake is {sv}", group)
                    for p in pinned.places(pinned.sglang)]
        if pinned.torch is not None and pinned.torch.version != new_torch and keep != "torch":
            moves += [_update(p, "torch", new_torch, f"sglang {sv} requires torch {new_torch}",
                            group) for p in pinned.places(pinned.torch)]
        if pinned.mooncake is not None and (pinned.mooncake.name, pinned.mooncake.version) != (
                best["dist"], best["version"]):
            moves += [_update(p, best["dist"], best["version"],
                            f"{best['requirement']} has a build sglang {sv} loads", group)
                    for p in pinned.places(pinned.mooncake)]
        return moves
    return []


def _loose_mooncake(pinned: PinnedSet) -> Pin | None:
    """A mooncake requirement without an exact version (unpinned or a range)."""
    return next((p for p in pinned.loose if p.name in MOONCAKE_FAMILY), None)


def _judge_minimal(g: Any, pinned: PinnedSet, *, python: str | None, arch: str | None,
                   keep: str | None) -> dict[str, Any]:
    from resolver import query

    out: dict[str, Any] = {"verdict": "unknown", "reasons": [], "updates": [], "notes": []}
    if pinned.sglang is None:
        out["reasons"].append("sglang is not pinned to one version: nothing to check against")
        return out
    sv = pinned.sglang.version or ""
    torch = pinned.torch.version if pinned.torch else None
    loose = _loose_mooncake(pinned) if pinned.mooncake is None else None
    if pinned.mooncake is None:
        what = f"{loose.name}{loose.spec}" if loose and loose.spec else (
            f"{loose.name} (no version)" if loose else "none")
        out["reasons"].append(f"no mooncake distribution is pinned to one version ({what})")
    else:
        mc = f"{pinned.mooncake.name}=={pinned.mooncake.version}"
        res = query.explain(g, sv, mc, torch=torch, python=python, arch=arch).to_json()
        out["verdict"] = res["verdict"]
        out["reasons"] = res["reasons"]
        out["notes"] = list(res.get("notes") or [])
        out["explain"] = res
        if res["verdict"] == "compatible":
            return out
    # Keep SGLang (and the pinned torch), move mooncake to the newest compatible release
    # (of the distribution in the file when one of its releases fits), prebuilt first.
    which = query.which_mooncake(g, sv, torch=torch, python=python, arch=arch).to_json()
    fits = which["compatible"]
    if loose is not None:
        fits = [c for c in fits if c["dist"] == loose.name and loose.spec and
                _in_spec(c["version"], loose.spec)] or [
                    c for c in fits if c["dist"] == loose.name] or fits
    plain = [c for c in fits if not c.get("notes")] or fits
    if keep == "mooncake":
        plain = []
    target = pinned.mooncake or loose
    if plain and target is not None:
        best = plain[0]
        places = pinned.places(target) if target.version is not None else [target]
        out["updates"] += [_update(
            place, best["dist"], best["version"],
            f"sglang {sv} with torch {torch or 'as it requires'} needs "
            f"{which['query']['module']}; {best['requirement']} has a matching build"
            + ("; note: " + "; ".join(best["notes"]) if best.get("notes") else ""))
            for place in places]
    elif plain:
        out["reasons"].append(f"add {plain[0]['requirement']}: it is the mooncake that fits")
    elif torch is not None and keep not in ("torch", "mooncake"):
        # No mooncake fits the pinned torch: move torch to what SGLang requires.
        relaxed = query.which_mooncake(g, sv, python=python, arch=arch).to_json()
        fits = [c for c in relaxed["compatible"] if not c.get("notes")] or relaxed["compatible"]
        if fits and pinned.torch is not None:
            new_torch = fits[0]["wheels"][0]["torch"]
            out["updates"] += [_update(place, "torch", new_torch,
                                       f"sglang {sv} requires torch {new_torch}")
                               for place in pinned.places(pinned.torch)]
            if target is not None:
                places = pinned.places(target) if target.version is not None else [target]
                note = "; ".join(fits[0].get("notes") or [])
                out["updates"] += [_update(place, fits[0]["dist"], fits[0]["version"],
                                           f"{fits[0]['requirement']} fits torch {new_torch}"
                                           + (f"; note: {note}" if note else ""))
                                   for place in places]
    if not out["updates"] and out["verdict"] != "compatible" and keep != "mooncake" \
            and not plain:
        out["reasons"].append(f"no mooncake release in the knowledge base fits sglang {sv}"
                              f"{' with torch ' + torch if torch else ''}; `moonpin which "
                              f"mooncake --sglang {sv} --why` says why each is excluded")
    return out


def _in_spec(version: str, spec: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        return False


# ----------------------------------------------------------------------- rewriting


def read_for_rewrite(path: str) -> str:
    """A pins file's text exactly as stored (``\\r\\n`` kept: no newline translation), read
    like :func:`read_pins` reads it. Raises ``OSError`` (``kb.errors.ReadRefused``)."""
    from kb.files import read_regular

    return read_regular(path, cap=MAX_FILE_BYTES, what="pins file").decode("utf-8")


def write_keeping(path: str, text: str) -> str:
    """Write ``text`` to ``path`` atomically, keeping what the edit does not change: the file's
    mode, and a symlink (its target is written; the link stays). Returns the path written.
    Raises ``OSError`` naming the path; the file is then unchanged."""
    import stat
    import tempfile

    target = os.path.realpath(path)
    st = os.stat(target)  # ELOOP / ENOENT for a link that leads nowhere
    if not stat.S_ISREG(st.st_mode):
        raise OSError(21, "not a regular file", target)
    folder, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def _name_pattern(name: str) -> re.Pattern[str]:
    """Any PEP 503-equivalent spelling of ``name`` (``mooncake_transfer_engine`` …)."""
    parts = re.split(r"[-_.]+", name)
    return re.compile(r"(?<![\w.-])" + r"[-_.]+".join(map(re.escape, parts)) + r"(?![\w-])",
                      re.IGNORECASE)


def _pin_loose(lines: dict[str, list[str]], pin: Pin, new_name: str, version: str) -> bool:
    """Give an unpinned or ranged requirement line the exact version: its range (or nothing)
    after the name and extras becomes ``==version``. Only a requirement written on one line
    of a requirements file or a ``pip install`` line."""
    if pin.kind not in ("requirements", "constraints", "pip-install") or (pin.note and (
            "reference" in pin.note or "editable" in pin.note or "variable" in pin.note)):
        return False
    text = lines[pin.path][pin.line - 1]
    m = _name_pattern(pin.name).search(text)
    if m is None:
        return False
    end = m.end()
    ex = re.match(r"\s*\[[^\]]*\]", text[end:])
    if ex:
        end += ex.end()
    rest = text[end:]
    if pin.spec:
        at = rest.find(pin.spec)
        if at < 0 or rest[:at].strip():
            return False
        rest = rest[:at] + "==" + version + rest[at + len(pin.spec):]
    else:
        rest = "==" + version + rest
    head = text[:m.start()] + (new_name if new_name != pin.name else m.group(0))
    lines[pin.path][pin.line - 1] = head + text[m.end():end] + rest
    return True


def apply_updates(pins: Sequence[Pin], updates: Sequence[dict[str, Any]],
                  texts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The files' new texts with ``updates`` applied at the pins' recorded places, and the
    updates that could not be written (with why). Only the versions (and, for a switch of
    distribution, the name) change; comments, extras, markers and layout stay."""
    by_place = {(p.path, p.version_line, p.version): p for p in pins if p.version is not None}
    lines = {path: text.splitlines(keepends=True) for path, text in texts.items()}
    problems: list[str] = []
    edits: dict[tuple[str, int], list[tuple[int, str, str]]] = {}
    renames: list[tuple[Pin, str]] = []
    loose = {(p.path, p.line, p.name): p for p in pins if p.version is None}
    for u in updates:
        where = f"{u['packageFile']}:{u['line']}"
        if "currentVersion" in u and u["currentVersion"] is None:
            lpin = loose.get((u["packageFile"], u["line"], u["depName"]))
            if lpin is None or not _pin_loose(lines, lpin, u["newName"], u["newVersion"]):
                problems.append(f"{where}: no requirement text to pin for {u['depName']}")
            continue
        pin = by_place.get((u["packageFile"], u["line"], u["currentVersion"]))
        if pin is None or pin.col < 0:
            problems.append(f"{where}: no version text to rewrite for {u['depName']}")
            continue
        if pin.note and HASH_NOTE in pin.note:
            problems.append(f"{where}: {u['depName']} is pinned with --hash; a new version "
                            "needs new hashes (pip-compile --generate-hashes): not written")
            continue
        if u["newName"] != u["depName"]:
            if pin.kind == "dockerfile-arg":
                problems.append(f"{where}: {pin.raw.split('=')[0]} carries a version only; "
                                f"switch the package to {u['newName']} where it is installed")
                continue
            renames.append((pin, u["newName"]))
        edits.setdefault((pin.path, pin.version_line), []).append(
            (pin.col, pin.version or "", u["newVersion"]))
    for (path, lineno), changes in edits.items():
        text = lines[path][lineno - 1]
        for col, old, new in sorted(changes, reverse=True):  # right to left keeps columns
            if text[col:col + len(old)] != old:
                problems.append(f"{path}:{lineno}: the file changed since it was read")
                continue
            text = text[:col] + new + text[col + len(old):]
        lines[path][lineno - 1] = text
    for pin, new_name in renames:
        text = lines[pin.path][pin.line - 1]
        lines[pin.path][pin.line - 1] = _name_pattern(pin.name).sub(new_name, text, count=1)
    return {path: "".join(ls) for path, ls in lines.items()}, problems


