"""The pre-commit hook as pre-commit itself runs it (`pre-commit try-repo <this checkout>
moonpin-pins`, opt-in: -m precommit; MOONPIN_PRECOMMIT names the executable, else
pre-commit on PATH): a commit that touches only a docs requirements file passes, one that
pins a mooncake unusable with the project's torch fails with the reason, one that adds a file
pinning only torch (the project's) passes. pre-commit builds the hook's environment from
this checkout with pip (the package index)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.precommit

STACK = "sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.13.post1\n"


def _precommit() -> str:
    exe = os.environ.get("MOONPIN_PRECOMMIT") or shutil.which("pre-commit")
    if exe is None:
        pytest.skip("pre-commit is not installed (set MOONPIN_PRECOMMIT)")
    return exe


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _try(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_precommit(), "try-repo", str(ROOT), "moonpin-pins"], cwd=repo,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "requirements.txt").write_text(STACK)
    (tmp_path / "requirements-docs.txt").write_text("mkdocs==1.6.1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    return tmp_path


def test_a_docs_only_commit_passes(repo: Path) -> None:
    (repo / "requirements-docs.txt").write_text("mkdocs==1.6.1\nmkdocs-material==9.5.0\n")
    _git(repo, "add", "requirements-docs.txt")
    r = _try(repo)
    assert r.returncode == 0 and "Passed" in r.stdout, r.stdout + r.stderr


def test_a_commit_that_breaks_the_stack_fails(repo: Path) -> None:
    (repo / "requirements.txt").write_text(
        STACK.replace("mooncake-transfer-engine-cuda13==", "mooncake-transfer-engine=="))
    _git(repo, "add", "requirements.txt")
    r = _try(repo)
    assert r.returncode == 1 and "Failed" in r.stdout, r.stdout + r.stderr
    assert "verdict: incompatible" in r.stdout and "CUDA major" in r.stdout
    assert "-> mooncake-transfer-engine-cuda13==0.3.13.post1" in r.stdout


def test_a_file_pinning_only_the_projects_torch_passes(repo: Path) -> None:
    (repo / "requirements-torch.txt").write_text("torch==2.13.0\n")
    _git(repo, "add", "requirements-torch.txt")
    r = _try(repo)
    assert r.returncode == 0 and "Passed" in r.stdout, r.stdout + r.stderr
