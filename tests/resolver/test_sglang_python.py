"""Issue 38 (2): SGLang's own ``Requires-Python`` (in the KB: 0.5.22 and 0.5.23 say
``>=3.11``, as their index metadata does) is part of the one rule: ``explain`` shows a
python check, ``which``/``triples``/``matrix`` list no release on a Python it excludes,
``pins`` judges the project's Python against it. Opt-in (marker ``uv``): the real uv refuses
the same project on Python 3.10 and resolves it on 3.11."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from moonpin.resolver import rule
from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"
JIT = "mooncake-transfer-engine-cuda13==0.3.14"


@pytest.mark.parametrize(("requires", "python", "ok"), [
    (">=3.11", "cp310", False), (">=3.11", "cp311", True), (">=3.11", "3.12", True),
    (None, "cp310", True), ("", "cp39", True), (">=3.10,<3.13", "cp313", False),
    (">=3.10.5", "cp310", None), ("not a spec", "cp312", None), (">=3.11", "cp313t", True),
    ("!=3.12.*", "cp312", False),
])
def test_the_rule(requires: str | None, python: str, ok: bool | None) -> None:
    d = rule.python_requires(requires, python, "sglang 9")
    assert d.ok is ok, d.detail
    if ok is False:
        assert "sglang 9 requires python" in d.detail


def test_explain_shows_the_python_check() -> None:
    r = run_moonpin("explain", "sglang==0.5.23", JIT, "--python", "3.10", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "incompatible"
    checks = [c for e in doc.get("evaluations", [doc]) for c in e.get("checks", [])]
    py = [c for c in checks if c["name"] == "python"]
    assert py and all(c["ok"] is False for c in py), checks
    ok = run_moonpin("explain", "sglang==0.5.23", JIT, "--python", "3.11", "--arch", "x86_64")
    assert "[ok  ] python: python 3.11 satisfies sglang 0.5.23's requires-python" in ok.stdout


def test_which_and_triples_never_list_an_excluded_python() -> None:
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.23", "--python", "3.10")
    assert r.returncode == 1 and "requires python '>=3.11'" in r.stdout, r.stdout
    s = run_moonpin("which", "sglang", "--mooncake", JIT, "--python", "3.10", "--json")
    listed = [c["version"] for c in json.loads(s.stdout)["compatible"]]
    assert listed and not {"0.5.22", "0.5.23"} & set(listed), listed
    t = json.loads(run_moonpin("triples", "--sglang", ">=0.5.22", "--json").stdout)
    rows = t["triples"] if isinstance(t, dict) else t
    assert rows and all(r["python"] not in ("cp38", "cp39", "cp310") for r in rows)
    m = run_moonpin("matrix", "--format", "csv", "--sglang", ">=0.5.22", "--python", "3.10")
    cells = list(csv.DictReader(io.StringIO(m.stdout)))
    assert cells and all(c["state"] != "compatible" for c in cells)


def _project(root: Path, requires: str) -> None:
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "demo"\nversion = "0.1"\nrequires-python = "{requires}"\n'
        'dependencies = ["sglang==0.5.23", "torch==2.14.1", '
        f'"{JIT}"]\n')


def test_pins_judges_the_projects_python(tmp_path: Path) -> None:
    _project(tmp_path, ">=3.10")
    r = run_moonpin("pins", "pyproject.toml", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "sglang 0.5.23 requires python '>=3.11'; python 3.10 is not admitted" in r.stdout
    _project(tmp_path, ">=3.11")
    assert run_moonpin("pins", "pyproject.toml", cwd=tmp_path).returncode == 0


@pytest.mark.uv
def test_uv_agrees(tmp_path: Path) -> None:
    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    for requires, want in ((">=3.10", 1), (">=3.11", 0)):
        _project(tmp_path, requires)
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-deps", "--no-header",
                            "--python-platform", "x86_64-manylinux_2_34", "pyproject.toml",
                            "--python-version", requires.removeprefix(">=")],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert (r.returncode != 0) == bool(want), r.stdout + r.stderr
        assert run_moonpin("pins", "pyproject.toml", cwd=tmp_path).returncode == want


def _file(name: str, yanked: bool = False) -> object:
    from moonpin.scrapers.pypi import IndexFile

    return IndexFile(filename=name, url="u", size=1, sha256="0" * 64, yanked=yanked,
                     requires_python=None, has_metadata=False)


@pytest.mark.parametrize(("names", "want"), [
    (["sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
      "sglang-0.5.23-cp313-cp313-manylinux_2_34_aarch64.whl"], ("cp311", "cp313")),
    (["sglang-0.5.10-py3-none-any.whl"], None),
    (["sglang-0.5.10-cp312-cp312-manylinux_2_34_x86_64.whl", "sglang-0.5.10.tar.gz"], None),
    (["x-1-cp39-abi3-manylinux_2_34_x86_64.whl"], None),
    ([], None),
])
def test_the_interpreters_a_release_installs_on(names: list[str],
                                                 want: tuple[str, ...] | None) -> None:
    from moonpin.scrapers.pypi import wheel_pythons

    assert wheel_pythons([_file(n) for n in names]) == want  # type: ignore[misc]


def test_the_rule_reads_the_wheels_interpreters() -> None:
    tags = ("cp311", "cp312", "cp313")
    d = rule.python_requires(">=3.11", "cp314", "sglang 9", tags)
    assert d.ok is False and "cp311, cp312, cp313 only" in d.detail
    assert rule.python_requires(">=3.11", "3.12", "sglang 9", tags).ok is True
    assert rule.python_requires(">=3.11", "cp313t", "sglang 9", tags).ok is True
    assert rule.python_requires(">=3.11", "cp314", "sglang 9", None).ok is True


def test_no_release_is_listed_on_a_python_it_has_no_wheel_for() -> None:
    t = json.loads(run_moonpin("triples", "--sglang", ">=0.5.11", "--json").stdout)
    rows = t["triples"] if isinstance(t, dict) else t
    assert rows and all(r["python"] != "cp314" for r in rows), {r["python"] for r in rows}
    e = run_moonpin("explain", "sglang==0.5.23", JIT, "--python", "3.14", "--arch", "x86_64")
    assert e.returncode == 1 and "publishes wheels for cp311, cp312, cp313 only" in e.stdout
