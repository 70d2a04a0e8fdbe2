"""The warm start's stamps file: what a worker start checks instead of walking SGLang's tree.

Which files ``import sglang.<x>`` loads is found by a walk of the target's importer model
(:func:`moonpin.preflight.pyimport.importer.package_sources`: ~4,000 module lookups over ~500
folder listings on a real SGLang), and what they require by reading them
(:func:`moonpin.preflight.installed.sources.scan`). Both are kept in one small marshal file per
source set (``check-stamps-<crc>.marshal`` in moonpin's cache folder, named after what the
model is given: ``sys.path``, the site folders, the extension suffixes, the package name),
with the stamp of everything they were made from:

* every folder the walk listed: its mtime, taken before the listing (an entry added, removed
  or renamed in a folder changes it: a new module, ``.pth`` or finder file is seen);
* every path whose kind the walk asked (whether it exists, as a file or a folder: a
  ``sys.path`` entry, a candidate of an editable finder's ``MAPPING``, where a symbolic link
  leads);
* every file whose content decided (``.pth`` files, editable finders, the ``__init__.py``
  files read for ``extend_path``, ``.pkg`` files): size and mtime, taken before the read;
* every source: size and mtime (an edit in place, or a file mounted over it, changes them),
  and the requirement derived from them, with the analyzer that derived it;
* the stamps of moonpin's own code that made them (its modules' size and mtime).

A start reads this one file and makes one ``stat`` per folder, path, file and source: no
listing, no read. When everything matches, neither the walk nor the analyzer runs. When
anything differs, the walk runs again (and the source cache of
:mod:`moonpin.preflight.installed.sources` re-reads only the sources that changed).

A folder whose stamp is racy when it was listed (:func:`moonpin.kb.cache.racy`: it could
change again within the same timestamp tick, keeping its stamp) is not trusted by its stamp:
its listing is kept and listed again and compared at every start, until a later walk finds
it older. A file is trusted by its stamp, as the file-facts memo that reads it is
(:class:`moonpin.kb.cache.FileMemo`, the limit of Python's own bytecode cache: an edit that
keeps both size and mtime goes unseen; ``--no-cache`` reads everything). A source set with a
folder that cannot be listed or a source that cannot be read is not kept (the check says so
every time), nor one found under an image's root (``--rootfs``: paths there resolve through
the image's own links).

Only ``os`` at import (the worker-start path).
"""

from __future__ import annotations

import os

from moonpin.kb import cache as _cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from moonpin.preflight.pyimport.importer import Sources
    from moonpin.preflight.pyimport.metapath import Importer

__all__ = ["FORMAT", "Stamps", "key", "memoised"]

#: The stamps file's layout version.
FORMAT = 4
_HERE = os.path.dirname(os.path.abspath(__file__))
#: moonpin's code that makes what the file keeps (the importer model, the scan; the analyzer
#: is hashed by the scan): a change to it is a change to every source set
_MODEL = tuple(os.path.join(_HERE, f) for f in ("metapath.py", "importer.py", "sitefiles.py",
                                                 "sources.py", "stamps.py"))
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def key(*parts: Any) -> str:
    """The name of a source set: what its walk was given (``repr`` of each part)."""
    return "\0".join(map(repr, parts))


def _model() -> list[int]:
    out: list[int] = []
    for path in _MODEL:
        try:
            st = os.stat(path)
            out += (st.st_size, st.st_mtime_ns)
        except OSError:
            out += (-1, -1)
    return out


class Stamps:
    """One stamps file (``path``) as loaded and found valid, or as written after a walk
    (``doc``); ``checked``: the sources' own stamps were compared and matched (so what
    was derived from them holds); ``error``: why it could not be written (None: it was,
    or it need not be)."""

    def __init__(self, path: str, doc: dict[str, Any], checked: bool = False) -> None:
        self.path = path
        self.doc = doc
        self.checked = checked
        self.error: str | None = None

    def derived(self, analyzer: str) -> dict[str, Any] | None:
        """What :func:`moonpin.preflight.installed.sources.scan` derived from the sources, when
        this file vouches for it (the sources' stamps matched when it was loaded, and the
        analyzer is the same); else None."""
        got = self.doc.get("scan")
        if self.checked and type(got) is dict and got.get("analyzer") == analyzer:
            derived = got.get("derived")
            return derived if type(derived) is dict else None
        return None

    def keep(self, analyzer: str, stamps: dict[str, tuple[int, int, str]],
             derived: dict[str, Any]) -> str | None:
        """Record what the scan derived from the sources as it found them (``stamps``:
        module path -> (size, mtime_ns, file), taken before they were read), and write the
        file when that changed it; why it failed, or None."""
        flat: list[int] = []
        try:
            for group in self.doc["groups"]:
                head, names, rels = _text(group)
                for name, rel in zip(names, _rels(names, rels), strict=True):
                    size, mtime, path = stamps[rel]
                    if path != head + name:
                        return None  # the scan's sources are not this set's
                    flat += (size, mtime)
        except (KeyError, ValueError, TypeError):
            return None
        if len(flat) != 2 * len(stamps):
            return None
        old = self.doc.get("scan")
        if old is not None and old.get("stamps") != flat:
            return None  # a source changed since its stamps were compared: the next start walks
        scan = {"analyzer": analyzer, "stamps": flat, "derived": derived}
        if old == scan:
            return None
        if old is None:  # a file the walk read that is a source: its stamp is compared there
            same = {p: [size, mtime] for size, mtime, p in stamps.values()}
            kept = [(p, v) for p, v in zip(self.doc["reads"], self.doc["read"], strict=True)
                    if v is None or same.get(p) != v]
            self.doc["reads"], self.doc["read"] = [p for p, _ in kept], [v for _, v in kept]
        self.doc["scan"] = scan
        self.checked = True
        self.error = _cache.store(self.path, self.doc)
        return self.error


def memoised(name: str, build: Callable[[], tuple[Importer | None, Sources | None]],
             cache_dir: str | os.PathLike[str] | None = None) -> Sources | None:
    """The source set ``build`` finds (it returns the recording importer model it walked
    and the set), from the stamps file named ``name`` (:func:`key`) when nothing it was
    made from changed; else built, and the file written."""
    folder = os.fspath(cache_dir) if cache_dir is not None else _cache.cache_folder()
    if folder is None:
        return build()[1]
    import zlib  # builtin

    path = os.path.join(folder, f"check-stamps-{zlib.crc32(name.encode()):08x}.marshal")
    doc = _cache.load(path)
    if type(doc) is dict and doc.get("format") == FORMAT and doc.get("key") == name \
            and doc.get("model") == _model():
        try:
            got = _valid(doc)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            got = None  # a damaged file is a change
        if got is not None:
            got[0].stamps = Stamps(path, doc, got[1])
            return got[0]
    imp, src = build()
    if src is None or imp is None:
        return src
    new = _record(name, imp, src)
    if new is not None:
        src.stamps = Stamps(path, new)
        src.stamps.error = _cache.store(path, new)
        if doc is None and src.stamps.error is None:  # one more source set kept here
            _cache.prune(folder, "check-stamps-")
    return src


# ---------------------------------------------------------------- a warm start


def _valid(doc: dict[str, Any]) -> tuple[Sources, bool] | None:
    """The source set ``doc`` keeps, and whether the sources' own stamps were compared,
    when every stamp in it still holds (None: one changed). Raises
    TypeError/ValueError/KeyError on a damaged document."""
    scan = doc["scan"]
    flat = scan["stamps"] if scan is not None else None
    if not _same_sources(doc["groups"], flat):
        return None
    st = os.stat
    got: list[int] = []
    try:
        for p in doc["folders"]:
            got.append(st(p).st_mtime_ns)
    except OSError:
        return None
    if got != doc["mtimes"]:
        return None
    from moonpin.preflight.pyimport.metapath import kind_of

    if [kind_of(p) for p in doc["kinds"]] != doc["kind"]:
        return None
    for p, want in zip(doc["reads"], doc["read"], strict=True):
        try:
            s = st(p)
        except OSError:
            if want is not None:
                return None
            continue
        if want is None or s.st_size != want[0] or s.st_mtime_ns != want[1]:
            return None
    if doc["relist"]:
        from moonpin.preflight.pyimport.metapath import Importer

        fresh = Importer([], [])
        if any(fresh.listing(f) != listing for f, listing in doc["relist"]):
            return None
    return _sources_from(doc), flat is not None


def _same_sources(groups: list[Any], flat: list[int] | None) -> bool:
    """Whether every folder of ``groups`` (``[folder/, [names], module paths, mtime]``
    each, the folder and names as bytes: the folders holding sources; the paths as
    :func:`_rels` takes them) has its mtime
    (-3: not listed by the walk, not compared) and, with ``flat``, every source in it the
    (size, mtime) ``flat`` holds: one ``stat`` per folder and source, relative to the
    folder's descriptor (a shorter path walk for the kernel)."""
    got: list[int] = []
    ap = got.append
    st, fst, op, cl = os.stat, os.fstat, os.open, os.close
    try:
        for head, names, _, mtime in groups:
            fd = op(head, _DIR_FLAGS)
            try:
                if mtime != -3 and fst(fd).st_mtime_ns != mtime:
                    return False
                if flat is not None:
                    for name in names:
                        s = st(name, dir_fd=fd)
                        ap(s.st_size)
                        ap(s.st_mtime_ns)
            finally:
                cl(fd)
    except OSError:
        return False
    return flat is None or got == flat


def _sources_from(doc: dict[str, Any]) -> Sources:
    from moonpin.preflight.pyimport.importer import Found, Sources

    f = doc["found"]
    found = Found(f[0], f[1], f[2], f[3], f[4])
    groups = doc["groups"]
    for _, names, rels, _ in groups:  # what files() will need, checked now (ValueError)
        if type(rels) is not str and (type(rels) is not list or len(rels) != len(names)
                                      or not all(type(r) is str for r in rels)):
            raise ValueError("a group's module paths")

    def files() -> dict[str, str]:
        out: dict[str, str] = {}
        for group in groups:
            head, names, rels = _text(group)
            if isinstance(rels, str):  # the module paths are the folder's prefix and the names
                for name in names:
                    out[rels + name] = head + name
            else:
                for name, rel in zip(names, rels, strict=True):
                    out[rel] = head + name
        return out

    count = sum(len(g[1]) for g in groups)
    return Sources(found, (files, count), doc["roots"], doc["via"], (), doc["package"])


def _text(group: list[Any]) -> tuple[str, list[str], list[str] | str]:
    """A group's folder and file names as text (kept as the bytes ``stat`` takes: a warm
    start stats ~4,000 names and would encode each), and its module paths."""
    return (os.fsdecode(group[0]), [os.fsdecode(n) for n in group[1]], group[2])


def _rels(names: list[str], rels: list[str] | str) -> list[str]:
    """The module paths of a group's files (``rels``: their list, or the prefix every one of
    them has before its file name)."""
    if isinstance(rels, str):
        return [rels + n for n in names]
    return rels


# ---------------------------------------------------------------- after a walk


def _prefix(names: list[str], rels: list[str]) -> list[str] | str:
    """``rels``, or the prefix every module path has before its file's name (the usual case:
    a folder's modules are its package's)."""
    lead = rels[0][:len(rels[0]) - len(names[0])]
    if all(r == lead + n for n, r in zip(names, rels, strict=True)):
        return lead
    return rels


def _record(name: str, imp: Importer, src: Sources) -> dict[str, Any] | None:
    """The stamps document of ``src`` as the recording ``imp`` found it (None: not to be
    kept: a source that cannot be read, a folder that cannot be listed, no recording)."""
    if imp.stamps is None or imp.reads is None or src.broken:
        return None
    if any(not isinstance(e, (FileNotFoundError, NotADirectoryError))
           for e in imp.unlistable.values()):
        return None  # a folder that is there but cannot be listed: its mode may change
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for rel, path in sorted(src.files.items(), key=lambda kv: kv[1]):
        i = path.rfind("/") + 1
        if i == 0:
            return None
        names, rels = groups.setdefault(path[:i], ([], []))
        names.append(path[i:])
        rels.append(rel)
    listed: dict[str, int] = {}
    relist: list[list[Any]] = []
    others: list[tuple[str, int]] = []
    for folder, mtime in imp.stamps.items():
        if _cache.racy(mtime, imp.t0):
            relist.append([folder, imp.listing(folder)])
        head = folder if folder.endswith("/") else folder + "/"
        if head in groups and head not in listed:
            listed[head] = mtime  # stamped with its sources
        else:
            others.append((folder, mtime))
    kinds = imp.kinds()
    reads = sorted(imp.reads.items())
    found = src.found
    return {"format": FORMAT, "key": name, "model": _model(),
            "found": [found.folder, found.how, list(found.portions), list(found.search),
                      found.module],
            "roots": list(src.roots), "via": dict(src.via), "package": src.key,
            "groups": [[os.fsencode(h), [os.fsencode(x) for x in n], _prefix(n, r),
                        listed.get(h, -3)] for h, (n, r) in groups.items()],
            "folders": [f for f, _ in others], "mtimes": [m for _, m in others],
            "kinds": list(kinds), "kind": list(kinds.values()),
            "reads": [p for p, _ in reads], "read": [v for _, v in reads],
            "relist": relist, "scan": None}
