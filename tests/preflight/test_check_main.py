"""``python -m moonpin.preflight`` leaves through ``os._exit`` once its output is flushed,
and the ordinary way whenever something still needs that exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.lib.images import healthy_image

ROOT = Path(__file__).resolve().parents[2]
#: stdout block-buffered, as in a worker's pipe (this machine sets PYTHONUNBUFFERED)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _argv(site: Path, backend: str = "mooncake") -> list[str]:
    return ["--site-packages", str(site), "--elastic-ep-backend", backend, "--no-deep",
            "--kb", str(ROOT / "data" / "kb.json")]


def test_the_whole_report_and_exit_code_survive_the_quick_exit(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    for backend, code, last in (("mooncake", 0, "usable (deep probe not run: --no-deep)"),
                                ("mooncak", 2, "could not check: launch (the error above "
                                 "says why; deep probe not run)")):
        r = subprocess.run([sys.executable, "-m", "moonpin.preflight",
                            *_argv(site, backend)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env=ENV)
        assert r.returncode == code, r.stderr
        assert r.stdout.splitlines()[-1] == last  # flushed to the pipe before leaving
        assert r.stdout.endswith("\n")
    assert "did you mean --elastic-ep-backend mooncake" in r.stderr


def test_an_exit_handler_or_a_thread_gets_the_ordinary_exit(tmp_path: Path) -> None:
    """What an embedding program registers still runs (and a thread still finishes)."""
    site = healthy_image(tmp_path / "site")
    for setup, said in (
        ("import atexit; atexit.register(lambda: print('handler ran'))", "handler ran"),
        ("import threading, time\n"
         "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()",
         "thread done"),
    ):
        code = (f"{setup}\nimport runpy, sys\nsys.argv = ['check', *{_argv(site)!r}]\n"
                "runpy.run_module('moonpin.preflight', run_name='__main__')\n")
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env=ENV)
        assert r.returncode == 0, r.stderr
        assert said in r.stdout.splitlines()
        assert "usable (deep probe not run: --no-deep)" in r.stdout
