"""What a piece of the check reads, traced: every path it stats, opens, lists, reads a link of
or tests through ``os``, ``open`` and ``io``, and every environment variable it reads.

:class:`Reads` patches those calls for the time between :meth:`Reads.start` and
:meth:`Reads.stop` and records each path (absolute, as bytes, with whether symbolic links were
followed) and each variable (its value, or None when unset). Two traces may be nested (the
kept verdict's, :mod:`moonpin.preflight.verdict`, around the extensions' memo,
:mod:`moonpin.preflight.extensions.verdict`): the inner one calls through the outer's patches,
so both see every read. Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

__all__ = ["WRITE_FLAGS", "Reads", "plain_folder"]

#: ``os.open`` flags that make an open a write
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def plain_folder(path: bytes) -> bool:
    """Whether ``path`` is a folder and not a link. A trace keeps no stamp of such a folder
    when only its kind was asked of it (``lstat``, ``readlink``: a folder on the way to a
    file, as ``realpath`` walks it): its stamp changes with every name added to it
    (``/tmp``), while what was asked of it does not, and every file read beneath it is
    stamped itself (a folder swapped for another changes their stamps)."""
    import stat

    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


class Reads:
    """One trace of reads (module doc): :attr:`paths` ``{(path, symlinks followed)}``,
    :attr:`env` ``{variable: value or None}``, :attr:`all_env` (the environment was listed
    or copied whole), :attr:`untraced` (why what was read is not fully known: a read
    through a descriptor of unknown path; None: it is). Writes are passed to :meth:`wrote`,
    which a subclass may judge."""

    def __init__(self, *, wrote: Callable[[Any, int | None], None] | None = None,
                 halt: Callable[[], None] | None = None, outermost: bool = False) -> None:
        """``wrote(path, dir_fd)``: told of each write (default: nothing); ``halt()``: what
        a spoiled trace stops (default: :meth:`stop`; a tracer this one is part of passes
        its own, which stops both); ``outermost``: no trace runs around this one (the kept
        verdict's), so :meth:`stop` puts the real calls back even over an inner trace's."""
        self._wrote = wrote
        self._outermost = outermost
        self._halt = halt
        self.paths: set[tuple[bytes, bool]] = set()  # (path, symlinks followed)
        self.env: dict[str, str | None] = {}
        self.all_env = False
        self.untraced: str | None = None
        self.fds: dict[int, bytes] = {}
        self._saved: list[tuple[Any, str, Any, Any]] = []

    # ---- what a traced call records

    def absolute(self, path: Any, dir_fd: int | None = None) -> bytes | None:
        """``path`` (or a descriptor's) as the absolute bytes the trace keeps; None when the
        real call raises or the path is not known (then the trace is spoiled)."""
        if isinstance(path, int):
            got = self.fds.get(path)
            if got is None:
                self.spoil("a read through a descriptor of unknown path")
            return got
        try:
            p = os.fsencode(os.fspath(path))
        except TypeError:
            return None  # the real call raises
        if not p.startswith(b"/"):
            if dir_fd is not None:
                base = self.fds.get(dir_fd)
                if base is None:
                    self.spoil("a read relative to a descriptor of unknown path")
                    return None
            else:
                base = os.fsencode(os.getcwd())
            p = base + b"/" + p if p else base
        while b"//" in p:
            p = p.replace(b"//", b"/")
        return p

    def read(self, path: Any, follow: bool = True, dir_fd: int | None = None) -> bytes | None:
        p = self.absolute(path, dir_fd)
        if p is not None:
            self.paths.add((p, bool(follow)))
        return p

    def spoil(self, why: str) -> None:
        """What was read is not fully known: say why (the first reason), and stop tracing."""
        if self.untraced is None:
            self.untraced = why
        (self._halt or self.stop)()

    def wrote(self, path: Any, dir_fd: int | None = None) -> None:
        """A write to ``path``: passed to ``wrote`` (a trace of reads keeps nothing of it)."""
        if self._wrote is not None:
            self._wrote(path, dir_fd)

    # ---- installing the tracer

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        old = getattr(owner, name, None)
        if old is None:
            return
        self._saved.append((owner, name, old, new))
        setattr(owner, name, new)

    def start(self) -> None:
        """Patch the reads (each call still made, through whatever was there before)."""
        import builtins
        import io

        real = {n: getattr(os, n) for n in ("stat", "lstat", "open", "listdir", "scandir",
                                            "readlink", "access") if hasattr(os, n)}
        rec = self

        def stat(path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> Any:
            rec.read(path, follow_symlinks, dir_fd)
            return real["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

        def lstat(path: Any, *, dir_fd: int | None = None) -> Any:
            rec.read(path, False, dir_fd)
            return real["lstat"](path, dir_fd=dir_fd)

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            if flags & WRITE_FLAGS:
                rec.wrote(path, dir_fd)
                p = rec.absolute(path, dir_fd)
            else:
                p = rec.read(path, not flags & getattr(os, "O_NOFOLLOW", 0), dir_fd)
            fd: int = real["open"](path, flags, mode, dir_fd=dir_fd)
            if p is not None:
                rec.fds[fd] = p
            return fd

        def listdir(path: Any = ".") -> Any:
            rec.read(path)
            return real["listdir"](path)

        def scandir(path: Any = ".") -> Any:
            rec.read(path)
            return _Entries(real["scandir"](path), rec)

        def readlink(path: Any, *, dir_fd: int | None = None) -> Any:
            rec.read(path, False, dir_fd)
            return real["readlink"](path, dir_fd=dir_fd)

        def access(path: Any, mode: int, *, dir_fd: int | None = None,
                   effective_ids: bool = False, follow_symlinks: bool = True) -> bool:
            rec.read(path, follow_symlinks, dir_fd)
            return real["access"](path, mode, dir_fd=dir_fd,  # type: ignore[no-any-return]
                                  effective_ids=effective_ids, follow_symlinks=follow_symlinks)

        for name, fn in (("stat", stat), ("lstat", lstat), ("open", open_),
                         ("listdir", listdir), ("scandir", scandir), ("readlink", readlink),
                         ("access", access)):
            self._patch(os, name, fn)
        real_open = builtins.open

        def open_file(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if not isinstance(file, int):
                if set(mode) & set("wax+"):
                    rec.wrote(file)
                else:
                    rec.read(file)
            elif file not in rec.fds:
                rec.spoil("a file opened from a descriptor of unknown path")
            return real_open(file, mode, *args, **kwargs)

        self._patch(builtins, "open", open_file)
        self._patch(io, "open", open_file)
        real_code = io.open_code

        def open_code(path: str) -> Any:
            rec.read(path)
            return real_code(path)

        self._patch(io, "open_code", open_code)
        self._patch(os, "environ", _Environ(os.environ, rec))

    def stop(self) -> None:
        """Undo every patch (in reverse). An inner trace whose outer one stopped first (it
        was spoiled) puts nothing back: the real calls stay."""
        while self._saved:
            owner, name, old, new = self._saved.pop()
            if self._outermost or getattr(owner, name, None) is new:
                setattr(owner, name, old)  # else an outer trace stopped first: left as it is


class _Entries:
    """``os.scandir``'s iterator, whose entries record what is asked of them."""

    def __init__(self, it: Any, rec: Reads) -> None:
        self.it, self.rec = it, rec

    def __iter__(self) -> _Entries:
        return self

    def __next__(self) -> _Entry:
        return _Entry(next(self.it), self.rec)

    def __enter__(self) -> _Entries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.it.close()

    def close(self) -> None:
        self.it.close()


class _Entry:
    def __init__(self, e: Any, rec: Reads) -> None:
        self.e, self.rec = e, rec
        self.name, self.path = e.name, e.path

    def __fspath__(self) -> Any:
        return self.e.path

    def inode(self) -> int:
        return self.e.inode()  # type: ignore[no-any-return]

    # What the listing's own entry says (its type and inode, from ``getdents``) changes only
    # with the folder, whose stamp is kept; only what needs a ``stat`` is recorded.

    def is_symlink(self) -> bool:
        return self.e.is_symlink()  # type: ignore[no-any-return]

    def _follows(self, follow_symlinks: bool) -> None:
        if follow_symlinks and self.e.is_symlink():
            self.rec.read(self.e.path, True)

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        self._follows(follow_symlinks)
        return self.e.is_dir(follow_symlinks=follow_symlinks)  # type: ignore[no-any-return]

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        self._follows(follow_symlinks)
        return self.e.is_file(follow_symlinks=follow_symlinks)  # type: ignore[no-any-return]

    def stat(self, *, follow_symlinks: bool = True) -> Any:
        self.rec.read(self.e.path, follow_symlinks)
        return self.e.stat(follow_symlinks=follow_symlinks)

    def __repr__(self) -> str:
        return repr(self.e)


class _Environ(os._Environ):  # type: ignore[name-defined,misc,type-arg]
    """``os.environ`` that records each variable read (with its value, or None when
    unset), and that the whole environment was read when it is listed or copied; each
    call goes through the environment it replaces (an outer trace's records too)."""

    def __init__(self, env: Any, rec: Reads) -> None:
        super().__init__(env._data, env.encodekey, env.decodekey, env.encodevalue,
                         env.decodevalue)
        self._env = env
        self._rec = rec

    def __getitem__(self, key: str) -> str:
        try:
            value: str = self._env[key]
        except KeyError:
            if isinstance(key, str):
                self._rec.env[key] = None
            raise
        self._rec.env[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        self._rec.all_env = True
        return iter(self._env)

    def __len__(self) -> int:
        self._rec.all_env = True
        return len(self._env)

    def copy(self) -> dict[str, str]:
        self._rec.all_env = True
        return self._env.copy()  # type: ignore[no-any-return]

    def __setitem__(self, key: str, value: str) -> None:
        self._rec.spoil("the environment written")
        self._env[key] = value

    def __delitem__(self, key: str) -> None:
        self._rec.spoil("the environment written")
        del self._env[key]
