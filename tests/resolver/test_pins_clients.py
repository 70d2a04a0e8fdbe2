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

from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"

pytestmark = pytest.mark.uv


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
    w = run_moonpin("pins", *files, "--write", cwd=tmp_path)
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
        e = run_moonpin("explain", sglang, *others, "--python", "3.11", "--arch", arch,
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
    w = run_moonpin("pins", *files, "--write", cwd=tmp_path)
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
        e = run_moonpin("explain", *got[1:2], got[0], got[2], "--python", "3.12", "--arch", arch,
                        cwd=tmp_path)
        assert e.returncode == 0 and ": COMPATIBLE" in e.stdout.splitlines()[0], e.stdout


def _pip() -> list[str]:
    pip = [os.environ["MOONPIN_PIP"]] if os.environ.get("MOONPIN_PIP") else [
        sys.executable, "-m", "pip"]
    version = subprocess.run([*pip, "--version"], capture_output=True, text=True).stdout
    if tuple(int(x) for x in version.split()[1].split(".")[:2]) < (25, 1):
        pytest.skip("pip --group needs pip 25.1: set MOONPIN_PIP to a newer pip")
    return pip


def _uv() -> str:
    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    return uv


def _pip_set(pip: list[str], root: Path, arch: str, *args: str) -> list[str]:
    """What `pip install --dry-run --report` (no dependencies) installs from ``args``."""
    import json

    report = root / f"report-{arch}.json"
    r = subprocess.run([*pip, "install", "--dry-run", "-q", "--ignore-installed", "--no-deps",
                        "--only-binary", ":all:", "--python-version", "3.12", "--platform",
                        f"manylinux_2_34_{arch}", "--platform", f"manylinux_2_28_{arch}",
                        "--report", str(report), *args],
                       capture_output=True, text=True, timeout=600, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    return sorted(f"{i['metadata']['name']}=={i['metadata']['version']}"
                  for i in json.loads(report.read_text())["install"])


def _uv_set(uv: str, root: Path, arch: str, *args: str) -> list[str]:
    """What `uv pip compile --no-deps` resolves ``args`` to."""
    r = subprocess.run([uv, "pip", "compile", "-q", "--no-deps", "--no-header", "--no-annotate",
                        "--python-version", "3.12", "--python-platform",
                        f"{arch}-manylinux_2_34", *args],
                       capture_output=True, text=True, timeout=600, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    return sorted(x for x in r.stdout.splitlines() if x and not x.startswith("#"))


def _compatible(got: list[str], arch: str, root: Path) -> None:
    sglang = next(x for x in got if x.startswith("sglang=="))
    e = run_moonpin("explain", sglang, *[x for x in got if x != sglang], "--python", "3.12",
                    "--arch", arch, cwd=root)
    assert e.returncode == 0 and ": COMPATIBLE" in e.stdout.splitlines()[0], e.stdout


_STACK = ["mooncake-transfer-engine-cuda13==0.3.13.post1", "sglang==0.5.18", "torch==2.13.0"]


def test_clients_resolve_what_write_leaves_with_per_platform_spellings(tmp_path: Path) -> None:
    """torch==2.12.0 in an included base file, torch==2.13 for x86_64 beside it, torch==2.13.0.0
    and mooncake~=0.3.12 in a -c constraints file, cuda13==0.3.12 behind a continuation: pip
    and uv refuse the project as it is (two torch versions); after `pins --write` both
    resolve it, on each architecture, to the set explain calls compatible."""
    pip, uv = _pip(), _uv()
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements.txt").write_text(
        "sglang[all]==0.5.18\n-r requirements/gpu.txt\n-c constraints.txt\n")
    (tmp_path / "requirements" / "gpu.txt").write_text(
        "-r base.txt\ntorch==2.13 ; platform_machine == \"x86_64\"\n"
        "mooncake-transfer-engine-cuda13==0.3.12 \\\n    # keep in step\n")
    (tmp_path / "requirements" / "base.txt").write_text("torch==2.12.0\n")
    (tmp_path / "constraints.txt").write_text(
        "mooncake-transfer-engine-cuda13~=0.3.12\ntorch==2.13.0.0\n")
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    for arch in ("x86_64", "aarch64"):
        for got in (_pip_set(pip, tmp_path, arch, "-r", "requirements.txt"),
                    _uv_set(uv, tmp_path, arch, "requirements.txt")):
            assert got == _STACK, got
            _compatible(got, arch, tmp_path)


def test_uv_resolves_what_write_leaves_with_a_uv_constraint_and_a_dockerfile(
        tmp_path: Path) -> None:
    """pyproject.toml with the CUDA-12 mooncake in an x86_64 extra, a [tool.uv] constraint
    `cuda13<0.3.13` and a multi-stage Dockerfile installing mooncake==${MOONCAKE_VERSION:-…}:
    after `pins --write`, uv (which reads the constraint) resolves the extra to the set
    explain calls compatible, and pip the Dockerfile's install line as written."""
    pip, uv = _pip(), _uv()
    (tmp_path / "docker").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "svc"\nversion = "0.1"\nrequires-python = ">=3.11"\n'
        'dependencies = ["sglang[srt]==0.5.18", "torch==2.13.0"]\n'
        "[project.optional-dependencies]\n"
        "rdma = [\"mooncake-transfer-engine==0.3.10; platform_machine == 'x86_64'\"]\n"
        '[tool.uv]\nconstraint-dependencies = ["mooncake-transfer-engine-cuda13<0.3.13"]\n')
    (tmp_path / "docker" / "Dockerfile").write_text(
        "ARG SGLANG_VERSION=0.5.18\nFROM python:3.12 AS build\nARG SGLANG_VERSION\n"
        "ARG MOONCAKE_VERSION=0.3.10\nRUN pip install \"sglang==${SGLANG_VERSION}\" torch==2.13.0 "
        "\\\n    mooncake-transfer-engine==${MOONCAKE_VERSION:-0.3.10}\n")
    w = run_moonpin("pins", "pyproject.toml", "docker/Dockerfile", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    got = _uv_set(uv, tmp_path, "x86_64", "--extra", "rdma", "pyproject.toml")
    assert got == _STACK, got
    _compatible(got, "x86_64", tmp_path)
    line = (tmp_path / "docker" / "Dockerfile").read_text()
    version = line.split("ARG MOONCAKE_VERSION=")[1].split()[0]
    installs = ["sglang==0.5.18", "torch==2.13.0", f"mooncake-transfer-engine-cuda13=={version}"]
    assert f"mooncake-transfer-engine-cuda13==${{MOONCAKE_VERSION:-{version}}}" in line, line
    for arch in ("x86_64", "aarch64"):
        got = _pip_set(pip, tmp_path, arch, *installs)
        assert got == _STACK, got
        _compatible(got, arch, tmp_path)


def test_pip_resolves_what_write_leaves_in_the_file_a_dockerfile_installs(
        tmp_path: Path) -> None:
    """docker/Dockerfile copying requirements.txt and requirements/ into /srv and running
    `uv pip install -r requirements.txt -c /srv/requirements/constraints.txt
    mooncake-transfer-engine-cuda13`: `pins docker/Dockerfile --write` rewrites the
    constraints file the image installs, and pip and uv resolve the install line (the files
    as the image has them) to the set explain calls compatible."""
    pip, uv = _pip(), _uv()
    (tmp_path / "docker").mkdir()
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements.txt").write_text("sglang==0.5.18\n-r requirements/gpu.txt\n")
    (tmp_path / "requirements" / "gpu.txt").write_text("torch==2.13.0\n")
    (tmp_path / "requirements" / "constraints.txt").write_text(
        "mooncake-transfer-engine-cuda13==0.3.12\n")
    (tmp_path / "docker" / "Dockerfile").write_text(
        "FROM python:3.12\nWORKDIR /srv\nCOPY requirements.txt ./\n"
        "COPY requirements/ ./requirements/\n"
        "RUN uv pip install --system -r requirements.txt \\\n"
        "      -c /srv/requirements/constraints.txt mooncake-transfer-engine-cuda13\n")
    w = run_moonpin("pins", "docker/Dockerfile", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    args = ["-r", "requirements.txt", "-c", "requirements/constraints.txt",
            "mooncake-transfer-engine-cuda13"]
    (tmp_path / "in.txt").write_text("mooncake-transfer-engine-cuda13\n")
    for arch in ("x86_64", "aarch64"):
        for got in (_pip_set(pip, tmp_path, arch, *args),
                    _uv_set(uv, tmp_path, arch, "requirements.txt", "in.txt", "-c",
                            "requirements/constraints.txt")):
            assert got == _STACK, got
            _compatible(got, arch, tmp_path)


def _written_set(root: Path, *files: str) -> list[str]:
    """The exact pins `moonpin pins` reads after a write (the base image's tag as sglang)."""
    import json

    r = run_moonpin("pins", *files, "--json", "--exit-zero", cwd=root)
    return sorted({f"{p['name']}=={p['version']}" for p in json.loads(r.stdout)["pins"]})


def test_clients_resolve_what_write_leaves_for_an_arm64_stage(tmp_path: Path) -> None:
    """`FROM --platform=linux/arm64` with a cuda13 release that has its torch build for
    x86_64 only: the stage's pins are judged and updated for aarch64, and pip and uv
    resolve what --write leaves there to the set explain calls compatible on aarch64."""
    pip, uv = _pip(), _uv()
    (tmp_path / "Dockerfile").write_text(
        "FROM --platform=linux/arm64 lmsysorg/sglang:v0.5.18-cu130\n"
        "COPY requirements.txt /srv/\nRUN pip install -r /srv/requirements.txt\n")
    (tmp_path / "requirements.txt").write_text(
        "torch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.12.post1\n")
    w = run_moonpin("pins", "Dockerfile", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert _written_set(tmp_path, "Dockerfile") == _STACK
    (tmp_path / "image.txt").write_text("sglang==0.5.18\n")  # what the tag stands for
    for got in (_pip_set(pip, tmp_path, "aarch64", "-r", "requirements.txt", "-r", "image.txt"),
                _uv_set(uv, tmp_path, "aarch64", "requirements.txt", "image.txt")):
        assert got == _STACK, got
        _compatible(got, "aarch64", tmp_path)


def test_clients_resolve_what_write_leaves_on_a_cu130_image(tmp_path: Path) -> None:
    """`FROM lmsysorg/sglang:v0.5.18-cu130` installing the CUDA 12 mooncake: the image's
    torch is CUDA 13, so --write switches the distribution; pip and uv resolve the install
    line as written (with the torch release the image has) to a set explain calls
    compatible with the image's build of torch."""
    pip, uv = _pip(), _uv()
    (tmp_path / "Dockerfile").write_text(
        "FROM lmsysorg/sglang:v0.5.18-cu130\n"
        "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")
    w = run_moonpin("pins", "Dockerfile", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    pinned = _written_set(tmp_path, "Dockerfile")
    assert pinned == ["mooncake-transfer-engine-cuda13==0.3.13.post1", "sglang==0.5.18"]
    (tmp_path / "in.txt").write_text("\n".join([*pinned, "torch==2.13.0"]) + "\n")
    for arch in ("x86_64", "aarch64"):
        for got in (_pip_set(pip, tmp_path, arch, "-r", "in.txt"),
                    _uv_set(uv, tmp_path, arch, "in.txt")):
            assert got == _STACK, got
            e = run_moonpin("explain", "sglang==0.5.18", got[0], "torch==2.13.0+cu130",
                            "--python", "3.12", "--arch", arch, cwd=tmp_path)
            assert e.returncode == 0 and ": COMPATIBLE" in e.stdout.splitlines()[0], e.stdout


def test_clients_resolve_what_latest_leaves_beside_a_labelled_torch(tmp_path: Path) -> None:
    """torch==2.13.0+cu126 with the CUDA 12 mooncake: `--strategy latest --write` moves
    SGLang and keeps the build; pip and uv resolve SGLang and mooncake as written (the
    labelled torch comes from PyTorch's own index, not configured here) and explain calls
    them compatible with that build."""
    pip, uv = _pip(), _uv()
    (tmp_path / "requirements.txt").write_text(
        "sglang==0.5.18\ntorch==2.13.0+cu126\nmooncake-transfer-engine==0.3.13.post1\n")
    w = run_moonpin("pins", "requirements.txt", "--strategy", "latest", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    text = (tmp_path / "requirements.txt").read_text()
    assert "torch==2.13.0+cu126\nmooncake-transfer-engine==0.3.13.post1\n" in text, text
    (tmp_path / "in.txt").write_text("".join(x + "\n" for x in text.splitlines()
                                             if not x.startswith("torch")))
    for arch in ("x86_64", "aarch64"):
        for got in (_pip_set(pip, tmp_path, arch, "-r", "in.txt"),
                    _uv_set(uv, tmp_path, arch, "in.txt")):
            assert got[0] == "mooncake-transfer-engine==0.3.13.post1", got
            e = run_moonpin("explain", got[1], got[0], "torch==2.13.0+cu126", "--python", "3.12",
                            "--arch", arch, cwd=tmp_path)
            assert e.returncode == 0 and ": COMPATIBLE" in e.stdout.splitlines()[0], e.stdout
