"""A fixed set of commands on the shipped KB prints what it printed when the set was
recorded (issue 28: the restructuring changed no output). A change of output on purpose
re-records it: ``MOONPIN_RECORD_OUTPUTS=1 python -m pytest tests/test_outputs_stable.py``,
and the diff of tests/golden/outputs.json is then part of the change's review."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
RECORD = GOLDEN / "outputs.json"
CUDA13 = "mooncake-transfer-engine-cuda13==0.3.13.post1"

COMMANDS: list[list[str]] = [
    ["--version"],
    ["which", "mooncake", "--sglang", "0.5.18"],
    ["which", "mooncake", "--sglang", "0.5.18", "--json"],
    ["which", "mooncake", "--sglang", "0.5.18", "--python", "3.12", "--arch", "x86_64"],
    ["which", "mooncake", "--sglang", "0.5.99"],
    ["which", "sglang", "--mooncake", CUDA13],
    ["which", "torch", "--sglang", "0.5.18", "--mooncake", CUDA13],
    ["explain", "sglang==0.5.18", CUDA13],
    ["explain", "sglang==0.5.17", "mooncake-transfer-engine==0.3.8", "--json"],
    ["triples", "--sglang", "0.5.18"],
    ["triples", "--sglang", ">=0.5.17", "--json"],
    ["show", "sglang==0.5.18"],
    ["show", CUDA13, "--json"],
    ["constraints", "--sglang", "0.5.18", "--python", "3.12", "--arch", "x86_64"],
    ["matrix", "--format", "md"],
    ["args", "--sglang", "0.5.23", "--", "--elastic-ep-backend", "mooncake", "--tp", "8"],
    ["pins", "requirements.txt"],
    ["pins", "requirements.txt", "--json"],
    ["renovate", "requirements.txt"],
]


def _moonpin() -> str:
    """The console script pip wrote beside this interpreter (the same before and after a
    restructuring; ``python -m`` spellings may not be)."""
    script = Path(sys.executable).with_name("moonpin")
    if not script.exists():
        pytest.skip(f"no moonpin script beside {sys.executable}")
    return str(script)


def _run(argv: list[str]) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOONPIN_")}
    env.update(COLUMNS="100", NO_COLOR="1", MOONPIN_KB_MAX_AGE_DAYS="0")  # no date in it
    proc = subprocess.run([_moonpin(), *argv], cwd=GOLDEN, capture_output=True, text=True,
                          timeout=120, env=env)
    def here(text: str) -> str:  # the checkout's own folder differs between clones
        return text.replace(str(ROOT), "<checkout>")

    return {"argv": argv, "rc": proc.returncode, "stdout": here(proc.stdout),
            "stderr": here(proc.stderr)}


def test_outputs_are_what_was_recorded() -> None:
    got = [_run(argv) for argv in COMMANDS]
    if os.environ.get("MOONPIN_RECORD_OUTPUTS") == "1":
        RECORD.write_text(json.dumps(got, indent=1) + "\n")
    want = json.loads(RECORD.read_text())
    assert [w["argv"] for w in want] == COMMANDS, "the recorded set is another set: re-record"
    for g, w in zip(got, want, strict=True):
        assert g == w, f"moonpin {' '.join(g['argv'])} changed"  # type: ignore[arg-type]
