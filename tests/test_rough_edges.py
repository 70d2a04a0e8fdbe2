"""The rough edges a new user met by hand (issue 40), each from the user's own command, run
in-process on the shipped knowledge base. Each failed on ee40e57."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moonpin.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = str(ROOT / "data" / "kb.json")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["--kb", SHIPPED, *args])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_match_takes_renovates_named_groups(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # a matchStrings entry copied from renovate.json: JavaScript's (?<name>...) groups
    ci = tmp_path / "ci.yaml"
    ci.write_text("build:\n  sglang_ref: v0.5.18\n")
    code, out, err = run(capsys, "pins", str(ci), "--match",
                         r"sglang_ref: v(?<currentValue>\S+)", "--dep", "sglang")
    # read, and judged on what it pins (no mooncake pinned: SGLang alone), exit 0
    assert code == 0 and err == "", err
    assert f"{ci}:2: sglang==0.5.18  (regex)" in out


@pytest.mark.parametrize(("js", "py"), [
    (r"(?<currentValue>\S+)", r"(?P<currentValue>\S+)"),
    (r"(?<=v)(?<currentValue>\d+)", r"(?<=v)(?P<currentValue>\d+)"),  # a lookbehind stays
    (r"(?<!x)\(?<a>", r"(?<!x)\(?<a>"),  # an escaped parenthesis is a literal
    (r"[(?<x>](?<currentValue>.)", r"[(?<x>](?P<currentValue>.)"),  # so is a class member
    (r"[]](?P<currentValue>.)", r"[]](?P<currentValue>.)"),
])
def test_renovate_regex_spelling(js: str, py: str) -> None:
    from moonpin.resolver.pins.reading.regex import python_syntax

    assert python_syntax(js) == py


def test_matrix_json_beside_o_writes_the_files_own_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `matrix -o m.md --json` wrote JSON into m.md; --json is the answer's form there
    page = tmp_path / "m.md"
    code, out, _ = run(capsys, "matrix", "-o", str(page), "--json")
    assert code == 0
    assert json.loads(out)["format"] == "md" and json.loads(out)["wrote"] == str(page)
    assert page.read_text().startswith("# Compatibility matrix")
    code, out, _ = run(capsys, "matrix", "-o", str(page), "--format", "json", "--json")
    assert code == 0 and json.loads(page.read_text())["scope"]  # --format still decides


def test_matrix_unknown_sglang_release_is_a_typo(capsys: pytest.CaptureFixture[str]) -> None:
    # `matrix --sglang 0.9` was an empty table, exit 1; `triples` says what was meant
    code, out, err = run(capsys, "matrix", "--sglang", "0.9")
    assert code == 2 and out == ""
    assert "sglang 0.9 is not in the knowledge base" in err
    assert "did you mean --sglang 0.5." in err
    code, out, _ = run(capsys, "matrix", "--sglang", "v0.5.18")  # a release as typed
    assert code == 0 and "\n| 0.5.18 |" in out


def test_pins_write_answers_for_the_files_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `pins --write` printed the verdict from before the write on stdout
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\ntorch==2.12.0\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    code, out, err = run(capsys, "pins", str(req), "--write")
    assert code == 0 and "torch==2.13.0" in req.read_text()
    assert "verdict: compatible" in out and "incompatible" not in out
    assert f"{req}:2: torch==2.13.0" in out
    assert "before writing:" in err and "verdict: incompatible" in err
    code, out, _ = run(capsys, "pins", str(req), "--write")  # nothing to write: as judged
    assert code == 0 and "verdict: compatible" in out


def test_pins_help_says_how_python_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "pins", "-h")
    assert code == 0
    assert "requires-python" in " ".join(out.split())


def test_which_with_nothing_fitting_says_each_check_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    # `which torch` with nothing fitting printed all 52 exclusions, one a line
    code, out, _ = run(capsys, "which", "torch", "--sglang", "0.5.18", "--mooncake",
                       "mooncake-transfer-engine==0.3.5")
    assert code == 1
    excluded = [ln for ln in out.splitlines() if ln.startswith("  excluded ")]
    assert len(excluded) == 2, out  # the torch requirement, and the one torch it admits
    assert any("torch 2.13.0: module present:" in ln for ln in excluded)
    assert "--why says why each" in out
    code, out, _ = run(capsys, "which", "torch", "--sglang", "0.5.18", "--mooncake",
                       "mooncake-transfer-engine==0.3.5", "--why")
    assert sum(ln.startswith("  excluded ") for ln in out.splitlines()) > 40


def test_a_summary_line_is_not_cut_mid_word(capsys: pytest.CaptureFixture[str]) -> None:
    # the none-compatible line ended in "… (33 more characters))"
    code, out, _ = run(capsys, "which", "sglang", "--mooncake",
                       "mooncake-transfer-engine==0.3.5")
    assert code == 1 and "more characters" not in out
    assert "none compatible: every one excluded by module present (36 excluded" in out


def test_explain_shows_the_combination_its_evidence_is_about(
        capsys: pytest.CaptureFixture[str]) -> None:
    # with no --python/--arch the headline said cp310 aarch64 above a cp312 x86_64 wheel
    code, out, _ = run(capsys, "explain", "sglang==0.5.18",
                       "mooncake-transfer-engine-cuda13==0.3.13.post1")
    assert code == 0
    head = out.splitlines()[0]
    assert head.endswith("on cp312 x86_64: COMPATIBLE"), head
    assert "sglang-0.5.18-cp312-cp312-manylinux_2_34_x86_64.whl" in out
    assert "-cp310-" not in out and "aarch64" not in out
    assert "other combinations: 7 compatible" in out


def test_constraints_for_a_release_without_a_process_group_module(
        capsys: pytest.CaptureFixture[str]) -> None:
    # sglang 0.4.0 imports no mooncake.pg/.ep: constraints invented torch==<newest> and
    # allowed all eight mooncake distributions under "the others are excluded (<0)"
    code, out, _ = run(capsys, "constraints", "--sglang", "0.4.0")
    assert code == 0
    body = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert body == ["sglang==0.4.0"]
    assert "imports no mooncake process-group module" in out and "excluded" not in out
    code, out, _ = run(capsys, "constraints", "--sglang", "0.4.0", "--json")
    assert code == 0 and json.loads(out)["constraints"] == ["sglang==0.4.0"]


def test_renovate_for_a_release_without_a_process_group_module(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "renovate", "--sglang", "0.4.0")
    assert code == 0 and json.loads(out) == {"packageRules": []}
    assert "holds neither torch nor mooncake" in err


def test_args_says_what_was_meant(capsys: pytest.CaptureFixture[str]) -> None:
    # `check` gives a did-you-mean for a misspelt launch option; `args` did not
    code, out, _ = run(capsys, "args", "--sglang", "0.5.18", "--",
                       "--elastic-ep-bakend", "mooncake")
    assert code == 1
    assert ("refused: sglang 0.5.18 has no option --elastic-ep-bakend (did you mean "
            "--elastic-ep-backend?)") in out
    # a launch option given to moonpin itself: the line goes after `--`
    code, out, err = run(capsys, "args", "--sglang", "0.5.18", "--elastic-ep-backend",
                         "mooncake")
    assert code == 2 and "the launch arguments go after `--`" in err


def test_an_old_kb_is_said_with_how_to_refresh_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """which/pins/check say when the KB is older than a stated age (issue 40)."""
    from moonpin.resolver.tables.documents import age_note

    scraped = json.loads((ROOT / "data" / "kb.json").read_text())["scrape"]["scraped_at"]
    monkeypatch.setenv("MOONPIN_KB_MAX_AGE_DAYS", "30")
    from datetime import datetime

    t = datetime.fromisoformat(scraped).timestamp()
    assert age_note(SHIPPED, now=t + 29 * 86400) is None
    note = age_note(SHIPPED, now=t + 45 * 86400)
    assert note is not None and "45 days ago (older than 30 days)" in note
    assert "`moonpin scrape` refreshes it" in note
    monkeypatch.setenv("MOONPIN_KB_MAX_AGE_DAYS", "0.000001")  # any KB is older than that
    code, out, err = run(capsys, "which", "mooncake", "--sglang", "0.5.18")
    assert code == 0 and "moonpin: note: the knowledge base was scraped" in err
    assert "knowledge base was scraped" not in out  # stdout is the answer alone
    code, out, err = run(capsys, "which", "mooncake", "--sglang", "0.5.18", "-q")
    assert code == 0 and err == ""  # -q: nothing but errors


def test_check_says_an_old_kb(tmp_path: Path) -> None:
    from tests.lib.checkrun import run as check_run
    from tests.lib.images import healthy_image

    site = healthy_image(tmp_path / "site")
    r = check_run(site, kb=Path(SHIPPED), env={"MOONPIN_KB_MAX_AGE_DAYS": "0.000001"})
    assert r.status("kb") == "warn" and "`moonpin scrape` refreshes it" in r.out, r.out
    assert check_run(site, kb=Path(SHIPPED)).status("kb") == "pass"


def test_pins_of_a_release_without_a_process_group_module(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # as constraints/renovate: pins told a 0.4.0 project to add a mooncake "that fits"
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.4.0\n")
    code, out, _ = run(capsys, "pins", str(req))
    assert code == 0 and "verdict: compatible" in out
    assert "nothing for moonpin to hold" in out and "add mooncake" not in out
