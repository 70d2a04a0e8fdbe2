"""Issue 27, the smaller findings of ``moonpin pins``, each from the user's command:
``${VAR}`` in a requirements file, a git tag as the release, ``--python 3.12.1`` and
``cp313t``, exit 0 after a ``--write`` that settles the set, ``--diff`` as a patch alone,
``requires-python`` as the project's Python, a marker that applies to its own line only,
and two mooncake distributions side by side."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
         ) -> subprocess.CompletedProcess[str]:
    """A clean environment: only ``PATH`` and what the test sets."""
    return run_moonpin(*args, cwd=cwd,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})})

def test_env_variables_in_requirements_are_expanded_as_pip_does(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==${SG_VER}\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    unset = _cli("pins", str(req), "--json")
    assert unset.returncode == 1, unset.stderr  # judged, not exit 2 for the whole file
    doc = json.loads(unset.stdout)
    (sg,) = [p for p in doc["pins"] if p["name"] == "sglang"]
    assert sg["version"] is None and "${SG_VER}" in sg["note"] and "not set" in sg["note"]
    assert doc["verdict"] == "unknown"
    assert "not pinned to a version moonpin can judge" in doc["reasons"][0]
    assert "${SG_VER}" in doc["reasons"][0]
    good = _cli("pins", str(req), "--json", env={"SG_VER": "0.5.18"})
    assert good.returncode == 0, good.stdout + good.stderr
    doc = json.loads(good.stdout)
    assert doc["verdict"] == "compatible"
    assert [p["version"] for p in doc["pins"]] == ["0.5.18", "0.3.13.post1"]


def test_a_git_tag_is_the_release_it_names(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("git+https://github.com/sgl-project/sglang@v0.5.18#egg=sglang\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    r = _cli("pins", str(req), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["pins"][0]["version"] == "0.5.18"
    req.write_text("sglang @ git+https://github.com/sgl-project/sglang@v0.5.17#subdirectory="
                   "python\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    r = _cli("pins", str(req), "--strategy", "latest", "--write")
    assert "wrote" in r.stderr, r.stdout + r.stderr
    assert req.read_text().startswith("sglang @ git+https://github.com/sgl-project/sglang@v0.5.21"
                                      "#subdirectory=python\n")
    # a branch or a commit is no release: not judged
    req.write_text("sglang @ git+https://github.com/sgl-project/sglang@main\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    doc = json.loads(_cli("pins", str(req), "--json").stdout)
    assert doc["pins"][0]["version"] is None and doc["updates"] == []


def test_python_with_a_micro_and_a_free_threaded_abi() -> None:
    r = _cli("which", "mooncake", "--sglang", "0.5.18", "--python", "3.12.1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["query"]["python"] == "cp312"
    t = _cli("explain", "sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1",
             "--python", "cp313t")
    assert t.returncode == 1, t.stdout + t.stderr
    assert "has no wheel for cp313t" in t.stdout


def test_write_that_settles_the_set_exits_0_and_diff_is_a_patch_alone(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.12\n")
    d = _cli("pins", str(req), "--diff")
    assert d.returncode == 1
    assert d.stdout.startswith("--- ") and "verdict" not in d.stdout
    assert "verdict: incompatible" in d.stderr
    patched = subprocess.run(["patch", "--dry-run", str(req)], input=d.stdout, text=True,
                             capture_output=True, timeout=30)
    assert patched.returncode == 0, patched.stdout + patched.stderr
    w = _cli("pins", str(req), "--write")
    assert w.returncode == 0, w.stdout + w.stderr
    assert "after writing: verdict compatible" in w.stderr


def test_requires_python_is_the_projects_python(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1"\nrequires-python = ">=3.12"\n'
        'dependencies = ["sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1"]\n')
    doc = json.loads(_cli("pins", "pyproject.toml", "--json", cwd=tmp_path).stdout)
    assert doc["platform"].startswith("judged for python 3.12 (the lowest requires-python")
    given = json.loads(_cli("pins", "pyproject.toml", "--json", "--python", "3.13",
                            cwd=tmp_path).stdout)
    assert "python 3.13 (from --python)" in given["platform"]


def test_a_marker_applies_to_its_own_line_only(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text('sglang==0.5.18\n'
                   'mooncake-transfer-engine-cuda13==0.3.13.post1 ; platform_machine == "aarch64"\n'
                   'mooncake-transfer-engine-cuda13==0.3.12.post1 ; platform_machine == "x86_64"\n')
    doc = json.loads(_cli("pins", str(req), "--json").stdout)
    # two pins for two platforms: no conflict, each judged where pip installs it
    assert (doc["verdict"], doc["conflicts"], doc["updates"]) == ("compatible", [], [])
    assert "x86_64 and aarch64 apart" in doc["platform"]
    req.write_text('sglang==0.5.18\ntorch==2.13.0 ; platform_machine == "x86_64"\n'
                   "mooncake-transfer-engine-cuda13==0.3.12\n")
    doc = json.loads(_cli("pins", str(req), "--json").stdout)
    assert doc["verdict"] == "incompatible"
    assert any(r.startswith("on aarch64: ") for r in doc["reasons"]), doc["reasons"]
    assert [u["line"] for u in doc["updates"]] == [3]


def test_two_mooncake_distributions_side_by_side_are_flagged(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.13.post1\n"
                   "mooncake-transfer-engine\n")
    r = _cli("pins", str(req), "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "incompatible"
    assert "two mooncake distributions" in doc["reasons"][0]
    assert [(u["line"], u["newName"]) for u in doc["updates"]] == [
        (3, "mooncake-transfer-engine-cuda13")]
