"""A small knowledge base cut from the shipped one, with its resolved tables: what the
hostile inputs are judged against (loading the 5 MB KB per input would cost ~0.5 s)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.hostile.harness import ROOT

#: The releases the slice keeps: an SGLang release with launch rules, its torch, and a
#: few mooncake releases of two distributions.
SGLANG = ("0.5.17", "0.5.18")
MOONCAKE = {"mooncake-transfer-engine": ("0.3.12", "0.3.13"),
            "mooncake-transfer-engine-cuda13": ("0.3.13", "0.3.13.post1")}


@pytest.fixture(scope="session")
def kb_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from moonpin.kb import store
    from moonpin.resolver.tables import writer

    full = store.load(ROOT / "data" / "kb.json")
    sg = tuple(r for r in full.sglang if r.version in SGLANG)
    mc = tuple(m for m in full.mooncake if m.version in MOONCAKE.get(m.dist, ()))
    torches = {req.split("==")[-1] for r in sg for req in r.torch_requirements}
    tr = tuple(t for t in full.torch if t.version in torches)
    small = full.model_copy(update={"sglang": sg, "mooncake": mc, "torch": tr, "unread": ()})
    folder = tmp_path_factory.mktemp("kb-template")
    path = folder / "kb.json"
    store.save(small, path)
    writer.write(path)
    return folder


@pytest.fixture
def kb_copy(kb_template: Path, tmp_path: Path) -> Path:
    """A private copy of the small KB (and its resolved tables); returns the kb.json."""
    dest = tmp_path / "kbdir"
    shutil.copytree(kb_template, dest)
    return dest / "kb.json"


@pytest.fixture
def empty_kb(kb_template: Path, tmp_path: Path) -> Path:
    """A KB of the template's schema holding no release: what a scrape writes into."""
    from moonpin.kb import store

    kb = tmp_path / "kb" / "kb.json"
    kb.parent.mkdir()
    full = store.load(kb_template / "kb.json")
    store.save(full.model_copy(update={"sglang": (), "mooncake": (), "torch": ()}), kb)
    return kb
