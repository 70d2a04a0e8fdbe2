"""Opt-in (``-m image``): PD disaggregation and HiCache with nixl on the real ``stack`` image
(``tests/realimg/stack.sh`` under ``MOONPIN_TEST_REALIMG``) and the classes of
``tests/realimg/disagg.sh``, hard-link copies of it built here into a temporary folder: the
meta ``nixl`` uninstalled, the ``nixl-cu13`` backend uninstalled with the meta kept,
``nixl_cu13/_bindings`` built for another Python, a library the bindings link (gRPC, of
``nixl_cu13.libs``) gone.

The truth is the real ``from nixl._api import nixl_agent`` SGLang runs for either option,
imported by ``tests/realimg/probe_stack.py``'s child (``import@nixl._api``) with the image's
own interpreter, the stub driver and no GPU visible. ``moonpin check --python <copy>/bin/python
-- --disaggregation-transfer-backend nixl`` (and ``--hicache-storage-backend nixl``) must give
``nixl`` that verdict; each fix line it prints, carried out with the copy's own pip (from the
index pip is configured with), must make the import work and the check pass. The copies are
removed at the end; ``stack`` is never changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lib.verdicts import stack_root

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
BUILD = ROOT / "tests" / "realimg" / "disagg.sh"
CLASSES = ("nometa", "nocu13", "py312", "nolib")
LAUNCHES = {
    "disagg": ("--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl"),
    "hicache": ("--enable-hierarchical-cache", "--hicache-storage-backend", "nixl"),
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH", "NIXL_"))}
    env.update(LD_LIBRARY_PATH=str(stack_root() / "stack-stubs"), CUDA_VISIBLE_DEVICES="")
    return env


def _build(dest: Path, *classes: str) -> None:
    subprocess.run(["bash", str(BUILD), str(stack_root() / "stack"), str(dest), *classes],
                   check=True, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``<folder>/c-<class>``: every class, built once for the module, removed after."""
    folder = tmp_path_factory.mktemp("disagg")
    _build(folder / "c", *CLASSES)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def real_import(image: Path) -> dict:
    """``from nixl._api import nixl_agent``'s module imported for real in ``image``."""
    proc = subprocess.run([str(image / "bin" / "python"), str(PROBE), "--child",
                           "import@nixl._api"], capture_output=True, text=True, timeout=600,
                          cwd="/", env=_env())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check(image: Path, launch: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", "--python",
                           str(image / "bin" / "python"), "--no-deep", "--",
                           *LAUNCHES[launch]], capture_output=True, text=True, timeout=1200,
                          cwd=ROOT, env=_env())
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def nixl_line(out: str) -> str:
    got = [line for line in out.splitlines() if line.startswith(("pass  nixl:", "fail  nixl:",
                                                                 "warn  nixl:", "skip  nixl:"))]
    assert len(got) == 1, out
    return got[0]


def _image(copies: Path, name: str) -> Path:
    return stack_root() / "stack" if name == "stack" else copies / f"c-{name}"


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
@pytest.mark.parametrize("name", ["stack", *CLASSES])
def test_the_check_says_what_the_import_does(copies: Path, name: str, launch: str) -> None:
    image = _image(copies, name)
    truth = real_import(image)
    assert truth["ok"] == (name == "stack"), truth  # each copy is of its class
    proc = check(image, launch)
    line = nixl_line(proc.stdout)
    if truth["ok"]:
        assert line.startswith("pass  nixl: nixl 1.5.1 at "), proc.stdout
        assert "loads nixl_cu13/_bindings.cpython-311" in line
        return
    assert line.startswith("fail  nixl:") and proc.returncode == 1, proc.stdout
    said = {"nometa": "not installed", "nocu13": "ImportError: detected CUDA 13 but "
            "nixl-cu13 is not installed", "py312": "ImportError: cannot import name "
            "'_bindings' from 'nixl_cu13'", "nolib": "libgrpc-5efa6dad.so.48.0.0 (needed by "
            "libnixl.so) cannot be found"}[name]
    assert said in line, proc.stdout
    # the real import raises what the line names
    assert truth["error_type"] in ("ModuleNotFoundError" if name == "nometa" else
                                   "ImportError"), truth


def _fix_lines(out: str) -> list[str]:
    return [line.strip().removeprefix("fix: ").split("  # ", 1)[0]
            for line in out.splitlines() if line.strip().startswith("fix: ")]


@pytest.mark.parametrize("name", CLASSES)
def test_each_fix_line_makes_the_import_work(tmp_path: Path, name: str) -> None:
    """The fix line, pasted into a copy of its own (its pip changes the copy), then the real
    import and the check again."""
    _build(tmp_path / "f", name)
    image = tmp_path / f"f-{name}"
    try:
        before = check(image, "disagg")
        fixes = _fix_lines(before.stdout)
        assert len(fixes) == 1 and str(image / "bin" / "python") in fixes[0], before.stdout
        done = subprocess.run(["bash", "-c", fixes[0]], capture_output=True, text=True,
                              timeout=1200, env=_env())
        assert done.returncode == 0, done.stdout + done.stderr
        assert real_import(image)["ok"], fixes[0]
        after = check(image, "disagg")
        assert nixl_line(after.stdout).startswith("pass  nixl:"), after.stdout
    finally:
        shutil.rmtree(image, ignore_errors=True)
