"""Compatible stacks as cliques of one multipartite graph (:mod:`moonpin.resolver.stacks`,
issue 39): its parts are the KB's, its edges the rule's; ``kb resolve`` writes where a stack
breaks (``resolved/_stacks.json``), and ``which mooncake`` / ``explain`` apply it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moonpin import api
from moonpin.kb import store
from moonpin.kb.models import DistPin
from moonpin.resolver import query, stacks
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.tables import per_release
from tests.lib.resolvedkb import resolved_kb
from tests.resolver.kbslice import build_kb
from tests.resolver.test_which_native import _kernel, _nixl_backend, _nixl_meta

MOONCAKE = "mooncake-transfer-engine-cuda13"


def _pg_build(torch: str) -> dict[str, Any]:
    return {"module": "pg_" + torch.replace(".", "_"), "names": ["MooncakeBackendOptions"],
            "backends": ["mooncake", "mooncake-cpu"], "cuda": 13}


def _stack_kb(pins: tuple[str, ...] = ("sglang-kernel==0.4.10",)) -> Any:
    """sglang 0.5.23 admits torch 2.13.0 and 2.14.1, imports mooncake.pg, and pins
    ``pins``; the mooncake release has a build for both torches; sglang-kernel 0.4.10
    requires torch==2.14.1."""
    kb = build_kb({
        "sglang": [{"version": "0.5.23", "module": "mooncake.pg",
                    "names": ["MooncakeBackendOptions"], "backends": ["mooncake"],
                    "torch": ["torch>=2.13,<2.15"]}],
        "mooncake": [{"dist": MOONCAKE, "version": "0.3.13", "wheels": [
            {"python": "cp312", "arch": "x86_64",
             "builds": [_pg_build("2.13.0"), _pg_build("2.14.1")],
             "loaders": {"mooncake.pg": ["mooncake.pg_{torch}"]}}]}],
        "torch": [{"version": v, "cuda": {"x86_64": 13, "aarch64": 13}}
                  for v in ("2.13.0", "2.14.1")]})
    s = kb.sglang[0].model_copy(update={"extension_pins": tuple(
        DistPin(dist=p.split("==")[0], requirement=p, member="sglang-0.5.23.dist-info/METADATA",
                line=270 + i) for i, p in enumerate(pins))})
    return kb.model_copy(update={"sglang": (s,), "native": (
        _kernel("0.4.10", "==2.14.1", 13), _kernel("0.4.9", "==2.13.0", 13),
        _nixl_meta("1.5.1"), _nixl_backend(13, "1.5.1", ("213", "214")),
        _nixl_backend(13, "1.4.0", ("213",)), _nixl_backend(12, "1.5.1", ("213",)))})


@pytest.fixture(scope="module")
def kb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolved_kb(tmp_path_factory.mktemp("stacks"), _stack_kb())


@pytest.fixture(scope="module")
def st() -> stacks.Stacks:
    return stacks.attach(CompatGraph(_stack_kb()))


# ----------------------------------------------------------------------- the graph


def test_parts_are_the_kb_s_and_releases_of_a_part_are_never_joined(st: stacks.Stacks) -> None:
    assert set(st.parts) == {"sglang", "torch", MOONCAKE, "sglang-kernel", "nixl",
                             "nixl-cu12", "nixl-cu13"}
    for nodes in st.parts.values():
        assert not any(st.g.has_edge(u, v) for u in nodes for v in nodes)
    # a new project in the KB is a new part, with no code naming it
    kb = _stack_kb()
    other = _kernel("1.0", None, 13).model_copy(update={"project": "newproj",
                                                       "dist": "newproj-cu13"})
    g = CompatGraph(kb.model_copy(update={"native": (*kb.native, other)}))
    assert "newproj-cu13" in stacks.Stacks(g).parts


def test_edges_are_the_rule_s(st: stacks.Stacks) -> None:
    plat = ("cp312", "x86_64")
    s, t13, t14 = ("sglang", "0.5.23"), ("torch", "2.13.0"), ("torch", "2.14.1")
    assert st.g[s][t13]["kind"] == "requires" and st.joined(s, t14, plat)
    # SGLang's own pin: only sglang-kernel 0.4.10
    assert st.joined(s, ("sglang-kernel", "0.4.10"), plat)
    assert not st.joined(s, ("sglang-kernel", "0.4.9"), plat)
    assert st.why(s, ("sglang-kernel", "0.4.9"), plat).startswith(
        "sglang's requirement: sglang 0.5.23 requires 'sglang-kernel==0.4.10'")
    # torch -- extension: pip installs it beside that torch
    assert st.joined(t14, ("sglang-kernel", "0.4.10"), plat)
    assert not st.joined(t13, ("sglang-kernel", "0.4.10"), plat)
    assert st.why(t13, ("sglang-kernel", "0.4.10"), plat).startswith("torch requirement: ")
    # the meta nixl's exact pins: nixl-cu13 1.5.1, not 1.4.0
    meta = ("nixl", "1.5.1")
    assert st.joined(meta, ("nixl-cu13", "1.5.1"), plat)
    assert not st.joined(meta, ("nixl-cu13", "1.4.0"), plat)
    assert "nixl 1.5.1 requires 'nixl-cu13==1.5.1'" in st.why(meta, ("nixl-cu13", "1.4.0"), plat)
    # unconstrained parts: free
    assert st.g[("sglang-kernel", "0.4.9")][("nixl-cu13", "1.4.0")]["kind"] == "free"


def test_a_compatible_stack_is_a_clique(st: stacks.Stacks) -> None:
    s = st.cg.find_sglang("0.5.23")
    assert s is not None
    found = st.cliques(s, "2.14.1", "cp312", "x86_64", ["sglang-kernel", "nixl", "nixl-cu13"])
    as_sets = [set(c) for c in found]
    assert {("sglang", "0.5.23"), ("torch", "2.14.1"), ("sglang-kernel", "0.4.10"),
            ("nixl", "1.5.1"), ("nixl-cu13", "1.5.1")} in as_sets
    # nixl 1.5.1 and nixl-cu13 1.4.0 are never in one clique
    assert not any({("nixl", "1.5.1"), ("nixl-cu13", "1.4.0")} <= c for c in as_sets)
    # and at torch 2.13.0 no clique holds SGLang's own sglang-kernel
    at13 = st.cliques(s, "2.13.0", "cp312", "x86_64", ["sglang-kernel"])
    assert not any(n[0] == "sglang-kernel" for c in at13 for n in c)


def test_the_meta_nixl_and_the_release_it_loads_from_are_a_3_clique(st: stacks.Stacks) -> None:
    """The meta ``nixl`` (no build) loads ``nixl_ep_cu<major>`` for torch's CUDA: its pin of
    that release is an edge recording where it loads from it, its torch edge is judged by
    that release's, and a stack with the meta holds the release it loads from."""
    s = st.cg.find_sglang("0.5.23")
    assert s is not None
    plat, meta = ("cp312", "x86_64"), ("nixl", "1.5.1")
    assert st.loaded("2.14.1", meta, plat) == [("nixl-cu13", "1.5.1")]  # torch is CUDA 13
    assert st.loaded("2.14.1", ("nixl-cu13", "1.5.1"), plat) == []  # it has builds
    t = ("torch", "2.14.1")
    assert st.joined(t, meta, plat) and st.joined(t, ("nixl-cu13", "1.5.1"), plat)
    assert st.g[meta][("nixl-cu13", "1.5.1")]["loads"]["2.14.1"] >= {plat}
    assert "loads" not in st.g[meta][("nixl-cu12", "1.5.1")]  # pinned, not loaded from
    # the meta's judgement is the one it loads from's, read off that release's torch edge
    meta_entry = st.entries("2.14.1", meta)[plat]
    assert meta_entry[2] == st.entries("2.14.1", ("nixl-cu13", "1.5.1"))[plat][2] == 0
    assert "nixl_ep loads its build from nixl-cu13==1.5.1" in meta_entry[7][0]
    found = [set(c) for c in st.cliques(s, "2.14.1", *plat, ["nixl"])]
    assert found and all({meta, ("nixl-cu13", "1.5.1")} <= c for c in found if meta in c)
    assert any(meta in c for c in found)


def test_evaluate_native_takes_the_judgement_it_is_handed() -> None:
    """The meta's judgement composes what ``loaded`` hands it (the stack graph's edge),
    not a judgement of its own."""
    from moonpin.resolver import native
    from moonpin.resolver.query import Check, Evaluation, resolve_torch

    g = CompatGraph(_stack_kb())
    meta = native.known_version(g, "nixl", "1.5.1")
    t = resolve_torch(g, "2.14.1", "x86_64")
    handed = Evaluation("", "nixl-cu13", "1.5.1", "2.14.1", "cp312", "x86_64")
    handed.checks = [Check("build for torch", False, "planted")]
    ev = native.evaluate_native(g, meta, t, "cp312", "x86_64", loaded=lambda r: handed)
    assert ev.reasons == ["build for torch: nixl-cu13 1.5.1: planted"]
    fresh = native.evaluate_native(CompatGraph(_stack_kb()), meta, t, "cp312", "x86_64")
    assert fresh.verdict == "compatible"  # judged here, it loads


def test_holds_names_the_edge_that_breaks_the_stack(st: stacks.Stacks) -> None:
    s = st.cg.find_sglang("0.5.23")
    assert s is not None
    assert st.holds(s, "2.14.1", "cp312", "x86_64") == (True, "")
    ok, why = st.holds(s, "2.13.0", "cp312", "x86_64")
    assert ok is False
    assert why.startswith("sglang-kernel: torch requirement: torch 2.13.0 does not satisfy "
                          "sglang-kernel 0.4.10's 'torch==2.14.1'"), why


def test_two_pinned_extensions_that_pin_each_other_apart_break_the_clique() -> None:
    """SGLang pins nixl 1.5.1 and nixl-cu13 1.4.0; each installs beside torch, but nixl
    1.5.1 requires nixl-cu13==1.5.1: no clique holds both."""
    g = CompatGraph(_stack_kb(("nixl==1.5.1", "nixl-cu13==1.4.0")))
    st = stacks.Stacks(g)
    s = g.find_sglang("0.5.23")
    assert s is not None
    ok, why = st.holds(s, "2.13.0", "cp312", "x86_64")
    assert ok is False and "nixl 1.5.1 requires 'nixl-cu13==1.5.1'" in why, why


# ----------------------------------------------------------------------- the table


def test_kb_resolve_writes_where_stacks_break_and_the_table_answers_as_the_graph(
        kb_path: Path, st: stacks.Stacks) -> None:
    doc = json.loads((kb_path.parent / "resolved" / per_release.STACKS_NAME).read_text())
    assert doc["broken"]["0.5.23"]["2.13.0"]["cp312/x86_64"][0] is False
    assert "2.14.1" not in doc["broken"]["0.5.23"]
    from_table = CompatGraph.from_path(kb_path)  # not attached: the table alone answers
    s = st.cg.find_sglang("0.5.23")
    assert s is not None
    for t in ("2.13.0", "2.14.1"):
        for p in st.pythons:
            for a in st.arches:
                assert from_table.stack_status(s, t, p, a) == st.holds(s, t, p, a), (t, p, a)


def test_a_damaged_stacks_table_is_not_read(kb_path: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    shutil.copytree(kb_path.parent / "resolved", tmp_path / "resolved")
    assert per_release.load_stacks(copy) is not None
    table = tmp_path / "resolved" / per_release.STACKS_NAME
    doc = json.loads(table.read_text())
    doc["broken"]["0.5.23"]["2.13.0"]["cp312/x86_64"] = [True, "damaged"]
    table.write_text(json.dumps(doc))
    assert per_release.load_stacks(copy) is None


# ----------------------------------------------------------------------- the queries


def test_which_mooncake_applies_the_extension_edges(kb_path: Path) -> None:
    """On main, mooncake 0.3.13 was recommended at torch 2.13.0 too, where pip cannot
    install sglang 0.5.23's own sglang-kernel."""
    res = api.which("mooncake", sglang="0.5.23", kb=kb_path)
    best = res.compatible[0]
    assert best.requirement == f"{MOONCAKE}==0.3.13"
    assert {w.torch for w in best.wheels} == {"2.14.1"}
    at13 = api.which("mooncake", sglang="0.5.23", torch="2.13.0", kb=kb_path)
    assert not at13.compatible
    assert (at13.excluded[0].reason or "").startswith(
        "sglang's extensions: sglang-kernel: torch requirement: torch 2.13.0 does not "
        "satisfy sglang-kernel 0.4.10's 'torch==2.14.1'"), at13.excluded


def test_the_full_resolver_answers_as_the_table(kb_path: Path) -> None:
    g = CompatGraph(_stack_kb())
    stacks.attach(g)
    for torch in (None, "2.13.0", "2.14.1"):
        full = query.which_mooncake(g, "0.5.23", torch=torch)
        fast = api.which("mooncake", sglang="0.5.23", torch=torch, kb=kb_path)
        assert full.to_json() == fast.to_json(), torch


def test_explain_names_the_extension_edge_that_breaks_the_stack(kb_path: Path) -> None:
    res = api.explain("sglang==0.5.23", f"{MOONCAKE}==0.3.13", "torch==2.13.0", kb=kb_path)
    assert res.verdict == "incompatible"
    bad = [c for c in res.checks if c["ok"] is False]
    assert [c["name"] for c in bad] == ["sglang's extensions"], bad
    assert bad[0]["detail"].startswith("sglang-kernel: torch requirement: ")
    ok = api.explain("sglang==0.5.23", f"{MOONCAKE}==0.3.13", "torch==2.14.1", kb=kb_path)
    assert ok.verdict == "compatible"
    # a whole stack: the extension's own edge is named too
    stack = api.explain("sglang==0.5.23", f"{MOONCAKE}==0.3.13", "sglang-kernel==0.4.9",
                        "torch==2.14.1", python="3.12", arch="x86_64", kb=kb_path)
    assert stack.verdict == "incompatible"
    assert any(c["name"] == "sglang-kernel==0.4.9" and c["detail"].startswith(
        "sglang's requirement: sglang 0.5.23 requires 'sglang-kernel==0.4.10'")
        for c in stack.checks), stack.checks


def test_a_kb_with_no_extension_pins_answers_as_before() -> None:
    plain = CompatGraph(_stack_kb(()))
    with_stacks = CompatGraph(_stack_kb(()))
    stacks.attach(with_stacks)
    assert (query.which_mooncake(plain, "0.5.23").to_json()
            == query.which_mooncake(with_stacks, "0.5.23").to_json())



def test_explain_of_a_stack_names_a_pin_one_extension_holds_on_another(kb_path: Path) -> None:
    """nixl 1.5.1 requires nixl-cu13==1.5.1: a stack naming nixl-cu13 1.4.0 beside it is
    no clique (real pip: "Cannot install nixl-cu12==1.4.0 and nixl==1.5.1 because these
    package versions have conflicting dependencies"); on main every check passed."""
    res = api.explain("nixl==1.5.1", "nixl-cu13==1.4.0", "torch==2.13.0", python="3.12",
                      arch="x86_64", kb=kb_path)
    bad = [c for c in res.checks if c["ok"] is False]
    assert [c["name"] for c in bad] == ["nixl==1.5.1 pin"], res.checks
    assert bad[0]["detail"] == ("nixl 1.5.1 requires 'nixl-cu13==1.5.1'; pip will not "
                                "install nixl-cu13 1.4.0 beside it")
    assert res.verdict == "incompatible"
    ok = api.explain("nixl==1.5.1", "nixl-cu13==1.5.1", "torch==2.13.0", python="3.12",
                     arch="x86_64", kb=kb_path)
    assert ok.verdict == "compatible", ok.checks


# ----------------------------------------------------------------------- one package


def _old_kernel(version: str) -> Any:
    """An ``sgl-kernel`` release: the kernel's former distribution, installing the same
    ``sgl_kernel/`` package (read from its wheel's files, as the scraper records it)."""
    k = _kernel(version, "==2.14.1", 13)
    return k.model_copy(update={"dist": "sgl-kernel", "wheels": tuple(
        w.model_copy(update={"artifact": w.artifact.model_copy(update={
            "filename": w.artifact.filename.replace("sglang_kernel", "sgl_kernel")})})
        for w in k.wheels)})


def _two_kernels_kb(pins: tuple[str, ...]) -> Any:
    kb = _stack_kb(pins)
    return kb.model_copy(update={"native": (*kb.native, _old_kernel("0.3.21"))})


def test_two_distributions_of_one_package_are_never_one_stack() -> None:
    """sgl-kernel and sglang-kernel both install ``sgl_kernel/``: no edge joins their
    releases, whatever else holds, and a stack SGLang pins with both does not hold."""
    g = CompatGraph(_two_kernels_kb(("sglang-kernel==0.4.10", "sgl-kernel==0.3.21")))
    st = stacks.Stacks(g)
    old, new, plat = ("sgl-kernel", "0.3.21"), ("sglang-kernel", "0.4.10"), ("cp312", "x86_64")
    assert not st.g.has_edge(old, new)
    assert "both install sgl_kernel/" in st.why(old, new, plat)
    t = ("torch", "2.14.1")
    assert st.joined(t, old, plat) and st.joined(t, new, plat)  # each installs alone
    s = g.find_sglang("0.5.23")
    assert s is not None
    ok, why = st.holds(s, "2.14.1", *plat)
    assert ok is False and "both install sgl_kernel/" in why, why
    found = st.cliques(s, "2.14.1", *plat, ["sgl-kernel", "sglang-kernel"])
    assert found and not any({old, new} <= set(c) for c in found)
    # other distributions stay joined: the rule reads the packages, not the names
    assert st.g[new][("nixl-cu13", "1.5.1")]["kind"] == "free"


def test_explain_says_two_distributions_install_one_package(tmp_path: Path) -> None:
    path = tmp_path / "kb.json"
    store.save(_two_kernels_kb(("sglang-kernel==0.4.10",)), path)
    res = api.explain("sglang==0.5.23", "sgl-kernel==0.3.21", "sglang-kernel==0.4.10",
                      python="3.12", arch="x86_64", kb=path)
    bad = [c for c in res.checks if c["ok"] is False]
    assert res.verdict == "incompatible"
    assert [c["name"] for c in bad] == ["one package, two distributions"]
    assert bad[0]["detail"].startswith("sgl-kernel==0.3.21 and sglang-kernel==0.4.10 both "
                                       "install sgl_kernel/")
    assert bad[0]["evidence"] == [
        "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl: top-level sgl_kernel",
        "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl: top-level sgl_kernel"]
    alone = api.explain("sglang==0.5.23", "sglang-kernel==0.4.10", python="3.12",
                        arch="x86_64", kb=path)
    assert alone.verdict == "compatible"  # the control: one of them is fine
