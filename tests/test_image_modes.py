"""Opt-in (``-m image``): issue 38's real-image cases judged in all three modes of the check
(``--python``, ``--site-packages`` and ``--image`` of the image packed by umoci) reach the
verdict the real ``import mooncake.pg`` has in that image.

Needs the real images of ``../shared/tools/realimg/build.sh`` under ``MOONPIN_TEST_REALIMG``
(``venv``, ``venv-cu12mooncake``, ``venv-cputorch`` and the wheels in ``dl/``), umoci and
the stub driver (``stubs/``); nothing is fetched. Each case is a hard-link copy of an image
changed with the copy's own pip (pip unlinks before it writes: the image is never changed):

* **two mooncake distributions over one folder** (issue 38, 4): the CUDA 12
  ``mooncake-transfer-engine`` installed over ``mooncake-transfer-engine-cuda13`` and the
  other way round, and the first order followed by an uninstall of the CUDA 12 one (which
  takes the files both share);
* **a compile-at-import mooncake over a CPU torch** (issue 38, 3):
  ``mooncake-transfer-engine-cuda13`` 0.3.14 (no prebuilt adapter; ``pg.py`` compiles one,
  which needs a CUDA torch) installed over ``venv-cputorch``.

For ``--image`` the case is an image as a Dockerfile's ``RUN pip install`` makes one: the
base image ``venv`` packed once by umoci (:func:`tests.lib.umoci.pack_venv`, kept under
``$MOONPIN_TEST_REALIMG/oci-venv``; minutes) plus, made by umoci from the copy, one layer of
the files that differ from ``venv``'s and whiteouts of the ones it lacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.umoci import add_changes, layout_copy, need_tools, pack_venv
from tests.lib.verdicts import mooncake_rc

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
REALIMG = os.environ.get("MOONPIN_TEST_REALIMG", "")
SITE = "lib/python3.11/site-packages"
CU12 = ("mooncake-transfer-engine", "0.3.13.post1")
CU13 = ("mooncake-transfer-engine-cuda13", "0.3.13.post1")
JIT = ("mooncake-transfer-engine-cuda13", "0.3.14")

#: case -> (the image copied, what its pip does: (verb, distribution) in order). Each image
#: is ``venv`` or a hard-link clone of it (build.sh), so ``venv`` packed is every case's base.
CASES = {
    "cuda12 over cuda13": ("venv", [("install", CU12)]),
    "cuda13 over cuda12": ("venv-cu12mooncake", [("install", CU13)]),
    "cuda13 over cuda12, cuda12 uninstalled": ("venv-cu12mooncake", [("install", CU13),
                                                                     ("uninstall", CU12)]),
    "0.3.14 over a CPU torch": ("venv-cputorch", [("install", JIT)]),
}
BASE = "venv"


def _root() -> Path:
    if not REALIMG or not (Path(REALIMG) / "venv" / "bin" / "python").exists():
        pytest.skip("set MOONPIN_TEST_REALIMG to the folder build.sh built into")
    return Path(REALIMG)


def _wheel(dist: tuple[str, str]) -> Path:
    name = dist[0].replace("-", "_")
    got = sorted((_root() / "dl").glob(f"{name}-{dist[1]}-*.whl"))
    if not got:
        pytest.skip(f"no wheel of {dist[0]} {dist[1]} in {_root() / 'dl'} (build.sh)")
    return got[0]


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               LD_LIBRARY_PATH=str(_root() / "stubs"), HOME=str(work / "home"),
               MOONCAKE_PG_JIT_DIR=str(work / "pg_jit"), CUDA_VISIBLE_DEVICES="")
    return env


def _copy(image: str, work: Path, steps: list[tuple[str, tuple[str, str]]]) -> Path:
    copy = work / image
    subprocess.run(["cp", "-al", str(_root() / image), str(copy)], check=True)
    for verb, dist in steps:
        what = ["install", "--no-deps", "--no-index", str(_wheel(dist))] if verb == "install" \
            else ["uninstall", "-y", dist[0]]
        r = subprocess.run([str(copy / "bin" / "python"), "-m", "pip", *what],
                           capture_output=True, text=True, env=_env(work), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
    return copy


def base_layout() -> Path:
    """``venv`` packed by umoci, once (kept under ``$MOONPIN_TEST_REALIMG/oci-venv``)."""
    need_tools()
    base = _root() / f"oci-{BASE}"
    if not (base / "index.json").exists():
        tmp = _root() / f"oci-{BASE}.part"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(_root() / f"oci-{BASE}.part-work", ignore_errors=True)
        sglang = next((_root() / BASE / SITE).glob("sglang-*.dist-info"))
        pack_venv(tmp, _root() / BASE, replaced=f"{SITE}/sglang/version.py",
                  deleted=f"{SITE}/{sglang.name}/INSTALLER")
        tmp.rename(base)
    return base


def _packed(copy: Path, work: Path) -> Path:
    """``copy`` as an image file: the base layout copied (its blobs hard-linked: they are
    never written again) plus the layer of what differs from ``venv``."""
    base = base_layout()
    layout = layout_copy(base, work / "oci")
    add_changes(layout, _root() / BASE, copy, "/opt/venv", work / "stage")
    return layout


def _real(copy: Path, work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(copy / "bin" / "python"), "-c", "import mooncake.pg"],
                          capture_output=True, text=True, env=_env(work), timeout=900, cwd="/")


def _check(work: Path, *target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "check", *target, "--no-deep",
                           "--elastic-ep-backend", "mooncake"], capture_output=True,
                          text=True, env=_env(work), timeout=1800, cwd=ROOT)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_mode_judges_as_the_real_import(case: str, tmp_path: Path) -> None:
    image, steps = CASES[case]
    root = _root()
    if not (root / image / "bin" / "python").exists():
        pytest.skip(f"{root / image} is not built")
    work = Path(os.environ.get("MOONPIN_TEST_WORK", "") or tmp_path)
    work = work / case.replace(" ", "_").replace(",", "")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        copy = _copy(image, work, steps)
        real = _real(copy, work)
        works = real.returncode == 0
        said = {
            "--python": _check(work, "--python", str(copy / "bin" / "python")),
            "--site-packages": _check(work, "--site-packages", str(copy / SITE)),
            "--image": _check(work, "--image", str(_packed(copy, work))),
        }
        for mode, proc in said.items():
            assert proc.returncode in (0, 1), (mode, proc.stdout, proc.stderr)
            assert mooncake_rc(proc.stdout) == (0 if works else 1), (
                mode, real.stderr[-1500:], proc.stdout)
        if case.startswith(("cuda12 over", "cuda13 over")) and "uninstalled" not in case:
            # both distributions' metadata, one's files: said, whatever the verdict
            for mode, proc in said.items():
                assert "mooncake-transfer-engine" in proc.stdout and \
                    "pip uninstall -y" in proc.stdout, (mode, proc.stdout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
