"""``which --json`` carries ``recommended`` in every answer, and lists the compatible
releases in the order the text output does (issue 27)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.mark.parametrize("argv", [
    ["mooncake", "--sglang", "0.5.23"],  # only a JIT release fits: it is still recommended
    ["mooncake", "--sglang", "0.5.18", "--torch", "2.13.0+cu126"],  # JIT and prebuilt
    ["mooncake", "--sglang", "0.5.18"],
    ["sglang", "--mooncake", "mooncake-transfer-engine-cuda13==0.3.13.post1"],
    ["torch", "--sglang", "0.5.18", "--mooncake", "mooncake-transfer-engine-cuda13==0.3.13"],
])
def test_json_recommends_what_the_text_recommends_in_its_order(argv: list[str]) -> None:
    text = run_moonpin("which", *argv, "--why")
    doc = json.loads(run_moonpin("which", *argv, "--json").stdout)
    assert text.returncode == 0, text.stderr
    rec = doc["recommended"]
    assert text.stdout.splitlines()[0] == (f"recommended: {rec['requirement']} "
                                           f"({rec['reason']})")
    listed = [ln.split()[0] for ln in text.stdout.splitlines()
              if ln.split() and "==" in ln.split()[0] and not ln.startswith(("#", " "))]
    assert listed == [c["requirement"] for c in doc["compatible"]][:len(listed)]
    assert not any(c.get("notes") for c in doc["compatible"][:1]) or all(
        c.get("notes") for c in doc["compatible"])  # a JIT release never before a prebuilt


def test_json_recommended_when_none_fits_or_none_is_needed() -> None:
    none = json.loads(run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", "2.99",
                                  "--json").stdout)
    assert none["recommended"] is None and none["compatible"] == []
    old = json.loads(run_moonpin("which", "mooncake", "--sglang", "0.4.0", "--json").stdout)
    assert old["compatible"] and old["recommended"]["requirement"] is None
    assert "none needed" in old["recommended"]["reason"]
