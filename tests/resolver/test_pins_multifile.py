"""``moonpin pins`` over a project of several files, as a user runs it (issue 27): every pin
of a package, in whatever file and spelling, is judged as the one set pip and uv install,
and ``--write`` changes every occurrence so that the next run settles (exit 0, nothing
proposed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


def _pins(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cwd: Path,
          *args: str) -> tuple[int, str, str]:
    """``moonpin pins ARGS`` run in ``cwd``: (exit code, stdout, stderr)."""
    from moonpin.resolver.cli.main import main

    monkeypatch.chdir(cwd)
    try:
        code = main(["--kb", str(SHIPPED), "pins", *args])
    except SystemExit as e:  # an error's exit
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _files(root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(text.encode("utf-8"))
    return list(files)


def _settles(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
             root: Path, *args: str) -> dict[str, object]:
    """``--write``, then the same command again: it must be compatible with nothing left
    to do and nothing more to write. Returns the second run's ``--json`` document."""
    code, out, err = _pins(capsys, monkeypatch, root, *args, "--write")
    assert "not written" not in err, out + err
    assert code == 0, out + err
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    code, out, err = _pins(capsys, monkeypatch, root, *args, "--json")
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["updates"], doc["conflicts"]) == (
        0, "compatible", [], []), out + err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    return dict(doc)


def test_one_release_spelled_two_ways_per_platform_is_one_update(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`moonpin pins requirements.txt` where gpu.txt pins torch==2.12.0 for both
    platforms and torch==2.13 / torch==2.13.0 per platform: the shared line was called
    "no one pin fits both" (2.13 vs 2.13.0 compared as text) and never updated."""
    files = _files(tmp_path, {
        "requirements.txt": "sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.13.post1\n"
                            "-r req/gpu.txt\n",
        "req/gpu.txt": 'torch==2.12.0\ntorch==2.13 ; platform_machine == "x86_64"\n'
                       'torch==2.13.0.0 ; platform_machine == "aarch64"\n'})
    code, out, _ = _pins(capsys, monkeypatch, tmp_path, files[0], "--json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"] == "incompatible"
    assert not any("no one pin fits both" in r for r in doc["reasons"]), doc["reasons"]
    assert [(u["packageFile"], u["line"], u["currentVersion"]) for u in doc["updates"]] == [
        ("req/gpu.txt", 1, "2.12.0")]
    _settles(capsys, monkeypatch, tmp_path, files[0])


@pytest.mark.parametrize("dependencies", [
    '["sglang==0.5.18", "torch==2.13.0", "mooncake-transfer-engine-cuda13>=0.3.10"]',
    '["sglang==0.5.18", "torch==2.13.0", \'mooncake-transfer-engine-cuda13[x]\']',
    '[\n  "mooncake-transfer-engine-cuda13 >=0.3, <1 ; sys_platform == \'linux\'",  # rdma\n'
    '  "sglang==0.5.18", "torch==2.13.0",\n]',
])
def test_a_range_in_pyproject_is_pinned_where_it_is_written(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        dependencies: str) -> None:
    """`moonpin pins pyproject.toml --write` with a ranged (or bare) mooncake in
    [project] dependencies proposed `pin` to 0.3.13.post1, then said "not written: no
    requirement text to pin" and exited 1: only requirements files could be pinned."""
    files = _files(tmp_path, {"pyproject.toml": '[project]\nname = "svc"\nversion = "0.1"\n'
                                                f"dependencies = {dependencies}\n"})
    _settles(capsys, monkeypatch, tmp_path, *files)
    text = (tmp_path / "pyproject.toml").read_text()
    assert re.search(r"mooncake-transfer-engine-cuda13(\[x\])? ?==0\.3\.13\.post1", text), text
    assert ("# rdma" in text) == ("# rdma" in dependencies)


def test_a_build_arg_without_default_is_given_the_version(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`moonpin pins Dockerfile --write` with `ARG MOONCAKE_VERSION` (no default) used by
    the install: the `pin` update was "not written", exit 1."""
    files = _files(tmp_path, {"Dockerfile": (
        "FROM python:3.12\nARG SGLANG_VERSION=0.5.18\nARG MOONCAKE_VERSION\n"
        "RUN pip install sglang==${SGLANG_VERSION} torch==2.13.0 \\\n"
        "    mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}\n")})
    _settles(capsys, monkeypatch, tmp_path, *files)
    assert "ARG MOONCAKE_VERSION=0.3.13.post1\n" in (tmp_path / "Dockerfile").read_text()
