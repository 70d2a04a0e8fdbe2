"""A knowledge base written for a test as ``moonpin kb resolve`` leaves one: the file and the
resolved tables a query reads beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["resolved_kb"]


def resolved_kb(folder: Path, kb: Any) -> Path:
    """``kb`` (a :class:`moonpin.kb.models.KnowledgeBase`) saved as ``folder/kb.json`` with its
    resolved tables; its path."""
    from moonpin.kb import store
    from moonpin.resolver.resolved_write import write

    path = folder / "kb.json"
    store.save(kb, path)
    write(path)
    return path
