"""The docs site: the generated reference pages are current, and (with the docs extra
installed) `mkdocs build --strict` builds it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_and_kb_schema_are_current() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_cli.py"), "--check"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr + "\n(run python docs/gen_cli.py)"


def test_every_command_and_option_is_in_the_reference() -> None:
    from moonpin.preflight.run import _parser as check_parser

    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for action in check_parser()._actions:
        for opt in action.option_strings:
            assert opt in page, opt
    for cmd in ("scrape", "kb", "show", "which", "explain", "check", "matrix", "pins",
                "renovate", "constraints", "args", "triples"):
        assert f"## moonpin {cmd}\n" in page, cmd
    assert "--image-env" in page and "--interpreter" in page


def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists() and shutil.which("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    r = subprocess.run([str(mkdocs) if mkdocs.exists() else "mkdocs", "build", "--strict",
                        "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                    "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
