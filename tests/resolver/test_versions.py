"""Versions compared as PEP 440 does, in every query (issue 27): release padding
(``torch==2.13`` is 2.13.0, so is ``2.13.0.0``) and local labels as distinct builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"
MC = "mooncake-transfer-engine-cuda13==0.3.13.post1"


@pytest.mark.parametrize("torch", ["2.13", "2.13.0.0", "v2.13"])
def test_explain_pads_the_release(torch: str) -> None:
    """`explain ... torch==2.13` looked for pg_2_13 and called the working 0.3.13.post1
    incompatible."""
    r = run_moonpin("explain", "sglang==0.5.18", MC, f"torch=={torch}", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["verdict"] == "compatible"


@pytest.mark.parametrize("torch", ["2.13", "2.13.0.0"])
def test_which_mooncake_with_a_padded_torch_recommends_the_prebuilt(torch: str) -> None:
    """`which mooncake --sglang 0.5.18 --torch 2.13` recommended the JIT 0.3.14."""
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", torch, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["query"]["torch"] == "2.13.0"
    first = [c["requirement"] for c in doc["compatible"] if not c.get("notes")]
    assert first and first[0] == MC


def test_a_local_label_stays_a_distinct_build() -> None:
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", "2.13+cu126", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["query"]["torch"] == "2.13.0+cu126"
    prebuilt = {c["dist"] for c in doc["compatible"] if not c.get("notes")}
    assert prebuilt == {"mooncake-transfer-engine"}  # CUDA-12 builds for a cu126 torch


def test_pins_torch_2_13_is_2_13_0(tmp_path: Path) -> None:
    """`moonpin pins` with `torch==2.13` proposed a move to a release that compiles at
    first import."""
    req = tmp_path / "requirements.txt"
    req.write_text(f"sglang==0.5.18\ntorch==2.13\n{MC}\n")
    r = run_moonpin("pins", str(req), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert (doc["verdict"], doc["updates"]) == ("compatible", [])


def test_which_torch_judges_the_torch_given() -> None:
    """Issue 27: `which torch ... --torch 2.13.0+cu126` dropped --torch (none compatible)
    while `explain ... torch==2.13.0+cu126` is COMPATIBLE."""
    argv = ["which", "torch", "--sglang", "0.5.18", "--mooncake",
            "mooncake-transfer-engine==0.3.13.post1"]
    exp = run_moonpin("explain", "sglang==0.5.18", "mooncake-transfer-engine==0.3.13.post1",
                      "torch==2.13.0+cu126", "--json")
    assert json.loads(exp.stdout)["verdict"] == "compatible"
    r = run_moonpin(*argv, "--torch", "2.13+cu126", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["recommended"]["requirement"] == "torch==2.13.0+cu126"
    assert doc["query"]["torch"] == "2.13.0+cu126"


def test_which_torch_says_in_one_line_why_no_build_of_the_index_fits() -> None:
    """The KB holds one torch build per release and arch, the index's (2.13.0 is CUDA 13
    on both): the CUDA-12 mooncake is refused for that; the answer says so, with the
    command that judges a CUDA-12 build, instead of 52 lines of exclusions only."""
    r = run_moonpin("which", "torch", "--sglang", "0.5.18", "--mooncake",
                    "mooncake-transfer-engine==0.3.13.post1", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["recommended"] is None
    (note,) = doc["notes"]
    assert "CUDA 12 build of torch 2.13.0" in note and "--torch 2.13.0+cu126" in note
