"""``bytes_from`` is picked the same way every scrape (issue 40: identical builds flipped
their provenance between scrapes, so KB diffs were noisy)."""

from __future__ import annotations

from pathlib import Path

from moonpin.kb import store
from moonpin.kb.models import MooncakeRelease
from moonpin.scrapers.refresh import canonical_provenance

ROOT = Path(__file__).resolve().parents[2]


def _pointers(rels: list[MooncakeRelease]) -> dict[tuple[str, str], str | None]:
    return {(w.artifact.filename, b.member): b.bytes_from
            for r in rels for w in r.wheels for b in (*w.builds, *w.libraries)}


def _reread_elsewhere(rels: list[MooncakeRelease]) -> list[MooncakeRelease]:
    """The KB another scrape order leaves: each shared reading's last member read it, the
    others (its first reader too) point there."""
    ptr = _pointers(rels)
    groups: dict[str, list[tuple[str, str]]] = {}
    for key, src in ptr.items():
        groups.setdefault(src or f"{key[1]} in {key[0]}", []).append(key)
    moved: dict[tuple[str, str], str | None] = {}
    for members in groups.values():
        if len(members) > 1:
            last = members[-1]
            for m in members:
                moved[m] = None if m == last else f"{last[1]} in {last[0]}"
    out = []
    for r in rels:
        wheels = tuple(w.model_copy(update={"builds": tuple(
            b.model_copy(update={"bytes_from": moved.get((w.artifact.filename, b.member),
                                                          b.bytes_from)})
            for b in w.builds)}) for w in r.wheels)
        out.append(r.model_copy(update={"wheels": wheels}))
    return out


def test_provenance_does_not_depend_on_which_wheel_was_read_first() -> None:
    rels = list(store.load(ROOT / "data" / "kb.json").mooncake)
    shared = sum(1 for v in _pointers(rels).values() if v)
    assert shared > 100  # the shipped KB shares many readings
    other = _reread_elsewhere(rels)
    assert _pointers(other) != _pointers(rels)  # the flip the issue saw
    once = canonical_provenance(rels)
    assert _pointers(canonical_provenance(other)) == _pointers(once)
    assert canonical_provenance(once) == once  # stable
    # every pointer names a member that has none itself (one hop, as the scrape writes)
    ptr = _pointers(once)
    readers = {f"{m} in {f}" for (f, m), v in ptr.items() if v is None}
    assert all(v in readers for v in ptr.values() if v)


def test_changes_say_what_is_new_changed_unchanged_and_gone() -> None:
    """The scrape summary's words (issue 40: it did not say whether anything was new)."""
    from moonpin.scrapers.refresh import changes

    kb = store.load(ROOT / "data" / "kb.json")
    older = kb.model_copy(update={
        "sglang": kb.sglang[1:],  # the first release is new to the next KB
        "torch": (kb.torch[0].model_copy(update={"variants": ()}), *kb.torch[1:]),
        "mooncake": kb.mooncake[:-1]})
    got = changes(older, kb)
    assert got["sglang"]["new"] == [kb.sglang[0].version]
    assert got["torch"]["changed"] == [kb.torch[0].version]
    assert got["mooncake"]["new"] == [f"{kb.mooncake[-1].dist}=={kb.mooncake[-1].version}"]
    assert len(got["sglang"]["unchanged"]) == len(kb.sglang) - 1
    back = changes(kb, older)
    assert back["sglang"]["gone"] == [kb.sglang[0].version]
    assert all(not d["new"] and not d["changed"] for d in changes(kb, kb).values())
