"""Scenario tests: a compact KB slice, one query, the expected answer (``cases/*.json``).

Each case file holds ``kb`` (the compact form :mod:`tests.resolver.kbslice` reads),
``query`` (``{"op", "args"}``) and ``expect``; an optional ``xfail`` names a resolver
bug the case shows. Expectation keys:

* explain: ``verdict``; ``failed`` / ``unknown_checks`` (exactly the checks with ok
  False / None); ``checks_ok`` (checks that must be ok); ``reason_contains``;
  ``notes_contains`` / ``notes_exclude``; ``details_contain`` ({check: text});
  ``evaluated`` (a subset of the evaluated combination).
* which_*: ``compatible`` (requirements, in answer order), ``excluded`` / ``unknown``
  ({requirement: text its reason contains}, exactly these keys); ``notes_contains``;
  ``wheels`` ({requirement: [{python, arch, torch}]} exactly); ``without_mooncake_pg``.
* triples: ``rows`` (exactly, in any order).
* any op: ``raises`` (text of the UsageError).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from moonpin.cli.main import main
from moonpin.kb import store
from moonpin.kb.errors import UsageError
from moonpin.resolver import query
from moonpin.resolver.graph import CompatGraph
from tests.resolver.kbslice import build_kb

CASES = Path(__file__).with_name("cases")
CASE_FILES = sorted(CASES.glob("*.json"))


def _load(name: str) -> dict[str, Any]:
    return json.loads((CASES / name).read_text())


def _param(path: Path) -> Any:
    case = json.loads(path.read_text())
    marks = [pytest.mark.xfail(strict=True, reason=case["xfail"])] if case.get("xfail") else []
    return pytest.param(path.name, marks=marks, id=path.stem)


def _key(op: str, entry: dict[str, Any]) -> str:
    if "requirement" in entry:
        return str(entry["requirement"])
    if "dist" in entry:
        return f"{entry['dist']}=={entry['version']}"
    prefix = {"which_sglang": "sglang", "which_torch": "torch"}[op]
    return f"{prefix}=={entry['version']}"


def run_query(kb_slice: dict[str, Any], q: dict[str, Any]) -> Any:
    g = CompatGraph(build_kb(kb_slice))
    res = getattr(query, q["op"])(g, **q.get("args", {}))
    return res if isinstance(res, list) else res.to_json()  # triples: rows; else an answer


def _contains(haystack: str, needles: str | list[str]) -> None:
    for n in [needles] if isinstance(needles, str) else needles:
        assert n in haystack, f"{n!r} not in {haystack!r}"


def check_explain(res: dict[str, Any], exp: dict[str, Any]) -> None:
    checks = {c["name"]: c for c in res["checks"]}
    assert res["verdict"] == exp["verdict"], res["reasons"]
    if "failed" in exp:
        assert [c["name"] for c in res["checks"] if c["ok"] is False] == exp["failed"]
    if "unknown_checks" in exp:
        assert [c["name"] for c in res["checks"] if c["ok"] is None] == exp["unknown_checks"]
    for name in exp.get("checks_ok", []):
        assert checks[name]["ok"] is True, checks[name]
    if "reason_contains" in exp:
        _contains("\n".join(res["reasons"]), exp["reason_contains"])
    if "notes_contains" in exp:
        _contains("\n".join(res["notes"]), exp["notes_contains"])
    for text in exp.get("notes_exclude", []):
        assert text not in "\n".join(res["notes"])
    for name, text in exp.get("details_contain", {}).items():
        _contains(checks[name]["detail"], text)
    for k, v in exp.get("evaluated", {}).items():
        assert res["evaluated"][k] == v
    # the verdict follows from the checks
    oks = [c["ok"] for c in res["checks"]]
    if res["checks"]:
        want = ("incompatible" if False in oks else "unknown" if None in oks else "compatible")
        assert res["verdict"] == want
    if res["verdict"] != "compatible":
        assert res["reasons"], "a verdict other than compatible must say why"


def check_which(op: str, res: dict[str, Any], exp: dict[str, Any]) -> None:
    got = {k: {_key(op, e): e for e in res[k]} for k in ("compatible", "excluded", "unknown")}
    if "compatible" in exp:
        assert [_key(op, e) for e in res["compatible"]] == exp["compatible"]
    for k in ("excluded", "unknown"):
        if k in exp:
            assert sorted(got[k]) == sorted(exp[k]), (k, got[k])
            for key, text in exp[k].items():
                _contains(got[k][key]["reason"], text)
    # a candidate is in exactly one list
    keys = [key for k in got for key in got[k]]
    assert len(keys) == len(set(keys)), f"a candidate answered twice: {keys}"
    for e in res["compatible"]:
        assert e["wheels"], e
    for key, wheels in exp.get("wheels", {}).items():
        have = sorted((w["python"], w["arch"], w["torch"]) for w in got["compatible"][key]
                      ["wheels"])
        assert have == sorted((w["python"], w["arch"], w["torch"]) for w in wheels)
    if "notes_contains" in exp:
        notes = list(res.get("notes", [])) + [n for e in res["compatible"]
                                               for n in e.get("notes", [])]
        _contains("\n".join(notes), exp["notes_contains"])
    if "without_mooncake_pg" in exp:
        assert res["without_mooncake_pg"] == exp["without_mooncake_pg"]


def check_triples(rows: list[dict[str, str]], exp: dict[str, Any]) -> None:
    def key(r: dict[str, str]) -> tuple[str, ...]:
        return tuple(r[c] for c in ("sglang", "torch", "dist", "mooncake", "python", "arch"))

    assert len(rows) == len({key(r) for r in rows}), "duplicate rows"
    assert sorted(map(key, rows)) == sorted(map(key, exp["rows"]))


def test_enough_cases() -> None:
    assert len(CASE_FILES) >= 16


@pytest.mark.parametrize("name", [_param(p) for p in CASE_FILES])
def test_scenario(name: str) -> None:
    case = _load(name)
    q, exp = case["query"], case["expect"]
    if "raises" in exp:
        with pytest.raises(UsageError, match=exp["raises"]):
            run_query(case["kb"], q)
        return
    res = run_query(case["kb"], q)
    if q["op"] == "explain":
        check_explain(res, exp)
    elif q["op"] == "triples":
        check_triples(res, exp)
    else:
        check_which(q["op"], res, exp)


# ------------------------------------------------------------------------ the CLI


@pytest.fixture
def kb_file(tmp_path: Path) -> Any:
    def write(case: str) -> str:
        path = tmp_path / "kb.json"
        store.save(build_kb(_load(case)["kb"]), path)
        return str(path)
    return write


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_which_json_shape_and_exit_codes(kb_file: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("cuda12_build_vs_cuda13_torch.json")
    code, out, _ = _run(capsys, ["--kb", kb, "which", "mooncake", "--sglang", "0.5.18",
                                 "--json"])
    assert code == 0
    res = json.loads(out)
    assert {"query", "compatible", "excluded"} <= set(res)
    assert [c["requirement"] for c in res["compatible"]] == [
        "mooncake-transfer-engine-cuda13==0.3.13"]
    for c in res["compatible"]:
        assert {"dist", "version", "requirement", "wheels"} <= set(c)
        assert c["requirement"] == f"{c['dist']}=={c['version']}"
        assert {w["python"] for w in c["wheels"]} == {"cp312"}
    assert [(e["dist"], e["version"]) for e in res["excluded"]] == [
        ("mooncake-transfer-engine", "0.3.13")]
    for e in res["excluded"]:
        assert {"dist", "version", "reason"} <= set(e)
        assert "CUDA major" in e["reason"]
    # only the CUDA-12 distribution: none compatible -> exit 1
    code, out, _ = _run(capsys, ["--kb", kb, "which", "mooncake", "--sglang", "0.5.18",
                                 "--dist", "Mooncake_Transfer_Engine", "--json"])
    assert code == 1
    assert json.loads(out)["compatible"] == []


def test_cli_which_torch_and_sglang(kb_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("which_torch_versions.json")
    code, out, _ = _run(capsys, ["--kb", kb, "which", "torch", "--sglang", "0.5.18",
                                 "--mooncake", "Mooncake_Transfer_Engine_CUDA13==0.3.13",
                                 "--json"])
    assert code == 0
    res = json.loads(out)
    assert [c["requirement"] for c in res["compatible"]] == ["torch==2.13.0,!=2.13.0+cpu"]
    assert res["query"]["mooncake"] == "mooncake-transfer-engine-cuda13==0.3.13"
    kb = kb_file("which_sglang_rename.json")
    code, out, _ = _run(capsys, ["--kb", kb, "which", "sglang", "--mooncake",
                                 "mooncake.transfer.engine==0.3.8", "--json"])
    assert code == 0
    assert [c["version"] for c in json.loads(out)["compatible"]] == ["0.5.10"]


def test_cli_explain_json_shape(kb_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("local_label_cu126.json")
    def argv(torch: str, *extra: str) -> list[str]:
        return ["--kb", kb, "explain", "sglang==0.5.18",
                "Mooncake_Transfer_Engine_Cuda13==0.3.13", f"torch=={torch}", "--python", "3.12",
                "--arch", "x86_64", *extra]

    code, out, _ = _run(capsys, argv("2.13.0+cu126", "--json"))
    assert code == 1
    res = json.loads(out)
    assert res["verdict"] == "incompatible"
    assert isinstance(res["reasons"], list) and res["reasons"]
    for c in res["checks"]:
        assert set(c) >= {"name", "ok", "detail", "evidence"}
        assert c["ok"] in (True, False, None)
        assert isinstance(c["evidence"], list)
    assert [c["name"] for c in res["checks"] if c["ok"] is False] == ["CUDA major"]
    code, out, _ = _run(capsys, argv("2.13.0+cu130", "--json"))
    assert code == 0
    assert json.loads(out)["verdict"] == "compatible"
    # text output says the verdict too
    code, out, _ = _run(capsys, argv("2.13.0+cu130"))
    assert code == 0
    assert "COMPATIBLE" in out and "INCOMPATIBLE" not in out


def test_cli_explain_unknown_exits_1(kb_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("unread_release_explain.json")
    code, out, _ = _run(capsys, ["--kb", kb, "explain", "sglang==0.5.18",
                                 "mooncake-transfer-engine==0.3.14", "--json"])
    assert code == 1
    res = json.loads(out)
    assert res["verdict"] == "unknown"
    assert "HTTP 503" in res["reasons"][0]


def test_cli_triples_formats(kb_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("triples_filtering.json")
    code, out, _ = _run(capsys, ["--kb", kb, "triples", "--format", "json"])
    assert code == 0
    rows = json.loads(out)
    assert isinstance(rows, list) and rows
    for r in rows:
        assert set(r) == {"sglang", "torch", "dist", "mooncake", "python", "arch"}
    expected = _load("triples_all.json")["expect"]["rows"]
    assert sorted(map(json.dumps, rows)) == sorted(map(json.dumps, expected))
    code, out, _ = _run(capsys, ["--kb", kb, "triples", "--format", "csv", "--sglang",
                                 ">=0.5.18"])
    assert code == 0
    reader = csv.reader(io.StringIO(out))
    header = next(reader)
    assert header == ["sglang", "torch", "dist", "mooncake", "python", "arch"]
    body = list(reader)
    assert body and all(r[0] == "0.5.18" for r in body)
    # a filter nothing matches: exit 1, empty list
    code, out, _ = _run(capsys, ["--kb", kb, "triples", "--format", "json", "--torch",
                                 "2.99.0"])
    assert code == 1
    assert json.loads(out) == []


def test_cli_bad_inputs(kb_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("cuda12_build_vs_cuda13_torch.json")
    code, _, err = _run(capsys, ["--kb", kb, "which", "mooncake", "--sglang", "0.5.19",
                                 "--torch", "2.13.0"])
    assert code == 2
    assert "0.5.19" in err and "nearest known: 0.5.17, 0.5.18" in err
    code, _, err = _run(capsys, ["--kb", kb, "explain", "sglang==0.5.16",
                                 "mooncake-transfer-engine==0.3.13"])
    assert code == 2
    assert "nearest known" in err and "0.5.17" in err
    code, _, err = _run(capsys, ["--kb", kb, "which", "mooncake", "--sglang", "0.5.18",
                                 "--torch", "2.13.0", "--python", "2.7x"])
    assert code == 2
    assert "2.7x" in err
    code, _, err = _run(capsys, ["--kb", kb, "explain", "sglang==0.5.18",
                                 "mooncake-transfer-engine==0.3.13", "--arch", "sparc"])
    assert code == 2
    assert "sparc" in err
    code, _, err = _run(capsys, ["--kb", kb, "explain", "sglang==0.5.18",
                                 "mooncake-transfer-engine"])
    assert code == 2
    assert "NAME==VERSION" in err
    code, _, err = _run(capsys, ["--kb", kb, "which", "mooncake", "--sglang", "0.5.18",
                                 "--torch", "2.13.0", "--dist", "no-such-dist"])
    assert code == 2
    assert "no-such-dist" in err
    code, _, err = _run(capsys, ["--kb", kb, "triples", "--torch", ">>2"])
    assert code == 2
    assert "not PEP 440" in err


def test_cli_name_spellings_accepted(kb_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    kb = kb_file("cuda12_build_vs_cuda13_torch.json")
    answers = set()
    for spelling in ("mooncake-transfer-engine-cuda13", "Mooncake_Transfer_Engine_CUDA13",
                     "mooncake.transfer_engine-cuda13"):
        code, out, err = _run(capsys, ["--kb", kb, "explain", "SGLang==0.5.18",
                                       f"{spelling}==0.3.13", "--json"])
        assert code == 0, err
        res = json.loads(out)
        assert res["query"]["mooncake"] == "mooncake-transfer-engine-cuda13==0.3.13"
        answers.add(json.dumps(res, sort_keys=True))
    assert len(answers) == 1
