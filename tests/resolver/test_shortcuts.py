"""The query's shortcuts answer exactly what judging every combination answers.

A torch that SGLang's own requirement refuses fails the first check of every combination,
so ``which`` names that check for it without judging the rest; the resolved tables answer
``which mooncake`` and ``triples`` without judging anything. Both are compared here, on the
shipped KB, with the long way round."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.resolver import query
from moonpin.resolver.graph import CompatGraph

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "data" / "kb.json"


def _long_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query, "_refused_torch", lambda *a, **k: None)
    monkeypatch.setattr(query, "_table", lambda *a, **k: None)


def test_which_answers_as_the_long_way(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = CompatGraph.from_path(KB)
    rng = random.Random(77)
    sglangs = [s.version for s in fast.sglang.values()]
    releases = [f"{d}=={v}" for d, v in fast.mooncake]
    torches = [str(t) for t in fast.torch_versions] + ["2.13.0+cu130", "2.99"]
    asked = []
    for _ in range(40):
        python, arch = rng.choice([None, "3.12", "3.10"]), rng.choice([None, "x86_64", "aarch64"])
        torch = rng.choice([None, *torches])
        asked += [("mooncake", (rng.choice(sglangs),), dict(torch=torch, python=python, arch=arch)),
                  ("sglang", (rng.choice(releases),), dict(torch=torch, python=python, arch=arch)),
                  ("torch", (rng.choice(sglangs), rng.choice(releases)),
                   dict(python=python, arch=arch))]
    refused, real = [], query._refused_torch

    def counting(*a: object, **k: object) -> str | None:
        refused.append(real(*a, **k))  # type: ignore[arg-type]
        return refused[-1]

    with monkeypatch.context() as m:
        m.setattr(query, "_refused_torch", counting)
        short = [getattr(query, f"which_{w}")(fast, *a, **k).to_json() for w, a, k in asked]
    with monkeypatch.context() as m:
        _long_way(m)
        slow = CompatGraph(store.load(KB))
        long = [getattr(query, f"which_{w}")(slow, *a, **k).to_json() for w, a, k in asked]
    for q, a, b in zip(asked, short, long, strict=True):
        assert a == b, q
    assert sum(r is not None for r in refused) > 200  # the shortcut was taken, often
