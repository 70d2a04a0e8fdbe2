"""``moonpin show`` and ``kb info`` of the native extensions a worker loads beside mooncake
(nixl, sglang-kernel, sgl-deep-ep, flashinfer): read from the shipped KB's own records, the
same as ``--json`` of ``show`` for a mooncake release; nothing here is a hard-coded fact
about a release — each expectation is read from the KB the command reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moonpin.cli import show
from moonpin.kb import store
from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.fixture(scope="module")
def kb() -> store.KnowledgeBase:
    return store.load(SHIPPED)


def test_every_native_record_has_the_shape_show_prints(kb: store.KnowledgeBase) -> None:
    assert kb.native
    for r in kb.native:
        assert show.fits(r.model_dump(mode="json"), show._NATIVE), (r.dist, r.version)
        assert show.record(SHIPPED, "native", r.dist, r.version) == r.model_dump(mode="json")


def test_show_of_an_uninstallable_release_says_why(kb: store.KnowledgeBase) -> None:
    bad = next(r for r in kb.native if r.uninstallable)
    out = run_moonpin("show", f"{bad.dist}=={bad.version}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{bad.dist} {bad.version} ({bad.project}):")
    for u in bad.uninstallable:
        assert f"cannot be installed: {u.requirement} ({u.reason})" in out.stdout


def test_show_json_is_the_record_and_the_text_names_each_build(
        kb: store.KnowledgeBase) -> None:
    r = max((r for r in kb.native if any(w.builds for w in r.wheels)),
            key=lambda r: sum(len(w.builds) for w in r.wheels))
    doc = json.loads(run_moonpin("show", f"{r.dist}=={r.version}", "--json").stdout)
    assert doc == r.model_dump(mode="json")
    text = run_moonpin("show", f"{r.dist.upper().replace('-', '_')}=={r.version}").stdout
    for w in r.wheels:
        assert w.artifact.filename in text
        for b in w.builds:
            assert f"build {b.member}:" in text


def test_show_of_a_native_release_the_kb_lacks_names_the_nearest(
        kb: store.KnowledgeBase) -> None:
    dist = kb.native[0].dist
    r = run_moonpin("show", f"{dist}==999.0")
    assert r.returncode == 2 and "is not in the knowledge base" in r.stderr
    r = run_moonpin("show", f"{dist}x==1.0")
    assert r.returncode == 2 and f"did you mean {dist}" in r.stderr


def test_kb_info_counts_the_native_releases(kb: store.KnowledgeBase) -> None:
    info = json.loads(run_moonpin("kb", "info", "--json").stdout)
    assert info["native_releases"] == len(kb.native)
    assert info["native_builds"] == sum(len(w.builds) for r in kb.native for w in r.wheels)
    for dist, n in info["native_distributions"].items():
        mine = [r for r in kb.native if r.dist == dist]
        assert n["releases"] == len(mine)
        assert n["uninstallable"] == sum(1 for r in mine if r.uninstallable)
    text = run_moonpin("kb", "info").stdout
    assert f"native   {len(kb.native)} releases" in text
