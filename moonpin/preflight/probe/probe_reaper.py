"""The deep probe's reaper: a small child interpreter of moonpin's own that makes itself
the *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), runs the probe under it,
and after the probe's answer or its timeout kills and reaps every process the probe left
behind, wherever it went: a daemon that called ``setsid()``, double-forked or kept the
probe's output open has left the process group, but an orphan is re-parented to the
nearest subreaper, so it is still the reaper's descendant.

The reaper runs as a separate process (``python -I -S -c``), not as moonpin's own process
turned subreaper, so that every descendant it finds is the probe's, whatever else the
process that runs the check has started; and nothing here is imported by the light check
(``ctypes`` is imported by the reaper only)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["run_reaped"]

#: Runs in the reaper child: ``argv[1]`` is JSON with the probe's command, its timeout and
#: the descriptor the report (one JSON object) is written to. Standard library only, and
#: code any Python 3 of an image can run.
_REAPER = r"""
import ctypes, json, os, signal, subprocess, sys, time
args = json.loads(sys.argv[1])
subreaper = False
try:
    libc = ctypes.CDLL(None, use_errno=True)
    subreaper = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER (linux/prctl.h)
except Exception:  # no prctl (not Linux): the caller's process-group kill is what is left
    pass
me = os.getpid()
by_children_file = os.path.exists("/proc/%d/task/%d/children" % (me, me))
def kids(pid):
    out = []
    if by_children_file:  # CONFIG_PROC_CHILDREN: each task's children
        try:
            for t in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                    out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pass
        return out
    for d in os.listdir("/proc"):  # else every process's parent, from its stat line
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d, "rb") as f:
                    fields = f.read(4096).rpartition(b")")[2].split()
                if int(fields[1]) == pid:
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out
def tree():
    seen, todo = [], [me]
    while todo:
        for k in kids(todo.pop()):
            if k not in seen and k != me:
                seen.append(k)
                todo.append(k)
    return seen
def comm(pid):
    try:
        with open("/proc/%d/comm" % pid, "rb") as f:
            return f.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return ""
def sweep():
    killed, deadline = set(), time.monotonic() + 10
    while True:
        for pid in tree():
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return killed, True  # no child left: with the subreaper, no descendant either
        if time.monotonic() > deadline:
            return killed, False  # a process the kernel does not let die (state D)
        time.sleep(0.005)
try:
    probe = subprocess.Popen(args["cmd"], stdin=subprocess.DEVNULL)
except OSError as e:
    report = {"error": e.strerror or str(e)}
else:
    try:
        rc, timed_out = probe.wait(args["timeout"]), False
    except subprocess.TimeoutExpired:
        rc, timed_out = None, True
    running = sorted(set(filter(None, map(comm, tree())))) if timed_out else []
    killed, clean = sweep()
    killed.discard(probe.pid)
    report = {"rc": rc, "timeout": timed_out, "running": running, "left": len(killed),
              "clean": clean and subreaper, "subreaper": subreaper}
with os.fdopen(args["fd"], "w") as f:
    f.write(json.dumps(report))
"""


def run_reaped(cmd: list[str], env: dict[str, str], timeout: float, stdout: Any,
               stderr: Any) -> dict[str, Any]:
    """Run ``cmd`` (the probe) under the reaper with ``stdout``/``stderr`` (files), for at
    most ``timeout`` seconds; every process it left is killed and reaped before this
    returns. The reaper's report: ``rc`` (the probe's exit status, negative for a signal,
    or None at the timeout), ``timeout``, ``running`` (the command names at the timeout),
    ``left`` (how many processes outlived the probe's answer), or ``error`` (the probe
    could not start). A reaper that gives no report in time is a timeout too, naming what
    its process group was running."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryFile() as rep:
        fd = rep.fileno()
        reaper = subprocess.Popen(
            [sys.executable or cmd[0], "-I", "-S", "-c", _REAPER,
             json.dumps({"cmd": cmd, "timeout": timeout, "fd": fd})],
            stdout=stdout, stderr=stderr, env=env, stdin=subprocess.DEVNULL,
            pass_fds=(fd,), start_new_session=True)
        # the reaper's margin: its own start, and its sweep (bounded at 10 s)
        if not _wait_unreaped(reaper.pid, timeout + 30):
            running = _group_commands(reaper.pid)
            _kill_group(reaper)
            return {"rc": None, "timeout": True, "running": running}
        _kill_group(reaper)  # what is left of its group (all of it, without prctl)
        rep.seek(0)
        try:
            out = json.loads(rep.read(1 << 16) or b"null")
        except ValueError:
            out = None
    if not isinstance(out, dict):
        return {"error": f"the probe's reaper exited {reaper.returncode} without a report"}
    return out


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait for the child to exit without reaping it (``WNOWAIT``): while it is a zombie its
    pid, and so its process group's id, cannot be given to another process, so the group
    can be killed safely afterwards. False at the timeout."""
    import time

    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True  # already reaped
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _group_commands(pgid: int) -> list[str]:
    """The command names of the processes in group ``pgid`` (from /proc; empty where it
    cannot be read)."""
    out = []
    try:
        pids = os.listdir("/proc")
    except OSError:
        return []
    for pid in pids:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read(4096).decode("utf-8", "replace")
        except OSError:
            continue
        name, _, rest = stat.partition(" (")[2].rpartition(") ")
        fields = rest.split()
        if len(fields) > 2 and fields[2] == str(pgid):
            out.append(name)
    return sorted(set(out))


def _kill_group(proc: Any) -> None:
    """End the child's process group, then reap the child (still unreaped here: see
    :func:`_wait_unreaped`)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass  # already gone
    try:
        proc.wait(timeout=10)
    except Exception:  # a child that cannot be reaped must not crash the check
        pass
