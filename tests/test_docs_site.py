"""The docs site: the generated reference pages are current, and (with the docs extra
installed) `mkdocs build --strict` builds it."""

from __future__ import annotations

import re
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


_CODE = re.compile(r"`([^`]+)`")
_NAMED_PATH = re.compile(r"(?<![\w./-])((?:\.ci|bench|docs|moonpin|tests)/[\w./-]+"
                         r"\.(?:py|md|sh|json|toml|yml|yaml))\b")


def _named_paths() -> list[tuple[str, str]]:
    """(page:line, path) of each repository file a page names in code."""
    pages = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [(f"{page.relative_to(ROOT)}:{n}", m.group(1))
            for page in pages
            for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            for code in _CODE.findall(line) for m in _NAMED_PATH.finditer(code)]


def test_every_file_a_page_names_exists() -> None:
    # A newcomer runs what the pages say: `pytest tests/resolver/test_ldfuzz.py` after the file
    # moved to tests/preflight/ is an error. A path under a folder this repository does not
    # have (another project's file, e.g. Dynamo's templates) is that project's.
    named = _named_paths()
    assert len(named) > 20, named  # the pages name files; a pattern that finds none tests nothing
    missing = [(where, path) for where, path in named
               if _ours(path) and not (ROOT / path).exists()]
    assert not missing, missing


def _ours(path: str) -> bool:
    """Whether `path` lies under a folder of this repository (its first two levels exist here)."""
    return ROOT.joinpath(*Path(path).parent.parts[:2]).is_dir()
