"""The moonpin command, run in-process and as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.cli.main import main
from moonpin.kb import store
from moonpin.scrapers.fetch import Fetcher
from tests.lib.server import FakeIndex
from tests.scrapers.test_scrape_e2e import (  # noqa: F401
    index,
    only_present,
    scraped_kb,
    sglang_wheel,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kb_file(index: FakeIndex, tmp_path: Path) -> Path:  # noqa: F811
    return scraped_kb(index, tmp_path / "kb.json")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_kb_info_json(kb_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kb", str(kb_file), "kb", "info", "--json")
    info = json.loads(out)
    assert code == 0
    assert info["sglang_releases"] == 2
    assert info["sglang_by_module"] == {"mooncake.ep": 1, "mooncake.pg": 1}
    assert info["mooncake_builds"] == 2


def test_show_sglang_and_mooncake(kb_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kb", str(kb_file), "show", "sglang==0.5.17")
    assert code == 0
    assert "process-group module: mooncake.pg" in out
    assert "sglang/srt/distributed/parallel_state.py:" in out
    code, out, _ = run(capsys, "--kb", str(kb_file), "show",
                       "Mooncake_Transfer_Engine==0.3.13", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["wheels"][0]["builds"][0]["torch"] == "2.13.0"


@pytest.mark.parametrize(
    ("release", "needle"),
    [
        ("sglang==0.5.5", "nearest known: 0.5.4, 0.5.17"),
        ("sglang>=0.5", "does not name one release"),
        ("not a req ==", "does not name one release"),
        ("mooncake-foo==1.0", "unknown release name"),
    ],
)
def test_show_bad_input_exits_2_with_tip(kb_file: Path, capsys: pytest.CaptureFixture[str],
                                         release: str, needle: str) -> None:
    code, _, err = run(capsys, "--kb", str(kb_file), "show", release)
    assert code == 2
    assert needle in err
    assert "tip:" in err


def test_corrupt_kb_exits_2_naming_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "kb.json"
    bad.write_text('{"schema_version": 1, "scrape": ')
    code, _, err = run(capsys, "--kb", str(bad), "kb", "info")
    assert code == 2
    assert str(bad) in err and "moonpin scrape --full" in err


def test_scrape_command_writes_kb_and_reports(index: FakeIndex, tmp_path: Path,  # noqa: F811
                                             capsys: pytest.CaptureFixture[str]) -> None:
    only_present(index)
    path = tmp_path / "out" / "kb.json"
    code, out, _ = run(capsys, "scrape", "--kb", str(path), "--index-url", index.url, "--json")
    report = json.loads(out)
    assert code == 0
    assert report["read"] == {"sglang": 2, "mooncake": 2, "torch": 2, "native": 0}
    assert report["bytes_fetched"] > 0
    assert store.load(path).sglang[-1].version == "0.5.17"
    # a second run reads nothing new and leaves the files alone
    before = path.stat().st_mtime_ns
    code, out, _ = run(capsys, "scrape", "--kb", str(path), "--index-url", index.url, "--json")
    assert json.loads(out)["read"] == {"sglang": 0, "mooncake": 0, "torch": 0, "native": 0}
    assert json.loads(out)["changed"] is False
    assert path.stat().st_mtime_ns == before
    # a KB read by older extractor code is read again and rewritten with the current
    # fingerprints, so the refresh after it reads nothing
    old = store.load(path)
    store.save(old.model_copy(update={"scrape": old.scrape.model_copy(update={
        "extractors": {**old.scrape.extractors, "torch": "older"}})}), path)
    code, out, _ = run(capsys, "scrape", "--kb", str(path), "--index-url", index.url, "--json")
    assert json.loads(out)["read"] == {"sglang": 0, "mooncake": 0, "torch": 2, "native": 0}
    assert json.loads(out)["changed"] is True
    code, out, _ = run(capsys, "scrape", "--kb", str(path), "--index-url", index.url, "--json")
    assert json.loads(out)["read"] == {"sglang": 0, "mooncake": 0, "torch": 0, "native": 0}
    # a release that fails is reported, exit 1, and the KB stays valid
    served = next(iter(index.add_project("sglang", {
        "0.5.20": dict([sglang_wheel("0.5.20", {})])}).files.values()))
    index.fault(served.path, "status", code=404)
    code, out, _ = run(capsys, "scrape", "--kb", str(path), "--index-url", index.url, "--json",
                       "--only", "sglang")
    assert code == 1
    assert [u["version"] for u in json.loads(out)["unread"]] == ["0.5.20"]
    assert [r.version for r in store.load(path).sglang] == ["0.5.4", "0.5.17"]


def test_index_unreachable_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Fetcher, "_backoff", lambda self, attempt: 0.0)
    code, _, err = run(capsys, "scrape", "--kb", str(tmp_path / "kb.json"), "--index-url",
                       "http://127.0.0.1:9/", "--only", "torch")
    assert code == 2
    assert "127.0.0.1:9" in err and "tip:" in err
    assert not (tmp_path / "kb.json").exists()


def test_shipped_kb_loads_and_entry_point_runs() -> None:
    r = subprocess.run([sys.executable, "-m", "moonpin", "kb", "info", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["sglang_releases"] > 50
    assert info["mooncake_wheels"] > 100


# --------------------------------------------------------------------------- pins


def write_reqs(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "requirements.txt"
    p.write_text(text)
    return p


def test_pins_compatible_set_exits_0(kb_file: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    req = write_reqs(tmp_path, "sglang==0.5.17\ntorch==2.13.0\nmooncake-transfer-engine==0.3.13\n")
    code, out, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                       "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["verdict"] == "compatible" and doc["updates"] == []
    assert [(p["name"], p["line"]) for p in doc["pins"]] == [
        ("sglang", 1), ("torch", 2), ("mooncake-transfer-engine", 3)]


def test_pins_incompatible_set_proposes_the_mooncake_move(
        kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req = write_reqs(tmp_path, "# stack\nsglang==0.5.17\ntorch==2.13.0\n"
                               "mooncake_transfer_engine==0.3.12  # old\n")
    code, out, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                       "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["verdict"] == "incompatible"
    (u,) = doc["updates"]
    assert (u["packageFile"], u["line"], u["currentValue"], u["newValue"], u["updateType"]) == (
        str(req), 4, "==0.3.12", "==0.3.13", "patch")  # as Renovate writes them
    assert {"depName", "groupName", "reason"} <= set(u)
    code, _, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                     "--exit-zero")
    assert code == 0


def test_pins_torch_behind_the_release_moves_torch(
        kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req = write_reqs(tmp_path, "sglang==0.5.17\ntorch==2.12.0\nmooncake-transfer-engine==0.3.13\n")
    code, out, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                       "--json")
    doc = json.loads(out)
    assert code == 1
    moves = {(u["depName"], u["newVersion"]) for u in doc["updates"]}
    assert ("torch", "2.13.0") in moves


def test_pins_unreadable_line_is_bad_input(kb_file: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    req = write_reqs(tmp_path, "sglang==0.5.17\nsglang >>= 0.5\n")
    code, _, err = run(capsys, "--kb", str(kb_file), "pins", str(req))
    assert code == 2
    assert f"{req}:2:" in err


def test_pins_diff_and_write_change_only_the_pins(
        kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ("# stack\nsglang[all]==0.5.17  # keep\ntorch==2.13.0\n"
            "mooncake_transfer_engine==0.3.12 ; platform_machine == 'x86_64'  # old\n")
    req = write_reqs(tmp_path, text)
    code, out, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                       "--diff")
    assert code == 1
    assert "-mooncake_transfer_engine==0.3.12 ; platform_machine == 'x86_64'  # old" in out
    assert "+mooncake_transfer_engine==0.3.13 ; platform_machine == 'x86_64'  # old" in out
    assert req.read_text() == text  # --diff writes nothing
    run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12", "--write")
    assert req.read_text() == text.replace("==0.3.12 ;", "==0.3.13 ;")
    code, _, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12")
    assert code == 0  # the written set is compatible


def test_pins_with_hashes_are_not_rewritten(
        kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ("sglang==0.5.17\ntorch==2.13.0\nmooncake-transfer-engine==0.3.12 \\\n"
            "    --hash=sha256:" + "0" * 64 + "\n")
    req = write_reqs(tmp_path, text)
    _, _, err = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                    "--write")
    assert "needs new hashes" in err
    assert req.read_text() == text


# Renovate's packageRules options this fragment may use (docs.renovatebot.com configuration
# options); allowedVersions is a PEP 440 range or a /regex/, never with matchUpdateTypes.
RENOVATE_RULE_KEYS = {"description", "matchPackageNames", "groupName", "allowedVersions"}


def test_renovate_fragment_has_renovates_shape(kb_file: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import re

    req = write_reqs(tmp_path, "sglang==0.5.17\n")
    code, out, _ = run(capsys, "--kb", str(kb_file), "renovate", str(req), "--python", "3.12")
    doc = json.loads(out)
    assert code == 0
    assert set(doc) == {"packageRules"}
    for rule in doc["packageRules"]:
        assert set(rule) <= RENOVATE_RULE_KEYS and "matchPackageNames" in rule
        assert "matchUpdateTypes" not in rule
    group, torch_rule, mooncake_rule = doc["packageRules"]
    assert group["groupName"] and {"sglang", "torch"} <= set(group["matchPackageNames"])
    assert torch_rule == {**torch_rule, "matchPackageNames": ["torch"],
                          "allowedVersions": "==2.13.0,!=2.13.0+cpu"}
    allowed = mooncake_rule["allowedVersions"]
    assert allowed.startswith("/") and allowed.endswith("/")
    pattern = re.compile(allowed[1:-1])
    assert pattern.match("0.3.13") and not pattern.match("0.3.12")
    assert mooncake_rule["matchPackageNames"] == ["mooncake-transfer-engine"]


def test_renovate_needs_an_sglang(kb_file: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    req = write_reqs(tmp_path, "torch==2.13.0\n")
    code, _, err = run(capsys, "--kb", str(kb_file), "renovate", str(req))
    assert code == 2 and "no exact sglang pin" in err


def test_pins_strategies_and_keep(kb_file: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    req = write_reqs(tmp_path, "sglang==0.5.4\ntorch==2.13.0\nmooncake-transfer-engine==0.3.12\n")

    def moves(*extra: str) -> set[tuple[str, str]]:
        _, out, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                        "--json", *extra)
        return {(u["depName"], u["newVersion"]) for u in json.loads(out)["updates"]}

    # latest: the whole stack to the newest SGLang with a compatible mooncake
    assert moves("--strategy", "latest") == {("sglang", "0.5.17"),
                                             ("mooncake-transfer-engine", "0.3.13")}
    # keep the pinned mooncake: no SGLang release fits 0.3.12 (CUDA 12 pg_2_12_0 only)
    assert moves("--keep", "mooncake") == set()
    _, out, _ = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                    "--json", "--keep", "mooncake")
    assert any("fits mooncake-transfer-engine==0.3.12" in r for r in json.loads(out)["reasons"])
    # minimal keeps sglang and moves mooncake
    assert ("sglang", "0.5.17") not in moves()


def test_pins_write_interrupted_leaves_the_file_whole(
        kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    text = "sglang==0.5.17\ntorch==2.13.0\nmooncake-transfer-engine==0.3.12\n"
    project = tmp_path / "project"
    project.mkdir()
    req = write_reqs(project, text)

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    code, _, err = run(capsys, "--kb", str(kb_file), "pins", str(req), "--python", "3.12",
                       "--write")
    assert code == 2 and "No space left on device" in err and "unchanged" in err
    assert req.read_text() == text
    assert [p.name for p in project.iterdir()] == ["requirements.txt"]  # no temp file left


# --------------------------------------------------------------------------- launch args


def test_args_violation_and_exit_codes(kb_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17", "--json",
                       "--", "--model-path", "m", "--elastic-ep-backend", "mooncake",
                       "--pp-size", "2")
    doc = json.loads(out)
    assert code == 1
    (v,) = doc["violations"]
    assert v["message"] == "elastic EP needs --pp-size 1 (got 2)"
    assert v["evidence"].endswith("sglang/srt/server_args.py:15")
    # negative control: the same launch with --pp-size 1 is valid
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17", "--",
                       "--elastic-ep-backend", "mooncake", "--pp-size", "1")
    assert code == 0 and "0 violated" in out
    # a value the release does not accept is bad input
    code, _, err = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17", "--",
                       "--elastic-ep-backend", "nccl")
    assert code == 2 and "--elastic-ep-backend" in err
    # a release without recorded rules says so
    code, _, err = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.4", "--")
    assert code == 2 and "no elastic-EP launch rules" in err


def test_args_from_manifests_and_scripts(kb_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    def manifest(args: str, image: str = "lmsysorg/sglang:v0.5.17", sibling: str = "") -> Path:
        path = tmp_path / "dgd.yaml"
        path.write_text(
            "spec:\n  services:\n    Worker:\n" + sibling +
            "      extraPodSpec:\n        mainContainer:\n"
            f"          image: {image}\n"
            '          command: ["python3", "-m", "dynamo.sglang"]\n'
            f"          args: {args}\n")
        return path

    bad = manifest('["--elastic-ep-backend", "mooncake", "--pp-size", "2"]')
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--file", str(bad), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["sglang"] == "0.5.17"  # from the image tag
    (v,) = doc["violations"]
    assert v["message"] == "elastic EP needs --pp-size 1 (got 2)"
    assert v["where"] == (f"{bad}:7 spec.services.Worker.extraPodSpec.mainContainer.command")
    good = manifest('["--elastic-ep-backend", "mooncake", "--pp-size", "1"]')
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--file", str(good))
    assert code == 0 and "0 violated" in out and "python3 -m dynamo.sglang" in out

    # the flag beside the pod template never reaches the worker
    sib = manifest('["--elastic-ep-backend", "mooncake"]',
                   sibling='      args: ["--pp-size", "1"]\n')
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--file", str(sib))
    assert code == 1 and "problem:" in out and "outside any container" in out

    # a script whose value is a variable it does not set: that rule is not checked
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\npython -m sglang.launch_server --elastic-ep-backend mooncake"
                      " --pp-size $PP\n")
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17",
                       "--file", str(script))
    assert code == 0 and "not checked" in out and "$PP" in out

    # bad input: exit 2 with the file named
    code, _, err = run(capsys, "--kb", str(kb_file), "args", "--file",
                       str(manifest('["--pp-size", "1"]', image="my/own:latest")))
    assert code == 2 and "pass --sglang" in err
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: ConfigMap\ndata: {a: b}\n")
    code, _, err = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17",
                       "--file", str(empty))
    assert code == 2 and "no SGLang launch line" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec:\n  args: [--tp\n  x: 1\n")
    code, _, err = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17",
                       "--file", str(broken))
    assert code == 2 and f"{broken}:" in err and "not valid YAML" in err
    code, _, err = run(capsys, "--kb", str(kb_file), "args", "--file", str(tmp_path / "nope"))
    assert code == 2 and "cannot read" in err


def test_args_lists_unchecked_rules_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = str(Path(__file__).resolve().parents[2] / "data" / "kb.json")
    launch = ["--", "--model-path", "m", "--elastic-ep-backend", "mooncake"]
    code, out, _ = run(capsys, "--kb", shipped, "args", "--sglang", "0.5.18", *launch)
    assert code == 0 and "not checked:" not in out
    assert "read what SGLang computes at start-up; --verbose lists them" in out
    code, verbose, _ = run(capsys, "--kb", shipped, "args", "--sglang", "0.5.18", "-v", *launch)
    listed = [ln for ln in verbose.splitlines() if ln.startswith("not checked:")]
    assert code == 0 and len(listed) >= 10 and "--verbose" not in verbose


def test_args_names_the_deprecated_flags_used(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = str(Path(__file__).resolve().parents[2] / "data" / "kb.json")
    code, out, _ = run(capsys, "--kb", shipped, "args", "--sglang", "0.5.23", "--",
                       "--model-path", "m", "--disable-cuda-graph")
    assert code == 0
    assert ("note: deprecated in sglang 0.5.23: --disable-cuda-graph -> "
            "--cuda-graph-backend-prefill=disabled") in out
    code, out, _ = run(capsys, "--kb", shipped, "args", "--sglang", "0.5.23", "--",
                       "--model-path", "m", "--cuda-graph-backend-prefill", "disabled")
    assert code == 0 and "deprecated" not in out  # control


def test_args_refuses_options_the_release_has_not(kb_file: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17", "--",
                       "--elastic-ep-backend", "mooncake", "--attn-dp-size", "8")
    assert code == 1
    assert ("refused: sglang 0.5.17 has no option --attn-dp-size; its parser stops with "
            "'unrecognized arguments'") in out
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--sglang", "0.5.17", "--",
                       "--elastic-ep-backend", "mooncake", "--pp", "1")  # control: a prefix
    assert code == 0 and "refused" not in out
    # Dynamo's worker has options of its own: said, not refused
    dgd = tmp_path / "dgd.yaml"
    dgd.write_text("spec:\n  services:\n    W:\n      extraPodSpec:\n        mainContainer:\n"
                   "          image: lmsysorg/sglang:v0.5.17\n"
                   '          command: ["python3", "-m", "dynamo.sglang"]\n'
                   '          args: ["--elastic-ep-backend", "mooncake", "--migration-limit", '
                   '"3"]\n')
    code, out, _ = run(capsys, "--kb", str(kb_file), "args", "--file", str(dgd))
    assert code == 0 and "(Dynamo's own, or mistakes): --migration-limit" in out


def test_version_help_and_bare_moonpin(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("moonpin ") and "scraped 20" in out
    # the version printed (and recorded by a scrape) is the package's own
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None and out.startswith(f"moonpin {declared.group(1)};")
    # bare: the overview on stderr and exit 2 (uv's and git's habit): `moonpin` alone in a
    # script is a mistake, not a pass
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: moonpin" in captured.err and "exit codes" in captured.err
    assert "thin glue" not in captured.err
    assert main(["--kb", str(ROOT / "data" / "kb.json")]) == 2
    assert "usage: moonpin" in capsys.readouterr().err
    assert main(["help"]) == 0 and "examples:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["help", "which"])
    assert e.value.code == 0 and "--sglang" in capsys.readouterr().out


def test_kb_equals_form_works_before_any_command(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    kb = str(ROOT / "data" / "kb.json")
    assert main([f"--kb={kb}", "kb", "info"]) == 0
    assert "sglang" in capsys.readouterr().out
    # check and matrix have their own parsers: --kb=X reaches them too
    assert main([f"--kb={kb}", "check", "--no-deep"]) == 0
    assert "nothing to check" in capsys.readouterr().out
    out = tmp_path / "m.csv"
    assert main([f"--kb={kb}", "matrix", "--format", "csv", "-o", str(out)]) == 0
    assert out.read_text().startswith("sglang")


def test_which_recommends_a_prebuilt_release_and_counts_the_rest(
        capsys: pytest.CaptureFixture[str]) -> None:
    kb = str(ROOT / "data" / "kb.json")
    assert main(["--kb", kb, "which", "mooncake", "--sglang", "0.5.18", "--python", "3.12",
                 "--arch", "x86_64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("recommended: mooncake-transfer-engine-cuda13==0.3.13.post1 "
                        "(prebuilt, the newest that fits)")
    listed = [ln.split()[0] for ln in lines if ln.startswith("mooncake-transfer-engine")]
    assert listed[-1] == "mooncake-transfer-engine-cuda13==0.3.14"  # compiles: listed last
    excluded = [ln for ln in lines if ln.lstrip().startswith("excluded")]
    assert excluded and all("--why says why each" in ln for ln in excluded)
    assert len({ln.split(":")[0] for ln in excluded}) == len(excluded)  # one per distribution
    # an SGLang or torch release is never "prebuilt": that is a mooncake build's word
    assert main(["--kb", kb, "which", "sglang", "--mooncake",
                 "mooncake-transfer-engine-cuda13==0.3.13.post1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("recommended: sglang==") and first.endswith("(the newest that fits)")
    # a torch nothing fits: one line per reason, not one per release
    assert main(["--kb", kb, "which", "mooncake", "--sglang", "0.5.18", "--torch", "2.99"]) == 1
    out = capsys.readouterr().out
    assert out.count("  excluded ") == 1 and "77 releases of" in out


@pytest.mark.parametrize("argv", [
    ["which", "mooncake", "--sglang", "1" * 5000],
    ["which", "mooncake", "--sglang", "0.5.18", "--torch", "2." + "9" * 100],
    ["explain", "sglang==0.5.18", "mooncake-transfer-engine==" + "1" * 5000],
    ["show", "sglang==" + "x" * 10_000],
    ["triples", "--sglang", "==" + "1" * 5000],
])
def test_oversized_arguments_are_refused_before_parsing(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "too long to be a release" in err and "tip:" in err
    assert len(err) < 400  # the input is cut, not echoed whole


SHIPPED = str(ROOT / "data" / "kb.json")


def _newest_sglang() -> str:
    from packaging.version import Version

    doc = json.loads(Path(SHIPPED).read_text())
    return str(max(Version(r["version"]) for r in doc["sglang"] if r["source"] == "index"
                    and not Version(r["version"]).is_prerelease))


@pytest.mark.parametrize("typed", ["v0.5.18", "V0.5.18", "0.5.18.0", " 0.5.18"])
def test_which_reads_a_release_as_users_type_it(typed: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kb", SHIPPED, "which", "mooncake", "--sglang", "0.5.18"]) == 0
    plain = capsys.readouterr().out
    assert main(["--kb", SHIPPED, "which", "mooncake", "--sglang", typed]) == 0
    assert capsys.readouterr().out == plain


def test_latest_is_the_newest_release_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    newest = _newest_sglang()
    main(["--kb", SHIPPED, "which", "mooncake", "--sglang", newest, "--json"])
    want = json.loads(capsys.readouterr().out)
    main(["--kb", SHIPPED, "which", "mooncake", "--sglang", "latest", "--json"])
    assert json.loads(capsys.readouterr().out) == want
    code, out, _ = run(capsys, "--kb", SHIPPED, "show", "sglang==latest", "--json")
    assert code == 0 and json.loads(out)["version"] == newest
    code, out, _ = run(capsys, "--kb", SHIPPED, "show",
                       "mooncake-transfer-engine-cuda13==LATEST", "--json")
    assert code == 0 and json.loads(out)["dist"] == "mooncake-transfer-engine-cuda13"
    code, out, _ = run(capsys, "--kb", SHIPPED, "explain", "sglang==v0.5.18",
                       "mooncake-transfer-engine-cuda13==v0.3.13.post1", "--python", "3.12",
                       "--arch", "x86_64")
    assert code == 0 and out.startswith("sglang 0.5.18 + mooncake-transfer-engine-cuda13=="
                                        "0.3.13.post1 + torch 2.13.0 on cp312 x86_64")
    code, out, _ = run(capsys, "--kb", SHIPPED, "constraints", "--sglang", "v0.5.18")
    assert code == 0 and "sglang 0.5.18" in out


def test_the_fast_path_sees_the_normalised_release() -> None:
    """`which mooncake --sglang v0.5.18` answers from the resolved tables, as 0.5.18 does."""
    probe = ("import sys; from moonpin.cli.main import main; code = main(sys.argv[1:]); "
             "print('networkx' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr); "
             "raise SystemExit(code)")
    r = subprocess.run([sys.executable, "-c", probe, "--kb", SHIPPED, "which", "mooncake",
                        "--sglang", "V0.5.18"], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("recommended: ")
    assert r.stderr.strip() == "False False"


@pytest.mark.parametrize(("argv", "message", "tip"), [
    (["which", "mooncake", "--sglang", "0.5.l8"], "'0.5.l8' is not a PEP 440 version",
     "tip: did you mean --sglang 0.5.18 (not '0.5.l8')?"),
    (["which", "mooncake", "--sglang", "0.5.99"], "sglang 0.5.99 is not in the knowledge base",
     "(not '0.5.99')? `moonpin scrape` refreshes"),
    (["which", "sglang", "--mooncake", "mooncake-transfer-engine-cuda31==0.3.13"],
     "unknown mooncake distribution 'mooncake-transfer-engine-cuda31'",
     "tip: did you mean mooncake-transfer-engine-cuda13"),
    (["which", "sglang", "--mooncake", "mooncake-transfer-engine-cuda13==0.3.l3"],
     "'0.3.l3' is not a PEP 440 version",
     "tip: did you mean mooncake-transfer-engine-cuda13==0.3.13 (not '0.3.l3')?"),
    (["show", "mooncake-transfer-engine-cuda31==0.3.13"],
     "unknown release name 'mooncake-transfer-engine-cuda31'", "tip: did you mean"),
    (["show", "sglang==0.5.l8"], "not a PEP 440", "tip: did you mean sglang==0.5.18"),
    (["explain", "sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.99"],
     "mooncake-transfer-engine-cuda13 0.3.99 is not in the knowledge base",
     "tip: did you mean mooncake-transfer-engine-cuda13==0.3.14 (not '0.3.99')?"),
    (["which", "mooncake", "--sglang", "0.5.18", "--python", "3.99"],
     "no CPython 3.99 exists", "tip: use e.g. --python 3.12 (not '3.99')"),
    (["which", "mooncake", "--sglang", "0.5.18", "--arch", "x86"], "unknown platform --arch",
     "tip: did you mean --arch x86_64?"),
    (["which", "mooncake", "--sglang", "0.5.18", "--dist", "cuda13"],
     "unknown mooncake distribution 'cuda13'", "tip: did you mean mooncake-transfer-engine-cuda13"),
    (["which", "mooncake", "--sglang", "0.5.18", "--torch", "2.l3.0"], "not a PEP 440",
     "tip: "),
    (["constraints", "--sglang", "0.5.l8"], "not a PEP 440", "tip: did you mean --sglang 0.5.18"),
    (["renovate", "--sglang", "0.5.99"], "not in the knowledge base", "tip: did you mean"),
    (["args", "--sglang", "0.5.l8", "--", "--tp", "2"], "not a PEP 440",
     "tip: did you mean --sglang 0.5.18"),
])
def test_a_mistyped_input_exits_2_with_what_was_meant(
        argv: list[str], message: str, tip: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--kb", SHIPPED, *argv)
    assert code == 2, err
    assert message in err and tip in err, err
    assert out == "" and "Traceback" not in err


@pytest.mark.parametrize("python", ["3.12", "cp312", "312", "py312"])
def test_every_spelling_of_a_real_python_answers(python: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kb", SHIPPED, "which", "mooncake", "--sglang", "0.5.18", "--python", python,
                 "--arch", "amd64", "--json"]) == 0
    q = json.loads(capsys.readouterr().out)["query"]
    assert (q["python"], q["arch"]) == ("cp312", "x86_64")


def test_kb_info_counts_a_locally_recorded_release_once(
        kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.scrapers.test_local import make_tree

    tree = make_tree(tmp_path / "src")
    assert main(["--kb", str(kb_file), "scrape", "--from-path", str(tree),
                 "--version", "0.5.17"]) == 0  # a version the index also has
    capsys.readouterr()
    code, out, _ = run(capsys, "--kb", str(kb_file), "kb", "info", "--json")
    info = json.loads(out)
    assert code == 0 and info["kb_source"] == "--kb"
    assert info["sglang_releases"] == 2 and info["sglang_range"] == ["0.5.4", "0.5.17"]
    assert info["sglang_by_module"] == {"mooncake.ep": 1, "mooncake.pg": 1}
    assert info["sglang_recorded_locally"] == ["0.5.17"]
    assert main(["--kb", str(kb_file), "scrape", "--from-path", str(tree),
                 "--version", "0.5.3"]) == 0  # older than any: the range's bottom moves
    capsys.readouterr()
    code, out, _ = run(capsys, "--kb", str(kb_file), "kb", "info")
    assert "sglang   3 releases (0.5.3 .. 0.5.17)" in out
    assert "recorded from local sources: 0.5.3, 0.5.17" in out


def test_triples_reads_a_bare_release_as_users_type_it(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--kb", SHIPPED, "triples", "--python", "3.12", "--arch", "x86_64", "--format",
            "json"]
    main([*base, "--sglang", "0.5.18"])
    want = json.loads(capsys.readouterr().out)
    main([*base, "--sglang", "v0.5.18"])
    assert json.loads(capsys.readouterr().out) == want and want
    main([*base, "--sglang", "latest"])
    assert {r["sglang"] for r in json.loads(capsys.readouterr().out)} <= {_newest_sglang()}


def test_quiet_prints_nothing_and_keeps_the_exit_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = str(ROOT / "data" / "kb.json")
    cuda13 = "mooncake-transfer-engine-cuda13==0.3.13.post1"
    for argv, code in ((["which", "mooncake", "--sglang", "0.5.18"], 0),
                       (["which", "mooncake", "--sglang", "0.5.18", "--torch", "2.99"], 1),
                       (["explain", "sglang==0.5.18", cuda13], 0),
                       (["explain", "sglang==0.5.17", "mooncake-transfer-engine==0.3.8"], 1)):
        assert main(["--kb", kb, *argv, "-q"]) == code, argv
        out, err = capsys.readouterr()
        assert (out, err) == ("", ""), argv
        assert main(["--kb", kb, *argv]) == code  # the same answer, printed
        assert capsys.readouterr().out
    req = tmp_path / "requirements.txt"
    req.write_text(f"sglang==0.5.18\ntorch==2.13.0\n{cuda13}\n")
    assert main(["--kb", kb, "pins", str(req), "-q"]) == 0
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit) as e:  # bad input still says why, on stderr
        main(["--kb", kb, "which", "mooncake", "--sglang", "0.5.l8", "-q"])
    assert e.value.code == 2 and "did you mean" in capsys.readouterr().err
