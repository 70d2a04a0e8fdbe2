"""Where a project's own files let pip and uv find torch besides the package index, and what
that lets in: PEP 440's ``torch==2.13.0`` admits every local build of 2.13.0 and both pick
the highest, so a ``2.13.0+cpu`` that a ``--find-links`` folder or an extra index offers is
installed instead of the index's CUDA build (and ``import mooncake.pg`` then fails with
``libc10_cuda.so: cannot open shared object file``); so is a ``2.14.1+cu126`` where the stack
was judged with the index's CUDA 13 build (every extension built for CUDA 13 then loads
beside a CUDA 12 torch).

Read here: a requirements or constraints file's ``-f``/``--find-links``, ``-i``/
``--index-url`` and ``--extra-index-url`` lines (pip's ``req_file.py``: a relative
find-links path is the requirements file's folder's when it exists there), its ``-r``/``-c``
includes; the same options on a Dockerfile's or script's ``pip install`` / ``uv pip
install`` lines (with uv's ``--index``, ``--default-index`` and ``--torch-backend``; a
path the Dockerfile copied mapped back to the build context) and the files those lines
install with ``-r``; a pyproject.toml's ``[[tool.uv.index]]`` (an ``explicit`` one only where
``[tool.uv.sources]`` sends torch to it) and ``[tool.uv]``/``[tool.uv.pip]``
``find-links``, ``index-url``, ``extra-index-url``. A local folder is listed for the local
builds it holds; an index is not fetched (``pins`` reads no network), so any index may
hold a CPU build (PyTorch's CPU index does), and one whose last path segment is a local
label, as PyTorch names its indexes (``…/whl/cu126``), holds that label's builds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from moonpin.resolver.pins.reading.base import MAX_FILE_BYTES, MAX_INCLUDE_DEPTH, Pin, cut

__all__ = ["Finding", "Source", "build_findings", "cpu_build", "index_sources",
           "with_sources"]

#: At most this many entries of a find-links folder are looked at.
MAX_LISTED = 100_000

_OPTION = re.compile(r"(--find-links|--extra-index-url|--index-url|-f|-i)(?:\s*=\s*|\s+|(?=\S))"
                     r"(\S+)")
_INCLUDE = re.compile(r"(--requirement|--constraint|-r|-c)(?:\s*=\s*|\s+|(?=\S))(\S+)")


class Source(NamedTuple):
    """One place a file lets the installer find packages: ``option`` as written
    (``--find-links``, ``[[tool.uv.index]]``), its value, where it is, the local folder
    it names (None for an index URL) and the torch builds with a local label that folder
    holds (``2.13.0+cpu``, ``2.14.1+cu126``, …; None when it is an index or could not be
    listed)."""

    path: str
    line: int
    option: str
    value: str
    folder: str | None = None
    local_builds: tuple[str, ...] | None = None

    def said(self) -> str:
        return f"{self.option} {cut(self.value, 120)} ({self.path}:{self.line})"

    def supplies(self, public: str) -> tuple[str, ...] | None:
        """The local builds of torch ``public`` this source can supply: those a folder
        holds; for an index or a folder that could not be listed, ``public+cpu`` and the
        build of the label its URL ends with (``…/whl/cu126``: ``public+cu126``); None for
        a folder holding none."""
        if self.local_builds is None:
            label = _url_label(self.value)
            return tuple(dict.fromkeys((f"{public}+cpu", *(
                (f"{public}+{label}",) if label else ()))))
        mine = tuple(b for b in self.local_builds if b.partition("+")[0] == public)
        return mine or None


def _url_label(url: str) -> str | None:
    """The local label an index URL's last path segment names, as PyTorch lays its indexes
    out (``https://download.pytorch.org/whl/cu126`` holds ``+cu126`` builds), else None."""
    from urllib.parse import urlsplit

    try:
        last = urlsplit(url).path.rstrip("/").rpartition("/")[2].lower()
    except ValueError:
        return None
    return last if re.fullmatch(r"cpu|cu\d{2,4}|rocm\d+(\.\d+)*", last) else None


def _local_folder(value: str, base: str) -> str | None:
    """The folder a find-links value names (a path, or a ``file:`` URL), or None for a URL."""
    if value.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(value).path) or None
    if "://" in value:
        return None
    value = os.path.expanduser(value)
    beside = os.path.join(base, value)
    return beside if os.path.exists(beside) else value


def _local_builds(folder: str) -> tuple[str, ...] | None:
    """The torch versions with a local label (``+cpu``, ``+cpu.cxx11.abi``, ``+cu126``)
    among the wheel and sdist names of ``folder``; None when it cannot be listed."""
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    found: set[str] = set()
    try:
        with os.scandir(folder) as it:
            for n, entry in enumerate(it):
                if n >= MAX_LISTED:
                    return None  # too many to say: judged as an index
                name = entry.name
                if not name.lower().startswith("torch-"):
                    continue
                try:
                    v = (parse_wheel_filename(name)[1] if name.endswith(".whl")
                         else parse_sdist_filename(name)[1])
                except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
                    continue
                if v.local is not None:
                    found.add(str(v))
    except OSError:
        return None
    return tuple(sorted(found))


def _requirements_sources(path: str, out: list[Source], seen: set[str], depth: int) -> None:
    from moonpin.kb.files import read_regular
    from moonpin.resolver.pins.reading.requirements import comment_start, pip_logical_lines

    real = os.path.realpath(path)
    if real in seen or depth > MAX_INCLUDE_DEPTH:
        return
    seen.add(real)
    try:
        text = read_regular(path, cap=MAX_FILE_BYTES, what="pins file").decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return  # reading its pins said so
    base = os.path.dirname(path) or "."
    for logical in pip_logical_lines(text.splitlines()):
        cut_at = comment_start(logical.text)
        body = (logical.text[:cut_at] if cut_at >= 0 else logical.text).strip()
        if not body.startswith("-"):
            continue
        inc = _INCLUDE.match(body)
        if inc is not None:
            target = inc.group(2).strip("'\"")
            if "://" not in target:
                _requirements_sources(os.path.join(base, target), out, seen, depth + 1)
            continue
        m = _OPTION.match(body)
        if m is None:
            continue
        option = {"-f": "--find-links", "-i": "--index-url"}.get(m.group(1), m.group(1))
        value = m.group(2).strip("'\"")
        folder = _local_folder(value, base) if option == "--find-links" else None
        out.append(Source(path, logical.first_line, option, value, folder,
                          _local_builds(folder) if folder is not None else None))


def _line_of(text: str, needle: str) -> int:
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _pyproject_sources(path: str, out: list[Source]) -> None:
    from moonpin.kb.files import read_regular
    from moonpin.resolver.pins.reading.pyproject import toml_document

    try:
        text = read_regular(path, cap=MAX_FILE_BYTES, what="pins file").decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return  # reading its pins said so
    doc = toml_document(text)
    if doc is None:
        return  # not TOML (reading its pins said so), or Python 3.10
    uv = doc.get("tool", {}).get("uv", {}) if isinstance(doc.get("tool"), dict) else {}
    if not isinstance(uv, dict):
        return
    base = os.path.dirname(path) or "."
    sources = uv.get("sources", {})
    torch_src: Any = sources.get("torch") if isinstance(sources, dict) else None
    torch_indexes = {s.get("index") for s in (torch_src if isinstance(torch_src, list)
                                               else [torch_src]) if isinstance(s, dict)}
    for index in uv.get("index", []) if isinstance(uv.get("index"), list) else []:
        if not isinstance(index, dict) or not isinstance(index.get("url"), str):
            continue
        if index.get("explicit") is True and index.get("name") not in torch_indexes:
            continue  # only the packages [tool.uv.sources] sends there come from it
        url = index["url"]
        folder = (_local_folder(url, base) if index.get("format") == "flat" else None)
        out.append(Source(path, _line_of(text, url), "[[tool.uv.index]]", url, folder,
                          _local_builds(folder) if folder is not None else None))
    pip = uv.get("pip")
    for table in (uv, pip if isinstance(pip, dict) else {}):
        for key in ("find-links", "extra-index-url", "index-url"):
            values = table.get(key)
            for value in (values if isinstance(values, list) else [values]):
                if not isinstance(value, str):
                    continue
                folder = _local_folder(value, base) if key == "find-links" else None
                out.append(Source(path, _line_of(text, value), f"[tool.uv] {key}", value,
                                  folder, _local_builds(folder) if folder is not None else None))


def _shell_sources(path: str, out: list[Source], seen: set[str]) -> None:
    """A Dockerfile's or script's ``pip install`` / ``uv pip install`` options, and those of
    the requirements files it installs (``-r``), each file looked for beside it, then in
    the current folder (as the pins reader looks for them)."""
    from moonpin.kb.files import read_regular
    from moonpin.resolver.pins.reading.base import Text
    from moonpin.resolver.pins.reading.shell import FileArg, shell_index_options

    try:
        text = read_regular(path, cap=MAX_FILE_BYTES, what="pins file").decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return  # reading its pins said so
    base = os.path.dirname(path) or "."
    for arg in shell_index_options(path, Text(text)):
        places = [os.path.normpath(os.path.join(b, p)) for p in arg.paths
                  for b in dict.fromkeys((base, "."))]
        if isinstance(arg, FileArg):
            found = next((p for p in places if os.path.isfile(p)), None)
            if found is not None:
                _requirements_sources(found, out, seen, 1)
            continue
        folder = None
        if arg.option == "--find-links":
            folder = next((p for p in places if os.path.isdir(p)), None) or _local_folder(
                arg.value, base)
        out.append(Source(path, arg.line, arg.option, arg.value, folder,
                          _local_builds(folder) if folder is not None else None))


def index_sources(files: Sequence[tuple[str, str | None]]) -> list[Source]:
    """Every find-links folder and index the ``files`` (each with the kind it is read as:
    ``requirements``, ``constraints``, ``pyproject``, ``shell``) and their includes add to
    pip's or uv's default index, in file order."""
    out: list[Source] = []
    seen: set[str] = set()
    for f, kind in files:
        if kind in ("requirements", "constraints"):
            _requirements_sources(f, out, seen, 0)
        elif kind == "pyproject":
            _pyproject_sources(f, out)
        elif kind == "shell":
            _shell_sources(f, out, seen)
    return out


def _admits(spec: str, build: str) -> bool:
    try:
        return SpecifierSet(spec).contains(build, prereleases=True)
    except InvalidSpecifier:
        return False


def cpu_build(public: str, build: str) -> str | None:
    """What is wrong with ``build`` of torch ``public`` when nothing is known of the CUDA
    the stack needs: a CPU build is (``a CPU build``); anything else is not said."""
    return "a CPU build" if build.partition("+")[2].startswith("cpu") else None


class Finding(NamedTuple):
    """A torch requirement that lets a wrong local build in: the requirement judged (a pin
    of torch, or, with none, the SGLang pin whose Requires-Dist is the torch requirement
    pip meets), the specifier judged, the release, the exclusions that keep it out
    (``!=2.13.0+cpu``, ``!=2.13.0+cu126``, …), why (the sources that can supply it), those
    sources said, and whether an update can write it (not when no torch line is there)."""

    pin: Pin
    public: str
    exclude: tuple[str, ...]
    why: str
    where: str
    cpu_only: bool = True
    spec: str = ""
    written_here: bool = True

    def written(self) -> str:
        """The specifier that keeps the builds out: the exact pin's release, or the range
        judged (as written, or SGLang's for an unpinned torch), with the exclusions."""
        head = f"=={self.public}" if _exact_spec(self.spec) is not None else self.spec
        return ",".join([head, *self.exclude])


def _exact_spec(spec: str) -> str | None:
    """The public release ``spec`` is exact on (``==2.13.0``, also with exclusions)."""
    try:
        specs = list(SpecifierSet(spec))
    except InvalidSpecifier:
        return None
    eq = [x for x in specs if x.operator == "==" and "*" not in x.version]
    if len(eq) != 1:
        return None
    try:
        v = Version(eq[0].version)
    except InvalidVersion:
        return None
    return None if v.local is not None else str(v)


def _publics(spec: str, releases: Sequence[str]) -> list[str]:
    """The public torch releases a requirement ``spec`` lets pip take: the one it is exact
    on, or each of ``releases`` (the knowledge base's) a range admits (pip takes the highest
    version the range admits, a local build of it included); none for ``===`` or no
    specifier."""
    if not spec or spec.lstrip().startswith("==="):
        return []
    public = _exact_spec(spec)
    if public is not None:
        return [public]
    return [r for r in releases if _admits(spec, r)]


def _judged(exact: Sequence[Pin], moved: set[tuple[str, int, int]], implied: str,
            sglang: Pin | None) -> list[tuple[Pin, str, str, bool]]:
    """Each torch requirement pip meets, as (the pin said, its specifier, how it is said,
    whether a torch line is there to write): every torch pin not already moved; an
    unpinned ``torch`` takes ``implied`` (the pinned SGLang's torch requirement); with no
    torch pin at all, that requirement itself, said at the SGLang pin."""
    out = []
    torches = [p for p in exact if p.name == "torch"]
    for pin in torches:
        if (pin.path, pin.version_line, pin.col) in moved:
            continue
        spec = pin.spec or (f"=={pin.version}" if pin.version else "")
        at = f"at {pin.path}:{pin.line}"
        if spec:
            out.append((pin, spec, f"torch{pin.spec} {at}", True))
        elif implied and sglang is not None:
            out.append((pin, implied, f"torch (unpinned) {at}, which sglang=="
                                      f"{sglang.version} requires as torch{implied},", True))
    if not torches and implied and sglang is not None:
        out.append((sglang, implied, f"sglang=={sglang.version} at {sglang.path}:"
                                     f"{sglang.line} requires torch{implied}, which", False))
    return out


def build_findings(exact: Sequence[Pin], updates: Sequence[dict[str, Any]],
                   sources: Sequence[Source],
                   wrong: Callable[[str, str], str | None] = cpu_build,
                   releases: Sequence[str] = (), implied: str = "",
                   sglang: Pin | None = None) -> list[Finding]:
    """The torch requirements (the pins of ``exact``, a range over the torch ``releases``
    it admits; an unpinned torch, or none, over ``implied``: what the ``sglang`` pin
    requires) that admit a local build ``sources`` can supply and ``wrong(public, build)``
    says is wrong for the stack (a CPU build; one of another CUDA major than the stack was
    judged with). A pin an update already moves is left to it (a written torch update
    carries the CPU exclusion)."""
    from moonpin.kb.distributions import torch_cpu_exclusions

    moved = {(u["packageFile"], u["line"], u["col"]) for u in updates if u["depName"] == "torch"}
    out: list[Finding] = []
    for pin, spec, subject, here in _judged(exact, moved, implied, sglang):
        by_source: dict[int, tuple[Source, dict[str, str]]] = {}
        publics: list[str] = []
        for public in _publics(spec, releases):
            for n, s in enumerate(sources):
                bad = {b: why for b in s.supplies(public) or () if _admits(spec, b)
                       and (why := wrong(public, b)) is not None}
                if bad:
                    by_source.setdefault(n, (s, {}))[1].update(bad)
                    publics.append(public)
        hits = list(by_source.values())
        if not hits:
            continue
        public = max(publics, key=Version)
        said = {b: why for _, bad in hits for b, why in bad.items()}
        builds = sorted(said, key=Version)
        excl = tuple(dict.fromkeys((*torch_cpu_exclusions(sorted(set(publics), key=Version)),
                                    *(f"!={b}" for b in builds))))
        where = "; ".join(s.said() for s, _ in hits[:3]) + (
            f" and {len(hits) - 3} more" if len(hits) > 3 else "")
        cpu_only = all(said[b] == "a CPU build" for b in builds)
        what = (f"{' and '.join(builds)}, {'CPU builds' if len(builds) > 1 else 'a CPU build'},"
                if cpu_only else
                " and ".join(f"{b}, {said[b]}," for b in builds))
        then = ("`import mooncake.pg` fails: libc10_cuda.so cannot be opened" if cpu_only else
                "the extensions built for the CUDA the stack was judged with load beside "
                "another CUDA runtime, or not at all")
        found = Finding(pin, public, excl, "", where, cpu_only, spec, here)
        takes = (f"the highest local build of {public}" if _exact_spec(spec) is not None
                 else "the highest version the range admits, a local build included")
        fix = (f"exclude it: torch{found.written()}" if here else
               f"pin torch beside it: torch{found.written()}")
        if _exact_spec(spec) is None:  # exclusions name releases; the range admits later ones
            fix += (f" (a later release the range admits is not excluded, and {where} may "
                    f"supply its CPU build too: pin torch=={public} to keep it out for good)"
                    if cpu_only else
                    f" (a later release the range admits is not excluded: pin "
                    f"torch=={public} to keep it out for good)")
        found = found._replace(why=(
            f"{subject} admits {what} which {where} can supply: "
            f"pip and uv take {takes} (then {then}); {fix}"))
        out.append(found)
    return out


def with_sources(updates: Sequence[dict[str, Any]], exact: Sequence[Pin],
                 sources: Sequence[Source],
                 update: Callable[[Pin, str, str, str], dict[str, Any]],
                 wrong: Callable[[str, str], str | None] = cpu_build,
                 releases: Sequence[str] = (), implied: str = "",
                 sglang: Pin | None = None,
                 ) -> tuple[tuple[str, ...], tuple[dict[str, Any], ...]]:
    """What the wrong local builds ``sources`` let in (see :func:`build_findings`) add to a
    :class:`~moonpin.resolver.pins.judging.judge.Judgement` whose updates are ``updates``: a
    reason each, and an update (made by ``update``, judge's own) that writes the exclusions
    (both empty: none; the judgement then makes a compatible verdict incompatible)."""
    found = build_findings(exact, updates, sources, wrong, releases, implied, sglang)
    added = []
    for f in found:
        if not f.written_here:
            continue  # no torch line to write: said, with the line to add
        u = update(f.pin, "torch", f.public, f"exclude the {'CPU' if f.cpu_only else 'wrong'} "
                   f"build {f.where} can supply")
        u.update(updateType="pin", newValue=f.written(), exclude=list(f.exclude))
        added.append(u)
    return tuple(f.why for f in found), tuple(added)
