"""Differential: moonpin's model of the loader (the import chain, ld.so's search, versions
and symbol binding: moonpin/preflight/loader/loadchain.py) against the real one, on random
small object sets built with gcc (tests/lib/ldfuzz.py) and imported for real in a child.

The default run judges a few seeded scenarios (a few seconds); ``MOONPIN_LDFUZZ_N`` sets
how many, ``MOONPIN_LDFUZZ_SEED`` the first seed; ``-m fuzz`` runs 400 (or that many)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.lib.ldfuzz import build, can_build, disagreement, generate, real

pytestmark = pytest.mark.skipif(can_build() is not None, reason=str(can_build()))

_FIRST = int(os.environ.get("MOONPIN_LDFUZZ_SEED", "1000"))


def _judge(tmp_path: Path, n: int) -> tuple[list[str], int]:
    """The disagreements over ``n`` seeds, and how many imports really failed."""
    found: list[str] = []
    failed = 0
    for seed in range(_FIRST, _FIRST + n):
        sc = generate(seed)
        site = tmp_path / str(seed) / "site"
        build(sc, site, tmp_path / str(seed) / "work")
        truth = real(sc, site)
        failed += not truth[0]
        d = disagreement(sc, site, truth)
        if d is not None:
            found.append(d)
    return found, failed


def test_moonpin_loads_what_the_loader_loads(tmp_path: Path) -> None:
    n = int(os.environ.get("MOONPIN_LDFUZZ_N", "12"))
    found, failed = _judge(tmp_path, n)
    assert not found, f"{len(found)} of {n} scenarios disagree:\n\n" + "\n\n".join(found)
    assert 0 < failed < n  # the seeds make both outcomes: the comparison decides something


@pytest.mark.fuzz
def test_moonpin_loads_what_the_loader_loads_at_full_size(tmp_path: Path) -> None:
    n = int(os.environ.get("MOONPIN_LDFUZZ_N", "400"))
    found, _ = _judge(tmp_path, n)
    assert not found, f"{len(found)} of {n} scenarios disagree:\n\n" + "\n\n".join(found[:20])
