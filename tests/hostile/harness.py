"""Judge hostile inputs by running moonpin on them, the way a user's shell would.

Two ways to run one input, both a separate process with its own ``HOME``, ``TMPDIR`` and
cache folder, a timeout, and stdout/stderr captured:

* :func:`run` starts the installed ``moonpin`` script (``.venv/bin/moonpin``): the real
  thing, ~0.4 s an input. The default test run uses it for every input.
* :func:`run_forked` forks this (already warm) interpreter and calls
  ``resolver.cli.main(argv)`` in the child, exactly what the script does after its
  imports: an uncaught exception prints its traceback and exits 1, as the interpreter
  would. ~20 ms an input, so the ``fuzz`` run can judge 10,000 inputs per surface; it also
  sends a sample of them through :func:`run`.

:func:`judge` holds every outcome to what the README promises for bad input: an exit code
in {0, 1, 2}, no traceback, no hang, and (the caller checks) nothing changed that the
command must not change.
"""

from __future__ import annotations

import hashlib
import io
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOONPIN = ROOT / ".venv" / "bin" / "moonpin"
if not MOONPIN.exists():  # an environment whose script is elsewhere: the one on sys.path
    MOONPIN = Path(sys.executable).with_name("moonpin")

#: Inputs per surface: the default run, and ``-m fuzz``.
DEFAULT_N = int(os.environ.get("MOONPIN_HOSTILE_N", "12"))
FUZZ_N = int(os.environ.get("MOONPIN_FUZZ_N", "10000"))
#: Of a fuzz run's inputs, how many also go through the real script.
FUZZ_SCRIPT_SAMPLE = 40
TIMEOUT = 30.0


@dataclass
class Outcome:
    argv: list[str]
    rc: int | None  # None: killed at the timeout
    out: str
    err: str
    seconds: float

    @property
    def hung(self) -> bool:
        return self.rc is None


def _env(home: Path) -> dict[str, str]:
    for sub in ("home", "tmp", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home / "home"), TMPDIR=str(home / "tmp"),
               MOONPIN_CACHE_DIR=str(home / "cache"), MOONPIN_CHECK_SYSTEM_LIBS="",
               PYTHONDONTWRITEBYTECODE="1", NO_COLOR="1")
    return env


def run(argv: Sequence[str], home: Path, *, timeout: float = TIMEOUT,
        env: dict[str, str] | None = None) -> Outcome:
    """The installed ``moonpin`` script on ``argv``."""
    t = time.monotonic()
    try:
        proc = subprocess.run([str(MOONPIN), *argv], capture_output=True, timeout=timeout,
                              env={**_env(home), **(env or {})}, cwd=home, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    except subprocess.TimeoutExpired as e:
        return Outcome(list(argv), None, _text(e.stdout), _text(e.stderr), timeout)
    return Outcome(list(argv), proc.returncode, _text(proc.stdout), _text(proc.stderr),
                   time.monotonic() - t)


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def run_forked(argv: Sequence[str], home: Path, *, timeout: float = TIMEOUT,
               env: dict[str, str] | None = None) -> Outcome:
    """``resolver.cli.main(argv)`` in a forked child (see the module docs)."""
    import resolver.cli  # noqa: F401 - imported once here, so each child starts warm

    child_env = {**_env(home), **(env or {})}
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    t = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.setsid()
            os.dup2(w_out, 1)
            os.dup2(w_err, 2)
            for fd in (r_out, w_out, r_err, w_err):
                os.close(fd)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                          errors="backslashreplace")
            os.environ.clear()
            os.environ.update(child_env)
            os.chdir(home)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from resolver.cli import main

            try:
                result = main(list(argv))
                code = result if isinstance(result, int) else 0
            except SystemExit as e:
                if e.code is None:
                    code = 0
                elif isinstance(e.code, int):
                    code = e.code
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
            except BaseException:  # what the interpreter does with an uncaught exception
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(w_out)
    os.close(w_err)
    bufs: dict[int, list[bytes]] = {r_out: [], r_err: []}
    open_fds = [r_out, r_err]
    deadline = t + timeout
    hung = False
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            hung = True
            break
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                bufs[fd].append(chunk)
            else:
                open_fds.remove(fd)
    if hung:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    _, status = os.waitpid(pid, 0)
    for fd in (r_out, r_err):
        os.close(fd)
    rc = None if hung else os.waitstatus_to_exitcode(status)
    return Outcome(list(argv), rc, b"".join(bufs[r_out]).decode("utf-8", "replace"),
                   b"".join(bufs[r_err]).decode("utf-8", "replace"), time.monotonic() - t)


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """sha256 (or what the path is) of each path, to tell whether a command changed it."""
    out = {}
    for p in paths:
        try:
            if p.is_symlink() or not p.is_file():
                out[str(p)] = "not a regular file" if p.exists() or p.is_symlink() else "absent"
            else:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError as e:
            out[str(p)] = f"unreadable: {e.errno}"
    return out


@dataclass
class Tally:
    """What a surface's run found; :meth:`check` fails the test with the first few."""

    surface: str
    inputs: int = 0
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    bad_exit: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def add(self, label: str, o: Outcome, *, allowed: Iterable[int] = (0, 1, 2)) -> None:
        self.inputs += 1
        where = f"{label}: moonpin {' '.join(a[:80] for a in o.argv)}"
        if o.hung:
            self.hangs.append(f"{where} (no answer in {o.seconds:.0f}s)")
        elif "Traceback (most recent call last)" in o.err:
            self.tracebacks.append(f"{where}\n{o.err[-1500:]}")
        elif o.rc not in set(allowed):
            self.bad_exit.append(f"{where}: exit {o.rc}\n{o.err[-500:]}")
        elif o.rc == 2 and "tip:" not in o.err:
            self.other.append(f"{where}: exit 2 without a tip:\n{o.err[-500:]}")

    def summary(self) -> str:
        return (f"{self.surface}: {self.inputs} inputs, {len(self.tracebacks)} tracebacks, "
                f"{len(self.hangs)} hangs, {len(self.bad_exit)} other exit codes, "
                f"{len(self.changed)} changed files, {len(self.other)} other")

    def check(self) -> None:
        problems = self.tracebacks + self.hangs + self.bad_exit + self.changed + self.other
        report = os.environ.get("MOONPIN_HOSTILE_REPORT")
        if report:
            with open(report, "a") as f:
                f.write(self.summary() + "\n")
        assert not problems, self.summary() + "\n\n" + "\n\n".join(problems[:5])


def runner(fuzz: bool, i: int) -> Callable[..., Outcome]:
    """The way input ``i`` is run: the real script in the default run and for the first
    :data:`FUZZ_SCRIPT_SAMPLE` fuzz inputs, a forked child for the rest."""
    return run if not fuzz or i < FUZZ_SCRIPT_SAMPLE else run_forked
