"""Requires-Dist markers are judged in the target's environment (its Python, its machine),
never in the interpreter running the check: a worker image's Python 3.12 judged from a 3.11
host (or from moonpin's own venv) reads the lines pip read when it installed the image."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.lib.checkrun import run, small_kb
from tests.lib.images import add_sglang, add_torch, healthy_image

#: a Python minor other than the host's and other than 3.12 (the minor the CUDA reader
#: assumed for every target before)
OTHER = next(m for m in (10, 13, 14) if m != sys.version_info.minor)


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    return small_kb(tmp_path)


def _site(tmp_path: Path, minor: int) -> Path:
    return tmp_path / "venv" / "lib" / f"python3.{minor}" / "site-packages"


def _requires(meta: Path, *lines: str) -> None:
    text = meta.read_text().rstrip("\n")
    meta.write_text(text + "".join(f"\nRequires-Dist: {ln}" for ln in lines) + "\n")


def test_sglangs_torch_pin_is_the_one_for_the_targets_python(tmp_path: Path, kb: Path) -> None:
    """SGLang pins torch 2.13.0 for the target's Python and 2.12.0 for the others: torch
    2.13.0 installed meets it. Judged in the host's environment it was a warning."""
    pins = (f'torch==2.13.0; python_version == "3.{OTHER}"',
            f'torch==2.12.0; python_version != "3.{OTHER}"')
    site = healthy_image(_site(tmp_path, OTHER))  # torch 2.13.0
    _requires(site / "sglang-0.5.23.dist-info" / "METADATA", *pins)
    r = run(site, kb=kb)
    assert "torch requirement" not in r.out, r.out
    # control: the same pins in an environment of the host's Python do bind
    here = healthy_image(_site(tmp_path / "here", sys.version_info.minor))
    _requires(here / "sglang-0.5.23.dist-info" / "METADATA", *pins)
    assert "requires torch==2.12.0" in run(here, kb=kb).line("torch requirement")


def test_torchs_cuda_from_its_requirements_for_the_targets_python(tmp_path: Path,
                                                                 kb: Path) -> None:
    """A torch whose files name no CUDA: its Requires-Dist decides, evaluated for the
    target's Python (a CUDA 12 runtime there), not for a fixed 3.12."""
    site = _site(tmp_path, OTHER)
    add_torch(site, cuda=None, version_py=False, native=False)
    add_sglang(site)
    _requires(site / "torch-2.13.0.dist-info" / "METADATA",
              f'nvidia-cuda-runtime-cu12==12.8.90; python_version == "3.{OTHER}"',
              f'cuda-toolkit[cudart]==13.0.3; python_version != "3.{OTHER}"')
    line = run(site, kb=kb).line("torch")
    assert "nvidia-cuda-runtime-cu12" in line and "CUDA 12" in line, line
