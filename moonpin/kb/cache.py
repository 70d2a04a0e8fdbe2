"""moonpin's own cache folder: small memos that spare a worker start repeated work.

Everything kept here is validated before use and rebuilt when missing, stale or unreadable;
a cache that cannot be written costs time, never a wrong answer.

Files are written with :mod:`marshal`, the format of Python's own bytecode cache: reading
one needs no import at all (``json`` alone would load ``re`` and ``enum``, ~5 ms of a
worker start), and a damaged one fails to load and is rebuilt. Like ``__pycache__``, the
folder must be writable only by its owner: marshal is not meant for data from others.

The folder is ``$MOONPIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/moonpin``, else
``~/.cache/moonpin``. Standard library only, and nothing heavier than ``os`` and
``marshal`` when a module is imported: the runtime check imports this.
"""

from __future__ import annotations

import marshal
import os

from moonpin.kb.files import outside

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: `typing` and `pathlib` load `re` and `enum`
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["KEEP_SETS", "RACY_COARSE_NS", "RACY_NS", "FileMemo", "cache_dir", "cache_folder",
           "facts_memo", "file_digest", "load", "own_files", "own_stamps", "prune", "racy",
           "store"]


def cache_folder() -> str | None:
    """The cache folder as a string; None when there is nowhere to keep it (no home folder:
    a container running as a UID without a passwd entry and no ``$HOME``), and callers then
    work without a cache."""
    env = os.environ.get("MOONPIN_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "moonpin")
    try:
        home = os.path.expanduser("~")
    except (KeyError, OSError):
        return None
    if not home or home.startswith("~"):  # neither $HOME nor a passwd entry
        return None
    return os.path.join(home, ".cache", "moonpin")


def cache_dir() -> Path | None:
    """:func:`cache_folder` as a :class:`~pathlib.Path`."""
    folder = cache_folder()
    if folder is None:
        return None
    from pathlib import Path

    return Path(folder)


#: A stamp (an mtime, ns) this close to when the thing was read may hide a second change
#: made within the same timestamp tick after the read: the thing is *racy* (as git calls an
#: index entry racily clean), and what was read of it is compared again at the next use
#: instead of trusted by its stamp. A file system that keeps nanoseconds ticks with the
#: kernel's coarse clock (a few ms); one whose stamps are whole seconds (ext3, HFS+; FAT's
#: are 2 s) gets the longer window.
RACY_NS = 100_000_000
RACY_COARSE_NS = 2_000_000_000


def racy(mtime_ns: int, read_ns: int) -> bool:
    """Whether a stamp ``mtime_ns`` is too close to ``read_ns`` (when it was read, or any
    earlier time) to vouch for what was read (:data:`RACY_NS`)."""
    window = RACY_COARSE_NS if mtime_ns % 1_000_000_000 == 0 else RACY_NS
    return mtime_ns >= read_ns - window


#: The largest cache file read (a real SGLang's source cache is ~2 MB).
MAX_BYTES = 64 * 1024 * 1024

#: What every cache file starts with: a magic, then the payload's length and CRC-32 (4
#: bytes each, little-endian), then the marshalled payload. A file that is cut, extended or
#: damaged fails the check and is never handed to ``marshal`` (whose declared lengths are
#: trusted: ``(\xff\xff\xff\x7f`` alone asks for a 16 GiB tuple).
MAGIC = b"MPC1"


def load(path: str | os.PathLike[str]) -> Any:
    """The document marshalled at ``path``, or None when missing, unreadable, damaged, not
    ours (another owner's, or writable by others), or over :data:`MAX_BYTES`."""
    from moonpin.kb.files import read_regular

    try:
        if not _trusted(path):
            return None
        data = read_regular(path, cap=MAX_BYTES, what="cache file")
    except OSError:  # moonpin.kb.errors.ReadRefused is one
        return None
    if len(data) < 12 or data[:4] != MAGIC:
        return None
    # a builtin module; the worker start loads it anyway (moonpin.preflight.installed.sources)
    import zlib

    size = int.from_bytes(data[4:8], "little")  # header: MAGIC, length, CRC-32 (4 bytes each)
    crc = int.from_bytes(data[8:12], "little")
    payload = data[12:]
    if size != len(payload) or zlib.crc32(payload) != crc:
        return None
    try:
        return marshal.loads(payload)
    except (ValueError, EOFError, TypeError, MemoryError, RecursionError):
        return None


def _trusted(path: str | os.PathLike[str]) -> bool:
    """Like ``__pycache__``: only a file of this user that nobody else can write is read
    (marshal is not meant for data from others)."""
    st = os.stat(path)
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    return (uid is None or st.st_uid == uid) and not st.st_mode & 0o022


def store(path: str | os.PathLike[str], doc: Any) -> str | None:
    """Write ``doc`` atomically (:func:`moonpin.kb.files.write_atomic`); return why it failed, or
    None."""
    import zlib

    from moonpin.kb.files import write_atomic

    try:
        payload = marshal.dumps(doc)
        if len(payload) > MAX_BYTES:
            return f"{len(payload):,} bytes, over the {MAX_BYTES:,}-byte cache limit: {path}"
        write_atomic(path, MAGIC + len(payload).to_bytes(4, "little")
                     + zlib.crc32(payload).to_bytes(4, "little") + payload, what="cache file")
    except OSError as e:
        return f"{e.strerror or type(e).__name__}: {e.filename or path}"
    except ValueError as e:  # something marshal cannot hold
        return f"{e}: {path}"
    return None


#: Files kept at most per kind of per-source-set cache file in one folder (each image and
#: environment a user checks leaves one of each kind; a worker node checks a handful).
KEEP_SETS = 64


def prune(folder: str, prefix: str, keep: int | None = None) -> None:
    """Remove the least recently written ``prefix*`` files of ``folder`` past ``keep``
    (default :data:`KEEP_SETS`; called when one more was written; best effort: what cannot
    be removed stays)."""
    keep = KEEP_SETS if keep is None else keep
    try:
        with os.scandir(folder) as it:
            found = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path) for e in it
                     if e.name.startswith(prefix) and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    if len(found) <= keep:
        return
    found.sort()
    for _, path in found[:len(found) - keep]:
        try:
            os.unlink(path)
        except OSError:
            pass


class FileMemo:
    """Facts derived from a file, each remembered with the file's size and modification
    time (ns), the way Python remembers bytecode per source: asked again for a file whose
    stamp is unchanged, the memo answers without reading it. One marshal file in the cache
    folder; :meth:`flush` writes what was learned (atomically; a failure is only returned).

    The documented limit is Python's own: an edit that keeps both size and mtime goes
    unseen (``--no-cache`` reads everything)."""

    #: Entries kept at most; past this, a flush keeps only those used by this process.
    LIMIT = 4096
    FORMAT = 1

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._data: dict[str, tuple[int, int, Any]] | None = None
        #: :func:`own_stamps` when the memo was loaded: what its answers were computed by
        self._code: tuple[tuple[str, int, int, int], ...] = ()
        self._used: set[str] = set()
        self._dirty = False
        #: what :meth:`get` computed while the memo is off, for the rest of that check
        self._once: dict[str, tuple[int, int, Any]] = {}
        self._enabled = True

    @property
    def enabled(self) -> bool:
        """False: nothing is read from or kept in the memo file (``--no-cache``); each
        ``get`` computes its answer once while it is off (a file asked of twice in one
        check, the KB's sha256 by each table read, is read once; switching it on or off
        forgets those)."""
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._enabled = on
        self._once.clear()

    def _entries(self) -> dict[str, tuple[int, int, Any]]:
        """The remembered entries; none when the memo was written by other moonpin code
        than this (another stamp of any of :func:`own_files`): every answer is some
        module's reading of a file, and an edited rule, loader or importer model reads
        differently."""
        if self._data is None:
            doc = load(self.path) if self.path is not None else None
            data: dict[str, tuple[int, int, Any]] = {}
            self._code = own_stamps()
            if isinstance(doc, dict) and doc.get("format") == self.FORMAT and isinstance(
                    doc.get("entries"), dict) and doc.get("code") == self._code:
                data = {k: v for k, v in doc["entries"].items() if type(k) is str}
            self._data = data
        return self._data

    def get(self, kind: str, path: str | os.PathLike[str], compute: Callable[[], T],
            valid: Callable[[Any], bool] | None = None, *, within: str | None = None) -> T:
        """``compute()``'s answer for ``path`` as it is now. Raises OSError when ``path``
        cannot be stat-ed, and whatever ``compute`` raises (nothing is remembered then).

        ``valid(value)`` says whether a remembered value has the shape ``compute`` returns;
        one that does not (a damaged or foreign memo) is computed afresh, never returned.
        Pass it wherever a wrong-shaped value would fail the caller: the memo file is
        untrusted input like any other.

        ``within``: the image root the check confines its reads to (a real path;
        :func:`moonpin.kb.files.outside`): a path its links take out of it is computed, never
        kept (what ``compute`` says of it holds for that check only)."""
        if outside(path, within):  # out of the image root: not kept
            return compute()
        name = os.path.abspath(path)
        try:
            st = os.stat(name)
        except (OSError, ValueError):
            if self._enabled:
                raise
            return compute()  # the memo off: asked as before, nothing kept
        key = f"{kind}\0{name}"
        # off: the answers of this check only, never read from or written to the file
        entries = self._entries() if self._enabled else self._once
        hit = entries.get(key)
        if self._enabled:
            self._used.add(key)
        if (type(hit) is tuple and len(hit) == 3 and hit[0] == st.st_size
                and hit[1] == st.st_mtime_ns and (valid is None or _fits(valid, hit[2]))):
            return hit[2]  # type: ignore[no-any-return]
        value = compute()
        entries[key] = (st.st_size, st.st_mtime_ns, value)
        self._dirty = self._dirty or self._enabled
        return value

    def get_traced(self, kind: str, path: str | os.PathLike[str],
                   compute: Callable[[], tuple[T, set[str], dict[str, str | None]]],
                   valid: Callable[[Any], bool] | None = None, *,
                   within: str | None = None) -> T:
        """:meth:`get` for an answer that depends on many files: ``compute()`` returns
        (the answer, every file and folder it read, every environment variable it read
        with its value) and the answer is remembered with their stamps (size, mtime, mode
        and owner; a folder's mtime changes when an entry is added, removed or renamed).
        Asked again, it is returned only while ``path``, each of them and each variable are
        unchanged."""
        if not self.enabled or outside(path, within):
            return compute()[0]
        name = os.path.abspath(path)
        st = os.stat(name)
        key = f"{kind}\0{name}"
        entries = self._entries()
        hit = entries.get(key)
        self._used.add(key)
        if (type(hit) is tuple and len(hit) == 3 and hit[0] == st.st_size
                and hit[1] == st.st_mtime_ns and type(hit[2]) is tuple and len(hit[2]) == 3
                and _fresh(hit[2][0], hit[2][1])
                and (valid is None or _fits(valid, hit[2][2]))):
            return hit[2][2]  # type: ignore[no-any-return]
        value, files, env = compute()
        stamps = tuple((p, *_stamp(p)) for p in sorted({_cover(f) for f in files}))
        entries[key] = (st.st_size, st.st_mtime_ns, (stamps, tuple(sorted(env.items())),
                                                     value))
        self._dirty = True
        return value

    def flush(self) -> str | None:
        """Write the memo when something was learned; why it failed, or None."""
        if not self._dirty or self.path is None:
            return None
        entries = self._entries()
        if len(entries) > self.LIMIT:
            entries = {k: v for k, v in entries.items() if k in self._used}
        self._dirty = False
        return store(self.path, {"format": self.FORMAT, "code": self._code,
                                 "entries": entries})


#: moonpin's own package folder (this file is ``<it>/kb/cache.py``)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def own_files() -> list[str]:
    """moonpin's own source, what every memo's answers are computed by: each folder of the
    package (its stamp changes when a module is added, removed or renamed) and each
    ``.py`` file in them, ``__pycache__`` aside; sorted."""
    out: list[str] = []
    todo = [_PACKAGE]
    while todo:
        folder = todo.pop()
        out.append(folder)
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if e.name == "__pycache__" or e.name.startswith("."):
                        continue
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
                    elif e.name.endswith(".py"):
                        out.append(e.path)
        except OSError:  # an unreadable folder: its own stamp below says so
            continue
    out.sort()
    return out


def own_stamps() -> tuple[tuple[str, int, int, int], ...]:
    """(path, inode, size, ctime ns) of each of :func:`own_files` (``-errno, 0, 0`` when it
    cannot be stat-ed): the ctime changes with any write, ``chmod`` or rename and, unlike
    the mtime, cannot be set back. One listing per folder and one ``stat`` per path (about
    200: well under a millisecond)."""
    got = []
    for p in own_files():
        try:
            st = os.stat(p)
        except OSError as e:
            got.append((p, -(e.errno or 1), 0, 0))
            continue
        got.append((p, st.st_ino, st.st_size, st.st_ctime_ns))
    return tuple(got)


def _cover(path: str) -> str:
    """``path``, or when it does not exist its nearest folder that does: the folder's
    stamp changes when ``path`` (or the first missing folder on the way to it) appears."""
    p = os.path.abspath(path)
    for _ in range(64):
        if os.path.lexists(p):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _stamp(path: str) -> tuple[int, ...]:
    """Size and mtime, and the mode and owner: who may read a file decides answers too (a
    ``chmod``/``chown`` keeps the mtime)."""
    try:
        st = os.stat(path)
    except OSError:
        return -1, -1, -1, -1, -1
    return st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_gid


def _fresh(stamps: Any, env: Any) -> bool:
    """Whether every (path, size, mtime, mode, uid, gid) and (variable, value) remembered
    still holds (an entry of the older (path, size, mtime) shape: no)."""
    try:
        for p, *stamp in stamps:
            if _stamp(p) != tuple(stamp):
                return False
        return all(os.environ.get(k) == v for k, v in env)
    except (TypeError, ValueError):  # a damaged entry
        return False


def _fits(valid: Callable[[Any], bool], value: Any) -> bool:
    try:
        return bool(valid(value))
    except Exception:  # a validator looking at damaged data may fail any way: not valid
        return False


_MEMO: FileMemo | None = None


def facts_memo() -> FileMemo:
    """This process's memo of file facts (``check-facts.marshal`` in the cache folder; one
    that keeps nothing when there is no cache folder). Tests that change
    ``$MOONPIN_CACHE_DIR`` get a memo for the new folder."""
    global _MEMO
    folder = cache_folder()
    path = os.path.join(folder, "check-facts.marshal") if folder is not None else None
    if _MEMO is None or _MEMO.path != path:
        _MEMO = FileMemo(path)
    return _MEMO


#: The largest file :func:`file_digest` hashes (a knowledge base: see ``moonpin.kb.store``).
MAX_DIGEST_BYTES = 256 * 1024 * 1024


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, remembered in :func:`facts_memo` (importing hashlib and
    hashing a 5 MB knowledge base costs a worker start ~10 ms). Raises OSError (a
    :class:`moonpin.kb.errors.ReadRefused` for a FIFO, a device, a file over
    :data:`MAX_DIGEST_BYTES`) when the file cannot be read."""
    memo = facts_memo()
    computed = []

    def digest() -> str:
        import hashlib

        from moonpin.kb.files import read_regular

        computed.append(True)
        return hashlib.sha256(read_regular(path, cap=MAX_DIGEST_BYTES,
                                           what="file")).hexdigest()

    value = memo.get("sha256", path, digest, _is_sha256)
    if computed:
        memo.flush()  # a query process may never flush: keep the expensive answer now
    return value


def _is_sha256(value: Any) -> bool:
    return type(value) is str and len(value) == 64
