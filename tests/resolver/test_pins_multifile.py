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
    from moonpin.cli.main import main

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


@pytest.mark.parametrize("where", ["constraints", "uv"])
def test_a_range_elsewhere_that_excludes_the_exact_pin_is_a_disagreement(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        where: str) -> None:
    """`moonpin pins requirements.txt pyproject.toml` with cuda13==0.3.13.post1 required
    and `mooncake-transfer-engine-cuda13<0.3.13` in a -c constraints file (or [tool.uv]
    constraint-dependencies) said "compatible", exit 0: pip and uv refuse that set (no
    release meets both). And with cuda13==0.3.12 the update to 0.3.13.post1 left the range
    excluding it: the advice, carried out, did not install."""
    files = {"requirements.txt": "sglang==0.5.18\ntorch==2.13.0\n"
                                 "mooncake-transfer-engine-cuda13==0.3.13.post1\n"}
    rng = "mooncake-transfer-engine-cuda13 >=0.3.10, <0.3.13"
    if where == "constraints":
        files["requirements.txt"] = "-c constraints.txt\n" + files["requirements.txt"]
        files["constraints.txt"] = f"{rng}  # tested\n"
    else:
        files["pyproject.toml"] = ('[project]\nname = "svc"\nversion = "0.1"\n'
                                   f'[tool.uv]\nconstraint-dependencies = ["{rng}"]\n')
    args = [f for f in files if f != "constraints.txt"]
    _files(tmp_path, files)
    code, out, _ = _pins(capsys, monkeypatch, tmp_path, *args, "--json")
    doc = json.loads(out)
    assert (code, doc["verdict"]) == (1, "incompatible"), out
    assert any("<0.3.13 excludes mooncake-transfer-engine-cuda13==0.3.13.post1" in r
               for r in doc["reasons"]), doc["reasons"]
    (u,) = doc["updates"]
    assert (u["line"], u["currentValue"], u["newValue"], u["updateType"]) == (
        1 if where == "constraints" else 5, ">=0.3.10, <0.3.13", "==0.3.13.post1", "pin")
    # the other way round: the exact pin moves out of the range, and the range with it
    req = tmp_path / "requirements.txt"
    req.write_text(req.read_text().replace("0.3.13.post1", "0.3.12"))
    code, out, _ = _pins(capsys, monkeypatch, tmp_path, *args, "--json")
    assert sorted((u["packageFile"], u["newVersion"]) for u in json.loads(out)["updates"]) == [
        (f, "0.3.13.post1") for f in sorted(["requirements.txt", *files][1:])]
    _settles(capsys, monkeypatch, tmp_path, *args)
    if where == "constraints":
        assert (tmp_path / "constraints.txt").read_text() == (
            "mooncake-transfer-engine-cuda13 ==0.3.13.post1  # tested\n")


def test_a_local_build_and_its_public_version_are_one_pin(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`moonpin pins requirements.txt gpu.txt` with torch==2.13.0 in one and
    torch==2.13.0+cu126 (beside the CUDA-12 mooncake) in the other: "the pins disagree",
    exit 1, though pip meets both with the +cu126 build (==2.13.0 ignores a candidate's
    local label) and explain calls that set compatible."""
    files = _files(tmp_path, {
        "requirements.txt": "sglang==0.5.18\ntorch==2.13.0\n"
                            "mooncake-transfer-engine==0.3.13.post1\n",
        "gpu.txt": "torch==2.13.0+cu126\n"})
    for order in (files, files[::-1]):
        code, out, _ = _pins(capsys, monkeypatch, tmp_path, *order, "--json")
        doc = json.loads(out)
        assert (code, doc["verdict"], doc["conflicts"], doc["updates"]) == (
            0, "compatible", [], []), out
    (tmp_path / "gpu.txt").write_text("torch==2.12.0+cu126\n")
    code, out, _ = _pins(capsys, monkeypatch, tmp_path, *files, "--json")
    assert (code, len(json.loads(out)["conflicts"])) == (1, 1), out


def test_a_build_arg_and_the_default_beside_its_use_move_together(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """A multi-stage Dockerfile installing `mooncake-transfer-engine==${MOONCAKE_VERSION:-
    0.3.10}` (ARG MOONCAKE_VERSION=0.3.10) with a pyproject.toml: --write switched the ARG
    and the name, left the default 0.3.10 (now a cuda13 version that never fit), said "not
    written: no requirement text to pin" for a false "two distributions side by side" and
    exited 1."""
    files = _files(tmp_path, {
        "pyproject.toml": '[project]\nname = "svc"\nversion = "0.1"\nrequires-python = ">=3.11"'
                          '\ndependencies = ["sglang[srt]==0.5.18", "torch==2.13.0"]\n'
                          "[project.optional-dependencies]\nrdma = "
                          "[\"mooncake-transfer-engine==0.3.10; platform_machine == 'x86_64'\"]\n",
        "docker/Dockerfile": "ARG SGLANG_VERSION=0.5.18\nFROM python:3.12 AS build\n"
                             "ARG SGLANG_VERSION\nARG MOONCAKE_VERSION=0.3.10\n"
                             'RUN pip install "sglang[all]==${SGLANG_VERSION}" \\\n'
                             "      mooncake-transfer-engine==${MOONCAKE_VERSION:-0.3.10} && \\\n"
                             "    pip install torch==2.13.0\n"
                             "FROM build\nRUN pip install torch==${TORCH_VERSION:-2.13.0}\n"})
    _, out, _ = _pins(capsys, monkeypatch, tmp_path, *files, "--json")
    doc = json.loads(out)
    assert not any("side by side" in r or "beside" in r for r in doc["reasons"]), doc
    assert ("docker/Dockerfile", 9, "torch", "2.13.0") in [
        (p["file"], p["line"], p["name"], p["version"]) for p in doc["pins"]]
    _settles(capsys, monkeypatch, tmp_path, *files)
    dock = (tmp_path / "docker/Dockerfile").read_text()
    assert "mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION:-0.3.13.post1} &&" in dock
    assert "ARG MOONCAKE_VERSION=0.3.13.post1\n" in dock


@pytest.mark.parametrize("dockerfile, where", [
    ("FROM python:3.12\nCOPY requirements.txt /app/\n"
     "RUN pip install -r /app/requirements.txt torch==2.13.0\n", "Dockerfile"),
    ("FROM python:3.12\nWORKDIR /srv\nCOPY [\"requirements.txt\", \"./\"]\n"
     "COPY requirements/ ./requirements/\n"
     "RUN --mount=type=cache,target=/root/.cache uv pip install --system \\\n"
     "      --requirement=requirements.txt -c /srv/requirements/constraints.txt torch==2.13.0\n",
     "docker/Dockerfile"),
    ("FROM python:3.12\nCOPY . /work\nRUN cd /work && uv pip sync requirements.txt && \\\n"
     "    pip install -rrequirements/constraints.txt torch==2.13.0\n", "docker/Dockerfile"),
    ("#!/bin/sh\nset -e\npython3 -m pip install -r ../requirements.txt torch==2.13.0\n",
     "scripts/install.sh"),
])
def test_a_requirements_file_a_dockerfile_installs_is_read_with_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        dockerfile: str, where: str) -> None:
    """`moonpin pins Dockerfile` whose `RUN pip install -r /app/requirements.txt` installs
    the project's sglang and mooncake pins said "sglang is not pinned", verdict unknown:
    the requirements file the image installs (COPY'd from the build context) was not
    read, so its broken mooncake was never judged nor updated."""
    _files(tmp_path, {"requirements.txt": "sglang==0.5.18\n"
                                          "mooncake-transfer-engine-cuda13==0.3.12\n",
                      "requirements/constraints.txt": "mooncake-transfer-engine-cuda13==0.3.12\n",
                      where: dockerfile})
    code, out, _ = _pins(capsys, monkeypatch, tmp_path, where, "--json")
    doc = json.loads(out)
    assert (code, doc["verdict"]) == (1, "incompatible"), out
    files = {u["packageFile"] for u in doc["updates"]}
    assert "requirements.txt" in files or "../requirements.txt" in files, doc["updates"]
    _settles(capsys, monkeypatch, tmp_path, where)
    assert "cuda13==0.3.13.post1" in (tmp_path / "requirements.txt").read_text()


def test_renovate_over_files_whose_pins_disagree_says_so(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`moonpin renovate a.txt b.txt` with sglang==0.5.18 in one and sglang==0.5.4 in the
    other printed a fragment for whichever file came first (0.5.18's, or 0.5.4's with the
    files swapped), exit 0: the rules Renovate would follow depended on the order given."""
    from moonpin.cli.main import main

    files = _files(tmp_path, {"a.txt": "sglang==0.5.18\ntorch==2.13.0\n",
                              "b.txt": "sglang==0.5.4\nmooncake-transfer-engine==0.3.8\n"})
    monkeypatch.chdir(tmp_path)
    for order in (files, files[::-1]):
        with pytest.raises(SystemExit) as e:
            main(["--kb", str(SHIPPED), "renovate", *order])
        out, err = capsys.readouterr()
        assert (e.value.code, out) == (2, ""), out + err
        assert "the pins disagree: sglang==" in err and "a.txt:1" in err and "b.txt:1" in err
        assert f"moonpin pins {' '.join(order)} --write" in err, err
    assert main(["--kb", str(SHIPPED), "renovate", *files, "--sglang", "0.5.18"]) == 0
    assert '"allowedVersions": "/^(0\\\\.5\\\\.21' in capsys.readouterr().out


def test_the_hook_skips_a_project_file_that_is_no_pins_file(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`moonpin pins --changed requirements/gpu.txt` (the pre-commit hook) in a project with
    a requirements/README.txt: exit 2, "2 line(s) could not be read; nothing was judged",
    for a file the commit did not touch and pip never reads; every commit failed."""
    _files(tmp_path, {"requirements.txt": "sglang==0.5.18\n-r requirements/gpu.txt\n",
                      "requirements/gpu.txt": "torch==2.13.0\n"
                                              "mooncake-transfer-engine-cuda13==0.3.13.post1\n",
                      "requirements/README.txt": "These files pin the stack.\n"})
    code, out, err = _pins(capsys, monkeypatch, tmp_path, "--changed", "requirements/gpu.txt")
    assert code == 0 and "verdict: compatible" in out, out + err
    assert "skipped requirements/README.txt (not in the commit): line 1: invalid" in err
    (tmp_path / "requirements/gpu.txt").write_text("torch==2.12.0\n")
    code, out, err = _pins(capsys, monkeypatch, tmp_path, "--changed", "requirements/gpu.txt")
    assert code == 1 and "requirements/gpu.txt:1 torch==2.12.0 -> torch==2.13.0" in out, out
    # a file the commit touches must still read
    code, _, err = _pins(capsys, monkeypatch, tmp_path, "--changed", "requirements/README.txt")
    assert code == 2 and "could not be read" in err, err


def test_an_include_named_through_the_environment_is_read(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`-r requirements/${TARGET}.txt` with TARGET=gpu: pip expands the variable and
    installs gpu.txt's torch and mooncake; moonpin left the include unread ("sglang 0.5.18,
    no mooncake"), so the broken mooncake there was never judged."""
    files = _files(tmp_path, {"requirements.txt": "sglang==0.5.18\n-r requirements/${TARGET}.txt\n",
                              "requirements/gpu.txt": "torch==2.13.0\n"
                                                      "mooncake-transfer-engine-cuda13==0.3.12\n"})
    monkeypatch.setenv("TARGET", "gpu")
    _, out, _ = _pins(capsys, monkeypatch, tmp_path, files[0], "--json")
    doc = json.loads(out)
    assert [(u["packageFile"], u["newVersion"]) for u in doc["updates"]] == [
        ("requirements/gpu.txt", "0.3.13.post1")], out
    _settles(capsys, monkeypatch, tmp_path, files[0])


def test_a_switch_of_distribution_moves_every_requirement_of_the_one_it_leaves(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The CUDA-12 mooncake pinned (==0.3.10, continued on the next line, CRLF) in
    requirements.txt, also required bare there and as a range in a pyproject.toml (BOM,
    CRLF): --write switched the pinned line to -cuda13 and left the other two, so the
    written project installs both distributions over each other; only a second run saw
    it."""
    files = _files(tmp_path, {
        "requirements.txt": "sglang==0.5.18\r\ntorch==2.13.0\r\nmooncake-transfer-engine[x] "
                            "\\\r\n    ==0.3.10 ; sys_platform == \"linux\"\r\n"
                            "mooncake_transfer_engine\r\n",
        "pyproject.toml": '\ufeff[project]\r\nname = "x"\r\nversion = "1"\r\ndependencies = '
                          '[\r\n  "Mooncake.Transfer_Engine >= 0.3.8",\r\n]\r\n'})
    _, out, _ = _pins(capsys, monkeypatch, tmp_path, *files, "--json")
    doc = json.loads(out)
    assert sorted((u["packageFile"], u["line"], u["newName"]) for u in doc["updates"]) == [
        ("pyproject.toml", 5, "mooncake-transfer-engine-cuda13"),
        ("requirements.txt", 4, "mooncake-transfer-engine-cuda13"),
        ("requirements.txt", 5, "mooncake-transfer-engine-cuda13")], doc["updates"]
    _settles(capsys, monkeypatch, tmp_path, *files)
    raw = (tmp_path / "pyproject.toml").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf[project]\r\n") and b"\n" not in raw.replace(b"\r\n", b"")


def test_write_is_one_change_when_a_hashed_pin_cannot_take_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The pinned CUDA-12 mooncake has --hash lines (a new version needs new hashes): --write
    still switched the bare requirement in pyproject.toml to -cuda13, leaving the hashed
    mooncake-transfer-engine==0.3.10 beside it, two distributions where there was one."""
    files = _files(tmp_path, {
        "requirements.txt": "sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine==0.3.10 "
                            "\\\n    --hash=sha256:" + "0" * 64 + "\n",
        "pyproject.toml": '[project]\nname = "x"\nversion = "1"\n'
                          'dependencies = ["mooncake-transfer-engine"]\n'})
    before = {f: (tmp_path / f).read_text() for f in files}
    code, _, err = _pins(capsys, monkeypatch, tmp_path, *files, "--write")
    assert code == 1 and "needs new hashes" in err and "nothing was written" in err, err
    assert {f: (tmp_path / f).read_text() for f in files} == before


def test_a_shared_line_moves_when_every_platform_is_content_with_the_move(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """cuda13 pinned per platform in requirements.txt (0.3.12.post1 on x86_64, 0.3.13.post1
    on aarch64, where 0.3.12.post1 has no wheel) and 0.3.12.post1 for both in pyproject.toml:
    "x86_64 needs it as written; no one pin fits both: pin it per platform", no update, exit
    1 for ever, though 0.3.13.post1 fits x86_64 too."""
    files = _files(tmp_path, {
        "requirements.txt": "sglang==0.5.18\ntorch==2.13.0\n"
                            'mooncake-transfer-engine-cuda13==0.3.12.post1 ; platform_machine == '
                            '"x86_64"\nmooncake-transfer-engine-cuda13==0.3.13.post1 ; '
                            'platform_machine == "aarch64"\n',
        "pyproject.toml": '[project]\nname = "x"\nversion = "1"\n'
                          'dependencies = ["mooncake-transfer-engine-cuda13==0.3.12.post1"]\n'})
    _, out, _ = _pins(capsys, monkeypatch, tmp_path, *files, "--json")
    doc = json.loads(out)
    assert not any("no one pin fits both" in r for r in doc["reasons"]), doc["reasons"]
    assert sorted((u["packageFile"], u["line"], u["newVersion"]) for u in doc["updates"]) == [
        ("pyproject.toml", 4, "0.3.13.post1"), ("requirements.txt", 3, "0.3.13.post1")]
    _settles(capsys, monkeypatch, tmp_path, *files)
