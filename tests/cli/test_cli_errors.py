"""Issue 27, the command line: with ``--json`` every error is a JSON object on stdout; an
unknown option is said with the subcommand's usage and a did-you-mean from the parser's own
tables; no internal names in messages; ``triples`` of a release the KB does not hold is
unknown (exit 2); "none compatible" starts with one line of reason; ``show torch==2.13.0``
answers from the KB's torch facts; ``constraints`` and ``kb resolve`` take ``--json``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.mark.parametrize("argv", [
    ["which", "mooncake", "--sglang", "0.5.99", "--json"],
    ["explain", "sglang==0.5.18", "nope==1", "--json"],
    ["pins", "/nonexistent/requirements.txt", "--json"],
    ["triples", "--sglang", "0.5.99", "--json"],
    ["constraints", "--sglang", "0.5.99", "--json"],
    ["show", "sglang==0.5.99", "--json"],
    ["which", "mooncake", "--sglang", "0.5.18", "--json", "--bogus"],
])
def test_with_json_every_error_is_a_json_object_on_stdout(argv: list[str]) -> None:
    r = run_moonpin(*argv)
    assert r.returncode == 2, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"error", "tip", "exit_code"} and doc["exit_code"] == 2
    assert doc["error"] and doc["tip"]
    assert "moonpin" in r.stderr and "error:" in r.stderr  # still said to a person


def test_an_unknown_option_shows_the_subcommands_usage_and_the_nearest() -> None:
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--jsn")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: moonpin which ")
    assert "did you mean '--json'?" in r.stderr
    c = run_moonpin("whcih", "mooncake")
    assert c.returncode == 2 and "did you mean 'which'?" in c.stderr


@pytest.mark.parametrize(("argv", "internal"), [(["kb"], "kb_command"),
                                                (["which"], "what")])
def test_no_internal_names_in_messages(argv: list[str], internal: str) -> None:
    r = run_moonpin(*argv)
    assert r.returncode == 2
    assert f"required: {internal}" not in r.stderr and "required: {" in r.stderr


def test_triples_of_a_release_the_kb_does_not_hold_is_unknown() -> None:
    r = run_moonpin("triples", "--sglang", "0.5.99")
    assert r.returncode == 2, r.stdout
    assert "0.5.99 is not in the knowledge base" in r.stderr and "0.5.23" in r.stderr
    assert "0 compatible" not in r.stdout
    assert run_moonpin("triples", "--sglang", "0.5.18").returncode == 0


def test_none_compatible_starts_with_its_reason() -> None:
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--python", "3.9")
    assert r.returncode == 1
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("none compatible")]
    assert line.startswith("none compatible: no mooncake wheel for cp39")
    t = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", "2.9.1")
    (line,) = [x for x in t.stdout.splitlines() if x.startswith("none compatible")]
    assert "torch requirement" in line


def test_show_torch_answers_from_the_kb() -> None:
    r = run_moonpin("show", "torch==2.13")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("torch 2.13.0\n") and "CUDA 13" in r.stdout
    assert "0.5.18" in r.stdout
    doc = json.loads(run_moonpin("show", "torch==2.13.0", "--json").stdout)
    assert {v["arch"] for v in doc["variants"]} == {"x86_64", "aarch64"}
    assert run_moonpin("show", "torch==9.0").returncode == 2


def test_constraints_and_kb_resolve_take_json(tmp_path: Path) -> None:
    doc = json.loads(run_moonpin("constraints", "--sglang", "0.5.18", "--json").stdout)
    assert doc["constraints"][:2] == ["sglang==0.5.18", "torch==2.13.0,!=2.13.0+cpu"]
    kb = tmp_path / "kb.json"
    shutil.copy(SHIPPED, kb)
    r = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(kb), "kb", "resolve",
                        "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kb"] == str(kb)


def test_the_matrix_page_names_the_repository_workflow_only_in_a_checkout(
        tmp_path: Path) -> None:
    from moonpin.resolver.matrix.table import _in_checkout

    assert _in_checkout(str(SHIPPED))  # this repository
    installed = tmp_path / "site-packages" / "data" / "kb.json"
    installed.parent.mkdir(parents=True)
    installed.write_text("{}")
    assert not _in_checkout(str(installed))


@pytest.mark.parametrize("label", ["cu1", "cu", "cuda"])
def test_a_local_label_naming_no_cuda_major_is_the_index_build(label: str) -> None:
    """``+cu1`` names no CUDA major (``cu126`` is 12.6): the torch is the index's build, as
    for any other label saying nothing of CUDA; it raised ValueError from int('')."""
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", f"2.13.0+{label}",
                    "--json")
    assert r.returncode in (0, 1), r.stderr
    plain = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", "2.13.0+git",
                        "--json")
    def said(out: str) -> list[str]:
        return [e["requirement"] for e in json.loads(out)["compatible"]]

    assert said(r.stdout) and said(r.stdout) == said(plain.stdout)
