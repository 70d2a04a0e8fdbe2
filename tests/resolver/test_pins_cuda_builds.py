"""Issue 38's leftover (b): a torch build of the wrong CUDA major is as wrong as a CPU one.
``torch==2.14.1`` admits every local build of 2.14.1 and pip and uv take the highest, so a
``2.14.1+cu126`` that the project's own find-links folder (or PyTorch's ``…/whl/cu126``
index) offers is installed where the stack was judged with the index's CUDA 13 build.
``pins`` flags it where the file's index options can supply it and writes the exclusion;
proven with the real pip here (and uv, marker ``uv``) on tiny fake torch wheels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.resolver.pins.reading.base import Pin
from moonpin.resolver.pins.reading.sources import Source, build_findings, cpu_build
from tests.lib.wheels import build_wheel

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"
#: pip and uv without this machine's configuration (it names a find-links folder of its own)
CLEAN_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))},
             "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_NO_CONFIG": "1"}
STACK = "sglang==0.5.23\ntorch==2.14.1\nmooncake-transfer-engine-cuda13==0.3.14\n"


def _moonpin(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _links(root: Path, *versions: str) -> Path:
    folder = root / "wheels"
    folder.mkdir(exist_ok=True)
    for version in versions:
        name, data = build_wheel("torch", version, {"torch/__init__.py": f"v = {version!r}\n"})
        (folder / name).write_bytes(data)
    return folder


def _pip_picks(cwd: Path, links: Path, requirement: str) -> str:
    """The torch the real pip installs for ``requirement`` (``--dry-run --report``)."""
    report = cwd / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                        "--quiet", "--find-links", str(links), "--report", str(report),
                        requirement], capture_output=True, text=True, timeout=300, cwd=cwd,
                       env=CLEAN_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    (torch,) = [i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
                if i["metadata"]["name"] == "torch"]
    return str(torch)


def _torch_line(req: Path) -> str:
    return next(x for x in req.read_text().splitlines() if x.startswith("torch"))


def test_a_cuda_12_build_in_the_files_find_links_is_flagged_and_kept_out(
        tmp_path: Path) -> None:
    links = _links(tmp_path, "2.14.1", "2.14.1+cu126")  # the index's build, and a CUDA 12 one
    assert _pip_picks(tmp_path, links, "torch==2.14.1") == "2.14.1+cu126"  # the premise
    req = tmp_path / "requirements.txt"
    req.write_text("--find-links wheels\n" + STACK)
    r = _moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert "admits 2.14.1+cu126, a CUDA 12 build (the index's torch 2.14.1, judged here, is " \
           "CUDA 13)" in r.stdout, r.stdout
    w = _moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    line = _torch_line(req)
    assert line == "torch==2.14.1,!=2.14.1+cpu,!=2.14.1+cu126", line
    assert _pip_picks(tmp_path, links, line) == "2.14.1"  # the advice, carried out in pip


def test_a_build_of_the_stacks_own_cuda_is_no_finding(tmp_path: Path) -> None:
    _links(tmp_path, "2.14.1", "2.14.1+cu130")
    (tmp_path / "requirements.txt").write_text("--find-links wheels\n" + STACK)
    r = _moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 0 and "verdict: compatible" in r.stdout, r.stdout


@pytest.mark.parametrize(("url", "flagged"), [
    ("https://download.example/whl/cu126", "2.14.1+cu126"),
    ("https://download.example/whl/cu126/", "2.14.1+cu126"),
    ("https://download.example/whl/cu130", None),
    ("https://download.example/simple", None),
])
def test_an_index_named_for_a_label_supplies_that_label(url: str, flagged: str | None) -> None:
    """An index is not fetched: any may hold a CPU build (that finding is the CPU one), and
    one whose last path segment is a local label, as PyTorch names its indexes, that
    label's builds."""
    pin = Pin("torch", "==2.14.1", "2.14.1", "r.txt", 2, 7, "torch==2.14.1", "requirements")
    src = Source("r.txt", 1, "--extra-index-url", url)
    assert src.supplies("2.14.1")[0] == "2.14.1+cpu"

    def wrong(public: str, build: str) -> str | None:
        return cpu_build(public, build) or ("a CUDA 12 build" if "cu12" in build else None)

    (found,) = build_findings([pin], [], [src], wrong)
    assert ("!=2.14.1+cu126" in found.exclude) is (flagged is not None), found
    assert "!=2.14.1+cpu" in found.exclude


def test_a_pin_already_excluding_the_build_is_left(tmp_path: Path) -> None:
    _links(tmp_path, "2.14.1", "2.14.1+cu126")
    (tmp_path / "requirements.txt").write_text(
        "--find-links wheels\n" + STACK.replace("torch==2.14.1",
                                                "torch==2.14.1,!=2.14.1+cpu,!=2.14.1+cu126"))
    r = _moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 0, r.stdout


@pytest.mark.uv
def test_uv_takes_what_pins_writes(tmp_path: Path) -> None:
    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    links = _links(tmp_path, "2.14.1", "2.14.1+cu126")

    def compile_(line: str) -> str:
        (tmp_path / "in.txt").write_text(line + "\n")
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-header", "--no-annotate",
                            "--no-index", "--find-links", str(links), "in.txt"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env=CLEAN_ENV)
        assert r.returncode == 0, r.stderr
        return next(x for x in r.stdout.splitlines() if x.startswith("torch=="))

    assert compile_("torch==2.14.1") == "torch==2.14.1+cu126"  # the premise
    req = tmp_path / "requirements.txt"
    req.write_text("--find-links wheels\n" + STACK)
    w = _moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert compile_(_torch_line(req)) == "torch==2.14.1"
