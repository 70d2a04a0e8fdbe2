"""The shipped knowledge base is current for the shipped code (issue 40): it records the
fingerprints of the extractors it ships with (else an installed moonpin re-reads every
release at its first `moonpin scrape`: 262.7 MB in 8,852 requests), and its provenance is
the canonical one (else the next scrape rewrites it and KB diffs are noise)."""

from __future__ import annotations

from pathlib import Path

from moonpin.kb import store
from moonpin.scrapers.mooncake import read_order as mc_order
from moonpin.scrapers.native import read_order
from moonpin.scrapers.refresh import EXTRACTORS, extractor_fingerprints

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "data" / "kb.json"
HOW = ("an extractor changed: refresh the shipped KB with this code (`moonpin --kb "
       "data/kb.json scrape`, see docs/DEVELOPERS.md), which re-reads what the change "
       "touches and records the new fingerprints")


def test_the_shipped_kb_was_read_by_the_shipped_extractors() -> None:
    kb = store.load(KB)
    recorded = dict(kb.scrape.extractors)
    current = extractor_fingerprints()
    assert set(recorded) == set(EXTRACTORS)
    stale = {k: (recorded[k], current[k]) for k in current if recorded[k] != current[k]}
    assert not stale, f"{HOW}; recorded vs this code's: {stale}"


def test_the_shipped_kb_provenance_is_canonical() -> None:
    kb = store.load(KB)
    # a mooncake build's reading is shared within its release only (scrapers/mooncake.py),
    # with the build its wheels' read order reaches first; a library is never read
    for m in kb.mooncake:
        read = {f"{b.member} in {w.artifact.filename}": mc_order(w.artifact.filename)
                for w in m.wheels for b in w.builds if b.bytes_from is None}
        for w in m.wheels:
            assert all(b.bytes_from is None for b in w.libraries), (m.dist, m.version)
            for b in w.builds:
                if b.bytes_from is not None:
                    assert b.bytes_from in read, (m.dist, m.version, b.member, b.bytes_from)
                    assert read[b.bytes_from] <= mc_order(w.artifact.filename)
    # a native build's reading is shared the same way (scrapers/native.py)
    for r in kb.native:
        read = {f"{b.member} in {w.artifact.filename}": read_order(w.artifact.filename)
                for w in r.wheels for b in w.builds if b.bytes_from is None}
        for w in r.wheels:
            for b in w.builds:
                if b.bytes_from is not None:
                    assert b.bytes_from in read, (r.dist, r.version, b.member, b.bytes_from)
                    assert read[b.bytes_from] <= read_order(w.artifact.filename)
