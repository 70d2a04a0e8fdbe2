"""The Renovate fragment on the shipped KB: every combination it allows is compatible (issue 13)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.pins.read import GROUP_NAME
from moonpin.resolver.pins.writing.renovate import (
    allowed_versions,
    plan_stack,
    renovate_fragment,
)
from tests.lib.shipped import explain_json, shipped_graph

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.fixture(scope="module")
def g() -> CompatGraph:
    return shipped_graph()


def _allowed(rule_value: str, versions: list[str]) -> list[str]:
    """The versions of ``versions`` an ``allowedVersions`` value admits, read as Renovate does
    (``==V`` or ``/regex/``)."""
    if rule_value.startswith("/"):
        rx = re.compile(rule_value[1:-1])
        return [v for v in versions if rx.match(v)]
    assert rule_value.startswith("=="), rule_value
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(rule_value)  # Renovate's pep440 versioning: a PEP 440 range
    return [v for v in versions if spec.contains(v, prereleases=True)]


def test_allowed_versions_is_a_form_renovate_parses() -> None:
    assert allowed_versions(["2.13.0"]) == "==2.13.0"
    # Renovate 39 rejects "==2.8.0 || ==2.9.0" and skips the repository: a regex instead
    assert allowed_versions(["2.8.0", "2.9.0"]) == r"/^(2\.8\.0|2\.9\.0)$/"
    rx = re.compile(allowed_versions(["2.8.0", "2.9.0"])[1:-1])
    assert rx.match("2.9.0") and not rx.match("2.9.01") and not rx.match("2x8x0")


def _every_combination_compatible(g: CompatGraph, frag: dict[str, Any]) -> list[str]:
    rules = frag["packageRules"]
    group = rules[0]
    sglangs = _allowed(group["allowedVersions"], [str(v) for v in g.sglang])
    by_name: dict[str, str] = {}
    for r in rules[1:]:
        if "allowedVersions" in r and "replacementName" not in r:
            (name,) = r["matchPackageNames"]
            by_name[name] = r["allowedVersions"]
    torches = _allowed(by_name.pop("torch"), [str(v) for v in g.torch_versions])
    bad = []
    assert sglangs and torches and by_name
    for dist, allowed in by_name.items():
        versions = _allowed(allowed, [str(v) for d, v in g.mooncake if d == dist])
        assert versions
        for s in sglangs:
            for t in torches:
                for v in versions:
                    res = explain_json(g, s, f"{dist}=={v}", torch=t)
                    if res["verdict"] != "compatible":
                        bad.append(f"sglang {s} torch {t} {dist} {v}: {res['reasons'][:1]}")
    return bad


@pytest.mark.parametrize(("sglang", "torch", "dist"), [
    ("0.5.18", "2.13.0", "mooncake-transfer-engine-cuda13"),
    ("0.5.16", "2.11.0", "mooncake-transfer-engine-cuda13"),
    ("0.5.4", "2.8.0", "mooncake-transfer-engine"),
    ("0.5.4", None, None),  # --sglang only: torch 2.8.0 or 2.9.0, a regex
    ("0.5.21", "2.13.0", "mooncake-transfer-engine-cuda13"),
])
def test_every_combination_the_fragment_allows_is_compatible(
        g: CompatGraph, sglang: str, torch: str | None, dist: str | None) -> None:
    frag = renovate_fragment(plan_stack(g, sglang, torch=torch, dist=dist))
    assert _every_combination_compatible(g, frag) == []


def test_sglang_is_held_to_releases_needing_the_same_torch(g: CompatGraph) -> None:
    plan = plan_stack(g, "0.5.18", torch="2.13.0", dist="mooncake-transfer-engine-cuda13")
    assert plan.sglang_allowed == ["0.5.21", "0.5.20", "0.5.19", "0.5.18"]  # 0.5.22 needs 2.14.1
    assert plan.torches == ["2.13.0"]
    # prebuilt preferred: 0.3.14 compiles at first import and is left out
    assert plan.mooncake == {"mooncake-transfer-engine-cuda13": ["0.3.13.post1", "0.3.13",
                                                                 "0.3.12.post1"]}
    frag = renovate_fragment(plan)
    group = frag["packageRules"][0]
    assert group["groupName"] == GROUP_NAME == "sglang stack"  # branch renovate/sglang-stack
    assert re.fullmatch(r"[a-z0-9-]+", GROUP_NAME.replace(" ", "-"))
    assert "sglang" in group["matchPackageNames"]
    assert _allowed(group["allowedVersions"], ["0.5.18", "0.5.21", "0.5.22", "0.5.23"]) == [
        "0.5.18", "0.5.21"]
    assert "0.3.14" not in json.dumps(frag)


def test_jit_release_only_when_nothing_prebuilt_fits_or_asked(g: CompatGraph) -> None:
    plan = plan_stack(g, "0.5.22", torch="2.14.1", dist="mooncake-transfer-engine-cuda13")
    assert plan.mooncake == {"mooncake-transfer-engine-cuda13": ["0.3.14"]}
    frag = renovate_fragment(plan)
    assert any("compiles its process-group extension" in r["description"] and "nvcc" in
               r["description"] for r in frag["packageRules"])
    asked = plan_stack(g, "0.5.18", torch="2.13.0", dist="mooncake-transfer-engine-cuda13",
                       allow_jit=True)
    assert "0.3.14" in asked.mooncake["mooncake-transfer-engine-cuda13"]
    assert asked.jit_notes


def test_the_pinned_cuda12_distribution_gets_a_replacement(g: CompatGraph) -> None:
    plan = plan_stack(g, "0.5.18", torch="2.13.0", dist="mooncake-transfer-engine",
                      current_mooncake="0.3.10")
    frag = renovate_fragment(plan)
    rules = {tuple(r["matchPackageNames"]): r for r in frag["packageRules"][1:]}
    rep = rules[("mooncake-transfer-engine",)]
    assert rep["replacementName"] == "mooncake-transfer-engine-cuda13"
    assert rep["replacementVersion"] == "0.3.13.post1"
    assert rep["allowedVersions"] == "==0.3.10"  # no plain bump of the CUDA 12 build
    assert "mooncake-transfer-engine" in frag["packageRules"][0]["matchPackageNames"]
    assert explain_json(g, "0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1",
                         torch="2.13.0")["verdict"] == "compatible"


def test_two_torches_give_a_regex_renovate_parses(g: CompatGraph) -> None:
    frag = renovate_fragment(plan_stack(g, "0.5.4"))
    torch_rule = frag["packageRules"][1]
    assert torch_rule["matchPackageNames"] == ["torch"]
    assert torch_rule["allowedVersions"] == r"/^(2\.8\.0|2\.9\.0)$/"
    assert "||" not in json.dumps(frag)
