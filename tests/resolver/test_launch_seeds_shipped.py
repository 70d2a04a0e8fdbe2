"""The seed cases of the launch-argument issue on the real releases' rules as the shipped
knowledge base records them (scraped from the wheels; hermetic: nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonpin.resolver.args.rules import check, rules_from_json
from moonpin.resolver.tables import per_release

KB = Path(__file__).resolve().parents[2] / "data" / "kb.json"

SCALE_UP = ("--model-path m --elastic-ep-backend mooncake --max-ep-size 16 --tp-size 8 "
            "--dp-size 8 --enable-dp-attention --enable-dp-lm-head --moe-a2a-backend nixl "
            "--load-balance-method round_robin").split()
CUDA_OFF = "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled".split()
JOINER = ("--elastic-ep-join-mode scale --elastic-ep-join-rank-offset 8 "
          "--elastic-ep-initial-size 8").split()
BOTH = "Elastic EP runtime scale-up requires decode and prefill CUDA graphs to be disabled."
PREFILL = "Elastic EP runtime scale-up requires prefill CUDA graph to be disabled."
RANK = "Elastic EP scale-up requires one joining TP group at --node-rank 1 (got 0)."


def violated(version: str, argv: list[str]) -> list[str]:
    record = per_release.load_launch(KB, version)
    assert record is not None, f"no launch rules for {version}: run `moonpin kb resolve`"
    flags, rules, constants = rules_from_json(record)
    return [v.message for v in check(rules, flags, argv, constants=constants)
            if v.status == "violated"]


@pytest.mark.parametrize(("version", "expected"), [
    ("0.5.14", []),  # before runtime scale-up: no such rule
    ("0.5.18", [BOTH]),
    ("0.5.20", [BOTH]),
    ("0.5.21", [PREFILL]),  # decode graphs may stay at their default, full
    ("0.5.23", [PREFILL]),
])
def test_scale_up_missing_both_cuda_graph_flags(version: str, expected: list[str]) -> None:
    assert violated(version, SCALE_UP) == expected
    assert violated(version, SCALE_UP + CUDA_OFF) == []  # control


def test_only_the_deprecated_disable_cuda_graph() -> None:
    assert violated("0.5.18", [*SCALE_UP, "--disable-cuda-graph"]) == []
    undone = [*SCALE_UP, "--disable-cuda-graph", "--cuda-graph-backend-prefill", "breakable"]
    assert violated("0.5.18", undone) == [BOTH]
    assert violated("0.5.23", undone) == [PREFILL]
    assert violated("0.5.14", undone) == []


@pytest.mark.parametrize("version", ["0.5.18", "0.5.23"])
def test_joiner_without_node_rank_one(version: str) -> None:
    argv = SCALE_UP + CUDA_OFF + JOINER
    assert violated(version, argv) == [RANK]
    assert violated(version, [*argv, "--node-rank", "1"]) == []  # control
    assert violated("0.5.14", argv) == []  # no join mode in 0.5.14: nothing fires


# Dynamo's elastic-EP template (tests/fault_tolerance/deploy/templates/sglang/
# sglang_elastic_ep.yaml in ai-dynamo/dynamo): it leaves --load-balance-method at "auto",
# which SGLang settles to round_robin before its elastic-EP checks.
DYNAMO_TEMPLATE = (
    "--model-path deepseek-ai/DeepSeek-V2-Lite --trust-remote-code --skip-tokenizer-init "
    "--page-size 16 --tp 4 --dp 4 --enable-dp-attention --enable-dp-lm-head "
    "--moe-a2a-backend nixl --deepep-mode low_latency --elastic-ep-backend mooncake "
    "--enable-eplb --ep-num-redundant-experts 24 --elastic-ep-initial-size 4 --max-ep-size 8 "
    "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled").split()


@pytest.mark.parametrize("version", ["0.5.16", "0.5.18", "0.5.23"])
def test_dynamo_elastic_ep_template(version: str) -> None:
    assert violated(version, DYNAMO_TEMPLATE) == []
    explicit = violated(version, [*DYNAMO_TEMPLATE, "--load-balance-method", "total_tokens"])
    assert len(explicit) == 1 and "--load-balance-method round_robin" in explicit[0]
