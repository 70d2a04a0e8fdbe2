"""The pins reader names files as ``pathlib`` does (``str(Path(x))``, what the report and
``--json`` quote) without importing it: every spelling of a file given or included is
shown and followed as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonpin.resolver.pins.read import file_type, read_pins

SPELLINGS = ["req.txt", "./req.txt", "sub/../req.txt", ".//req.txt", "sub/./../req.txt"]


@pytest.mark.parametrize("given", SPELLINGS)
def test_a_file_given_is_shown_as_pathlib_spells_it(given: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "req.txt").write_text("sglang==0.5.18\n")
    monkeypatch.chdir(tmp_path)
    for arg in (given, Path(given)):
        pins, errors = read_pins([arg])
        assert errors == [] and [p.path for p in pins] == [str(Path(given))], (arg, pins)
    absolute = str(tmp_path) + "/" + given
    pins, _ = read_pins([absolute])
    assert [p.path for p in pins] == [str(Path(absolute))]


@pytest.mark.parametrize("include", ["base.txt", "./base.txt", "../top/base.txt",
                                     "nested/../base.txt", "ABSOLUTE"])
def test_an_include_is_followed_and_shown_as_pathlib_spells_it(
        include: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "top"
    (top / "nested").mkdir(parents=True)
    (top / "base.txt").write_text("torch==2.13.0\n")
    value = str(top / "base.txt") if include == "ABSOLUTE" else include
    (top / "requirements.txt").write_text(f"-r {value}\nsglang==0.5.18\n")
    monkeypatch.chdir(tmp_path)
    pins, errors = read_pins(["top/requirements.txt"])
    assert errors == []
    got = {p.name: p.path for p in pins}
    assert got == {"sglang": "top/requirements.txt",
                   "torch": str(Path("top/requirements.txt").parent / value)}


def test_a_file_a_dockerfile_installs_is_found_beside_it(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile").write_text(
        "FROM --platform=linux/arm64 lmsysorg/sglang:v0.5.18-cu130\n"
        "COPY requirements.txt /app/\nRUN pip install -r /app/requirements.txt\n")
    (tmp_path / "docker" / "requirements.txt").write_text("torch==2.13.0\n")
    monkeypatch.chdir(tmp_path)
    pins, errors = read_pins(["./docker/Dockerfile"])
    assert errors == []
    torch = next(p for p in pins if p.name == "torch")
    assert torch.path == "docker/requirements.txt" and torch.platform == "linux/arm64"


def test_an_include_cycle_names_the_files(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("-r ./b.txt\n")
    (tmp_path / "b.txt").write_text("-r a.txt\n")
    monkeypatch.chdir(tmp_path)
    _, errors = read_pins(["a.txt"])
    assert [e.message for e in errors] == ["include cycle: a.txt -> b.txt -> a.txt"]


def test_a_symlink_loop_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.symlink("loop-b.txt", tmp_path / "loop-a.txt")
    os.symlink("loop-a.txt", tmp_path / "loop-b.txt")
    monkeypatch.chdir(tmp_path)
    pins, errors = read_pins(["loop-a.txt"])
    assert pins == [] and len(errors) == 1 and errors[0].path == "loop-a.txt"


@pytest.mark.parametrize(("name", "kind"), [
    ("pyproject.toml", "pyproject"), ("docker/Dockerfile.gpu", "shell"), ("x/run.sh", "shell"),
    ("constraints.txt", "constraints"), ("req/base.in", "requirements"), (".", None),
    ("notes.md", None)])
def test_the_kind_of_a_file_by_its_name(name: str, kind: str | None) -> None:
    assert file_type(name) == file_type(Path(name)) == kind
