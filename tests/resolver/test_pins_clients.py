"""Opt-in (marker ``uv``): what ``moonpin pins --write`` leaves in a multi-file project
(requirements.txt with ``-r requirements-gpu.txt``, pyproject.toml, a Dockerfile) is
resolved by the real uv (``uv pip compile --no-deps``, for each architecture) to the set
``moonpin explain`` calls compatible (issue 27). uv reads the package index it is
configured for; pip's ``pip install --dry-run --report`` was checked the same way by hand
(the report of issue 27's slice)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"

pytestmark = pytest.mark.uv


def _moonpin(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _project(root: Path) -> list[str]:
    (root / "requirements.txt").write_text(
        "sglang==0.5.18\n-r requirements-gpu.txt\n"
        "mooncake-transfer-engine==0.3.10  # the CUDA-12 build\n")
    (root / "requirements-gpu.txt").write_text("torch==2.13\n")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1"\nrequires-python = ">=3.11"\n'
        'dependencies = ["sglang==0.5.18", "mooncake-transfer-engine==0.3.10"]\n')
    (root / "Dockerfile").write_text(
        "FROM lmsysorg/sglang:v0.5.18-cu130\nARG MOONCAKE_VERSION=0.3.10\n"
        "RUN pip install mooncake-transfer-engine==${MOONCAKE_VERSION}\n")
    return ["requirements.txt", "requirements-gpu.txt", "pyproject.toml", "Dockerfile"]


def test_uv_resolves_what_pins_write_leaves_to_a_compatible_set(tmp_path: Path) -> None:
    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    files = _project(tmp_path)
    w = _moonpin("pins", *files, "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    for arch in ("x86_64", "aarch64"):
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-deps", "--no-header",
                            "--no-annotate", "--python-version", "3.11", "--python-platform",
                            f"{arch}-manylinux_2_34", "requirements.txt", "pyproject.toml"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = sorted(x for x in r.stdout.splitlines() if x and not x.startswith("#"))
        assert got == ["mooncake-transfer-engine-cuda13==0.3.13.post1", "sglang==0.5.18",
                       "torch==2.13.0"], got
        sglang = next(x for x in got if x.startswith("sglang=="))
        others = [x for x in got if x != sglang]
        e = _moonpin("explain", sglang, *others, "--python", "3.11", "--arch", arch,
                     cwd=tmp_path)
        assert e.returncode == 0 and ": COMPATIBLE" in e.stdout.splitlines()[0], e.stdout


def _included_project(root: Path) -> list[str]:
    """requirements.txt including requirements/base.txt (-r) and constraints.txt (-c),
    pyproject.toml with a PEP 735 dev group, a Dockerfile ARG: mooncake broken in each."""
    (root / "requirements").mkdir()
    (root / "requirements.txt").write_text(
        "-r requirements/base.txt\n-c constraints.txt\nsglang[all]==0.5.18\n")
    (root / "requirements" / "base.txt").write_text(
        "torch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.12\n")
    (root / "constraints.txt").write_text("mooncake-transfer-engine-cuda13==0.3.12\n")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["sglang==0.5.18"]\n'
        '[dependency-groups]\ndev = ["mooncake-transfer-engine-cuda13==0.3.12"]\n')
    (root / "Dockerfile").write_text(
        "FROM python:3.12\nARG MOONCAKE_VERSION=0.3.12\nRUN pip install -r requirements.txt "
        "mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}\n")
    return ["requirements.txt", "pyproject.toml", "Dockerfile"]


def test_pip_resolves_what_pins_write_leaves_in_included_files(tmp_path: Path) -> None:
    """Real pip (`pip install --dry-run --report`, the index pip is configured for) on
    requirements.txt (its -r and -c files) and the pyproject's dev group after --write."""
    import json

    pip = [os.environ["MOONPIN_PIP"]] if os.environ.get("MOONPIN_PIP") else [
        sys.executable, "-m", "pip"]
    version = subprocess.run([*pip, "--version"], capture_output=True, text=True).stdout
    if tuple(int(x) for x in version.split()[1].split(".")[:2]) < (25, 1):
        pytest.skip("pip --group needs pip 25.1: set MOONPIN_PIP to a newer pip")
    files = _included_project(tmp_path)
    w = _moonpin("pins", *files, "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    for arch in ("x86_64", "aarch64"):
        report = tmp_path / f"report-{arch}.json"
        r = subprocess.run([*pip, "install", "--dry-run", "-q",
                            "--ignore-installed", "--no-deps", "--only-binary", ":all:",
                            "--python-version", "3.12", "--platform", f"manylinux_2_34_{arch}",
                            "--platform", f"manylinux_2_28_{arch}", "--report", str(report),
                            "--group", "dev", "-r", "requirements.txt"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        got = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}"
                     for i in json.loads(report.read_text())["install"])
        assert got == ["mooncake-transfer-engine-cuda13==0.3.13.post1", "sglang==0.5.18",
                       "torch==2.13.0"], got
        e = _moonpin("explain", *got[1:2], got[0], got[2], "--python", "3.12", "--arch", arch,
                     cwd=tmp_path)
        assert e.returncode == 0 and ": COMPATIBLE" in e.stdout.splitlines()[0], e.stdout
