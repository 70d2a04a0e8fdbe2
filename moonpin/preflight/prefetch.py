"""Work of a cold check done on a second core: a forked child computes it while the check
goes on, and hands the answer back through a pipe.

A cold worker start (nothing remembered: a new image, ``--no-cache``) spends its time in
two independent pieces: reading SGLang's ~4,000 sources for what they need from mooncake,
and loading ``import mooncake.pg`` as ld.so would (:mod:`moonpin.preflight.loader.loadchain`).
The second needs the first's answer only to know which module SGLang imports, and that is
known before the sources are read in nearly every image (the knowledge base's record of the
release; else the module the package has). So the load is started in a child with that
guess, the parent reads the sources, and the load's answer is taken when the check reaches
it, if the guess was right (the answer is keyed by everything it was computed from: a wrong
guess is a miss, and the parent computes it itself).

Nothing here decides anything: a child that cannot be forked, fails, is killed or answers
something unreadable is a miss. No fork when another thread runs (forking one is unsafe)
or when ``MOONPIN_CHECK_FORK=0``. The child never prints, flushes nothing of the parent's
and leaves by ``os._exit``; one not taken is killed and reaped by whoever started it
(:meth:`Pending.cancel`; the check's :class:`moonpin.preflight.env.context.Run` holds its own).

Only ``os`` and ``sys`` at import: this runs at worker start.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["Pending", "held", "isolated", "start"]

#: The largest answer read back (a child answers a few hundred kilobytes).
_MAX_ANSWER = 64 * 1024 * 1024


class Pending:
    """A child computing something; :meth:`take` waits for its answer (None: a miss)."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd
        self.done = False

    def take(self) -> Any:
        """The child's answer, waited for; None when it has none (it failed, was killed,
        or wrote something unreadable). Taken once: later calls give None."""
        if self.done:
            return None
        chunks: list[bytes] = []
        size = 0
        try:
            while size <= _MAX_ANSWER:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError:
            chunks = []
        status = self._finish(kill=size > _MAX_ANSWER)
        if status != 0 or not chunks or size > _MAX_ANSWER:
            return None
        import marshal

        try:
            return marshal.loads(b"".join(chunks))
        except (ValueError, EOFError, TypeError):
            return None

    def _finish(self, kill: bool = False) -> int | None:
        """Close the pipe, reap the child (killed first with ``kill``); its exit status."""
        if self.done:
            return None
        self.done = True
        try:
            os.close(self.fd)
        except OSError:
            pass
        if kill:
            _kill(self.pid)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return None
        return os.waitstatus_to_exitcode(status)

    def cancel(self) -> None:
        """Kill and reap the child unless it was taken (its answer is no longer wanted)."""
        self._finish(kill=True)


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _may_fork() -> bool:
    if not hasattr(os, "fork") or os.environ.get("MOONPIN_CHECK_FORK") == "0":
        return False
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() <= 1


def start(work: Callable[[], Any]) -> Pending | None:
    """``work()`` in a forked child, its answer (marshal-able) to be taken later; None when
    no child is started (then the caller computes it when needed)."""
    if not _may_fork():
        return None
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: compute, answer, leave without running anything of the parent
        code = 1
        try:
            os.close(r)
            # nothing of the parent's output is held open or written by the child
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            import marshal

            data = marshal.dumps(work())
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
            code = 0
        except BaseException:  # a failed child is a miss, said by its exit code
            pass
        finally:
            os._exit(code)
    os.close(w)
    return Pending(pid, r)


def isolated(work: Callable[[], Any], timeout: float = 20.0,
             memory: int = 512 << 20) -> tuple[bool, Any]:
    """``work()`` in a forked child held to ``memory`` bytes more data than this process
    has and to ``timeout`` seconds: (True, its answer), or (False, None) when it could not
    be run so (no fork), failed, crashed, ran out of either, or answered unreadably (or
    answered None).

    For readers of input that could take the process down (``marshal.loads`` of an image's
    bytecode trusts the lengths the bytes declare: a few bytes ask for gigabytes)."""
    how, got = held(work, timeout, memory)
    return (how == "answer" and got is not None), got if how == "answer" else None


def held(work: Callable[[], Any], timeout: float = 20.0,
         memory: int = 512 << 20) -> tuple[str, Any]:
    """:func:`isolated`, telling a child that ran and died apart from one never started:
    ("answer", what it answered, None included), ("died", None): it raised, was killed,
    ran out of memory or time, or answered unreadably; ("not run", None): no fork here."""
    if not _may_fork():
        return "not run", None

    def child() -> Any:
        _hold_memory(memory)
        return ("answer", work())

    p = start(child)
    if p is None:
        return "not run", None
    import select

    try:
        ready, _, _ = select.select([p.fd], [], [], timeout)
    except (OSError, ValueError):
        ready = []
    if not ready:
        p.cancel()
        return "died", None
    got = p.take()
    if type(got) is tuple and len(got) == 2 and got[0] == "answer":
        return "answer", got[1]
    return "died", None


def _hold_memory(extra: int) -> None:
    """Limit this (child) process's data to what it has now plus ``extra`` bytes (best
    effort: where RLIMIT_DATA or /proc is missing, nothing is limited)."""
    try:
        import resource

        with open("/proc/self/statm", "rb") as f:
            data_pages = int(f.read().split()[5])
        limit = data_pages * os.sysconf("SC_PAGE_SIZE") + extra
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    except (OSError, ValueError, IndexError, ImportError, AttributeError):
        pass

