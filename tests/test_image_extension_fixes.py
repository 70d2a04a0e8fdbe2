"""Opt-in (``-m image``): the fix line of a worker extension that is missing or has no build
for the image's torch, carried out as an operator would, on the real images of
``tests/realimg/stack.sh`` (``MOONPIN_TEST_REALIMG``): ``stack-nonixl`` (no nixl),
``stack-nixl140`` (nixl 1.4.0: builds for torch 2.11-2.13, torch 2.14.1) and
``stack-kernel048`` (sglang-kernel 0.4.8, built for torch 2.13.0).

Each image is copied with hard links (``cp -al``: pip unlinks before it writes, so the image
is never changed); the check runs against the copy's interpreter (``--python``, so the line
is the copy's own ``python -m pip``), the extension's line is run with the machine's pip
configuration (the index the images were built from), then the real import runs in the copy
(the stub driver, no device) and the check again: both must pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.test_image_fixes import commands
from tests.test_image_stack import stack_root

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ("--", "--elastic-ep-backend", "mooncake", "--moe-a2a-backend", "nixl")
#: image -> (the extension's line, what the line names, the real import that must work)
CASES = {
    "stack-nonixl": ("nixl_ep", "'nixl==1.5.1'", "import nixl_ep; nixl_ep.Buffer"),
    "stack-nixl140": ("nixl_ep", "'nixl==1.5.1'", "import nixl_ep; nixl_ep.Buffer"),
    "stack-kernel048": ("sgl_kernel", "'sglang-kernel==0.4.10'", "import sgl_kernel"),
}


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "NIXL_"))}
    env.update(LD_LIBRARY_PATH=str(root / "stack-stubs"), CUDA_VISIBLE_DEVICES="",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _check(copy: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "check", "--python",
                           str(copy / "bin" / "python"), "--no-deep", *LAUNCH],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)


@pytest.mark.parametrize("image", sorted(CASES))
def test_the_extension_line_makes_the_import_work(image: str) -> None:
    root = stack_root()
    if not (root / image / "bin" / "python").exists():
        pytest.skip(f"{root / image} not built (tests/realimg/stack.sh)")
    name, names, code = CASES[image]
    env = _env(root)
    work = Path(tempfile.mkdtemp(prefix="moonpin-extfix-", dir=root))
    try:
        copy = work / image
        subprocess.run(["cp", "-al", str(root / image), str(copy)], check=True)
        before = _check(copy, env)
        lines = before.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(f"fail  {name}:"))
        assert before.returncode == 1 and lines[at + 1].startswith("  fix: "), before.stdout
        fix = lines[at + 1][len("  fix: "):]
        assert names in fix, fix
        for cmd in commands(fix, copy):
            done = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=env,
                                  timeout=1800)
            assert done.returncode == 0, (cmd, done.stderr[-2000:])
        real = subprocess.run([str(copy / "bin" / "python"), "-c", code], capture_output=True,
                              text=True, env=env, timeout=600)
        assert real.returncode == 0, real.stderr[-2000:]
        after = _check(copy, env)
        assert after.returncode == 0 and f"pass  {name}:" in after.stdout, after.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
