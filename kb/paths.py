"""Where the knowledge base lives; standard library only, so light callers stay light."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_kb_path"]


def default_kb_path() -> Path:
    """The KB this process reads when none is named.

    ``MOONPIN_KB`` wins; then the copy installed inside the ``kb`` package (a
    wheel install); then ``data/kb.json`` of the source checkout (editable).
    """
    env = os.environ.get("MOONPIN_KB")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    packaged = here / "data" / "kb.json"  # what importlib.resources.files("kb") names
    if packaged.is_file():
        return packaged
    return here.parent / "data" / "kb.json"
