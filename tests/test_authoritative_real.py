"""`moonpin args --authoritative` against a real SGLang installation, opt-in:
`MOONPIN_TEST_SGLANG_PYTHON=<venv>/bin/python pytest -m image tests/test_authoritative_real.py`.

Prepare it from the real image of tests/test_image.py (torch 2.13.0, SGLang 0.5.18 with
--no-deps): copy the venv and install, with `--no-deps` so torch stays, the modules
`import sglang.srt.server_args` asks for (numpy, transformers==5.12.1 with its dependencies,
torchvision==0.28.0, pyzmq, xgrammar, apache-tvm-ffi, ...), one by one until it imports.
The host has no GPU: resolution steps that need one are reported as not run here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = os.environ.get("MOONPIN_TEST_SGLANG_PYTHON", "")

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(not PY or not Path(PY).exists(),
                       reason="set MOONPIN_TEST_SGLANG_PYTHON to a python with SGLang 0.5.18"),
]

SCALE_UP = ("--model-path m --elastic-ep-backend mooncake --max-ep-size 16 --tp-size 8 "
            "--dp-size 8 --enable-dp-attention --enable-dp-lm-head --moe-a2a-backend nixl "
            "--load-balance-method round_robin").split()
CUDA_OFF = "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled".split()


def args(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "resolver.cli", "args", "--authoritative",
                           "--python", PY, "--", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)


def test_seed_cases_agree_with_sglang_itself() -> None:
    r = args(*SCALE_UP)
    assert r.returncode == 1
    assert ("agree: SGLang rejects (sglang/srt/server_args.py:7188): Elastic EP runtime "
            "scale-up requires decode and prefill CUDA graphs to be disabled.") in r.stdout
    assert "0 disagree" in r.stdout
    joiner = args(*SCALE_UP, *CUDA_OFF, "--elastic-ep-join-mode", "scale",
                  "--elastic-ep-join-rank-offset", "8", "--elastic-ep-initial-size", "8")
    assert "agree: SGLang rejects (sglang/srt/server_args.py:7089)" in joiner.stdout
    fixed = args(*SCALE_UP, *CUDA_OFF)  # control
    assert fixed.returncode == 0 and "0 agree, 0 disagree" in fixed.stdout
