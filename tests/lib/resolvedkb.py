"""A knowledge base written for a test as ``moonpin kb resolve`` leaves one: the file and the
resolved tables a query reads beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["flashinfer_kb", "resolved_kb"]


def resolved_kb(folder: Path, kb: Any) -> Path:
    """``kb`` (a :class:`moonpin.kb.models.KnowledgeBase`) saved as ``folder/kb.json`` with its
    resolved tables; its path."""
    from moonpin.kb import store
    from moonpin.resolver.tables.writer import write

    path = folder / "kb.json"
    store.save(kb, path)
    write(path)
    return path


def flashinfer_kb(folder: Path, releases: dict[str, tuple[str, ...]]) -> Path:
    """The small KB of :func:`tests.resolver.test_which_native._kb` (SGLang 0.5.23, torch
    2.12-2.15, nixl, sglang-kernel) with these FlashInfer releases (dist -> versions; a
    flashinfer-python holds its version lock on the cubin), written with its tables in
    ``folder``."""
    from tests.resolver.test_which_native import _flashinfer, _kb

    kb = _kb()
    more = tuple(_flashinfer(d, v, d == "flashinfer-python") for d, vs in releases.items()
                 for v in vs)
    folder.mkdir(parents=True, exist_ok=True)
    return resolved_kb(folder, kb.model_copy(update={"native": (*kb.native, *more)}))
