"""A rebuild's unread release gets back the facts the old KB had, for every kind, through
the one keyed restore of :class:`moonpin.scrapers.refresh._Source` (issue 37, D1)."""

from __future__ import annotations

import pytest

from moonpin.kb.models import (
    Artifact,
    MooncakeRelease,
    NativeRelease,
    PGRequirement,
    SglangRelease,
    TorchRelease,
    TorchVariant,
    Unread,
)
from moonpin.scrapers import refresh as rf

ART = Artifact(filename="x.whl", path="x/x.whl", sha256="0" * 64, size=1)


def _variant(arch: str) -> TorchVariant:
    return TorchVariant(platform=f"manylinux_2_28_{arch}", arch=arch, cuda_major=13,
                        evidence="e", artifact=ART)


def _previous() -> rf._Facts:
    return rf._Facts(
        sglang={"0.5.1": SglangRelease(version="0.5.1", artifact=ART,
                                       pg=PGRequirement(module=None))},
        moon={("mooncake-transfer-engine", "0.3.1"):
              MooncakeRelease(dist="mooncake-transfer-engine", version="0.3.1")},
        native={("nixl-cu13", "1.5.1"):
                NativeRelease(project="nixl", dist="nixl-cu13", version="1.5.1")},
        torch={"2.14.1": TorchRelease(version="2.14.1", variants=(
            _variant("aarch64"), _variant("x86_64")))})


@pytest.mark.parametrize(("source", "unread", "field", "key"), [
    (rf._SglangSource(None, "f"), Unread(kind="sglang", name="sglang", version="0.5.1",
                                         reason="503"), "sglang", "0.5.1"),
    (rf._MooncakeSource(), Unread(kind="mooncake", name="mooncake-transfer-engine",
                                  version="0.3.1", reason="503"),
     "moon", ("mooncake-transfer-engine", "0.3.1")),
    (rf._NativeSource(), Unread(kind="native", name="nixl-cu13", version="1.5.1",
                                reason="503"), "native", ("nixl-cu13", "1.5.1")),
])
def test_a_release_not_read_again_gets_its_previous_facts(
        source: rf._Source, unread: Unread, field: str, key: object) -> None:
    previous, facts = _previous(), rf._Facts()
    assert source.restore(facts, previous, unread)
    assert getattr(facts, field)[key] is getattr(previous, field)[key]
    assert not source.restore(facts, previous, unread)  # already there: not replaced
    other = unread.model_copy(update={"version": "9.9"})
    assert not source.restore(facts, previous, other)  # the old KB had none
    assert list(getattr(facts, field)) == [key]


def test_a_torch_release_gets_back_only_the_platforms_not_read() -> None:
    previous, facts = _previous(), rf._Facts()
    read = _variant("x86_64").model_copy(update={"evidence": "new"})
    facts.torch["2.14.1"] = TorchRelease(version="2.14.1", variants=(read,))
    u = Unread(kind="torch", name="torch", version="2.14.1", reason="503")
    assert rf._TorchSource().restore(facts, previous, u)
    assert [(v.arch, v.evidence) for v in facts.torch["2.14.1"].variants] == [
        ("aarch64", "e"), ("x86_64", "new")]
    assert not rf._TorchSource().restore(facts, previous, u)
