"""A knowledge base written for a test as ``moonpin kb resolve`` leaves one: the file and the
resolved tables a query reads beside it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["facts_reads", "flashinfer_kb", "resolved_kb", "same_as_full"]

T = TypeVar("T")


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


def facts_reads() -> tuple[tuple[object, str], ...]:
    """Where a query reads the KB's scraped facts (the graph's file, the resolver's
    typed facts): what an answer from the resolved tables alone never calls."""
    from moonpin.resolver.graph import CompatGraph
    from moonpin.resolver.tables import documents

    return ((CompatGraph, "_read"), (documents, "_load_facts"))


def same_as_full(monkeypatch: pytest.MonkeyPatch, answer: Callable[[], T], *,
                 refused: Sequence[tuple[object, str]],
                 full: Sequence[tuple[object, str]],
                 what: str = "the facts were read") -> T:
    """``answer()`` with each ``(owner, name)`` of ``refused`` raising ``AssertionError(what)``
    when called (a class's attribute replaced by a static method), required equal to
    ``answer()`` again with each of ``full`` answering None (the tables' fast paths off: the
    full resolver answers); the first answer."""
    def refuse(*_a: object, **_k: object) -> Any:
        raise AssertionError(what)

    with monkeypatch.context() as m:
        for owner, name in refused:
            m.setattr(owner, name, staticmethod(refuse) if isinstance(owner, type) else refuse)
        got = answer()
    for owner, name in full:
        monkeypatch.setattr(owner, name, lambda *a, **k: None)
    assert got == answer()
    return got
