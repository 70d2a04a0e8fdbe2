"""Writing a file so that readers never see half of it; standard library only, so the
runtime check's cache can use it without loading pydantic."""

from __future__ import annotations

import os

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Temp file in the same folder, fsync, ``os.replace``: readers see the old file or
    the new one, never half of either."""
    import tempfile  # here: a worker start that writes nothing does not load it

    target = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600; these files are meant to be read
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
