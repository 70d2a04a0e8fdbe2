"""Issue 38 (5): a requirement's environment marker is read as pip reads it
(``Marker.evaluate`` per judged architecture and Python): false there means the requirement
is absent there, not unpinned, and a platform where the stack is absent is no failure. And
after ``pins --write`` a plain run exits 0 whenever the write could make it so: held for
every fixture below (the issue's, the golden project, a CPU find-links folder, includes,
a pyproject and a Dockerfile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.resolver.pins.reading.base import Pin
from moonpin.resolver.pins.reading.platforms import marker_applies

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


def _moonpin(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize(("marker", "arch", "python", "holds"), [
    ('platform_machine == "x86_64"', "aarch64", None, False),
    ('platform_machine == "x86_64"', "x86_64", None, True),
    ('python_version >= "3.11"', "x86_64", "3.10", False),
    ('python_version >= "3.11"', "x86_64", "cp310", False),
    ('python_version >= "3.11"', "x86_64", "3.11", True),
    ('python_version >= "3.11"', "x86_64", "cp313t", True),
    ('python_full_version < "3.12"', "aarch64", "3.12", False),
    ('sys_platform == "win32"', "x86_64", "3.12", False),
])
def test_a_marker_is_evaluated_for_the_judged_platform(marker: str, arch: str,
                                                       python: str | None, holds: bool) -> None:
    pin = Pin("sglang", "==0.5.18", "0.5.18", "r.txt", 1, 8, "sglang==0.5.18", "requirements",
              marker=marker)
    assert marker_applies(pin, arch, python) is holds


ISSUE = ('sglang[srt]==0.5.18 ; platform_machine == "x86_64"\ntorch==2.9.1\n'
         "mooncake-transfer-engine==0.3.10\n")


def test_an_arch_the_marker_leaves_out_is_no_failure(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(ISSUE)
    r = _moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert "not pinned to a version moonpin can judge" not in r.stdout, r.stdout
    assert "on aarch64 no sglang requirement applies" in r.stdout
    w = _moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0 and "after writing: verdict compatible" in w.stderr, w.stderr
    again = _moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert again.returncode == 0, again.stdout


def test_a_python_the_marker_leaves_out_is_no_failure(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        'sglang==0.5.23 ; python_version >= "3.11"\ntorch==2.14.1\n'
        "mooncake-transfer-engine-cuda13==0.3.14\n")
    for python in ("3.10", "3.12"):
        r = _moonpin("pins", "requirements.txt", "--python", python, cwd=tmp_path)
        assert r.returncode == 0, (python, r.stdout)


def _links(root: Path) -> str:
    sys.path.insert(0, str(ROOT))
    from tests.lib.wheels import build_wheel

    folder = root / "wheels"
    folder.mkdir(exist_ok=True)
    name, data = build_wheel("torch", "2.13.0+cpu", {"torch/__init__.py": ""})
    (folder / name).write_bytes(data)
    return "--find-links wheels\n"


#: (id, files: name -> text; a callable text gets the project folder)
FIXTURES = [
    ("golden", {"requirements.txt": (ROOT / "tests/golden/requirements.txt").read_text()}),
    ("issue-marker", {"requirements.txt": ISSUE}),
    ("aarch64-marker", {"requirements.txt": ISSUE.replace('"x86_64"', '"aarch64"')}),
    ("mooncake-marker", {"requirements.txt": "sglang==0.5.18\ntorch==2.9.1\n"
                         'mooncake-transfer-engine==0.3.10 ; platform_machine == "x86_64"\n'}),
    ("cpu-find-links", {"requirements.txt": lambda root: _links(root) + "sglang==0.5.18\n"
                        "torch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.13.post1\n"}),
    ("cpu-and-move", {"requirements.txt": lambda root: _links(root) + ISSUE}),
    ("include", {"requirements.txt": "sglang==0.5.18\n-r gpu.txt\n",
                 "gpu.txt": "torch==2.11.0,!=2.11.0+cpu\nmooncake-transfer-engine==0.3.10\n"}),
    ("pyproject", {"pyproject.toml": '[project]\nname = "x"\nversion = "0"\n'
                   'requires-python = ">=3.11"\ndependencies = ["sglang==0.5.18", '
                   '"torch==2.9.1", "mooncake-transfer-engine-cuda13==0.3.12"]\n'
                   '[[tool.uv.index]]\nname = "cpu"\nurl = "https://x.example/cpu"\n'}),
    ("dockerfile", {"Dockerfile": "FROM python:3.12\nARG SGLANG_VERSION=0.5.18\n"
                    "RUN pip install sglang==${SGLANG_VERSION} torch==2.9.1 "
                    "mooncake-transfer-engine==0.3.10\n"}),
]


@pytest.mark.parametrize(("case", "files"), FIXTURES, ids=[c for c, _ in FIXTURES])
def test_after_write_a_plain_run_exits_0(tmp_path: Path, case: str, files: dict) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text(tmp_path) if callable(text) else text)
    names = list(files)
    before = _moonpin("pins", *names, cwd=tmp_path)
    assert before.returncode == 1, (case, before.stdout)  # each fixture has something to fix
    w = _moonpin("pins", *names, "--write", "--json", cwd=tmp_path)
    doc = json.loads(w.stdout)
    assert doc["written"] and not doc["not_written"], (case, doc)
    after = _moonpin("pins", *names, cwd=tmp_path)
    assert after.returncode == 0, (case, after.stdout, w.stderr)
    assert doc["after"]["verdict"] == "compatible" and w.returncode == 0
