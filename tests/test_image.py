"""A real worker image, opt-in: `MOONPIN_TEST_IMAGE=<site-packages> pytest -m image`.

Prepare it once (about 5 GB; the index is needed only for this):

    python3 -m venv /tmp/img2
    PIP_FIND_LINKS= /tmp/img2/bin/pip install --isolated torch==2.13.0
    /tmp/img2/bin/pip install --isolated --no-deps \\
        mooncake-transfer-engine-cuda13==0.3.13.post1 sglang==0.5.18
    apt-get install -y libibverbs1 ibverbs-providers libnuma1   # what the extension links

The host has no GPU: ``../shared/tools/make_libcuda_stub.sh`` builds a stub
``libcuda.so.1`` so the real extension can load. Each test changes the image and puts it
back, so run them one at a time against a scratch image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.verdicts import mooncake_rc

ROOT = Path(__file__).resolve().parents[1]
SITE = os.environ.get("MOONPIN_TEST_IMAGE", "")
STUB = ROOT.parent / "shared" / "tools" / "make_libcuda_stub.sh"

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(not SITE or not Path(SITE, "mooncake").is_dir(),
                       reason="set MOONPIN_TEST_IMAGE to a prepared site-packages folder"),
]


def check(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "moonpin.preflight", "--site-packages", SITE,
                           "--elastic-ep-backend", "mooncake"], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("cudastub")
    subprocess.run(["bash", str(STUB), str(out), SITE], check=True, capture_output=True)
    return str(out)


def test_healthy_image_loads_the_real_extension(stub: str) -> None:
    r = check({"LD_LIBRARY_PATH": stub})
    assert mooncake_rc(r.stdout) == 0, r.stdout
    assert "deep import: import mooncake.pg works" in r.stdout
    assert "mooncake ('cuda',)" in r.stdout and "mooncake-cpu ('cpu',)" in r.stdout


def test_without_the_driver_the_light_checks_decide() -> None:
    r = check({})
    assert mooncake_rc(r.stdout) == 0, r.stdout
    assert "no NVIDIA driver on this host" in r.stdout


def test_removed_build_is_no_build_for_this_torch(stub: str) -> None:
    build = next(Path(SITE, "mooncake").glob("pg_2_13_0.*.so"))
    saved = build.with_name(build.name + ".moved")
    shutil.move(build, saved)
    try:
        r = check({"LD_LIBRARY_PATH": stub})
    finally:
        shutil.move(saved, build)
    assert r.returncode == 1
    assert "fail  build: pg.py imports mooncake.pg_2_13_0 for torch 2.13.0" in r.stdout
    assert "Mooncake PG was not built against torch==2.13.0" in r.stdout
