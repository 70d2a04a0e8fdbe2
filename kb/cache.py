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

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: `typing` and `pathlib` load `re` and `enum`
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["FileMemo", "cache_dir", "cache_folder", "facts_memo", "file_digest", "load",
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


def load(path: str | os.PathLike[str]) -> Any:
    """The document marshalled at ``path``, or None when missing, unreadable or damaged."""
    try:
        with open(path, "rb") as f:
            return marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def store(path: str | os.PathLike[str], doc: Any) -> str | None:
    """Write ``doc`` atomically (:func:`kb.files.write_atomic`); return why it failed, or
    None."""
    from kb.files import write_atomic

    try:
        write_atomic(path, marshal.dumps(doc))
    except OSError as e:
        return f"{e.strerror or type(e).__name__}: {e.filename or path}"
    except ValueError as e:  # something marshal cannot hold
        return f"{e}: {path}"
    return None


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
        self._used: set[str] = set()
        self._dirty = False
        #: False: every ``get`` computes afresh and nothing is remembered (``--no-cache``)
        self.enabled = True

    def _entries(self) -> dict[str, tuple[int, int, Any]]:
        if self._data is None:
            doc = load(self.path) if self.path is not None else None
            data: dict[str, tuple[int, int, Any]] = {}
            if isinstance(doc, dict) and doc.get("format") == self.FORMAT and isinstance(
                    doc.get("entries"), dict):
                data = doc["entries"]
            self._data = data
        return self._data

    def get(self, kind: str, path: str | os.PathLike[str], compute: Callable[[], T]) -> T:
        """``compute()``'s answer for ``path`` as it is now. Raises OSError when ``path``
        cannot be stat-ed, and whatever ``compute`` raises (nothing is remembered then)."""
        if not self.enabled:
            return compute()
        name = os.path.abspath(path)
        st = os.stat(name)
        key = f"{kind}\0{name}"
        entries = self._entries()
        hit = entries.get(key)
        self._used.add(key)
        if (type(hit) is tuple and len(hit) == 3 and hit[0] == st.st_size
                and hit[1] == st.st_mtime_ns):
            return hit[2]  # type: ignore[no-any-return]
        value = compute()
        entries[key] = (st.st_size, st.st_mtime_ns, value)
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
        return store(self.path, {"format": self.FORMAT, "entries": entries})


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


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, remembered in :func:`facts_memo` (importing hashlib and
    hashing a 5 MB knowledge base costs a worker start ~10 ms). Raises OSError when the
    file cannot be read."""
    memo = facts_memo()
    computed = []

    def digest() -> str:
        import hashlib

        computed.append(True)
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    value = memo.get("sha256", path, digest)
    if computed:
        memo.flush()  # a query process may never flush: keep the expensive answer now
    return value
