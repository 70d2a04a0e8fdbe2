"""A file ahead of the standard library on sys.path that Python would import instead of a
module moonpin uses: every entry point names it (exit 2, a tip), never a traceback."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.guard import USED

ROOT = Path(__file__).resolve().parents[2]


def test_the_list_holds_every_standard_module_moonpin_imports() -> None:
    imported: set[str] = set()
    for path in (ROOT / "moonpin").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.partition(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.partition(".")[0])
    missing = sorted(n for n in imported if n in sys.stdlib_module_names and n not in USED)
    assert not missing, missing


def _run(argv: list[str], pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(pythonpath), str(ROOT)))}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


@pytest.mark.parametrize("argv", [
    ["-m", "moonpin.preflight", "--elastic-ep-backend", "mooncake", "--no-deep"],
    ["-c", "from moonpin.cli.main import main; "
           "raise SystemExit(main(['which', 'mooncake', '--sglang', '0.5.18']))"],
], ids=["check", "which"])
@pytest.mark.parametrize("shape", ["json.py", "re.py", "difflib/__init__.py"])
def test_a_shadowing_file_is_named(tmp_path: Path, argv: list[str], shape: str) -> None:
    shadow = tmp_path / "shadow"
    target = shadow / shape
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("raise RuntimeError('not the standard library')\n")
    proc = _run(argv, shadow, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(target.parent if shape.endswith("__init__.py") else target) in proc.stderr
    assert "\ntip: " in proc.stderr


def test_a_namespace_folder_of_the_same_name_is_no_shadow(tmp_path: Path) -> None:
    """A folder without __init__.py: the standard library's regular package wins."""
    (tmp_path / "shadow" / "json").mkdir(parents=True)
    proc = _run(["-c", "from moonpin.cli.main import main; raise SystemExit("
                       "main(['which', 'mooncake', '--sglang', '0.5.18']))"],
                tmp_path / "shadow", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("recommended:")
