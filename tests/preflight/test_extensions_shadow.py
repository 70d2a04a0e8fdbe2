"""An extension found first on the worker's import path as a copy no installed distribution
wrote (``PYTHONPATH``, a ``.pth`` line), in front of its installed distribution's own (found on
a real image: ``hunt-H-torch291`` with ``PYTHONPATH`` on a folder holding sglang-kernel
0.4.8's ``sgl_kernel/``; the real import fails on that copy's ``libnvrtc.so.13``). The check
named the installed distribution as the failing copy's and wrote its reinstall as the fix,
which leaves the import finding the same copy; it now says whose copy it is not, and the fix
takes it off the path (carried out on the real image: the import then loads the installed
sglang-kernel 0.4.1's build). Fails on the commit before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.checkrun import ROOT, small_kb
from tests.lib.extimages import add_sgl_kernel, torch_image
from tests.lib.images import add_dist

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _check(venv: Path, kb: Path, pythonpath: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "MOONPIN_KB", "PYTHONPATH")}
    env["MOONPIN_CHECK_SYSTEM_LIBS"] = str(venv / "_none")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python",
                           str(venv / "bin" / "python"), "--no-deep", "--kb", str(kb),
                           "--gpu-capability", "none"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def test_a_copy_on_the_path_before_the_installed_one_is_said_and_taken_off(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    torch_image(site)
    add_sgl_kernel(site)
    shutil.rmtree(next(site.glob("sglang_kernel-*.dist-info")))
    add_dist(site, "sglang-kernel", "0.4.10", requires=["torch==2.14.1"],
             files=["sgl_kernel/__init__.py", "sgl_kernel/load_utils.py"])
    kb = small_kb(tmp_path)
    healthy = _check(venv, kb, None)
    assert healthy.returncode == 0, healthy.stdout
    other = tmp_path / "pp"
    shutil.copytree(site / "sgl_kernel", other / "sgl_kernel")
    for f in other.glob("sgl_kernel/sm*/common_ops.*"):
        f.unlink()  # this copy's loader finds no build
    r = _check(venv, kb, other)
    line = next(x for x in r.stdout.splitlines() if x.startswith("fail  sgl_kernel:"))
    assert line.startswith(f"fail  sgl_kernel: at {other / 'sgl_kernel'} (no installed "
                           "distribution wrote it: found on the import path before "
                           f"sglang-kernel 0.4.10's own {site / 'sgl_kernel'})"), r.stdout
    fix = r.stdout.splitlines()[r.stdout.splitlines().index(line) + 1]
    assert fix.strip().startswith(f"fix: take {other} off the worker's import path"), r.stdout
    assert "pip" not in fix, r.stdout
