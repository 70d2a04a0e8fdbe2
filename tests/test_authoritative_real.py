"""`moonpin args --authoritative` against real SGLang installations, opt-in:
`MOONPIN_TEST_SGLANG_PYTHON=<venv>/bin/python` (SGLang 0.5.18) and/or
`MOONPIN_TEST_SGLANG23_PYTHON=<venv>/bin/python` (SGLang 0.5.23), then
`pytest -m image tests/test_authoritative_real.py`.

Prepare it from the real image of tests/test_image.py (torch 2.13.0, SGLang 0.5.18 with
--no-deps): copy the venv and install, with `--no-deps` so torch stays, the modules
`import sglang.srt.server_args` asks for (numpy, transformers==5.12.1 with its dependencies,
torchvision==0.28.0, pyzmq, xgrammar, apache-tvm-ffi, ...), one by one until it imports.
For 0.5.23: a copy of that venv with `pip install --no-deps` of the 0.5.23 wheel and the
modules `from sglang.srt.arg_groups import pipeline` asks for (compressed-tensors, loguru,
gguf); it imports with torch 2.13.0. The host has no GPU: resolution steps that need one are
reported as not run here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = os.environ.get("MOONPIN_TEST_SGLANG_PYTHON", "")
PY23 = os.environ.get("MOONPIN_TEST_SGLANG23_PYTHON", "")

pytestmark = [pytest.mark.image]
needs_18 = pytest.mark.skipif(not PY or not Path(PY).exists(),
                              reason="set MOONPIN_TEST_SGLANG_PYTHON (SGLang 0.5.18)")
needs_23 = pytest.mark.skipif(not PY23 or not Path(PY23).exists(),
                              reason="set MOONPIN_TEST_SGLANG23_PYTHON (SGLang 0.5.23)")

SCALE_UP = ("--model-path m --elastic-ep-backend mooncake --max-ep-size 16 --tp-size 8 "
            "--dp-size 8 --enable-dp-attention --enable-dp-lm-head --moe-a2a-backend nixl "
            "--load-balance-method round_robin").split()
CUDA_OFF = "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled".split()


def args(*argv: str, py: str = PY) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "args", "--authoritative",
                           "--python", py, "--", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)


@needs_18
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


@needs_23
def test_seed_cases_agree_with_sglang_0_5_23_hooks() -> None:
    base = ("--model-path m --elastic-ep-backend mooncake --max-ep-size 16 --tp-size 8 "
            "--attn-dp-size 8 --enable-dp-lm-head --moe-a2a-backend nixl "
            "--load-balance-method round_robin").split()
    undone = args(*base, "--disable-cuda-graph", "--cuda-graph-backend-prefill", "breakable",
                  py=PY23)
    assert undone.returncode == 1
    assert ("agree: SGLang rejects (sglang/srt/arg_groups/parallel_hook.py:696): Elastic EP "
            "runtime scale-up requires prefill CUDA graph to be disabled.") in undone.stdout
    assert "0 disagree" in undone.stdout and "device=cuda" in undone.stdout
    joiner = args(*base, "--cuda-graph-backend-prefill", "disabled", "--elastic-ep-join-mode",
                  "scale", "--elastic-ep-join-rank-offset", "8", "--elastic-ep-initial-size",
                  "8", py=PY23)
    assert "agree: SGLang rejects (sglang/srt/arg_groups/parallel_hook.py:551)" in joiner.stdout
    fixed = args(*base, "--cuda-graph-backend-prefill", "disabled", py=PY23)  # control
    assert fixed.returncode == 0 and "0 agree, 0 disagree" in fixed.stdout
