"""moonpin's own cache folder: small JSON memos that spare a worker start repeated work.

Everything kept here is validated before use (see each caller) and rebuilt when missing,
stale or unreadable; a cache that cannot be written costs time, never a wrong answer.
Standard library only (the runtime check imports it).

The folder is ``$MOONPIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/moonpin``, else
``~/.cache/moonpin``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "file_digest", "load", "store"]


def cache_dir() -> Path | None:
    """None when there is nowhere to keep it (no home folder: a container running as a
    UID without a passwd entry and no ``$HOME``); callers then work without a cache."""
    env = os.environ.get("MOONPIN_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg, "moonpin")
    try:
        return Path.home() / ".cache" / "moonpin"
    except (RuntimeError, KeyError, OSError):
        return None


def load(path: Path) -> Any:
    """The JSON document at ``path``, or None when missing or unreadable."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def store(path: Path, doc: Any) -> str | None:
    """Write ``doc`` atomically (:func:`kb.files.write_atomic`); return why it failed, or
    None."""
    from kb.files import write_atomic

    try:
        write_atomic(path, json.dumps(doc, separators=(",", ":")).encode())
    except OSError as e:
        return f"{e.strerror or type(e).__name__}: {e.filename or path}"
    return None


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, remembered per (path, size, mtime_ns) the way Python
    remembers bytecode per source (importing hashlib and hashing a 4 MB knowledge base
    costs a worker start ~10 ms). Raises OSError when the file cannot be read."""
    st = path.stat()
    key = str(path.resolve())
    seen = _DIGESTS.get(key)
    if seen is not None and seen[:2] == (st.st_size, st.st_mtime_ns):
        return seen[2]  # asked again in this process (each resolved table checks its KB)
    digest = _file_digest(path, key, st)
    _DIGESTS[key] = (st.st_size, st.st_mtime_ns, digest)
    return digest


_DIGESTS: dict[str, tuple[int, int, str]] = {}


def _file_digest(path: Path, key: str, st: os.stat_result) -> str:
    folder = cache_dir()
    if folder is None:
        import hashlib

        return hashlib.sha256(path.read_bytes()).hexdigest()
    memo_path = folder / "digests.json"
    memo = load(memo_path)
    if not isinstance(memo, dict):
        memo = {}
    hit = memo.get(key)
    if (isinstance(hit, list) and len(hit) == 3 and hit[:2] == [st.st_size, st.st_mtime_ns]
            and isinstance(hit[2], str)):
        return hit[2]
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    memo[key] = [st.st_size, st.st_mtime_ns, digest]
    store(memo_path, memo)
    return digest
