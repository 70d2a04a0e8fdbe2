"""Read an installed SGLang's sources for the runtime check, fast.

A real SGLang release holds ~3,200 ``.py`` files (~46 MB); reading them all costs more than a
bare interpreter start. The check therefore keeps what it learned in a small cache validated
the way Python validates bytecode against its source: a file whose size and modification
time (ns) are unchanged since it was analysed is not read again; a new, changed or removed
file is (or is dropped), and so is every file when moonpin's analyzer changed (the cache
records a hash of ``moonpin/readers/pyast*.py``). A cache that cannot be read, parsed or written is
ignored: the check then reads every source, as with ``--no-cache``.

The cache lives in moonpin's cache folder (:func:`moonpin.kb.cache.cache_dir`), two marshal
files per SGLang folder: ``check-stamps-<crc>.marshal``, the stamp of every folder and source
with the requirement derived from them (all a start that finds nothing changed reads: one
``stat`` per folder and per source, no listing but of the folders that were racy when
walked: a folder's mtime tells an added or removed entry, a source's own stamp an edit in
place or a file mounted over it), and
``check-sources-<crc>.marshal``, the facts of each source (read only when something
changed). Run the check once when the image is built (``RUN moonpin check --no-deep ...``)
and every worker start of that image finds it warm.

Standard library and :mod:`moonpin.readers.pyast` only: this is on the worker-start path (no
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
    from typing import Any

    from moonpin.readers import pyast

__all__ = ["CACHE_FORMAT", "SourceFacts", "derive", "scan"]

CACHE_FORMAT = 4
#: The stamps file's layout version (see :func:`scan`).
STAMPS_FORMAT = 2
#: the moonpin package folder (readers/ is in it)
_MOONPIN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
_READERS = os.path.join(_MOONPIN, "readers")
_PYAST = tuple(os.path.join(_READERS, f) for f in ("pyast.py", "pyast_facts.py", "pyast_walk.py"))
_BACKENDS = ("mooncake", "mooncake-cpu")


class SourceFacts:
    """The mooncake facts of one SGLang package folder, and how they were obtained."""

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


def _stat_tree(pkg: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """relative posix path -> (size, mtime_ns) of every ``.py`` file under ``pkg``.

    Symlinked folders are not followed (``os.walk``'s default). Raises OSError when a
    folder cannot be listed."""
    return _walk(pkg)[0]


#: A folder modified this close (ns) to the walk that listed it may change again within
#: the same timestamp tick, keeping its stamp: it is racy (as git calls an index entry
#: racily clean), and every start lists it again until a later walk finds it older. A file
#: system that keeps nanoseconds ticks with the kernel's coarse clock (a few ms); one whose
#: stamps are whole seconds (ext3, HFS+; FAT's are 2 s) gets the longer window.
_RACY_NS = 100_000_000
_RACY_COARSE_NS = 2_000_000_000


def _walk(pkg: str | os.PathLike[str]) -> tuple[dict[str, tuple[int, int]], list[list[Any]]]:
    """:func:`_stat_tree`, and the folders as the warm check sees them: ``[rel, mtime_ns,
    [.py names], listing or None]`` per folder, each folder stat-ed before it is listed (a
    change made while it is listed gives it a newer stamp); ``listing`` (what
    :func:`_listing` says) only for a racy folder."""
    import time

    now = time.time_ns()
    out: dict[str, tuple[int, int]] = {}
    layout: list[list[Any]] = []
    stack = [(os.fspath(pkg), "")]
    while stack:
        folder, rel = stack.pop()
        mtime = os.stat(folder).st_mtime_ns
        names: list[str] = []
        subdirs: list[str] = []
        with os.scandir(folder) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":  # bytecode only: never a source
                        stack.append((e.path, f"{rel}{e.name}/"))
                        subdirs.append(e.name + "/")
                elif e.name.endswith(".py"):
                    st = e.stat()
                    out[rel + e.name] = (st.st_size, st.st_mtime_ns)
                    names.append(e.name)
        window = _RACY_COARSE_NS if mtime % 1_000_000_000 == 0 else _RACY_NS
        racy = mtime >= now - window
        layout.append([rel, mtime, names, sorted(names + subdirs) if racy else None])
    return out, layout


def _listing(folder: str) -> list[str]:
    """What the walk keeps of a folder: its ``.py`` names and its folders (``name/``, no
    ``__pycache__``), sorted."""
    with os.scandir(folder) as it:
        return sorted(e.name + "/" if e.is_dir(follow_symlinks=False) else e.name for e in it
                      if (e.name.endswith(".py") or e.is_dir(follow_symlinks=False))
                      and e.name != "__pycache__")


def _stamps(tree: dict[str, tuple[int, int]], layout: list[list[Any]]) -> list[int]:
    """The values :func:`_same_stamps` computes for an unchanged tree, in its order."""
    out: list[int] = []
    for rel, mtime, names, _ in layout:
        out.append(mtime)
        for name in names:
            out += tree[rel + name]
    return out


def _same_stamps(pkg: str, layout: Any, expect: Any, relist: Any = ()) -> bool:
    """Whether every folder of ``layout`` (``[rel, [.py names]]`` each) and every source in
    it has the stamp ``expect`` holds: one ``stat`` per folder and per source, no listing.
    A folder's modification time changes when an entry is added, removed or renamed in it
    (so a new source is seen); an in-place edit, or a file bind-mounted over a source (a
    ConfigMap), changes the source's own size or mtime. The folders that were racy when
    walked (``relist``: ``[rel, listing]`` each) are listed again and compared. A malformed
    layout is a mismatch. Sources are stat-ed relative to their folder's descriptor (a
    shorter path walk for the kernel)."""
    got: list[int] = []
    ap = got.append
    st, fst, op, cl = os.stat, os.fstat, os.open, os.close
    try:
        for rel, names in layout:
            fd = op(f"{pkg}/{rel}", _DIR_FLAGS)
            try:
                ap(fst(fd).st_mtime_ns)
                for name in names:
                    s = st(name, dir_fd=fd)
                    ap(s.st_size)
                    ap(s.st_mtime_ns)
            finally:
                cl(fd)
        if got != expect:
            return False
        return all(_listing(f"{pkg}/{rel}") == listing for rel, listing in relist)
    except (OSError, TypeError, ValueError):  # gone, or a damaged layout
        return False


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


#: The largest source file read (SGLang's largest is well under 1 MB).
MAX_SOURCE = 16 * 1024 * 1024


def _read(path: str) -> bytes:
    """Raises OSError (:class:`moonpin.kb.errors.ReadRefused`) for a FIFO, a device, a folder, a
    loop or a file over :data:`MAX_SOURCE`: the caller then falls back to the KB."""
    from moonpin.kb.files import read_regular

    return read_regular(path, cap=MAX_SOURCE, what="SGLang source")


def _analyzer_hash() -> str:
    out = []
    for path in _PYAST:
        data = _read(path)  # read, not imported: a warm start never loads it
        out.append(f"{len(data)}-{zlib.crc32(data):08x}")
    return " ".join(out)


def derive(facts: SourceFacts) -> dict[str, Any]:
    """The process-group requirement of the facts (what :func:`moonpin.readers.pyast.pg_needs`
    makes of them) as plain data."""
    from moonpin.readers import pyast

    n = pyast.pg_needs(facts.imports, facts.calls)
    return {"module": n.module, "names": list(n.names),
            "backends": sorted({b.value for b in facts.backends if b.value in _BACKENDS}),
            "evidence": list(n.evidence), "optional_names": list(n.optional_names),
            "alternatives": list(n.alternatives)}


def _cache_file(cache_dir: str | os.PathLike[str], real_pkg: str) -> str:
    # The document names its package too: two folders sharing a CRC only thrash.
    return os.path.join(cache_dir, f"check-sources-{zlib.crc32(real_pkg.encode()):08x}.marshal")


def _facts_to_json(fa: pyast.FileAnalysis) -> dict[str, Any]:
    from dataclasses import asdict

    return {"imports": [asdict(i) for i in fa.imports], "calls": [asdict(c) for c in fa.calls],
            "backends": [asdict(b) for b in fa.backends]}


def _facts_from_json(d: dict[str, Any]) -> tuple[list[pyast.ImportFact],
                                                  list[pyast.CallFact],
                                                  list[pyast.BackendLiteral]]:
    """Raises TypeError/KeyError/ValueError on a malformed record."""
    from moonpin.readers import pyast

    imports = [pyast.ImportFact(**{**i, "names": tuple(i["names"]),
                                   "alternatives": tuple(i["alternatives"])})
               for i in d["imports"]]
    calls = [pyast.CallFact(**{**c, "keywords": tuple(c["keywords"])}) for c in d["calls"]]
    backends = [pyast.BackendLiteral(**b) for b in d["backends"]]
    return imports, calls, backends


def _load_cache(path: str, analyzer: str, real_pkg: str) -> dict[str, Any] | None:
    doc = _cache.load(path)
    if (not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT
            or doc.get("analyzer") != analyzer or doc.get("package") != real_pkg
            or not isinstance(doc.get("files"), dict)):
        return None
    return doc


def _valid_derived(d: Any) -> bool:
    return (isinstance(d, dict) and (d.get("module") is None or isinstance(d["module"], str))
            and all(isinstance(d.get(k), list) and all(isinstance(x, str) for x in d[k])
                    for k in ("names", "backends", "evidence", "optional_names")))


def _unchanged(tree: dict[str, tuple[int, int]], files: dict[str, Any],
               every_import: bool) -> bool:
    """Whether the cache holds every file as it is now (nothing added, removed, changed,
    or skipped that ``every_import`` would parse)."""
    if len(files) != len(tree):
        return False
    for rel, (size, mtime) in tree.items():
        hit = files.get(rel)
        if not (isinstance(hit, list) and len(hit) == 5 and hit[0] == size
                and hit[1] == mtime and (hit[3] != _MOONCAKE or not every_import)):
            return False
    return True


#: How far a file was read: it does not mention mooncake; it does, but cannot import the
#: process-group module (not parsed unless every mooncake import is wanted); it was parsed.
_NONE, _MOONCAKE, _PARSED = 0, 1, 2


def scan(pkg: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
         use_cache: bool = True, every_import: bool = False) -> SourceFacts:
    """The mooncake facts of the ``.py`` files under ``pkg``.

    ``imports``/``calls``/``backends`` come from the files that can import the process-group
    module (:func:`moonpin.readers.pyast.mentions_pg_module`): the elastic-EP requirement. With
    ``every_import``, every file that mentions mooncake is parsed as well and
    ``feature_imports`` holds all their imports (the MoE all-to-all, PD-disaggregation and
    HiCache features). Raises OSError when a source or folder cannot be read (the caller
    falls back to the knowledge base).

    Two cache files: the stamps of every folder and source with the requirement derived from
    them (``check-stamps-*``, all a start that finds nothing changed reads: one ``stat`` per
    folder and per source, :func:`_same_stamps`), and the facts of each source
    (``check-sources-*``, read only when something changed, to re-read only what did)."""
    out = SourceFacts()
    pkg = os.fspath(pkg)
    real_pkg = os.path.realpath(pkg)
    folder = (cache_dir or _cache.cache_folder()) if use_cache else None
    quick: dict[str, Any] | None = None
    sfile: str | None = None
    analyzer = ""
    if folder is not None:
        analyzer = _analyzer_hash()
        sfile = _stamps_file(folder, real_pkg)
        quick = _load_stamps(sfile, analyzer, real_pkg)
        if (quick is not None and not every_import and _valid_derived(quick.get("derived"))
                and _same_stamps(pkg, quick.get("layout"), quick.get("stamps"),
                                 quick.get("relist"))):
            out.cache = "warm"  # nothing changed: neither the facts nor the analyzer load
            out.files = (len(quick["stamps"]) - len(quick["layout"])) // 2
            out.derived = quick["derived"]
            return out
    stamps, layout = _walk(pkg)
    out.files = len(stamps)
    prefix = os.path.basename(os.path.normpath(pkg)) + "/"
    cached: dict[str, Any] | None = None
    doc: dict[str, Any] | None = None
    cfile: str | None = None
    if folder is not None:
        cfile = _cache_file(folder, real_pkg)
        doc = _load_cache(cfile, analyzer, real_pkg)
        cached = doc["files"] if doc is not None else None
        out.cache = "cold" if cached is None else "warm"
        if (doc is not None and not every_import and _valid_derived(doc.get("derived"))
                and _unchanged(stamps, doc["files"], every_import)):
            out.derived = doc["derived"]  # nothing changed: the analyzer is not even loaded
            out.cache_error = _keep_stamps(sfile, quick, analyzer, real_pkg, stamps, layout,
                                           out.derived)
            return out
    from moonpin.readers import pyast

    entries: dict[str, list[Any]] = {}

    def take(facts: tuple[list[pyast.ImportFact], list[pyast.CallFact],
                          list[pyast.BackendLiteral]], pg: bool) -> None:
        i, c, b = facts
        out.feature_imports += i
        if pg:
            out.imports += i
            out.calls += c
            out.backends += b

    for rel in sorted(stamps):
        size, mtime = stamps[rel]
        hit = cached.get(rel) if cached is not None else None
        if (isinstance(hit, list) and len(hit) == 5 and hit[0] == size and hit[1] == mtime
                and (hit[3] != _MOONCAKE or not every_import)):
            try:
                if hit[2] is not None:
                    take(_facts_from_json(hit[2]), bool(hit[4]))
                entries[rel] = hit
                continue
            except (TypeError, KeyError, ValueError):
                out.cache = "unusable"
        data = _read(os.path.join(pkg, rel))
        out.read += 1
        facts = None
        level = _MOONCAKE if pyast.mentions_mooncake(data) else _NONE
        pg = level == _MOONCAKE and pyast.mentions_pg_module(data)
        if pg or (level == _MOONCAKE and every_import):
            fa = pyast.analyze_source(data, prefix + rel)
            facts = _facts_to_json(fa)
            take((list(fa.imports), list(fa.calls), list(fa.backends)), pg)
            level = _PARSED
        entries[rel] = [size, mtime, facts, level, pg]
    if cached is not None and out.cache == "warm" and (out.read or set(cached) - set(stamps)):
        out.cache = "stale"
    out.derived = derive(out)
    if cfile is not None and (out.cache != "warm" or doc is None or doc.get("derived")
                              != out.derived):
        out.cache_error = _cache.store(cfile, {"format": CACHE_FORMAT, "analyzer": analyzer,
                                               "package": real_pkg,
                                               "files": entries, "derived": out.derived})
    if out.cache_error is None:  # the stamps vouch for the facts just written
        out.cache_error = _keep_stamps(sfile, quick, analyzer, real_pkg, stamps, layout,
                                       out.derived)
    return out


def _stamps_file(cache_dir: str | os.PathLike[str], real_pkg: str) -> str:
    return os.path.join(cache_dir, f"check-stamps-{zlib.crc32(real_pkg.encode()):08x}.marshal")


def _load_stamps(path: str, analyzer: str, real_pkg: str) -> dict[str, Any] | None:
    doc = _cache.load(path)
    if (not isinstance(doc, dict) or doc.get("format") != STAMPS_FORMAT
            or doc.get("analyzer") != analyzer or doc.get("package") != real_pkg):
        return None
    return doc


def _keep_stamps(path: str | None, old: dict[str, Any] | None, analyzer: str, real_pkg: str,
                 tree: dict[str, tuple[int, int]], layout: list[list[Any]],
                 derived: dict[str, Any]) -> str | None:
    """Write the stamps file when it would change; why it failed, or None."""
    if path is None:
        return None
    doc = {"format": STAMPS_FORMAT, "analyzer": analyzer, "package": real_pkg,
           "layout": [[rel, names] for rel, _, names, _ in layout],
           "stamps": _stamps(tree, layout), "derived": derived,
           "relist": [[rel, listing] for rel, _, _, listing in layout if listing is not None]}
    return None if doc == old else _cache.store(path, doc)
