"""The shipped knowledge base (``data/kb.json``) as the tests ask it: the ``moonpin`` command
run in a child, as a user runs it, and the resolver's graph of it, built once a session."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph

__all__ = ["ROOT", "SHIPPED", "explain_json", "run_moonpin", "shipped_graph"]

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


@functools.cache
def shipped_graph() -> CompatGraph:
    """The shipped KB as the resolver's graph, loaded and built once a session (~5 s each
    time; four test modules each built their own): its models are frozen and its memo holds
    answers only, so the tests share it as they shared one per module."""
    from moonpin.kb import store
    from moonpin.resolver.graph import CompatGraph

    return CompatGraph(store.load(SHIPPED))


def explain_json(*a: Any, **kw: Any) -> dict[str, Any]:
    """``query.explain`` as its ``--json`` dict (a dict today, or a typed answer's
    ``to_json()``: the same shape)."""
    from moonpin.resolver import query

    res = query.explain(*a, **kw)
    return res if isinstance(res, dict) else res.to_json()  # type: ignore[no-any-return]
