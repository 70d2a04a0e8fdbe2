"""Judge hostile inputs by running moonpin on them, the way a user's shell would.

Two ways to run one input, both a separate process with its own ``HOME``, ``TMPDIR`` and
cache folder, a timeout, and stdout/stderr captured:

* :func:`run` starts the installed ``moonpin`` script (``.venv/bin/moonpin``): the real
  thing, ~0.4 s an input. The default test run uses it for every input.
* :func:`run_forked` forks this (already warm) interpreter and calls
  ``moonpin.cli.main.main(argv)`` in the child, exactly what the script does after its
  imports: an uncaught exception prints its traceback and exits 1, as the interpreter
  would. ~20 ms an input, so the ``fuzz`` run can judge 10,000 inputs per surface; it also
  sends a sample of them through :func:`run`.

:func:`survey` is the loop every surface shares: it asks the surface for one
:class:`Case` per input (seeded), runs it, and tallies the outcome against what the
README promises for bad input: an exit code in {0, 1, 2}, no traceback, no hang, an exit 2
with a ``tip:``, no terminal control character printed raw, nothing changed that the
command must not change, no process left running in the command's session, and whatever
the surface's own ``judge`` adds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import re
import select
import shutil
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
#: A file each surface's figures are appended to (every 500 inputs, and at the end).
PROGRESS = os.environ.get("MOONPIN_HOSTILE_REPORT")
#: Another stream of inputs for every surface (0: the usual one): a surface whose inputs
#: mostly wait (retries, stalls) runs in several processes at once, one shard each.
SHARD = int(os.environ.get("MOONPIN_FUZZ_SHARD", "0"))


@dataclass
class Outcome:
    argv: list[str]
    rc: int | None  # None: killed at the timeout
    out: str
    err: str
    seconds: float
    #: processes still running in the command's session after it ended (killed since)
    leaked: list[str] = field(default_factory=list)

    @property
    def hung(self) -> bool:
        return self.rc is None


def _leftovers(sid: int) -> list[str]:
    """Kill, and describe, every live process of session ``sid`` (each input runs in a
    session of its own: anything in it after the command ended was left behind)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().rsplit(b")", 1)[1].split()
            if int(stat[3]) != sid or stat[0] == b"Z":  # session; a zombie is gone already
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")[:120]
            os.kill(int(name), signal.SIGKILL)
            found.append(f"pid {name}: {cmd}")
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
    return found


def _env(home: Path, user: int | None = None) -> dict[str, str]:
    for sub in ("home", "tmp", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chown(home / sub, user, user)
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home / "home"), TMPDIR=str(home / "tmp"),
               MOONPIN_CACHE_DIR=str(home / "cache"), MOONPIN_CHECK_SYSTEM_LIBS="",
               PYTHONDONTWRITEBYTECODE="1", NO_COLOR="1")
    return env


def run(argv: Sequence[str], home: Path, *, timeout: float = TIMEOUT,
        env: dict[str, str] | None = None, user: int | None = None) -> Outcome:
    """The installed ``moonpin`` script on ``argv``; as ``user`` (uid = gid), when given,
    through ``python -m moonpin`` of an interpreter that user may run."""
    cmd = [str(MOONPIN), *argv]
    extra: dict[str, object] = {}
    full_env = {**_env(home, user), **(env or {})}
    if user is not None:
        import sysconfig

        from tests.lib.checkrun import python_for_nobody

        python = python_for_nobody() or sys.executable
        cmd = [python, "-m", "moonpin", *argv]
        full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
        extra = {"user": user, "group": user}
    t = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=full_env, cwd=home,
                            start_new_session=True, **extra)  # type: ignore[call-overload]
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Outcome(list(argv), None, _text(out), _text(err), timeout,
                       _leftovers(proc.pid))
    return Outcome(list(argv), proc.returncode, _text(out), _text(err),
                   time.monotonic() - t, _leftovers(proc.pid))


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def run_forked(argv: Sequence[str], home: Path, *, timeout: float = TIMEOUT,
               env: dict[str, str] | None = None, user: int | None = None) -> Outcome:
    """``moonpin.cli.main.main(argv)`` in a forked child (see the module docs). A ``user``
    goes through :func:`run`: the child would import what it has not yet imported from
    this interpreter's own folders, which that user may not be able to read."""
    if user is not None:
        return run(argv, home, timeout=timeout, env=env, user=user)

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
            # nothing of pytest's: a test server's listening socket held open here would
            # leave connections to it unanswered once pytest is gone
            os.closerange(3, 1 << 16)
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
            from moonpin.cli.main import main

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
                   b"".join(bufs[r_err]).decode("utf-8", "replace"), time.monotonic() - t,
                   _leftovers(pid))


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """sha256 (or what the path is) of each path, to tell whether a command changed it."""
    out = {}
    for p in paths:
        try:
            if p.is_symlink() or not p.is_file():
                out[str(p)] = "not a regular file" if p.exists() or p.is_symlink() else "absent"
            elif (st := p.stat()).st_size > 8 * 1024 * 1024:  # a sparse giant: not read
                out[str(p)] = f"{st.st_size} bytes, mtime {st.st_mtime_ns}, mode {st.st_mode}"
            else:
                out[str(p)] = f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_mode:o}"
        except OSError as e:
            out[str(p)] = f"unreadable: {e.errno}"
    return out


#: Characters a terminal acts on (ESC starts a sequence that moves the cursor, sets the
#: title or the colours; BEL; backspace; a carriage return but CSV's CRLF; CSI), which no
#: output may carry raw (stderr is no terminal here, so moonpin's own progress line is off).
_TERMINAL_CONTROLS = re.compile("[\x1b\x07\x08\x9b]|\r(?!\n)")


@dataclass
class Tally:
    """What a surface's run found; :meth:`check` fails the test with the first few."""

    surface: str
    inputs: int = 0
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    bad_exit: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    #: of the inputs, how many went through the installed script (the rest forked)
    scripted: int = 0
    seconds: float = 0.0
    slowest: list[tuple[float, str]] = field(default_factory=list)

    def add(self, label: str, o: Outcome, *, allowed: Iterable[int] = (0, 1, 2)) -> None:
        self.inputs += 1
        self.seconds += o.seconds
        self.slowest = sorted([*self.slowest, (o.seconds, label[:100])], reverse=True)[:5]
        where = f"{label}: moonpin {' '.join(a[:80] for a in o.argv)}"
        if o.leaked:
            self.leaked.append(f"{where}: left running: " + "; ".join(o.leaked[:3]))
        if o.hung:
            self.hangs.append(f"{where} (no answer in {o.seconds:.0f}s)")
        elif "Traceback (most recent call last)" in o.err:
            self.tracebacks.append(f"{where}\n{o.err[-1500:]}")
        elif o.rc not in set(allowed):
            self.bad_exit.append(f"{where}: exit {o.rc}\n{o.err[-500:]}")
        elif o.rc == 2 and "tip:" not in o.err:
            self.other.append(f"{where}: exit 2 without a tip:\n{o.err[-500:]}")
        elif _TERMINAL_CONTROLS.search(o.out) or _TERMINAL_CONTROLS.search(o.err):
            # what moonpin prints quotes what it read: escaped, never acted on by a terminal
            self.other.append(f"{where}: a terminal control character printed:\n"
                              f"{(o.out + o.err)[-500:]!r}")

    def summary(self) -> str:
        return (f"{self.surface}: {self.inputs} inputs ({self.inputs - self.scripted} forked"
                f" / {self.scripted} script, {self.seconds:.0f}s in moonpin), "
                f"{len(self.tracebacks)} tracebacks, {len(self.hangs)} hangs, "
                f"{len(self.bad_exit)} other exit codes, {len(self.changed)} changed files, "
                f"{len(self.leaked)} leaked processes, {len(self.other)} other; slowest: "
                + ", ".join(f"{label} {t:.1f}s" for t, label in self.slowest[:3]))

    def problems(self) -> list[str]:
        return (self.tracebacks + self.hangs + self.bad_exit + self.changed + self.leaked
                + self.other)

    def check(self) -> None:
        problems = self.problems()
        if PROGRESS:
            with open(PROGRESS, "a") as f:
                f.write(f"[{time.strftime('%H:%M:%S')}] done: {self.summary()}\n")
        assert not problems, self.summary() + "\n\n" + "\n\n".join(problems[:5])


def runner(fuzz: bool, i: int) -> Callable[..., Outcome]:
    """The way input ``i`` is run: the real script in the default run and for the first
    :data:`FUZZ_SCRIPT_SAMPLE` fuzz inputs, a forked child for the rest."""
    return run if not fuzz or i < FUZZ_SCRIPT_SAMPLE else run_forked


@dataclass
class Case:
    """One hostile input, as a surface makes it: the command and what it must keep."""

    label: str  # what is hostile about it, for the report
    argv: list[str]
    #: files no outcome may change
    keep: Sequence[Path] = ()
    #: files only a run that exits with one of ``writes_on`` may change
    keep_if_refused: Sequence[Path] = ()
    writes_on: tuple[int, ...] = (0,)
    #: another promise of the surface's: a problem (text) or None
    judge: Callable[[Outcome], str | None] | None = None
    home: Path | None = None
    timeout: float = 60.0
    env: dict[str, str] | None = None
    user: int | None = None  # run as this uid (the unprivileged part of a surface)


def survey(surface: str, seed: int, n: int, fuzz: bool, home: Path,
           make: Callable[[random.Random, int], Case]) -> Tally:
    """Run ``n`` inputs of one surface, ``make(rng, i)`` each (seeded with ``seed``), and
    tally them (see the module docs); ``home`` is where a case without its own runs."""
    tally = Tally(surface if not SHARD else f"{surface} (shard {SHARD})")
    rng = random.Random(seed if not SHARD else f"{seed}/{SHARD}")
    for i in range(n):
        case = make(rng, i)
        watched = [*case.keep, *case.keep_if_refused]
        before = digest(watched)
        how = runner(fuzz, i)
        tally.scripted += how is run or case.user is not None
        o = how(case.argv, case.home or home, timeout=case.timeout, env=case.env,
                user=case.user)
        label = f"#{i} {case.label}"
        tally.add(label, o)
        after = digest(watched)
        changed = [p for p in case.keep if after[str(p)] != before[str(p)]]
        if o.rc not in case.writes_on:
            changed += [p for p in case.keep_if_refused if after[str(p)] != before[str(p)]]
        if changed:
            tally.changed.append(f"{label}: exit {o.rc}, changed "
                                 + ", ".join(str(p) for p in changed))
        if case.judge is not None and not o.hung and "Traceback" not in o.err:
            problem = case.judge(o)
            if problem:
                tally.other.append(f"{label}: {problem}")
        if PROGRESS and (i + 1) % 500 == 0:  # a long run read while it goes
            with open(PROGRESS, "a") as f:
                f.write(f"[{time.strftime('%H:%M:%S')}] so far: {tally.summary()}\n")
                f.writelines(p[:300] + "\n" for p in tally.problems()[:3])
    return tally


def fresh(folder: Path) -> Path:
    """``folder``, emptied (whatever an earlier input left there: FIFOs, loops, a tree
    made unreadable) or made."""
    if folder.is_symlink() or folder.exists():
        for p in [folder, *folder.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                with contextlib.suppress(OSError):
                    p.chmod(0o755)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder
