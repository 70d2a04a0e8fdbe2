"""A torch local label given by the user (``--torch 2.13.0+cu126``, ``torch==2.13.0+cu126``
in a file) is the same build in every direction (issue 27): ``which mooncake|sglang|torch``,
``explain``, ``triples``, ``pins``, ``renovate``, ``show`` and ``matrix`` agree on it, and
none drops it silently. The KB holds only the index's builds: nothing proposes a labelled
build it does not list."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from moonpin.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = str(ROOT / "data" / "kb.json")
ON = ["--python", "3.12", "--arch", "x86_64"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    try:
        code = main(["--kb", SHIPPED, *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr().out
    return code, json.loads(out)


def pins(capsys: pytest.CaptureFixture[str], folder: Path, text: str, *argv: str
         ) -> tuple[int, Any]:
    (folder / "requirements.txt").write_text(text)
    here = os.getcwd()
    os.chdir(folder)
    try:
        return run(capsys, "pins", "requirements.txt", "--json", *argv)
    finally:
        os.chdir(here)


@pytest.mark.parametrize(("sglang", "mooncake", "torch", "fits"), [
    ("0.5.18", "mooncake-transfer-engine==0.3.13.post1", "2.13.0+cu126", True),
    ("0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1", "2.13.0+cu126", False),
    ("0.5.18", "mooncake-transfer-engine==0.3.13.post1", "2.13+cu130", False),
    ("0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1", "2.13.0+cu130", True),
    ("0.5.17", "mooncake-transfer-engine==0.3.13.post1", "2.11.0+cu126", True),
    ("0.5.17", "mooncake-transfer-engine==0.3.13.post1", "2.13.0+cu126", False),
])
def test_every_direction_agrees_on_a_labelled_torch(
        sglang: str, mooncake: str, torch: str, fits: bool, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    dist, version = mooncake.split("==")
    label = "+" + torch.split("+")[1]
    _, explain = run(capsys, "explain", f"sglang=={sglang}", mooncake, f"torch=={torch}",
                     *ON, "--json")
    assert (explain["verdict"] == "compatible") is fits
    assert explain["evaluated"]["torch"].endswith(label)

    _, which_m = run(capsys, "which", "mooncake", "--sglang", sglang, "--torch", torch, *ON,
                     "--json")
    assert which_m["query"]["torch"].endswith(label)
    assert (mooncake in [c["requirement"] for c in which_m["compatible"]]) is fits

    _, which_s = run(capsys, "which", "sglang", "--mooncake", mooncake, "--torch", torch, *ON,
                     "--json")
    assert (f"sglang=={sglang}" in [c["requirement"] for c in which_s["compatible"]]) is fits

    _, which_t = run(capsys, "which", "torch", "--sglang", sglang, "--mooncake", mooncake,
                     "--torch", torch, *ON, "--json")
    assert "recommended" in which_t
    assert bool(which_t["compatible"]) is fits
    if fits:
        assert which_t["recommended"]["requirement"].endswith(label)
    else:
        assert which_t["recommended"] is None and which_t["reason"]

    for spec in (torch, f"=={torch}"):
        _, rows = run(capsys, "triples", "--sglang", sglang, "--torch", spec, "--mooncake",
                      f"=={version}", "--dist", dist, *ON, "--format", "json")
        assert bool(rows) is fits, spec
        assert all(r["torch"].endswith(label) for r in rows)

    _, doc = pins(capsys, tmp_path, f"sglang=={sglang}\ntorch=={torch}\n{mooncake}\n", *ON)
    assert (doc["verdict"] == "compatible") is fits, doc


def test_latest_keeps_the_label_where_sglang_admits_its_torch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = pins(capsys, tmp_path, "sglang==0.5.18\ntorch==2.13.0+cu126\n"
                     "mooncake-transfer-engine==0.3.13.post1\n", "--strategy", "latest")
    moved = {u["depName"]: (u["newName"], u["newVersion"]) for u in doc["updates"]}
    assert "torch" not in moved and "mooncake-transfer-engine" not in moved, moved
    assert moved["sglang"][1] != "0.5.18"
    # what it proposes is compatible as written, with the same build
    code, doc = pins(capsys, tmp_path, f"sglang=={moved['sglang'][1]}\ntorch==2.13.0+cu126\n"
                     "mooncake-transfer-engine==0.3.13.post1\n")
    assert (code, doc["verdict"]) == (0, "compatible")


def test_a_torch_move_says_the_label_it_leaves(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = pins(capsys, tmp_path, "sglang==0.5.17\ntorch==2.13.0+cu126\n"
                     "mooncake-transfer-engine==0.3.13.post1\n")
    (torch,) = [u for u in doc["updates"] if u["depName"] == "torch"]
    assert torch["newVersion"] == "2.11.0"  # the index's build: no +cu126 is invented
    assert "CUDA 12 build" in torch["reason"] and "not in the knowledge base" in torch["reason"]


def test_renovate_holds_the_labelled_build(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "requirements.txt").write_text(
        "sglang==0.5.18\ntorch==2.13.0+cu126\nmooncake-transfer-engine==0.3.13.post1\n")
    code, doc = run(capsys, "renovate", str(tmp_path / "requirements.txt"))
    rules = {tuple(r["matchPackageNames"]): r for r in doc["packageRules"]}
    assert code == 0
    assert rules[("torch",)]["allowedVersions"] == "==2.13.0+cu126"
    assert not any("replacementName" in r for r in doc["packageRules"])  # mte fits cu126
    assert "0\\.3\\.13\\.post1" in rules[("mooncake-transfer-engine",)]["allowedVersions"]


def test_show_a_labelled_torch(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run(capsys, "show", "torch==2.13+cu126", "--json")
    assert code == 0 and doc["version"] == "2.13.0+cu126"
    assert doc["local_build"]["cuda_major"] == 12 and doc["variants"]


def test_matrix_at_a_labelled_torch(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run(capsys, "matrix", "--sglang", "0.5.18", "--torch", "2.13.0+cu126", *ON,
                    "--format", "json")
    assert code == 0 and doc["counts"]["compatible"] > 0
    assert [r["torch"] for r in doc["rows"]] == ["2.13.0+cu126"]
    assert doc["rows"][0]["cuda"] == {"x86_64": 12}
