"""The verdict of a warm worker start, replayed when nothing it was read from changed.

A warm check already answers from memos (the SGLang source stamps, the file-facts memo), but
it still loads ~40 modules and walks every memo to reach the verdict it reached last time.
This memo keeps the whole answer instead: what the check printed and its exit code, with the
stamp of every file and folder the run touched through ``os``, ``open`` and ``io`` (stat,
open, list, readlink, access) and every environment variable it read. A later start with
the same command line, interpreter, working folder, user and host whose stamps and
variables all still hold prints the same answer without loading the check at all.

The stamp of a file is its inode, size and status-change time (``st_ctime_ns``): any write,
``chmod``, rename, link or unlink changes the ctime, and unlike the mtime no user can set it
back. A missing or unreadable path is stamped with its ``errno``. A folder the run only
walked through (``lstat``, ``readlink``: ``realpath`` on the way to a file) is not stamped by
its listing (:func:`moonpin.preflight.access.reads.plain_folder`): a worker under ``/tmp`` would
never be replayed, and every file read beneath it is stamped itself. A run is kept only when it
was fully traced: no child process, no environment written, no file written outside the
cache folder, nothing read through a descriptor whose path is unknown, exit 0 or 1, and no
stamp so recent that a change within the same clock tick could hide behind it
(:func:`moonpin.kb.cache.racy`). Everything else simply runs the check; ``--no-cache``
neither replays nor records.

Only ``os`` and ``marshal`` at import: this runs first at every worker start.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any

__all__ = ["FORMAT", "Recorder", "main", "replay", "stamps"]

#: The memo file's format; a change of it, of the key's parts or of moonpin's own files
#: (their stamps are in every memo) makes a start compute afresh.
FORMAT = 1
_PREFIX = "check-verdict-"
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
#: Folders with at most this many names are stat-ed by whole paths (measured here: one
#: path 1.1 us, a folder's open + stat + close 1.9 us, each further name 0.65 us).
_FEW = 3


def _key(argv: Sequence[str]) -> str:
    """Everything outside the traced reads that the answer depends on."""
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    u = os.uname()
    ttys: list[bool | None] = []
    for fd in (0, 1, 2):
        try:
            ttys.append(os.isatty(fd))
        except OSError:
            ttys.append(None)
    streams = [(getattr(s, "encoding", None), getattr(s, "errors", None))
               for s in (sys.stdout, sys.stderr)]
    return repr((FORMAT, list(argv), cwd, sys.executable, sys.version, sys.path,
                 tuple(sys.flags), os.geteuid(), os.getegid(), os.getgroups(), u.sysname,
                 u.nodename, u.release, u.machine, ttys, streams, __file__))


def _memo_path(folder: str, key: str) -> str:
    import zlib  # builtin

    return os.path.join(folder, f"{_PREFIX}{zlib.crc32(key.encode()):08x}.marshal")


def _off(argv: Sequence[str]) -> bool:
    return "--no-cache" in argv or os.environ.get("MOONPIN_CHECK_MEMO") == "0"


def stamps(groups: Sequence[tuple[bytes, bool, Sequence[bytes]]]) -> list[int]:
    """Three numbers per path of ``groups`` (``(folder, follow symlinks, [names])`` each):
    inode, size and ctime (ns), or ``-errno, 0, 0`` when it cannot be stat-ed; one ``stat``
    per path, relative to its folder's descriptor when the folder has more than
    :data:`_FEW` names (fewer cost less as whole paths than the folder's open and close)."""
    got: list[int] = []
    ap = got.append
    st, op, cl = os.stat, os.open, os.close
    for folder, follow, names in groups:
        fd = None
        if len(names) <= _FEW:
            names = [folder + b"/" + name for name in names]
        else:
            try:
                fd = op(folder, _DIR_FLAGS)
            except OSError as e:
                for _ in names:
                    ap(-(e.errno or 1))
                    ap(0)
                    ap(0)
                continue
        try:
            for name in names:
                try:
                    s = st(name, dir_fd=fd, follow_symlinks=follow)
                except OSError as e:
                    ap(-(e.errno or 1))
                    ap(0)
                    ap(0)
                    continue
                ap(s.st_ino)
                ap(s.st_size)
                ap(s.st_ctime_ns)
        finally:
            if fd is not None:
                cl(fd)
    return got


def replay(argv: Sequence[str]) -> int | None:
    """Print the remembered answer for ``argv`` and return its exit code, or None when
    there is none that still holds."""
    return None if _off(argv) else _replay(_key(argv))


def _replay(key: str) -> int | None:
    from moonpin.kb.cache import cache_folder, load

    folder = cache_folder()
    if folder is None:
        return None
    doc = load(_memo_path(folder, key))
    if type(doc) is not dict or doc.get("format") != FORMAT or doc.get("key") != key:
        return None
    try:
        out, code = doc["out"], doc["code"]
        if code not in (0, 1) or type(out) is not list or not all(
                type(o) is tuple and len(o) == 2 and o[0] in (1, 2) and type(o[1]) is str
                for o in out):
            return None
        env = doc["env"]
        if env is None:
            if dict(os.environ) != doc["environ"]:
                return None
        else:
            get = os.environ.get
            for k, v in env:
                if get(k) != v:
                    return None
        if stamps(doc["groups"]) != doc["stamps"]:
            return None
    except (TypeError, ValueError, KeyError, AttributeError):  # a damaged memo
        return None
    try:
        for fd, text in out:
            stream = sys.stdout if fd == 1 else sys.stderr
            if stream is not None:  # a closed descriptor: nothing is printed, as print does
                stream.write(text)
    except BrokenPipeError:  # the reader left (`| head`): the exit code still holds
        from moonpin.kb.files import to_devnull

        to_devnull(1)
    return int(code)


def main(argv: Sequence[str]) -> int:
    """The check for ``argv``: replayed when a memo holds, else run (and recorded: from
    before the check's modules load, whose import-time reads count too)."""
    if _off(argv):
        from moonpin.preflight.run import main as run

        return run(list(argv))
    key = _key(argv)
    got = _replay(key)
    if got is not None:
        return got
    rec = Recorder(argv, key)
    rec.start()
    try:
        from moonpin.preflight.run import main as run

        code = run(list(argv))
    except BaseException:
        rec.stop()
        raise
    rec.finish(code)
    return code


# ---------------------------------------------------------------- recording a run


_WRITES = ("replace", "rename", "unlink", "remove", "mkdir", "makedirs", "rmdir", "symlink",
           "link", "chmod", "chown", "utime", "truncate", "mkfifo", "mknod")
_SPAWNS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen", "execv",
           "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe")


class Recorder:
    """Traces one run of the check (:meth:`start`, then :meth:`finish` or :meth:`stop`) and
    keeps its answer when the run was fully traced: its reads
    (:class:`moonpin.preflight.access.reads.Reads`, loaded only for a run to trace: a replayed
    start does without), and what spoils a run (a write outside the cache folder, a child
    process, output that could not be written)."""

    def __init__(self, argv: Sequence[str], key: str | None = None) -> None:
        from moonpin.preflight.access.reads import Reads

        self.reads = Reads(wrote=self.wrote, halt=self.stop, outermost=True)
        self.argv = list(argv)
        #: the memo's name (:func:`_key`), taken before the run (which may change sys.path)
        self.key = key if key is not None else _key(argv)
        self.out: list[tuple[int, str]] = []
        self.folder: bytes | None = None
        self.t0 = 0
        self._saved: list[tuple[Any, str, Any]] = []

    @property
    def paths(self) -> set[tuple[bytes, bool]]:
        """Every path read, with whether symbolic links were followed."""
        return self.reads.paths

    @property
    def env(self) -> dict[str, str | None]:
        """Every variable read, with its value (None: unset)."""
        return self.reads.env

    @property
    def all_env(self) -> bool:
        return self.reads.all_env

    @property
    def untraced(self) -> str | None:
        """Why this run cannot be kept (None: it can)."""
        return self.reads.untraced

    def spoil(self, why: str) -> None:
        """This run cannot be kept: say why (the first reason), and stop tracing it."""
        self.reads.spoil(why)

    def wrote(self, path: Any, dir_fd: int | None = None) -> None:
        p = self.reads.absolute(path, dir_fd)
        if p is None or self.folder is None or not (p + b"/").startswith(self.folder):
            self.spoil(f"a write to {p!r}")

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        old = getattr(owner, name, None)
        if old is None:
            return
        self._saved.append((owner, name, old))
        setattr(owner, name, new)

    def start(self) -> None:
        import time

        from moonpin.kb.cache import cache_folder

        folder = cache_folder()
        if folder is not None:
            self.folder = self.reads.absolute(folder) + b"/"  # type: ignore[operator]
        self.t0 = time.time_ns()
        real = {n: getattr(os, n) for n in _WRITES + _SPAWNS if hasattr(os, n)}
        self.reads.start()
        rec = self
        for name in _WRITES:
            if name in real:
                self._patch(os, name, _writer(rec, real[name]))
        for name in _SPAWNS:
            if name in real:
                self._patch(os, name, _spawner(rec, real[name]))
        import _posixsubprocess

        self._patch(_posixsubprocess, "fork_exec", _spawner(rec, _posixsubprocess.fork_exec))
        for fd, name in ((1, "stdout"), (2, "stderr")):
            if getattr(sys, name) is not None:  # None: nothing printed, here or replayed
                self._patch(sys, name, _Tee(getattr(sys, name), fd, self))

    def stop(self) -> None:
        """Undo every patch (in reverse): this one's, then the reads'."""
        while self._saved:
            owner, name, old = self._saved.pop()
            setattr(owner, name, old)
        self.reads.stop()

    # ---- keeping the answer

    def finish(self, code: int) -> str | None:
        """Stop tracing and keep the answer when the run can be replayed; why not, or
        None when kept."""
        self.stop()
        why = self._why_not(code)
        if why is not None:
            return why
        from moonpin.kb.cache import cache_folder, prune, racy, store

        folder = cache_folder()
        if folder is None:
            return "no cache folder"
        from moonpin.preflight.access.reads import plain_folder

        self.paths.update((name, True) for name in _own_files())
        keep = self.folder or b"\0"
        groups: dict[tuple[bytes, bool], list[bytes]] = {}
        for p, follow in sorted(self.paths):
            if (p + b"/").startswith(keep):
                continue  # moonpin's own memos: validated against what they were made from
            if not follow and plain_folder(p):
                continue  # a folder walked through: its kind, not its listing, was asked
            head, _, name = p.rstrip(b"/").rpartition(b"/") if p != b"/" else (b"/", b"", b".")
            groups.setdefault((head or b"/", follow), []).append(name or b".")
        flat = [(head, follow, names) for (head, follow), names in groups.items()]
        got = stamps(flat)
        if any(racy(c, self.t0) for c in got[2::3] if c > 0):
            return "a file changed too recently to trust its stamp"
        env = None if self.all_env else sorted(self.env.items())
        doc = {"format": FORMAT, "key": self.key, "env": env,
               "environ": dict(os.environ) if self.all_env else None,
               "groups": flat, "stamps": got, "out": self.out, "code": code}
        path = _memo_path(folder, doc["key"])  # type: ignore[arg-type]
        fresh = not os.path.exists(path)
        err = store(path, doc)
        if err is None and fresh:
            prune(folder, _PREFIX)
        return err

    def _why_not(self, code: int) -> str | None:
        if self.untraced is not None:
            return self.untraced
        if code not in (0, 1):
            return f"exit {code}"
        return None


def _own_files() -> Iterator[bytes]:
    """moonpin's own source (a changed moonpin changes the answer): every folder and module
    of the package (:func:`moonpin.kb.cache.own_files`), not only those this run loaded (a
    start whose walk was answered from its memo loads no loader rule, yet the answer is
    the rules'), and any other module loaded from beside it."""
    from moonpin.kb.cache import own_files

    for own in own_files():
        yield os.fsencode(own)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and f.startswith(root + os.sep):
            yield os.fsencode(f)


def _writer(rec: Recorder, real: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)):
                rec.wrote(a, kwargs.get("dir_fd"))
        return real(*args, **kwargs)

    return call


def _spawner(rec: Recorder, real: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        rec.spoil("a child process")
        return real(*args, **kwargs)

    return call


class _Tee:
    """A text stream that keeps what is written to it (in order, with its stream); a write
    that fails (a reader gone) spoils the run: what was kept would be cut."""

    def __init__(self, stream: Any, fd: int, rec: Recorder) -> None:
        self._stream, self._fd, self._rec = stream, fd, rec

    def write(self, text: str) -> int:
        try:
            n: int = self._stream.write(text)
        except BaseException:
            self._rec.spoil("its output could not be written")
            raise
        self._rec.out.append((self._fd, text))
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
