"""``bytes_from`` is picked the same way every scrape (issue 40: identical builds flipped
their provenance between scrapes, so KB diffs were noisy), and names bytes a build of its
release really shares (the same module, or the same CRC-32 and sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.kb.models import KnowledgeBase
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.refresh import scrape
from tests.lib.elfbuild import build_so
from tests.lib.server import FakeIndex
from tests.lib.wheels import build_wheel
from tests.scrapers.test_native_e2e import _in_order
from tests.scrapers.test_scrape_e2e import LOADER_PG, only_present

ROOT = Path(__file__).resolve().parents[2]


def _shared_index(idx: FakeIndex, releases: tuple[str, ...]) -> None:
    """mooncake releases re-shipping the same build bytes (as a ``.post`` does), two
    Python ABIs each."""
    so = build_so(needed=["libcudart.so.13", "libtorch.so"],
                  strings=["mooncake", "register_backend", "MooncakeBackendOptions"])
    idx.add_project("mooncake-transfer-engine", {v: dict(
        build_wheel("mooncake-transfer-engine", v, {
            "mooncake/__init__.py": "", "mooncake/pg.py": LOADER_PG,
            f"mooncake/pg_2_13_0.cpython-{py}-x86_64-linux-gnu.so": so},
            tag=f"cp{py}-cp{py}-manylinux_2_28_x86_64")
        for py in ("311", "312")) for v in releases})
    only_present(idx)


def _run(idx: FakeIndex, old: KnowledgeBase | None = None) -> tuple[KnowledgeBase, object]:
    return scrape(old, Fetcher(retries=0), idx.url + "/", only=("mooncake",), workers=2)


@pytest.mark.parametrize("reverse", [False, True])
def test_bytes_from_does_not_depend_on_the_read_order(monkeypatch: pytest.MonkeyPatch,
                                                      reverse: bool) -> None:
    """Which build names the reading it shares does not depend on the order the releases
    are read in (issue 40: identical builds flipped their provenance between scrapes), nor
    on a refresh having kept the release that read the bytes: a reading is shared within
    its release only, whose wheels are read in a fixed order (as native's)."""
    both = ("0.3.13", "0.3.13.post1")
    with FakeIndex() as idx:
        _shared_index(idx, both)
        _in_order(monkeypatch, reverse=False)
        forward, _ = _run(idx)
        _in_order(monkeypatch, reverse=reverse)
        other, _ = _run(idx)
    with FakeIndex() as idx:  # a refresh: 0.3.13 kept from the last KB, the .post read anew
        _shared_index(idx, both[:1])
        first, _ = _run(idx)
    with FakeIndex() as idx:
        _shared_index(idx, both)
        refreshed, summary = _run(idx, first)
    assert summary.kept["mooncake"] == 1  # type: ignore[attr-defined]
    assert other.mooncake == forward.mooncake == refreshed.mooncake
    ptr = {f"{b.member} in {w.artifact.filename}": b.bytes_from
           for r in forward.mooncake for w in r.wheels for b in w.builds}
    base = ("mooncake/pg_2_13_0.cpython-312-x86_64-linux-gnu.so in "
            "mooncake_transfer_engine-0.3.13-cp312-cp312-manylinux_2_28_x86_64.whl")
    post = base.replace("0.3.13-", "0.3.13.post1-")
    assert ptr[base] is None and ptr[post] is None  # each release reads its own
    assert [k for k, v in ptr.items() if v == base] == [base.replace("312", "311")]
    assert [k for k, v in ptr.items() if v == post] == [post.replace("312", "311")]


def test_changes_say_what_is_new_changed_unchanged_and_gone() -> None:
    """The scrape summary's words (issue 40: it did not say whether anything was new)."""
    from moonpin.scrapers.refresh import changes

    kb = store.load(ROOT / "data" / "kb.json")
    older = kb.model_copy(update={
        "sglang": kb.sglang[1:],  # the first release is new to the next KB
        "torch": (kb.torch[0].model_copy(update={"variants": ()}), *kb.torch[1:]),
        "mooncake": kb.mooncake[:-1], "native": kb.native[1:]})
    got = changes(older, kb)
    assert got["sglang"]["new"] == [kb.sglang[0].version]
    assert got["torch"]["changed"] == [kb.torch[0].version]
    assert got["mooncake"]["new"] == [f"{kb.mooncake[-1].dist}=={kb.mooncake[-1].version}"]
    assert got["native"]["new"] == [f"{kb.native[0].dist}=={kb.native[0].version}"]
    assert len(got["sglang"]["unchanged"]) == len(kb.sglang) - 1
    back = changes(kb, older)
    assert back["sglang"]["gone"] == [kb.sglang[0].version]
    assert all(not d["new"] and not d["changed"] for d in changes(kb, kb).values())
