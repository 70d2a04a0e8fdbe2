"""Reading a file someone else made, and writing one so that readers never see half of it.

Standard library only, and nothing past ``os`` and ``stat`` at import: the runtime check's
worker start imports this (``moonpin.kb.errors`` is imported only when something is refused, and
``json``/``tempfile`` only by the functions that need them).

:func:`read_regular` is the one way moonpin reads an outside file (a KB, a derived table, a
cache, an ``args --file``, an SGLang source, a scraped tree's member). It refuses, without
blocking, whatever is not a regular file (a FIFO would block a plain ``open``; ``/dev/zero``
would be read until memory runs out), and anything past a size cap chosen per kind of file.
Every refusal is one exception, :class:`moonpin.kb.errors.ReadRefused`: a
:class:`~moonpin.kb.errors.MoonpinError`
(the CLI prints it and exits 2 with its ``tip:``) that is also an :class:`OSError` (``errno``
kept: ``ENOENT`` for a missing file), so callers that already treat "cannot read" as one
outcome need no change. Given the image root a check is confined to (``within``; the check
hands it down as a value, :class:`moonpin.preflight.access.confined.Confined`), a file under
it whose symbolic links lead out of it is refused as missing (:func:`outside`).
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = ["MiB", "endless", "endless_fd", "loads_json", "outside", "read_regular", "sha256_hex",
           "to_devnull", "write_atomic"]

MiB = 1024 * 1024

def outside(path: str | os.PathLike[str], root: str | None) -> bool:
    """Whether ``path`` names a file under ``root`` (as written; ``root`` already a real path,
    without a trailing ``/``; None: no root) that its symbolic links take out of it. Files
    elsewhere (moonpin's own) are not affected."""
    if root is None:
        return False
    name = os.path.abspath(path)
    if not (name == root or name.startswith(root + "/")):
        return False
    real = os.path.realpath(name)
    return not (real == root or real.startswith(root + "/"))


_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
          | getattr(os, "O_NOCTTY", 0))


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse(path: str, reason: str, *, what: str, errno: int = 0, hint: str | None = None,
            limit: int | None = None) -> NoReturn:
    import errno as E

    from moonpin.kb.errors import ReadRefused

    if not errno:
        errno = (E.EISDIR if "directory" in reason else E.EFBIG if "limit" in reason
                 else E.EINVAL)

    if hint is None and limit is not None:
        hint = f"point moonpin at a regular {what} (at most {_size(limit)})"
    raise ReadRefused(path, reason, what=what, errno=errno, limit=limit, hint=hint)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    return f"{n:,} bytes"


def _os_error(path: str, e: OSError, *, what: str, cap: int, hint: str | None) -> NoReturn:
    import errno as E

    if e.errno == E.ELOOP:
        reason = "is a symlink loop (too many levels of symbolic links)"
    elif e.errno == E.ENOENT:
        reason = "does not exist"
    elif e.errno == E.EACCES:
        reason = "cannot be read: permission denied"
    elif e.errno == E.EISDIR:
        reason = "is a directory, not a regular file"
    else:
        reason = f"cannot be read: {e.strerror or type(e).__name__}"
    _refuse(path, reason, what=what, errno=e.errno or 0, hint=hint, limit=cap)


def read_regular(path: str | os.PathLike[str], *, cap: int, what: str = "file",
                 hint: str | None = None, stamp: list[int] | None = None,
                 within: str | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most ``cap`` bytes.

    Raises :class:`moonpin.kb.errors.ReadRefused` (an ``OSError`` and a ``MoonpinError``) naming
    the path, ``what`` it is for, and the problem: missing (``errno.ENOENT``), unreadable,
    a symlink loop, a directory, a FIFO, a device or a socket, or larger than ``cap``
    (checked on the size it has, and again while reading, so a file that grows under us
    never returns more than ``cap`` bytes: at most ``cap + 1`` are read). Never blocks on a
    FIFO: the file is opened ``O_NONBLOCK`` and ``fstat``-ed before any read. ``hint`` is
    the ``tip:`` line (a generic one by default). ``stamp``: the size and mtime of what was
    opened, as its ``fstat`` gave them before the read, are appended to it. ``within``: the
    image root the check confines its reads to (a real path; None: none): a path under it
    that its symbolic links take out of it is refused as missing (``errno.ENOENT``), as the
    image itself would not reach that file (:func:`outside`)."""
    name = os.fspath(path)
    if within is not None and outside(name, within):
        import errno as E

        _refuse(name, f"lies outside the image root {within} (a symbolic link points "
                "out of it)", what=what, errno=E.ENOENT, hint=hint, limit=cap)
    try:
        st = os.stat(name)  # refuse a device before even opening it (opening may act)
        if not stat.S_ISREG(st.st_mode):
            _refuse(name, f"is {_kind(st.st_mode)}, not a regular file", what=what,
                    hint=hint, limit=cap)
        fd = os.open(name, _FLAGS)
    except OSError as e:
        if getattr(e, "what", None) is not None:  # already ours
            raise
        _os_error(name, e, what=what, cap=cap, hint=hint)
    try:
        st = os.fstat(fd)  # what was opened, not what the name pointed at a moment ago
        if not stat.S_ISREG(st.st_mode):
            _refuse(name, f"is {_kind(st.st_mode)}, not a regular file", what=what,
                    hint=hint, limit=cap)
        if st.st_size > cap:
            _refuse(name, f"is {st.st_size:,} bytes, over the {_size(cap)} limit for a {what}",
                    what=what, hint=hint, limit=cap)
        if stamp is not None:
            stamp += (st.st_size, st.st_mtime_ns)
        chunks = []
        total = 0
        limit = cap + 1
        want = min(st.st_size + 1, limit)  # one past the size: EOF seen in the same pass
        while total < limit:
            n = want - total if total < want else min(1 << 20, limit - total)
            try:
                chunk = os.read(fd, n)
            except OSError as e:
                _os_error(name, e, what=what, cap=cap, hint=hint)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total == st.st_size and len(chunk) < n:
                break  # the size it had, and a short read of a regular file: its end
        if total > cap:
            _refuse(name, f"grew past the {_size(cap)} limit for a {what} while being read",
                    what=what, hint=hint, limit=cap)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data``, by CPython's own implementation where it has one: hashlib
    loads OpenSSL first, which costs a query more than hashing a few hundred kilobytes
    the slower way (a large file is better hashed by hashlib)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.10, 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]  # CPython 3.12+
        except ImportError:
            from hashlib import sha256
    out: str = sha256(data).hexdigest()
    return out


def loads_json(data: bytes | str) -> Any:
    """``json.loads`` that fails only with :class:`ValueError`, whose message says what is
    wrong: not JSON (with line and column), not UTF-8, a number longer than Python converts
    (``int()``'s 4,300-digit limit), or nested deeper than Python's recursion limit.

    Depth is bounded by catching :class:`RecursionError` at this boundary rather than by a
    pre-scan: the standard library's C scanner checks the recursion limit at every nested
    array and object and unwinds cleanly, so a good file costs nothing extra (a bracket
    pre-scan in Python costs more than the parse itself on a 5 MB KB)."""
    import json
    import sys

    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested deeper than Python's JSON parser allows (recursion limit "
                         f"{sys.getrecursionlimit()})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not valid JSON: not UTF-8 at byte {e.start}") from None
    except ValueError as e:
        if "digits" in str(e):  # "Exceeds the limit (4300 digits) for integer string ..."
            raise ValueError("holds a number longer than Python converts (limit "
                             f"{sys.get_int_max_str_digits()} digits)") from None
        raise ValueError(f"not valid JSON: {e}") from None


def write_atomic(path: str | os.PathLike[str], data: bytes, *, what: str = "file") -> None:
    """Temp file in the same folder, fsync, ``os.replace``: readers see the old file or
    the new one, never half of either. Raises :class:`moonpin.kb.errors.WriteFailed` (an
    ``OSError`` and a ``MoonpinError``) naming the path when it cannot be written; the old
    file is then unchanged and no temp file is left."""
    import tempfile  # here: a worker start that writes nothing does not load it

    target = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(target))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600; these files are meant to be read
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError) and getattr(e, "what", None) is None:
            from moonpin.kb.errors import WriteFailed

            where = e.filename if isinstance(e.filename, str) and e.filename != tmp else target
            raise WriteFailed(target, f"cannot be written ({e.strerror or type(e).__name__}"
                              + (f": {where}" if where != target else "") + "); it is unchanged",
                              what=what, errno=e.errno or 0,
                              hint="check that its folder exists, is writable, and has "
                                   "space") from e
        raise


def to_devnull(fd: int) -> None:
    """Point ``fd`` at the null device (its reader went away): what is still buffered for it
    goes nowhere instead of failing the exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


def endless_fd(fd: int) -> str | None:
    """What the file open at ``fd`` is when reading it to its end, as Python's own readers
    do (``site`` a ``.pth`` file, the importer a bytecode cache), never ends: "a FIFO (named
    pipe)" (a read blocks for ever), "a character device that does not end" (``/dev/zero``:
    read until memory runs out); None for anything else (``/dev/null`` ends at once). Open
    ``fd`` with ``O_NONBLOCK``; at most one byte of a device is read."""
    st = os.fstat(fd)
    if stat.S_ISFIFO(st.st_mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(st.st_mode) and os.read(fd, 1):
        return "a character device that does not end"
    return None


def endless(path: str | os.PathLike[str]) -> str | None:
    """:func:`endless_fd` of ``path`` (None when it cannot be opened: then Python's reader
    cannot open it either)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return endless_fd(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
