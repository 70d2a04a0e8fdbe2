"""Opt-in (marker ``renovate``): the real Renovate CLI, in local lookup mode, on throwaway git
repos configured with ``moonpin renovate``; every branch it proposes, applied to a copy of the
file, is a set ``moonpin pins`` judges compatible, and Renovate reports no config error.

The CLI: ``$MOONPIN_RENOVATE_CLI`` (the ``renovate`` executable), else
``$MOONPIN_RENOVATE_CACHE`` (default ``~/.cache/moonpin/renovate-cli``) holding
``npm install --prefix CACHE renovate@39`` (39.x is the newest that runs on node 20; the
install takes ~10 minutes and is done here when the folder has none). Renovate reads the
package index, so this needs the network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"

pytestmark = pytest.mark.renovate

#: (case id, requirements.txt, the `moonpin renovate` arguments; empty: the file itself)
CASES: list[tuple[str, str, list[str]]] = [
    ("0.5.18-cuda13-0.3.12", "sglang==0.5.18\ntorch==2.13.0\n"
     "mooncake-transfer-engine-cuda13==0.3.12\n", []),
    ("0.5.18-sglang-only", "sglang==0.5.18\ntorch==2.13.0\n"
     "mooncake-transfer-engine-cuda13==0.3.12\n", ["--sglang", "0.5.18"]),
    ("0.5.16-compatible", "sglang==0.5.16\ntorch==2.11.0\n"
     "mooncake-transfer-engine-cuda13==0.3.11\n", []),
    ("0.5.18-cuda12-dist", "sglang==0.5.18\ntorch==2.13.0\n"
     "mooncake-transfer-engine==0.3.10\n", []),
    ("0.5.4-two-torches", "sglang==0.5.4\ntorch==2.8.0\nmooncake-transfer-engine==0.3.8\n", []),
    ("0.5.4-sglang-only", "sglang==0.5.4\ntorch==2.8.0\nmooncake-transfer-engine==0.3.8\n",
     ["--sglang", "0.5.4"]),
    ("0.5.21-compatible", "sglang==0.5.21\ntorch==2.13.0\n"
     "mooncake-transfer-engine-cuda13==0.3.13.post1\n", []),
    ("0.5.22-jit-only", "sglang==0.5.22\ntorch==2.14.1\n"
     "mooncake-transfer-engine-cuda13==0.3.14\n", []),
    # issue 39: the native extensions the file pins move in the same group
    ("0.5.23-natives", "sglang==0.5.23\ntorch==2.14.1\n"
     "mooncake-transfer-engine-cuda13==0.3.14\nnixl==1.4.1\nsglang-kernel==0.4.10\n"
     "sgl-deep-ep==0.1.2.post1\nflashinfer-python==0.7.2\n", []),
]


def _renovate() -> str:
    exe = os.environ.get("MOONPIN_RENOVATE_CLI")
    if exe:
        return exe
    cache = Path(os.environ.get("MOONPIN_RENOVATE_CACHE")
                 or Path.home() / ".cache" / "moonpin" / "renovate-cli")
    exe_path = cache / "node_modules" / ".bin" / "renovate"
    if not exe_path.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm not found: install node 20+ or set MOONPIN_RENOVATE_CLI")
        subprocess.run([npm, "install", "--prefix", str(cache), "renovate@39"], check=True,
                       timeout=1800, capture_output=True)
    return str(exe_path)


def _log_records(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _proposals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every proposed update of the "packageFiles with updates" record, one dict each."""
    (rec,) = [r for r in records if r.get("msg") == "packageFiles with updates"]
    out = []
    for files in rec["config"].values():
        for pf in files:
            for dep in pf["deps"]:
                for u in dep.get("updates", []):
                    out.append({"file": pf["packageFile"], "depName": dep["depName"],
                                "currentValue": dep.get("currentValue"),
                                "branchName": u.get("branchName"),
                                "updateType": u.get("updateType"),
                                "newName": u.get("newName"), "newValue": u.get("newValue")})
    return out


def _apply(text: str, updates: list[dict[str, Any]]) -> str:
    """One branch's updates applied as Renovate's pip_requirements manager writes them."""
    lines = text.splitlines()
    for u in updates:
        for i, line in enumerate(lines):
            name = line.split("==")[0].strip()
            if name != u["depName"]:
                continue
            if u["updateType"] == "replacement":
                value = u["newValue"] if u["newValue"].startswith("=") else f"=={u['newValue']}"
                lines[i] = f"{u['newName']}{value}"
            else:
                lines[i] = line.replace(u["currentValue"], u["newValue"], 1)
    return "\n".join(lines) + "\n"


def run_case(tmp_path: Path, pins: str, args: list[str]) -> dict[str, Any]:
    """Renovate on one throwaway repo; the proposals per branch and moonpin's verdicts."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "requirements.txt").write_text(pins, encoding="utf-8")
    frag = run_moonpin("renovate", *(args or [str(repo / "requirements.txt")]))
    assert frag.returncode == 0, frag.stderr
    (repo / "renovate.json").write_text(frag.stdout, encoding="utf-8")
    records, problems = _lookup(tmp_path, repo)
    branches: dict[str, list[dict[str, Any]]] = {}
    for u in _proposals(records):
        branches.setdefault(u["branchName"], []).append(u)
    verdicts = {}
    for branch, ups in branches.items():
        after = tmp_path / f"{branch.replace('/', '_')}.txt"
        after.write_text(_apply(pins, ups), encoding="utf-8")
        v = run_moonpin("pins", str(after), "--json")
        doc = json.loads(v.stdout) if v.stdout.strip() else {"verdict": v.stderr}
        verdicts[branch] = {"updates": ups, "result": after.read_text(encoding="utf-8"),
                            "verdict": doc["verdict"], "exit": v.returncode}
    return {"branches": verdicts, "warnings": problems}


def _lookup(tmp_path: Path, repo: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Renovate in local lookup mode on ``repo``: its log records and its warnings; fails on
    a config error."""
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "pins"], cwd=repo, check=True)
    env = {**os.environ, "LOG_LEVEL": "debug", "LOG_FORMAT": "json",
           "RENOVATE_BASE_DIR": str(tmp_path / "renovate-base")}
    r = subprocess.run([_renovate(), "--platform=local", "--dry-run=lookup",
                        "--onboarding=false"], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=900)
    records = _log_records(r.stdout + r.stderr)
    problems = [rec.get("msg", "") for rec in records if rec.get("level", 0) >= 40]
    assert r.returncode == 0, problems or r.stderr[-2000:]
    assert not [p for p in problems if "config" in p.lower()], problems
    # an allowedVersions Renovate cannot parse is logged at level 30 as a configError, and
    # the repository is then skipped ("Repository has invalid config")
    config_errors = [rec for rec in records if "configError" in rec
                     or (rec.get("error") or {}).get("message") == "config-validation"]
    assert not config_errors, "Renovate config-validation: " + "; ".join(
        str((rec.get("configError") or rec.get("error") or {}).get("validationMessage"))
        for rec in config_errors)
    return records, problems


def test_an_unparsable_allowed_versions_is_caught(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the fragment's old ``==2.8.0 || ==2.9.0`` makes this test fail."""
    from moonpin.resolver.pins.writing import renovate as pins_renovate

    monkeypatch.setattr(pins_renovate, "allowed_versions",
                        lambda vs: " || ".join(f"=={v}" for v in vs))
    frag = pins_renovate.renovate_fragment(pins_renovate.StackPlan(
        sglang="0.5.4", torches=["2.8.0", "2.9.0"],
        mooncake={"mooncake-transfer-engine": ["0.3.8.post1", "0.3.8"]},
        sglang_allowed=["0.5.4.post1", "0.5.4"]))
    assert "||" in json.dumps(frag)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "requirements.txt").write_text("sglang==0.5.4\ntorch==2.8.0\n", encoding="utf-8")
    (repo / "renovate.json").write_text(json.dumps(frag), encoding="utf-8")
    with pytest.raises(AssertionError, match=r"config-validation: .*does not parse"):
        _lookup(tmp_path, repo)


@pytest.mark.parametrize(("case", "pins", "args"), CASES, ids=[c[0] for c in CASES])
def test_every_branch_renovate_proposes_is_compatible(tmp_path: Path, case: str, pins: str,
                                                      args: list[str]) -> None:
    out = run_case(tmp_path, pins, args)
    report = Path(os.environ.get("MOONPIN_RENOVATE_REPORT", tmp_path / "report.json"))
    if report.parent.is_dir():
        old = json.loads(report.read_text()) if report.exists() else {}
        old[case] = {"pins": pins, **out}
        report.write_text(json.dumps(old, indent=1), encoding="utf-8")
    for branch, b in out["branches"].items():
        assert b["verdict"] == "compatible" and b["exit"] == 0, (branch, b)
    assert all(b.startswith("renovate/sglang-stack") for b in out["branches"]), out


def _apply_anywhere(text: str, updates: list[dict[str, Any]]) -> str:
    """A branch's updates of one file applied as Renovate's pip_requirements and pep621
    managers write them: ``name<currentValue>`` becomes ``newName<newValue>``."""
    for u in updates:
        new = u["newValue"] if u["newValue"].startswith("=") else f"=={u['newValue']}"
        text = text.replace(f"{u['depName']}{u['currentValue']}",
                            f"{u['newName'] or u['depName']}{new}")
    return text


def test_a_multi_file_repo_keeps_only_compatible_proposals(tmp_path: Path) -> None:
    """Issue 27: requirements.txt (with ``-r requirements-gpu.txt``) and pyproject.toml
    pinning one stack; every branch Renovate proposes, applied to every file it touches,
    is a set ``moonpin pins`` judges compatible over all the files together."""
    repo = tmp_path / "repo"
    repo.mkdir()
    files = {
        "requirements.txt": "sglang==0.5.18\n-r requirements-gpu.txt\n"
                            "mooncake-transfer-engine-cuda13==0.3.12\n",
        "requirements-gpu.txt": "torch==2.13.0\n",
        "pyproject.toml": '[project]\nname = "demo"\nversion = "0.1"\ndependencies = '
                          '["sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.12"]\n',
    }
    for name, text in files.items():
        (repo / name).write_text(text, encoding="utf-8")
    frag = run_moonpin("renovate", *(str(repo / n) for n in files))
    assert frag.returncode == 0, frag.stderr
    (repo / "renovate.json").write_text(frag.stdout, encoding="utf-8")
    records, _ = _lookup(tmp_path, repo)
    branches: dict[str, list[dict[str, Any]]] = {}
    for u in _proposals(records):
        branches.setdefault(u["branchName"], []).append(u)
    assert branches, "Renovate proposed nothing (0.3.12 does not fit sglang 0.5.18)"
    for branch, ups in branches.items():
        after = tmp_path / branch.replace("/", "_")
        after.mkdir()
        for name, text in files.items():
            mine = [u for u in ups if u["file"] == name]
            (after / name).write_text(_apply_anywhere(text, mine), encoding="utf-8")
        v = run_moonpin("pins", *files, "--json", cwd=after)
        doc = json.loads(v.stdout)
        assert (doc["verdict"], v.returncode) == ("compatible", 0), (branch, ups, doc)
        assert "mooncake-transfer-engine-cuda13==0.3.12" not in (
            (after / "pyproject.toml").read_text() + (after / "requirements.txt").read_text())
