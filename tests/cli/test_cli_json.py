"""With ``--json`` (or ``--format json``), stdout is exactly one JSON document, whatever
else the command line asks (``--diff``, ``--write``, ``--changed``, ``-q``, ``-o FILE``) and
whether the input is good or bad: an error is ``{"error", "tip", "exit_code"}`` there too
(issue 27). Every command whose parser takes ``--json`` is walked with a good and a bad
input; a command added without a row here fails :func:`test_every_json_command_is_walked`."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from moonpin.cli.main import main
from tests.cli.test_cli_help import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = str(ROOT / "data" / "kb.json")

BROKEN = "sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.12\n"
GOOD = "sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.13.post1\n"


def _files(tmp: Path) -> Path:
    (tmp / "requirements.txt").write_text(BROKEN)
    (tmp / "ok.txt").write_text(GOOD)
    (tmp / "bad.txt").write_text("sglang==\n")
    (tmp / "requirements-docs.txt").write_text("sphinx==7.0\n")
    return tmp


def _tree(tmp: Path) -> str:
    from tests.scrapers.test_local import make_tree

    return str(make_tree(tmp / "src"))


def _kb_copy(tmp: Path) -> str:
    shutil.copy(SHIPPED, tmp / "kb.json")
    return str(tmp / "kb.json")


# (command, good argv, bad argv); argv may name {tmp}, {tree} and {kb} (a copy of the
# shipped KB, for the commands that write beside it). Both runs pass --json.
RUNS: list[tuple[str, list[str], list[str]]] = [
    ("kb info", ["kb", "info"], ["--kb", "{tmp}/missing.json", "kb", "info"]),
    ("kb resolve", ["--kb", "{kb}", "kb", "resolve"],
     ["--kb", "{tmp}/missing.json", "kb", "resolve"]),
    ("scrape", ["--kb", "{kb}", "scrape", "--from-path", "{tree}", "--version", "0.5.99"],
     ["--kb", "{kb}", "scrape", "--from-path", "{tmp}/nowhere"]),
    ("show", ["show", "sglang==0.5.18"], ["show", "sglang==0.5.l8"]),
    ("which", ["which", "mooncake", "--sglang", "0.5.18"],
     ["which", "mooncake", "--sglang", "0.5.99"]),
    ("explain", ["explain", "sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1"],
     ["explain", "sglang==0.5.18"]),
    ("triples", ["triples", "--sglang", "0.5.18"], ["triples", "--sglang", "0.5.99"]),
    ("pins", ["pins", "{tmp}/ok.txt"], ["pins", "{tmp}/bad.txt"]),
    ("renovate", ["renovate", "--sglang", "0.5.18"], ["renovate"]),
    ("constraints", ["constraints", "--sglang", "0.5.18"],
     ["constraints", "--sglang", "0.5.99"]),
    ("args", ["args", "--sglang", "0.5.18", "--", "--elastic-ep-backend", "mooncake"],
     ["args", "--file", "{tmp}/missing.yaml"]),
    ("matrix", ["matrix", "--sglang", "0.5.18"], ["matrix", "--sglang", "not a spec"]),
    ("check", ["check", "--site-packages", "{tmp}", "--no-deep"],
     ["check", "--elastic-ep-backend", "mooncake", "--python", "{tmp}/missing-python"]),
]

# What else may be asked beside --json: each combination, good and bad.
COMBOS: list[tuple[list[str], int | None]] = [
    (["pins", "{tmp}/requirements.txt", "--diff"], 1),
    (["pins", "{tmp}/ok.txt", "--diff"], 0),
    (["pins", "{tmp}/requirements.txt", "--diff", "--exit-zero"], 0),
    (["pins", "{tmp}/requirements.txt", "--write"], 0),
    (["pins", "{tmp}/requirements.txt", "--write", "--diff"], 0),
    (["pins", "{tmp}/requirements.txt", "-q"], 1),
    (["pins", "{tmp}/requirements-docs.txt", "--changed"], 0),
    (["pins", "{tmp}/bad.txt", "--diff"], 2),
    (["pins", "{tmp}/requirements.txt", "--match", "x(?P<currentValue>y)"], 2),
    (["which", "mooncake", "--sglang", "0.5.18", "-q"], 0),
    (["which", "mooncake", "--sglang", "0.5.18", "--why", "-q"], 0),
    (["which", "mooncake", "--sglang", "0.5.18", "--torch", "2.99"], 1),
    (["which", "mooncake", "--sglang", "0.5.l8", "-q"], 2),
    (["which", "mooncake", "--sglang", "0.5.18", "--bogus"], 2),
    (["which", "nothing"], 2),
    (["explain", "sglang==0.5.18", "mooncake-transfer-engine==0.3.13.post1", "-q"], 1),
    (["triples", "--sglang", "0.5.18", "--format", "csv"], 0),
    (["matrix", "--sglang", "0.5.18", "-o", "{tmp}/m.html"], 0),
    (["matrix", "--sglang", "0.5.18", "--format", "csv"], 0),
    (["renovate", "--sglang", "0.5.18", "-q"], 0),
]


def _argv(argv: list[str], tmp: Path, **extra: Callable[[], str]) -> list[str]:
    if "--" in argv:  # --json is moonpin's, not the launch line's
        at = argv.index("--")
        argv = [*argv[:at], *[a for a in argv[at:] if a == "--json"][:1],
                *[a for a in argv[at:] if a != "--json"]]
    made = {k: f() for k, f in extra.items() if any("{" + k + "}" in a for a in argv)}
    return [a.format(tmp=tmp, **made) for a in argv]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    lead = [] if "--kb" in argv else ["--kb", SHIPPED]
    try:
        code = main([*lead, *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_document(out: str) -> object:
    doc, end = json.JSONDecoder().raw_decode(out.lstrip())
    assert not out.lstrip()[end:].strip(), f"more than one document: {out[:400]!r}"
    return doc


def test_every_json_command_is_walked() -> None:
    takes = {name for name, p in COMMANDS.items()
             if any("--json" in a.option_strings for a in p._actions
                    if not isinstance(a, argparse._SubParsersAction))}
    assert takes == {name for name, _, _ in RUNS}


@pytest.mark.parametrize(("name", "good", "bad"), RUNS, ids=[r[0] for r in RUNS])
def test_json_good_and_bad_input(name: str, good: list[str], bad: list[str], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    tmp = _files(tmp_path)
    code, out, err = _run(capsys, _argv([*good, "--json"], tmp, tree=lambda: _tree(tmp),
                                        kb=lambda: _kb_copy(tmp)))
    assert code in (0, 1), err
    doc = _one_document(out)
    assert not (isinstance(doc, dict) and "error" in doc), doc
    code, out, err = _run(capsys, _argv([*bad, "--json"], tmp, kb=lambda: _kb_copy(tmp)))
    assert code == 2, (out, err)
    doc = _one_document(out)
    assert isinstance(doc, dict) and doc["exit_code"] == 2, doc
    if name == "check":  # its own document: the failed check carries message and fix
        assert not doc["usable"] and doc["checks"][0]["fix"]
    else:
        assert set(doc) == {"error", "tip", "exit_code"} and doc["error"] and doc["tip"]
    assert "error:" in err  # and said for people on stderr, as without --json


@pytest.mark.parametrize(("argv", "code"), COMBOS, ids=[" ".join(c[0]) for c in COMBOS])
def test_json_whatever_else_is_asked(argv: list[str], code: int, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    tmp = _files(tmp_path)
    got, out, err = _run(capsys, _argv([*argv, "--json"], tmp))
    assert got == code, (out, err)
    doc = _one_document(out)
    assert isinstance(doc, (dict, list))
    if code == 2:
        assert isinstance(doc, dict) and doc["exit_code"] == 2 and doc["tip"]


def test_format_json_errors_are_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, ["triples", "--sglang", "0.5.99", "--format", "json"])
    assert code == 2 and _one_document(out) == {
        "error": json.loads(out)["error"], "tip": json.loads(out)["tip"], "exit_code": 2}


def test_pins_diff_is_a_field_and_the_report_stays_off_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmp = _files(tmp_path)
    code, out, err = _run(capsys, ["pins", f"{tmp}/requirements.txt", "--json", "--diff"])
    doc = _one_document(out)
    assert code == 1 and isinstance(doc, dict)
    assert doc["verdict"] == "incompatible" and doc["updates"]
    assert doc["diff"].startswith(f"--- {tmp}/requirements.txt\n")
    assert "+mooncake-transfer-engine-cuda13==0.3.13.post1\n" in doc["diff"]
    assert doc["not_written"] == [] and "{" not in err
    assert (tmp / "requirements.txt").read_text() == BROKEN  # --diff writes nothing


def test_pins_write_says_what_it_wrote_and_the_verdict_after(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmp = _files(tmp_path)
    code, out, _ = _run(capsys, ["pins", f"{tmp}/requirements.txt", "--json", "--write"])
    doc = _one_document(out)
    assert isinstance(doc, dict) and code == 0
    assert doc["written"] == [f"{tmp}/requirements.txt"]
    assert doc["after"]["verdict"] == "compatible" and doc["after"]["updates"] == []
    assert (tmp / "requirements.txt").read_text() == GOOD


def test_which_json_none_compatible_carries_null_and_the_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, ["which", "torch", "--sglang", "0.5.18", "--mooncake",
                                 "mooncake-transfer-engine==0.3.13.post1", "--json"])
    doc = _one_document(out)
    assert code == 1 and isinstance(doc, dict)
    assert doc["recommended"] is None and doc["compatible"] == []
    assert doc["reason"].startswith("none compatible: ")
    text = _run(capsys, ["which", "torch", "--sglang", "0.5.18", "--mooncake",
                         "mooncake-transfer-engine==0.3.13.post1"])[1]
    assert doc["reason"] in text  # the line the text output gives


@pytest.mark.parametrize(("name", "good"), [r[:2] for r in RUNS], ids=[r[0] for r in RUNS])
def test_json_usage_errors_are_json(name: str, good: list[str], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A good command line with an option the command does not take, and --json: the JSON
    document on stdout, the usage and a did-you-mean on stderr, exit 2 (check's own parser
    said it as text only)."""
    tmp = _files(tmp_path)
    argv = _argv([*good, "--json"], tmp, tree=lambda: _tree(tmp), kb=lambda: _kb_copy(tmp))
    at = argv.index("--") if "--" in argv else len(argv)
    code, out, err = _run(capsys, [*argv[:at], "--jsonn", *argv[at:]])
    assert code == 2, (out, err)
    doc = _one_document(out)
    assert isinstance(doc, dict) and doc["exit_code"] == 2 and "--jsonn" in doc["error"]
    assert "did you mean '--json'?" in doc["tip"] and "usage:" in err
