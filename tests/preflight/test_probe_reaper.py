"""The deep probe leaves no process behind, however its child daemonises itself
(moonpin/preflight/probe/probe_reaper.py): fake images whose mooncake build, when imported, starts a
process that leaves the probe's process group (``setsid`` then fork, a double fork, a
grandchild holding the probe's stdout open, an exec'd ``sleep``), with the import then
answering or hanging. After ``check`` returns, no process carrying the test's marker in its
environment or command line exists, and the check returned within its timeout with the
probe's verdict."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from tests.lib.checkrun import Run, run
from tests.lib.images import healthy_image

#: What the fake build's import runs before it defines its names. ``MARK`` is replaced by
#: the test's marker; each daemon sleeps far past the test's own timeout.
SETSID_FORK = '''import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
'''
DOUBLE_FORK_HOLDING_STDOUT = '''import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    # the grandchild: stdout and stderr (the probe's) stay open, and it keeps writing
    for _ in range(6000):
        sys.stdout.write("still here\\n"); sys.stdout.flush()
        time.sleep(0.1)
    os._exit(0)
'''
EXEC_SLEEP = '''import os
if os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "600", "MARK"])
'''
FORK_BOMBLET = '''import os, time
if os.fork() == 0:
    os.setsid()
    for _ in range(5):  # a few generations, each leaving a sleeper behind
        if os.fork() != 0:
            break
    time.sleep(600)
    os._exit(0)
'''
HANG = "import time\ntime.sleep(600)\n"


def _marked(marker: str) -> list[str]:
    """The processes whose environment or command line holds ``marker``."""
    found = []
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if marker.encode() in data:
                try:
                    with open(f"/proc/{pid}/stat", "rb") as f:
                        state = f.read().rpartition(b")")[2].split()[0]
                except OSError:
                    break
                if state != b"Z":  # a zombie is gone but for its parent's wait
                    found.append(pid)
                break
    return found


def _image(tmp_path: Path, prelude: str, marker: str) -> Path:
    site = tmp_path / "site"
    healthy_image(site, kind="py")
    for build in (site / "mooncake").glob("pg_2_13_0*.py"):
        build.write_text(prelude.replace("MARK", marker) + build.read_text())
    return site


def _check(site: Path, marker: str, *args: str) -> tuple[Run, float]:
    start = time.monotonic()
    r = run(site, *args, deep=True, env={"MOONPIN_TEST_DAEMON_MARK": marker})
    return r, time.monotonic() - start


def _gone(marker: str) -> list[str]:
    """The marked processes still there (a killed one may take a moment to vanish)."""
    deadline = time.monotonic() + 2
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("prelude", [SETSID_FORK, DOUBLE_FORK_HOLDING_STDOUT, EXEC_SLEEP,
                                     FORK_BOMBLET],
                         ids=["setsid-fork", "double-fork-stdout", "exec-sleep", "generations"])
def test_a_daemonising_import_answers_and_leaves_nothing(tmp_path: Path, prelude: str) -> None:
    marker = uuid.uuid4().hex
    site = _image(tmp_path, prelude, marker)
    r, took = _check(site, marker, "--deep-timeout", "20")
    assert r.rc == 0, r.out
    assert r.status("deep import") == "pass"  # the probe's own verdict, not a hang
    assert took < 20, took
    assert not _gone(marker)


def test_a_daemonising_import_that_hangs_is_a_hang_and_leaves_nothing(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    site = _image(tmp_path, DOUBLE_FORK_HOLDING_STDOUT + SETSID_FORK + HANG, marker)
    r, took = _check(site, marker, "--deep-timeout", "3")
    assert r.rc == 1 and "hung: no answer in 3s" in r.line("deep probe"), r.out
    assert took < 3 + 15, took
    assert not _gone(marker)


def test_the_marker_scan_sees_a_daemon_it_did_not_kill(tmp_path: Path) -> None:
    """Negative control: the same daemon started outside the check is found, so the
    assertions above could fail."""
    import subprocess
    import sys

    marker = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker],
                            start_new_session=True)
    try:
        import time

        deadline = time.monotonic() + 10  # until the child has exec'd (a loaded machine)
        while not _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _marked(marker) == [str(proc.pid)]
    finally:
        proc.kill()
        proc.wait()
    assert not _gone(marker)
