"""Run ``python -m moonpin.preflight`` against a throwaway image, as a worker would, and read
its verdict line by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import machinery
from pathlib import Path

from moonpin.kb.models import SCHEMA_VERSION
from tests.lib.images import PG_NAMES

__all__ = ["NOBODY", "ROOT", "Run", "as_nobody", "assert_healthy", "check_as_nobody",
           "fake_python", "nobody_python", "open_to_all", "python_for_nobody", "run",
           "run_check", "small_kb"]

ROOT = Path(__file__).resolve().parents[2]
#: The unprivileged user the permission tests run the check as.
NOBODY = 65534


def python_for_nobody() -> str | None:
    """An interpreter of this Python version that the unprivileged user can run (the
    venv's may live under root's home): the check's light path needs only the stdlib and
    moonpin's dependencies, put on PYTHONPATH by the caller."""
    for cand in (sys.executable, f"/usr/bin/python{sys.version_info.major}."
                 f"{sys.version_info.minor}"):
        try:
            if subprocess.run([cand, "-c", "pass"], capture_output=True, timeout=30,
                              user=NOBODY, group=NOBODY).returncode == 0:
                return cand
        except OSError:
            continue
    return None


def nobody_python() -> str:
    """:func:`python_for_nobody`, or the test skipped when there is none."""
    import pytest

    python = python_for_nobody()
    if python is None:
        pytest.skip("no interpreter of this Python version the unprivileged user can run")
    return python


def open_to_all(root: Path) -> None:
    """Every folder under ``root`` (itself too) 0755 and every file 0644."""
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def as_nobody(python: str, code: str, site: Path, cwd: Path
              ) -> subprocess.CompletedProcess[str]:
    """``python -B -c code`` as the unprivileged user with ``site`` on its path: the real
    import a check is held against."""
    return subprocess.run([python, "-B", "-c", code], capture_output=True, text=True,
                          timeout=60, user=NOBODY, group=NOBODY, cwd=cwd,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})


def check_as_nobody(python: str, site: Path, *args: str, home: Path) -> Run:
    """``python -m moonpin.preflight --site-packages site --no-deep *args`` live as the
    unprivileged user (moonpin and its dependencies on its path, ``home`` its HOME)."""
    import sysconfig

    env = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    env["HOME"] = str(home)
    return Run(subprocess.run(
        [python, "-m", "moonpin.preflight", "--site-packages", str(site), "--no-deep", *args],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300, user=NOBODY,
        group=NOBODY))


def small_kb(tmp_path: Path) -> Path:
    """A small KB that knows SGLang 0.5.23 (module mooncake.pg, its five names)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "sglang": [{"version": "0.5.23", "pg": {
            "module": "mooncake.pg", "names": list(PG_NAMES),
            "backends": ["mooncake", "mooncake-cpu"]}}],
        "mooncake": [{"dist": "mooncake-transfer-engine", "version": "0.3.9", "wheels": [
            {"builds": [{"names": list(PG_NAMES)}]}]}],
    }
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(doc))
    return path


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.lines = proc.stdout.splitlines()

    def status(self, name: str) -> str:
        for line in self.lines:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[1].startswith(f"{name}:"):
                return parts[0]
        raise AssertionError(f"no check {name!r} in:\n{self.out}")

    def line(self, name: str) -> str:
        return next(line for line in self.lines if line.split(None, 1)[-1].startswith(name))

    def fixes(self) -> list[str]:
        return [line.strip() for line in self.lines if line.startswith("  fix: ")]


def run(site: Path, *args: str, kb: Path | None = None, env: dict[str, str] | None = None,
        ep: bool = True, deep: bool = False) -> Run:
    cmd = [sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site)]
    if not deep:  # light checks; the deep-probe tests below import the image's modules
        cmd.append("--no-deep")
    if ep:
        cmd += ["--elastic-ep-backend", "mooncake"]
    if kb is not None:
        cmd += ["--kb", str(kb)]
    cmd += list(args)
    full = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    # the host's own libraries (its CUDA toolkit, its loader cache) must not decide
    full["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    full.update(env or {})
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=full, timeout=60)
    assert not proc.stderr or proc.returncode == 2, proc.stderr
    return Run(proc)


def assert_healthy(r: Run) -> None:
    assert r.rc == 0, r.out
    assert not any(line.startswith(("fail", "warn")) for line in r.lines), r.out


def fake_python(path: Path, site: Path, minor: int) -> Path:
    """An interpreter at ``path`` that answers the check's target question (``--python``)
    for an environment of Python 3.``minor`` whose one site folder is ``site``."""
    suffix = f".cpython-3{minor}-{machinery.EXTENSION_SUFFIXES[0].split('-', 2)[2]}"
    doc = {"path": [str(site)], "version": [3, minor], "ext": [suffix, ".abi3.so", ".so"],
           "machine": os.uname().machine, "executable": str(path), "prefix": str(path.parent)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{json.dumps(doc)}'\n")
    path.chmod(0o755)
    return path


def run_check(*args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``python -m moonpin.preflight --no-deep --elastic-ep-backend mooncake`` with ``args``
    (no ``MOONPIN_KB`` nor ``VIRTUAL_ENV`` of this process; ``env`` over the rest)."""
    full = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "VIRTUAL_ENV")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "moonpin.preflight", "--no-deep",
                           "--elastic-ep-backend", "mooncake", *args], cwd=ROOT,
                          capture_output=True, text=True, env=full, timeout=60)
