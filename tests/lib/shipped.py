"""The ``moonpin`` command run in a child on the shipped knowledge base (``data/kb.json``), as
a user runs it: the one helper of the tests that ask it from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["ROOT", "SHIPPED", "run_moonpin"]

#: this checkout
ROOT = Path(__file__).resolve().parents[2]
#: the knowledge base the package ships
SHIPPED = ROOT / "data" / "kb.json"


def run_moonpin(*args: str, cwd: Path = ROOT, env: Mapping[str, str] | None = None,
                kb: Path | str = SHIPPED) -> subprocess.CompletedProcess[str]:
    """``python -m moonpin --kb <kb> *args`` from ``cwd``, its output as text, with moonpin
    imported from this checkout whatever the folder (``PYTHONPATH``). ``env``: the child's
    whole environment instead of this process's (``PYTHONPATH`` added). A traceback fails
    the test: every command answers with a message and an exit code."""
    base = dict(os.environ) if env is None else dict(env)
    r = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(kb), *args],
                       capture_output=True, text=True, cwd=cwd, timeout=300,
                       env={**base, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in r.stderr, r.stderr
    return r
