"""Read an installed SGLang's sources for the runtime check, fast.

A real SGLang release holds ~3,200 ``.py`` files (~46 MB); reading them all costs more than a
bare interpreter start. The check therefore keeps what it learned in a small cache validated
the way Python validates bytecode against its source: a file whose size and modification
time (ns) are unchanged since it was analysed is not read again; a new, changed or removed
file is (or is dropped), and so is every file when moonpin's analyzer changed (the cache
records a hash of ``moonpin/readers/pyast*.py``). A cache that cannot be read, parsed or written is
ignored: the check then reads every source, as with ``--no-cache``.

The cache lives in moonpin's cache folder (:func:`moonpin.kb.cache.cache_dir`), two marshal
files per source set: the stamps file (:mod:`moonpin.preflight.installed.stamps`), the source set
with the stamp of every folder, file and source it was made from and the requirement derived
from the sources (all a start that finds nothing changed reads: one ``stat`` per folder and
per source, no listing, no source read), and ``check-sources-<crc>.marshal``, the facts of
each source (read only when something changed, to re-read only what did). Run the check once
when the image is built (``RUN moonpin check --no-deep ...``) and every worker start of that
image finds it warm.

Standard library and :mod:`moonpin.readers.pyast.usage` only: this is on the worker-start path (no
``hashlib`` either: loading OpenSSL costs ~5 ms; CRC-32 tells changes apart well enough).
The cache also keeps the process-group requirement derived from the facts, so a start that
finds nothing changed does not even load the analyzer, nor ``pathlib``, ``dataclasses``,
``typing`` or ``json`` (each of them loads ``re`` and ``enum``: ~8 ms together).
"""

from __future__ import annotations

import os
import zlib

from moonpin.kb import cache as _cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.pyimport.importer import Sources
    from moonpin.readers.pyast import usage as pyast

__all__ = ["CACHE_FORMAT", "SourceFacts", "derive", "scan", "will_read"]

CACHE_FORMAT = 5
#: the moonpin package folder (readers/ is in it)
_MOONPIN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
_READERS = os.path.join(_MOONPIN, "readers")
_PYAST = tuple(os.path.join(_READERS, "pyast", f) for f in ("usage.py", "facts.py", "walk.py"))


class SourceFacts:
    """The process-group extension's facts of one SGLang package folder (mooncake's: the
    analyzer's, :mod:`moonpin.readers.pyast.usage`), and how they were obtained."""

    def __init__(self) -> None:
        self.imports: list[pyast.ImportFact] = []
        self.calls: list[pyast.CallFact] = []
        self.backends: list[pyast.BackendLiteral] = []
        self.feature_imports: list[pyast.ImportFact] = []  # every_import
        #: the elastic-EP requirement from imports/calls/backends: module, names, backends,
        #: evidence, optional_names (see :func:`derive`)
        self.derived: dict[str, Any] = {}
        self.files = 0  # .py files in the package
        self.read = 0  # files read this time (the rest came from the cache)
        self.cache = "off"  # "off" | "cold" | "warm" | "stale" | "unusable"
        self.cache_error: str | None = None  # why the cache could not be written, if so

    def __repr__(self) -> str:
        return (f"SourceFacts(files={self.files}, read={self.read}, cache={self.cache!r}, "
                f"derived={self.derived!r})")


def _stat_files(src: Sources) -> dict[str, tuple[int, int, str]]:
    """module path -> (size, mtime_ns, file) of every source ``src`` names. Raises OSError
    when one cannot be read (a ``.py`` entry that is no file, an unlistable folder)."""
    _refuse_broken(src)
    out: dict[str, tuple[int, int, str]] = {}
    for rel, path in src.files.items():
        st = os.stat(path)
        out[rel] = (st.st_size, st.st_mtime_ns, path)
    return out


def _refuse_broken(src: Sources) -> None:
    """Raises OSError for the first entry of ``src`` the importer cannot load."""
    for path in src.broken[:1]:
        if os.path.isdir(path):
            os.listdir(path)  # raises why it cannot be listed
        else:
            os.stat(path)  # a dangling symbolic link raises FileNotFoundError
        raise OSError(5, "not a regular file: the importer cannot load it", path)


#: The largest source file read (SGLang's largest is well under 1 MB).
MAX_SOURCE = 16 * 1024 * 1024


def _read(path: str, within: Confined, stamp: list[int] | None = None) -> bytes:
    """Raises OSError (:class:`moonpin.kb.errors.ReadRefused`) for a FIFO, a device, a folder, a
    loop or a file over :data:`MAX_SOURCE`: the caller then falls back to the KB.
    ``stamp``: gets the file's size and mtime, taken before the read."""
    return within.read(path, cap=MAX_SOURCE, what="SGLang source", stamp=stamp)


def _analyzer_hash() -> str:
    from moonpin.preflight.access.confined import NOWHERE

    out = []
    for path in _PYAST:
        data = _read(path, NOWHERE)  # moonpin's own; read, not imported: a warm start never
        # loads it
        out.append(f"{len(data)}-{zlib.crc32(data):08x}")
    return " ".join(out)


def derive(facts: SourceFacts) -> dict[str, Any]:
    """The process-group requirement of the facts (what :func:`moonpin.readers.pyast.usage.pg_needs`
    makes of them) as plain data."""
    from moonpin.readers.pyast import usage as pyast

    n = pyast.pg_needs(facts.imports, facts.calls, facts.backends)
    return {"module": n.module, "names": list(n.names), "backends": list(n.backends),
            "evidence": list(n.evidence), "optional_names": list(n.optional_names),
            "alternatives": list(n.alternatives)}


def _cache_file(cache_dir: str | os.PathLike[str], key: str) -> str:
    # The document names its package too: two folders sharing a CRC only thrash.
    return os.path.join(cache_dir, f"check-sources-{zlib.crc32(key.encode()):08x}.marshal")


def _facts_to_json(fa: pyast.FileAnalysis) -> dict[str, Any]:
    from dataclasses import asdict

    return {"imports": [asdict(i) for i in fa.imports], "calls": [asdict(c) for c in fa.calls],
            "backends": [asdict(b) for b in fa.backends]}


def _facts_from_json(d: dict[str, Any]) -> tuple[list[pyast.ImportFact],
                                                  list[pyast.CallFact],
                                                  list[pyast.BackendLiteral]]:
    """Raises TypeError/KeyError/ValueError on a malformed record."""
    from moonpin.readers.pyast import usage as pyast

    imports = [pyast.ImportFact(**{**i, "names": tuple(i["names"]),
                                   "alternatives": tuple(i["alternatives"])})
               for i in d["imports"]]
    calls = [pyast.CallFact(**{**c, "keywords": tuple(c["keywords"])}) for c in d["calls"]]
    backends = [pyast.BackendLiteral(**b) for b in d["backends"]]
    return imports, calls, backends


def _load_cache(path: str, analyzer: str, key: str) -> dict[str, Any] | None:
    doc = _cache.load(path)
    if (not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT
            or doc.get("analyzer") != analyzer or doc.get("package") != key
            or not isinstance(doc.get("files"), dict)):
        return None
    return doc


def _valid_derived(d: Any) -> bool:
    return (isinstance(d, dict) and (d.get("module") is None or isinstance(d["module"], str))
            and all(isinstance(d.get(k), list) and all(isinstance(x, str) for x in d[k])
                    for k in ("names", "backends", "evidence", "optional_names")))


def _hit(hit: Any, size: int, mtime: int, path: str, every_import: bool) -> bool:
    """Whether a cache entry holds this file as it is now (the same file, size and
    modification time, and not skipped where ``every_import`` would parse it)."""
    return (isinstance(hit, list) and len(hit) == 6 and hit[0] == size and hit[1] == mtime
            and hit[5] == path and (hit[3] != _MOONCAKE or not every_import))


def _unchanged(tree: dict[str, tuple[int, int, str]], files: dict[str, Any],
               every_import: bool) -> bool:
    """Whether the cache holds every file as it is now (nothing added, removed, changed,
    or skipped that ``every_import`` would parse)."""
    if len(files) != len(tree):
        return False
    return all(_hit(files.get(rel), size, mtime, path, every_import)
               for rel, (size, mtime, path) in tree.items())


#: How far a file was read: it does not mention mooncake; it does, but cannot import the
#: process-group module (not parsed unless every mooncake import is wanted); it was parsed.
_NONE, _MOONCAKE, _PARSED = 0, 1, 2


def will_read(src: Sources, use_cache: bool = True) -> bool:
    """Whether :func:`scan` of ``src`` reads its sources (no stamps file vouches for the
    requirement): the cold start, where other work can go on beside it."""
    stamps = src.stamps
    return (not use_cache or stamps is None or not stamps.checked
            or type(stamps.doc.get("scan")) is not dict)


def scan(pkg: str | os.PathLike[str] | Sources, *,
         cache_dir: str | os.PathLike[str] | None = None,
         use_cache: bool = True, every_import: bool = False) -> SourceFacts:
    """The mooncake facts of the SGLang sources ``pkg`` names: the files ``import
    sglang.<x>`` loads (:func:`moonpin.preflight.pyimport.importer.package_sources`), or, for a
    folder, the modules of the package in it taken alone.

    When the set comes with a stamps file that found its sources unchanged
    (:attr:`~moonpin.preflight.pyimport.importer.Sources.stamps`), the requirement is the one
    it keeps: nothing is read. Otherwise every source is stat-ed, the ones the facts cache
    does not hold as they are now are read, and the stamps file gets the requirement.

    ``imports``/``calls``/``backends`` come from the files that can import the process-group
    module (:func:`moonpin.readers.pyast.usage.mentions_pg_module`): the elastic-EP requirement.
    With ``every_import``, every file that mentions mooncake is parsed as well and
    ``feature_imports`` holds all their imports (the MoE all-to-all, PD-disaggregation and
    HiCache features). Raises OSError when a source or folder cannot be read (the caller
    falls back to the knowledge base)."""
    import gc  # builtin; nothing cyclic is made here

    collecting = gc.isenabled()
    gc.disable()  # the cache's ~100,000 objects would be walked at every collection
    try:
        return _scan(pkg, cache_dir, use_cache, every_import)
    finally:
        if collecting:
            gc.enable()


def _folder_sources(pkg: str, cache_dir: str | os.PathLike[str] | None,
                    use_cache: bool) -> Sources:
    """The sources of the package folder ``pkg`` taken alone, from the stamps file when
    nothing changed (:func:`moonpin.preflight.installed.stamps.memoised`)."""
    from moonpin.preflight.pyimport.importer import folder_sources

    if not use_cache:
        return folder_sources(pkg)
    from moonpin.preflight.installed import stamps as _stamps
    from moonpin.preflight.pyimport.metapath import Importer

    def build() -> tuple[Importer, Sources]:
        imp = Importer([], [], None, None, record=True)
        return imp, folder_sources(pkg, imp=imp)

    got = _stamps.memoised(_stamps.key("folder", os.path.realpath(pkg)), build, cache_dir)
    assert got is not None  # folder_sources always gives a set (or raises)
    return got


def _facts_of(data: bytes, rel: str, size: int, mtime: int, path: str, every_import: bool,
              take: Callable[[tuple[Any, Any, Any], bool], None]) -> list[Any]:
    """The facts-cache entry of the source ``rel`` read now: whether it mentions mooncake,
    parsed (and its facts given to ``take``) when it can import the process-group module,
    or with ``every_import`` when it mentions mooncake at all."""
    from moonpin.readers.pyast import usage as pyast

    facts = None
    level = _MOONCAKE if pyast.mentions_mooncake(data) else _NONE
    pg = level == _MOONCAKE and pyast.mentions_pg_module(data)
    if pg or (level == _MOONCAKE and every_import):
        fa = pyast.analyze_source(data, rel)
        facts = _facts_to_json(fa)
        take((list(fa.imports), list(fa.calls), list(fa.backends)), pg)
        level = _PARSED
    return [size, mtime, facts, level, pg, path]


def _scan(pkg: str | os.PathLike[str] | Sources, cache_dir: str | os.PathLike[str] | None,
          use_cache: bool, every_import: bool) -> SourceFacts:
    src = pkg if not isinstance(pkg, (str, os.PathLike)) else \
        _folder_sources(os.fspath(pkg), cache_dir, use_cache)
    out = SourceFacts()
    folder = (cache_dir or _cache.cache_folder()) if use_cache else None
    analyzer = _analyzer_hash() if folder is not None else ""
    vouched = src.stamps if use_cache else None
    if vouched is not None and not every_import:
        derived = vouched.derived(analyzer)
        if _valid_derived(derived):  # nothing changed: neither facts nor analyzer load
            assert derived is not None
            out.cache, out.files, out.derived = "warm", src.count(), derived
            return out
    key = src.key
    cached: dict[str, Any] | None = None
    doc: dict[str, Any] | None = None
    cfile: str | None = None
    if folder is not None:
        cfile = _cache_file(folder, key)
        doc = _load_cache(cfile, analyzer, key)
        cached = doc["files"] if doc is not None else None
        out.cache = "cold" if cached is None else "warm"
    # With facts to compare against, every source is stat-ed first; else each stamp is
    # taken by the read itself (its fstat, before the bytes): one call fewer per source.
    stamps = _stat_files(src) if cached is not None else None
    if stamps is None:
        _refuse_broken(src)
    out.files = len(src.files)
    if stamps is not None:
        assert doc is not None
        if (not every_import and _valid_derived(doc.get("derived"))
                and _unchanged(stamps, doc["files"], every_import)):
            out.derived = doc["derived"]  # nothing changed: the analyzer is not even loaded
            if vouched is not None:
                out.cache_error = vouched.keep(analyzer, stamps, out.derived)
            return out
    entries: dict[str, list[Any]] = {}

    def take(facts: tuple[list[pyast.ImportFact], list[pyast.CallFact],
                          list[pyast.BackendLiteral]], pg: bool) -> None:
        i, c, b = facts
        out.feature_imports += i
        if pg:
            out.imports += i
            out.calls += c
            out.backends += b

    if stamps is None:
        stamps = {}
        for rel in sorted(src.files):
            path = src.files[rel]
            got: list[int] = []
            data = _read(path, src.within, got)
            stamps[rel] = (got[0], got[1], path)
            out.read += 1
            entries[rel] = _facts_of(data, rel, got[0], got[1], path, every_import, take)
    else:
        assert cached is not None
        for rel in sorted(stamps):
            size, mtime, path = stamps[rel]
            hit = cached.get(rel)
            if _hit(hit, size, mtime, path, every_import):
                assert isinstance(hit, list)
                try:
                    if hit[2] is not None:
                        take(_facts_from_json(hit[2]), bool(hit[4]))
                    entries[rel] = hit
                    continue
                except (TypeError, KeyError, ValueError):
                    out.cache = "unusable"
            data = _read(path, src.within)
            out.read += 1
            entries[rel] = _facts_of(data, rel, size, mtime, path, every_import, take)
    if cached is not None and out.cache == "warm" and (out.read or set(cached) - set(stamps)):
        out.cache = "stale"
    out.derived = derive(out)
    if cfile is not None and (out.cache != "warm" or doc is None or doc.get("derived")
                              != out.derived):
        out.cache_error = _cache.store(cfile, {"format": CACHE_FORMAT, "analyzer": analyzer,
                                               "package": key,
                                               "files": entries, "derived": out.derived})
        if doc is None and out.cache_error is None and folder is not None:
            _cache.prune(os.fspath(folder), "check-sources-")  # one more source set kept
    if vouched is not None and out.cache_error is None:  # the stamps vouch for the facts
        out.cache_error = vouched.keep(analyzer, stamps, out.derived)
    return out
