"""The derived facts' encoding: a value that occurs more than once is written once and
read back as one object; a pool that refers forward, to itself or as two types is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.kb.facts import FORMAT, Artifact, FactsError, Pg, from_json, from_model, to_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped() -> object:
    return from_model(store.load(ROOT / "data" / "kb.json"))


def test_round_trip_shares_repeated_values(shipped: object) -> None:
    doc = json.loads(json.dumps(to_json(shipped)))  # as a file would hold it
    back = from_json(doc)
    assert back == shipped
    # the wheels of one release share their loaders: one object, read once
    release = next(r for r in back.mooncake if len(r.wheels) > 1 and r.wheels[0].loaders)
    assert release.wheels[0].loaders is release.wheels[1].loaders
    # ... and the file is a fraction of the same facts written without sharing (2.97x on
    # the shipped KB since mooncake's bytes_from stays within a release; 3.18x before)
    assert len(json.dumps(doc)) * 2.5 < len(json.dumps(shipped, default=str))


def _pg(names: list[str]) -> list[object]:
    return [None, [], names, [], [], False, []]


@pytest.mark.parametrize("pool, root, why", [
    ([_pg(["a"])], 1, "no shared value 1"),
    ([_pg(["a"])], -1, "no shared value -1"),
    ([["a", "b"], _pg(["x"])], 0, "not a list of 7 fields"),   # strings read as a Pg
    ([0], 0, "shared value 0 is a reference"),
    ([[None, [], 0, [], [], False, []]], 0, "no shared value 0 here"),  # itself
])
def test_a_bad_pool_is_refused(pool: list[object], root: object, why: str) -> None:
    from moonpin.kb import facts

    reader = facts._reader(Pg)
    facts._POOL.append(facts._Pool(pool))
    try:
        with pytest.raises(facts._Bad) as e:
            reader(root)
    finally:
        facts._POOL.pop()
    assert why in e.value.what


def test_one_entry_is_one_type() -> None:
    from moonpin.kb import facts

    facts._POOL.append(facts._Pool([["a.whl", "0" * 64]]))
    try:
        assert facts._reader(Artifact)(0) == Artifact("a.whl", "0" * 64)
        with pytest.raises(facts._Bad, match="read as two types"):
            facts._reader(tuple[str, ...])(0)
    finally:
        facts._POOL.pop()


def test_another_format_is_refused(shipped: object) -> None:
    doc = to_json(shipped)
    for bad in ({**doc, "format": "pooled-0"}, {**doc, "extra": 1}, doc["root"], [],
                {**doc, "pool": {}}):
        with pytest.raises(FactsError, match=f"not {FORMAT} facts"):
            from_json(bad)
