"""``moonpin pins`` verdicts on the shipped KB (issue 13): one update for an unpinned or
ranged mooncake, the platform the file's markers give, the compile note of a JIT release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.pins.read import Judgement, apply_updates, judge, pinned_set, read_pins
from tests.lib.shipped import shipped_graph

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.fixture(scope="module")
def g() -> CompatGraph:
    return shipped_graph()


def _judge(g: CompatGraph, tmp_path: Path, text: str, **kw: str) -> tuple[Judgement, Path]:
    req = tmp_path / "requirements.txt"
    req.write_text(text, encoding="utf-8")
    pins, errors = read_pins([req])
    assert errors == []
    return judge(g, pinned_set(pins), **kw), req


@pytest.mark.parametrize("line", ["mooncake-transfer-engine-cuda13",
                                  "mooncake-transfer-engine-cuda13>=0.3.13",
                                  "mooncake-transfer-engine-cuda13[x] >=0.3.12 ; "
                                  "sys_platform == 'linux'  # keep"])
def test_unpinned_or_ranged_mooncake_gets_one_update(g: CompatGraph, tmp_path: Path,
                                                    line: str) -> None:
    out, req = _judge(g, tmp_path, f"sglang==0.5.18\ntorch==2.13.0\n{line}\n")
    (u,) = out.updates
    assert (u["depName"], u["newVersion"], u["updateType"]) == (
        "mooncake-transfer-engine-cuda13", "0.3.13.post1", "pin")
    assert u["groupName"] == "sglang stack"
    text = " ".join(out.reasons)
    assert "no mooncake release in the knowledge base fits" not in text
    assert "which sglang" not in text
    pins, _ = read_pins([req])
    new, problems = apply_updates(pins, out.updates, {str(req): req.read_text()})
    assert problems == []
    (written,) = [x for x in new[str(req)].splitlines() if "mooncake" in x]
    assert "==0.3.13.post1" in written and ">=" not in written
    assert written.endswith("# keep") == line.endswith("# keep")
    # the result is a set moonpin judges compatible
    req.write_text(new[str(req)], encoding="utf-8")
    again, _ = _judge(g, tmp_path, new[str(req)])
    assert again.verdict == "compatible" and again.updates == ()


def test_reasons_use_the_platform_of_the_files_marker(g: CompatGraph, tmp_path: Path) -> None:
    out, _ = _judge(g, tmp_path, 'sglang==0.5.18\ntorch==2.13.0 ; platform_machine == "x86_64"\n'
                                 "mooncake-transfer-engine-cuda13==0.3.12\n")
    # issue 27: the marker applies to torch's pin alone, not to the project: x86_64 and
    # aarch64 are judged apart, each with the pins that apply there
    assert out.verdict == "incompatible"
    assert "x86_64 and aarch64 apart (the marker at" in out.platform
    assert all(r.startswith(("on x86_64: ", "on aarch64: ")) for r in out.reasons)
    out, _ = _judge(g, tmp_path, "sglang==0.5.18\ntorch==2.13.0\n"
                                 "mooncake-transfer-engine-cuda13==0.3.12\n", arch="aarch64",
                    python="3.12")
    assert "aarch64 (from --arch)" in out.platform
    assert "python 3.12 (from --python)" in out.platform
    assert "x86_64" not in " ".join(out.reasons)


def test_a_jit_release_is_compatible_with_its_compile_note(g: CompatGraph,
                                                           tmp_path: Path) -> None:
    out, _ = _judge(g, tmp_path, "sglang==0.5.18\ntorch==2.13.0\n"
                                 "mooncake-transfer-engine-cuda13==0.3.14\n")
    assert out.verdict == "compatible"
    assert any("compiles its process-group extension" in n and "nvcc" in n
               for n in out.notes)


def test_pins_cli_prints_platform_and_note(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.14\n",
                   encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), "pins",
                        str(req)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "verdict: compatible (judged for" in r.stdout
    assert "note: mooncake-transfer-engine-cuda13==0.3.14 compiles" in r.stdout


def test_self_hosted_post_upgrade_task_brings_torch_and_mooncake(g: CompatGraph,
                                                               tmp_path: Path) -> None:
    """Mode (b): Renovate moved sglang alone; `moonpin pins --keep sglang --write` in the
    branch brings the torch and mooncake it needs (a JIT release only because nothing
    prebuilt fits 0.5.23, with its compile note)."""
    out, req = _judge(g, tmp_path, "sglang==0.5.23\ntorch==2.13.0\n"
                                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n",
                      keep="sglang")
    moves = {u["depName"]: u for u in out.updates}
    assert set(moves) == {"torch", "mooncake-transfer-engine-cuda13"}
    assert moves["torch"]["newVersion"] == "2.14.1"
    assert moves["mooncake-transfer-engine-cuda13"]["newVersion"] == "0.3.14"
    assert "compiles its process-group extension" in moves[
        "mooncake-transfer-engine-cuda13"]["reason"]
    pins, _ = read_pins([req])
    new, problems = apply_updates(pins, out.updates, {str(req): req.read_text()})
    assert problems == []
    again, _ = _judge(g, tmp_path, new[str(req)])
    assert again.verdict == "compatible"


def test_judgement_is_frozen_and_its_json_is_the_documented_shape(g: CompatGraph,
                                                                  tmp_path: Path) -> None:
    import json

    out, _ = _judge(g, tmp_path, "sglang==0.5.18\ntorch==2.13.0\n"
                                 "mooncake-transfer-engine-cuda13==0.3.12\n")
    with pytest.raises(AttributeError):
        out.verdict = "compatible"  # type: ignore[misc]
    doc = out.to_json()
    assert list(doc) == ["verdict", "reasons", "updates", "notes", "platform"]
    assert doc["verdict"] == "incompatible" and isinstance(doc["reasons"], list)
    assert doc["updates"][0]["newVersion"] == "0.3.13.post1"
    assert out.explain is not None and out.explain["verdict"] == "incompatible"
    assert json.loads(json.dumps(doc)) == doc  # plain JSON all through


def _pins_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), "pins",
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_disagreeing_pins_across_files_are_one_set_whatever_the_order(tmp_path: Path) -> None:
    """Issue 27: `moonpin pins a.txt b.txt` with a broken mooncake pin in b.txt said
    `verdict: compatible` and proposed nothing; the other order said incompatible."""
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    a.write_text("sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    b.write_text("mooncake-transfer-engine-cuda13==0.3.12\n")
    outs = [_pins_cli(str(x), str(y), "--json") for x, y in ((a, b), (b, a))]
    for r in outs:
        assert r.returncode == 1, r.stderr
    docs = [json.loads(r.stdout) for r in outs]
    for doc in docs:
        assert doc["verdict"] == "incompatible"
        assert f"{a}:2" in doc["reasons"][0] and f"{b}:1" in doc["reasons"][0]
        assert [(u["packageFile"], u["line"], u["newName"], u["newVersion"])
                for u in doc["updates"]] == [
            (str(b), 1, "mooncake-transfer-engine-cuda13", "0.3.13.post1")]
    assert docs[0]["updates"] == docs[1]["updates"]


def test_write_over_requirements_pyproject_and_dockerfile_settles(tmp_path: Path) -> None:
    """Issue 27: `--write` over requirements + pyproject.toml + Dockerfile left
    pyproject.toml's other mooncake pin broken, and a second run called it compatible."""
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.12\n")
    pyp = tmp_path / "pyproject.toml"
    pyp.write_text('[project]\nname = "demo"\nversion = "0.1"\ndependencies = '
                   '["sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.11"]\n')
    dock = tmp_path / "Dockerfile"
    dock.write_text("FROM python:3.12\nRUN pip install sglang==0.5.18 "
                    "mooncake-transfer-engine-cuda13==0.3.12\n")
    files = [str(req), str(pyp), str(dock)]
    first = _pins_cli(*files, "--write")
    assert "wrote" in first.stdout + first.stderr, first.stdout + first.stderr
    for f in (req, pyp, dock):
        text = f.read_text()
        assert "mooncake-transfer-engine-cuda13==0.3.13.post1" in text, (f, text)
        assert "==0.3.11" not in text and "==0.3.12" not in text, (f, text)
    before = [f.read_text() for f in (req, pyp, dock)]
    second = _pins_cli(*files, "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    doc = json.loads(second.stdout)
    assert (doc["verdict"], doc["updates"], doc["conflicts"]) == ("compatible", [], [])
    assert [f.read_text() for f in (req, pyp, dock)] == before



def _hook(project: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """The pre-commit hook's command (its ``entry`` in .pre-commit-hooks.yaml, then the
    changed files), run at the project's root as pre-commit runs it."""
    entry = next(ln.split(":", 1)[1].split() for ln in
                 (ROOT / ".pre-commit-hooks.yaml").read_text().splitlines()
                 if ln.strip().startswith("entry:"))
    assert entry[0] == "moonpin"
    return subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED),
                           *entry[1:], *files], capture_output=True, text=True, cwd=project,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _project(tmp_path: Path) -> Path:
    (tmp_path / "requirements.txt").write_text(
        "sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    (tmp_path / "requirements-gpu.txt").write_text("torch==2.13.0\n")
    (tmp_path / "requirements-docs.txt").write_text("sphinx==7.0\nfuro==2024.1\n")
    return tmp_path


def test_hook_passes_a_file_with_nothing_relevant(tmp_path: Path) -> None:
    """Issue 27: a commit changing only requirements-docs.txt failed the hook (exit 2)."""
    r = _hook(_project(tmp_path), "requirements-docs.txt")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing to judge" in r.stdout


def test_hook_judges_a_torch_only_file_with_the_project(tmp_path: Path) -> None:
    """Issue 27: a file pinning only torch was judged alone (exit 1, sglang not pinned)."""
    project = _project(tmp_path)
    ok = _hook(project, "requirements-gpu.txt")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verdict: compatible" in ok.stdout
    (project / "requirements-gpu.txt").write_text("torch==2.12.0\n")
    bad = _hook(project, "requirements-gpu.txt")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "requirements-gpu.txt:1 torch==2.12.0 -> torch==2.13.0" in bad.stdout


def test_write_over_several_files_is_all_or_nothing(tmp_path: Path) -> None:
    """`moonpin pins a.txt b.txt c.txt --write` where c.txt cannot be written (here: the
    file size limit, as a full disk): a.txt and b.txt were left rewritten while the command
    said the write failed. Nothing may change in any file when one cannot be written."""
    import resource

    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    c = tmp_path / "c.txt"
    a.write_text("sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.12\n")
    b.write_text("mooncake-transfer-engine-cuda13==0.3.12\n")
    c.write_text("# padding\n" * 900 + "mooncake-transfer-engine-cuda13==0.3.12\n")
    before = {f: f.read_text() for f in (a, b, c)}

    def limit() -> None:  # the child ignores SIGXFSZ (Python does): a write gets EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    r = subprocess.run([sys.executable, "-B", "-m", "moonpin", "--kb", str(SHIPPED), "pins",
                        str(a), str(b), str(c), "--write"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, preexec_fn=limit)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"cannot write {c}" in r.stderr, r.stderr
    assert {f: f.read_text() for f in (a, b, c)} == before
    assert "wrote " not in r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.txt", "b.txt", "c.txt"]


def test_pep735_dependency_groups_are_pins_of_the_project(tmp_path: Path) -> None:
    """`moonpin pins pyproject.toml` with `[dependency-groups] dev = [mooncake…==0.3.12]`
    (PEP 735; `uv sync` installs the dev group by default, `pip install --group dev` too):
    the pin was not read, `verdict: compatible`, and `--write` left it broken."""
    pyp = tmp_path / "pyproject.toml"
    pyp.write_text('[project]\nname = "demo"\nversion = "0.1"\ndependencies = '
                   '["sglang[all]==0.5.18", "torch==2.13.0"]\n\n[dependency-groups]\n'
                   'dev = ["pytest>=8", "mooncake-transfer-engine-cuda13==0.3.12"]\n'
                   'serve = [{include-group = "dev"}]\n')
    r = _pins_cli(str(pyp), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "incompatible"
    assert [(u["packageFile"], u["line"], u["newVersion"]) for u in doc["updates"]] == [
        (str(pyp), 7, "0.3.13.post1")]
    w = _pins_cli(str(pyp), "--write")
    assert w.returncode == 0, w.stdout + w.stderr
    assert 'dev = ["pytest>=8", "mooncake-transfer-engine-cuda13==0.3.13.post1"]' in \
        pyp.read_text()
    text = _pins_cli(str(pyp)).stdout
    assert "dependency group 'dev'" in text and "verdict: compatible" in text


def _hook_files_pattern() -> str:
    line = next(ln for ln in (ROOT / ".pre-commit-hooks.yaml").read_text().splitlines()
                if ln.strip().startswith("files:"))
    return line.split(":", 1)[1].strip().strip("'")


def test_hook_sees_and_judges_files_of_a_requirements_folder(tmp_path: Path) -> None:
    """A project whose pins live in requirements/base.txt and requirements/gpu.txt (the
    common layout, `pip install -r requirements/base.txt -r requirements/gpu.txt`): a
    commit breaking torch in requirements/gpu.txt passed, as pre-commit did not run the hook
    for that path, and run by hand the hook judged gpu.txt alone (sglang not pinned)."""
    import re

    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "base.txt").write_text(
        "sglang[all]==0.5.18\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    gpu = tmp_path / "requirements" / "gpu.txt"
    gpu.write_text("torch==2.13.0\n")
    (tmp_path / "constraints" ).mkdir()
    (tmp_path / "constraints" / "cuda13.txt").write_text("numpy<3\n")
    pattern = re.compile(_hook_files_pattern())
    for path in ("requirements/gpu.txt", "requirements/base.in", "constraints/cuda13.txt",
                 "requirements.txt", "svc/requirements-dev.txt", "pyproject.toml"):
        assert pattern.search(path), path
    for path in ("docs/requirements.md", "src/requirements/model.py", "notes.txt"):
        assert not pattern.search(path), path
    ok = _hook(tmp_path, "requirements/gpu.txt")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verdict: compatible" in ok.stdout
    gpu.write_text("torch==2.12.0\n")
    bad = _hook(tmp_path, "requirements/gpu.txt")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "requirements/gpu.txt:1 torch==2.12.0 -> torch==2.13.0" in bad.stdout


def test_a_pin_both_platforms_share_is_not_moved_for_one_of_them(tmp_path: Path) -> None:
    """`moonpin pins requirements.txt requirements-arm.txt --write` where torch is pinned per
    platform (CUDA-13 2.13.0 on x86_64, 2.13.0+cu126 on aarch64) and one mooncake line serves
    both: it moved mooncake to the CUDA-12 distribution for aarch64, breaking x86_64, and the
    next run moved it back: every run rewrote the file and never settled. No one mooncake
    pin fits both: say so (pin it per platform), and write nothing."""
    req = tmp_path / "requirements.txt"
    req.write_text('sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.13.post1\n'
                   'torch==2.13.0 ; platform_machine == "x86_64"\n')
    arm = tmp_path / "requirements-arm.txt"
    arm.write_text('torch==2.13.0+cu126 ; platform_machine == "aarch64"\n')
    before = req.read_text()
    r = _pins_cli(str(req), str(arm), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "incompatible" and doc["updates"] == [], doc
    said = " ".join(doc["reasons"])
    assert f"{req}:2" in said and "per platform" in said, said
    w = _pins_cli(str(req), str(arm), "--write")
    assert w.returncode == 1, w.stdout + w.stderr
    assert req.read_text() == before


def test_a_stage_arg_without_default_takes_the_global_default(tmp_path: Path) -> None:
    """`moonpin pins Dockerfile` with `ARG MOONCAKE_VERSION=0.3.13.post1` before the first
    FROM and `ARG MOONCAKE_VERSION` in a stage: Docker gives the stage the global default,
    moonpin said the stage's ARG was unpinned ("build arg without default")."""
    dock = tmp_path / "Dockerfile"
    dock.write_text("ARG MOONCAKE_VERSION=0.3.13.post1\nFROM python:3.12\n"
                    "ARG MOONCAKE_VERSION\nRUN pip install sglang==0.5.18 torch==2.13.0 "
                    "mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}\n")
    r = _pins_cli(str(dock), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "compatible", doc
    assert not any("without default" in (p.get("note") or "") for p in doc["pins"]), doc["pins"]
