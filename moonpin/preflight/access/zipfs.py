"""Modules inside zip archives on ``sys.path``, found and read as ``zipimport`` finds and
reads them, without running them.

A ``sys.path`` entry that is a zip archive, or a folder inside one (``/opt/deps.zip/lib``),
is searched by ``zipimport.zipimporter`` (the path hook before ``FileFinder``): a package is
``NAME/__init__.py`` or ``NAME/__init__.pyc`` in it, a module ``NAME.py`` or ``NAME.pyc``, a
folder with neither a namespace portion (only when the archive has an entry for the folder
itself, ``NAME/``: ``zipimport``'s ``_is_dir``); it finds no extension module (``.so`` files in an
archive are never imported). A path inside an archive is told by the file it passes
through (``stat`` says ``ENOTDIR``); the archive's members are read from its central
directory (``zipfile``, imported only when an archive is met). Only ``os`` at import.
"""

from __future__ import annotations

import errno
import os

from moonpin.preflight.access.confined import NOWHERE, Confined

__all__ = ["archive_of", "find", "read", "read_source", "size"]

#: Members of an archive read at most (a larger one is not searched).
_MAX_MEMBERS = 1_000_000
_MEMBERS: dict[tuple[str, int, int], frozenset[str] | None] = {}


def _members(archive: str) -> frozenset[str] | None:
    """The member names of the zip archive at ``archive`` (None: not a readable zip)."""
    try:
        st = os.stat(archive)
    except (OSError, ValueError):
        return None
    key = (archive, st.st_size, st.st_mtime_ns)
    if key in _MEMBERS:
        return _MEMBERS[key]
    import stat
    import zipfile

    got: frozenset[str] | None = None
    if stat.S_ISREG(st.st_mode):
        try:
            with zipfile.ZipFile(archive) as z:
                infos = z.infolist()
                if len(infos) <= _MAX_MEMBERS:
                    got = frozenset(i.filename for i in infos)
        except (OSError, zipfile.BadZipFile, ValueError, RuntimeError, EOFError):
            got = None
    _MEMBERS[key] = got
    return got


def archive_of(path: str) -> tuple[str, str] | None:
    """(the archive, the folder inside it, ``""`` for its top) when ``path`` is a zip
    archive or a path inside one, as ``zipimporter(path)`` takes it; else None."""
    p = os.path.normpath(path)
    inner: list[str] = []
    for _ in range(64):
        try:
            os.stat(p)
        except OSError as e:
            if e.errno != errno.ENOTDIR:
                return None
            head, tail = os.path.split(p)
            if head == p or not tail:
                return None
            inner.insert(0, tail)
            p = head
            continue
        except ValueError:
            return None
        if _members(p) is None:
            return None
        return p, "/".join(inner)
    return None


def find(entry: str, fullname: str) -> tuple[str, str | None, tuple[str, ...] | None] | None:
    """``zipimporter(entry).find_spec(fullname)``: (kind ``py``/``pyc``/``ns``, the file,
    the package's search locations: None for a module), or None (no such module there, or
    ``entry`` is no archive)."""
    got = archive_of(entry)
    if got is None:
        return None
    archive, prefix = got
    names = _members(archive) or frozenset()
    tail = fullname.rpartition(".")[2]
    base = f"{prefix}/{tail}" if prefix else tail
    where = os.path.join(archive, base)
    for init in ("__init__.py", "__init__.pyc"):
        if f"{base}/{init}" in names:
            return init.rpartition(".")[2], os.path.join(where, init), (where,)
    for suffix in (".py", ".pyc"):
        if base + suffix in names:
            return suffix[1:], where + suffix, None
    if base + "/" in names:  # a folder is one only where the archive lists it
        return "ns", None, (where,)
    return None


def _member(path: str) -> tuple[str, str] | None:
    got = archive_of(path)
    if got is None or not got[1] or got[1] not in (_members(got[0]) or ()):
        return None
    return got


def size(path: str) -> int | None:
    """The uncompressed size of the archive member at ``path`` (None: no member)."""
    got = _member(path)
    if got is None:
        return None
    import zipfile

    try:
        with zipfile.ZipFile(got[0]) as z:
            return z.getinfo(got[1]).file_size
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, RuntimeError, EOFError):
        return None


def read(path: str, cap: int, what: str = "file") -> bytes:
    """The bytes of the archive member at ``path``, at most ``cap``; raises OSError naming
    it when it is no member or cannot be read."""
    got = _member(path)
    if got is None:
        raise OSError(errno.ENOENT, f"no {what} in a zip archive", path)
    import zipfile

    try:
        with zipfile.ZipFile(got[0]) as z:
            info = z.getinfo(got[1])
            if info.file_size > cap:
                raise OSError(errno.EFBIG, f"{what} larger than {cap} bytes", path)
            with z.open(info) as f:
                data = f.read(cap + 1)
    except (zipfile.BadZipFile, KeyError, ValueError, RuntimeError, EOFError) as e:
        raise OSError(errno.EIO, f"{what} in a zip archive cannot be read ({e})", path) from e
    if len(data) > cap:
        raise OSError(errno.EFBIG, f"{what} larger than {cap} bytes", path)
    return data


def read_source(path: str, cap: int, what: str = "file", *,
                within: Confined = NOWHERE) -> bytes:
    """A regular file's bytes (:meth:`~moonpin.preflight.access.confined.Confined.read`:
    one its links take out of the image root ``within`` is refused), or, for a path
    inside a zip archive, the member's (:func:`read`); raises OSError."""
    try:
        return within.read(path, cap=cap, what=what)
    except OSError:
        if archive_of(path) is None:
            raise
    return read(path, cap, what)
