"""The compatibility rule on plain facts (moonpin/resolver/rule.py): inline cases, no KB, no
image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from moonpin.resolver import rule
from moonpin.resolver.rule import BuildFacts, Decision, Requirement, Scheme, TorchFacts

ROOT = Path(__file__).resolve().parents[2]
STD = Scheme("prebuilt", ("mooncake.pg_{torch}",), r"\d+(?:\.\d+)*", "_")
REQ = Requirement("mooncake.pg", ("MooncakeBackendOptions", "join_group"),
                  ("mooncake", "mooncake-cpu"), release="sglang 0.5.18")
FULL = BuildFacts("mooncake/pg_2_13_0.so", ("MooncakeBackendOptions", "join_group"),
                  ("mooncake", "mooncake-cpu"), cuda=13)


@pytest.mark.parametrize(("scheme", "torch", "sep", "want"), [
    (STD, "2.13.0", None, "2_13_0"),
    (STD, "2.13.0+cu130", None, "2_13_0"),          # the local label is not matched
    (STD, "2.9.0a0+git123", None, "2_9_0"),
    (STD, "2.11.0", ".", "2.11.0"),                # the version an error message names
    (Scheme("prebuilt", separator="_"), "2.13.0+cu130", None, "2_13_0+cu130"),  # no regex
    (Scheme("prebuilt", version_regex=r"\d+"), "2.13.0", None, None),          # no separator
    (Scheme("prebuilt", version_regex=r"(", separator="_"), "2.13.0", None, None),  # bad regex
    (Scheme("prebuilt", version_regex=r"v\d+", separator="_"), "2.13.0", None, None),
])
def test_loader_suffix(scheme: Scheme, torch: str, sep: str | None, want: str | None) -> None:
    assert rule.loader_suffix(scheme, torch, sep) == want


def test_loader_targets() -> None:
    two = Scheme("prebuilt", ("mooncake._ep", "mooncake.pg_{torch}"), r"\d+(?:\.\d+)*", "_")
    assert rule.loader_targets(two, "2.12.0+cu126") == (("mooncake._ep", "mooncake.pg_2_12_0"),
                                                        "")
    assert rule.loader_target(two, "mooncake._ep", "anything") == "mooncake._ep"
    none, why = rule.loader_targets(Scheme("prebuilt", ("mooncake.pg_{torch}",)), "2.13.0")
    assert none is None
    assert why == "cannot compute mooncake.pg_{torch} for torch 2.13.0 with the loader's rule"


@pytest.mark.parametrize(("shipped", "want"), [
    ({"mooncake.pg", "mooncake.ep"}, "mooncake.pg"),
    ({"mooncake.ep"}, "mooncake.ep"),      # SGLang's ImportError fallback
    ({"mooncake.other"}, None),
    (set(), None),
])
def test_choose_module(shipped: set[str], want: str | None) -> None:
    req = Requirement("mooncake.pg", alternatives=("mooncake.ep",))
    assert rule.choose_module(req, shipped) == want


def test_choose_module_without_fallback() -> None:
    assert rule.choose_module(Requirement("mooncake.pg"), {"mooncake.ep"}) is None
    assert rule.choose_module(Requirement(None), {"mooncake.pg"}) is None


def test_no_module_and_no_build_words() -> None:
    d = rule.no_module(REQ, "w.whl", ["mooncake.ep"])
    assert d == Decision(False, "sglang 0.5.18 imports mooncake.pg; w.whl has no mooncake.pg "
                                "(it has: mooncake.ep)")
    assert rule.no_module(REQ, "w.whl", []).detail.endswith("(it has: no extension modules)")
    d = rule.no_build("mooncake/pg.py", "mooncake.pg_2_14_0", "2.14.0", "w.whl",
                      ["pg_2_12_0", "pg_2_13_0"], " for cp312 on x86_64")
    assert d.ok is False
    assert d.detail == ("mooncake/pg.py imports mooncake.pg_2_14_0 for torch 2.14.0; w.whl "
                        "has no such build for cp312 on x86_64 (it has pg_2_12_0, pg_2_13_0)")


@pytest.mark.parametrize(("built_for", "torch", "ok", "text"), [
    ("2.8.0", "2.8.0", True, "was built for torch 2.8.0 (bytes)"),
    ("2.8.0", "2.8.0+cu128", True, "was built for torch 2.8.0 (bytes)"),
    ("2.8", "2.8.0", True, "built for torch 2.8 "),       # PEP 440 equality, not strings
    ("2.8.0", "2.9.1", False, "(bytes), not 2.9.1"),
    (None, "2.8.0", None, "names no torch release it was built for"),
    ("2.8.0", "nightly", None, "not a PEP 440 version"),
])
def test_direct_build(built_for: str | None, torch: str, ok: bool | None, text: str) -> None:
    d = rule.direct_build("mooncake/ep.so", built_for, "bytes", torch)
    assert d.ok is ok
    assert text in d.detail


@pytest.mark.parametrize(("builds", "ok", "text"), [
    ([FULL], True, "provides MooncakeBackendOptions, join_group"),
    ([BuildFacts("b", ("join_group",))], False,
     "sglang 0.5.18 imports MooncakeBackendOptions from mooncake.pg; the build does not "
     "export it"),
    ([BuildFacts("b", ())], False, "imports MooncakeBackendOptions, join_group from "
     "mooncake.pg; the build does not export them"),
    # a name never looked for is not known missing
    ([BuildFacts("b", ("join_group",), names_checked=("join_group",))], None,
     "not known whether MooncakeBackendOptions exist"),
    # one missing name looked for decides, even beside one not looked for
    ([BuildFacts("b", (), names_checked=("join_group",))], False, "join_group"),
    # bytes read in part: nothing missing is known missing
    ([BuildFacts("b", ("join_group",), complete=False)], None, "those bytes were not read"),
    ([], None, "not known whether"),
    # the names come from every build the loader imports
    ([BuildFacts("a", ("join_group",)), BuildFacts("b", ("MooncakeBackendOptions",))], True,
     "provides"),
])
def test_names(builds: list[BuildFacts], ok: bool | None, text: str) -> None:
    d = rule.names(REQ, builds)
    assert d.ok is ok
    assert text in d.detail


def test_names_when_nothing_required() -> None:
    assert rule.names(Requirement("mooncake.pg"), [FULL]) == Decision(
        True, "provides every name imported")


def test_optional_missing() -> None:
    req = Requirement("mooncake.pg", ("join_group",), optional_names=("get_peer_state",
                                                                      "brand_new"))
    b = BuildFacts("b", ("join_group",), names_checked=("join_group", "get_peer_state"))
    assert rule.optional_missing(req, [b]) == ("get_peer_state",)  # brand_new not looked for
    assert rule.optional_missing(req, [BuildFacts("b", ("join_group",))]) == (
        "get_peer_state", "brand_new")


@pytest.mark.parametrize(("needs", "builds", "ok", "text"), [
    (("mooncake", "mooncake-cpu"), [FULL], True, "registers mooncake, mooncake-cpu"),
    (("mooncake", "mooncake-cpu"), [BuildFacts("b", (), ("mooncake",))], False,
     "does not register mooncake-cpu (registers mooncake)"),
    (("mooncake", "mooncake-cpu"), [BuildFacts("b")], False,
     "does not register mooncake, mooncake-cpu (registers none)"),
    (("mooncake", "mooncake-cpu"), [BuildFacts("b", complete=False)], None, "does not"),
    # the release's own backends decide, not a fixed list
    (("mooncake",), [BuildFacts("b", (), ("mooncake",))], True, "registers mooncake"),
    ((), [BuildFacts("b")], True, "registers "),
])
def test_backends(needs: tuple[str, ...], builds: list[BuildFacts], ok: bool | None,
                  text: str) -> None:
    d = rule.backends(Requirement("mooncake.pg", backends=needs), builds)
    assert d.ok is ok
    assert text in d.detail


CU13 = TorchFacts("2.13.0", 13, True, "torch/version.py")


@pytest.mark.parametrize(("builds", "torch", "jit", "ok", "text"), [
    ([FULL], CU13, False, True, "build links CUDA 13, torch 2.13.0 is CUDA 13 "
     "(torch/version.py)"),
    ([BuildFacts("b", cuda=12)], CU13, False, False, "build links CUDA 12, torch 2.13.0 is "
     "CUDA 13"),
    ([BuildFacts("a", cuda=12), FULL], CU13, False, False, "CUDA 12/13"),
    ([FULL], TorchFacts("2.13.0+cpu", None, True, "local label +cpu"), False, False,
     "libcudart.so.13; torch 2.13.0+cpu is a CPU build (local label +cpu)"),
    ([FULL], TorchFacts("2.14.0", None, False, "no CUDA facts"), False, None,
     "build links CUDA 13; no CUDA facts"),
    ([BuildFacts("b", cuda_read=False)], CU13, False, None, "its dynamic section was not "
     "read"),
    ([BuildFacts("b")], CU13, False, None, "link no CUDA runtime"),
    ([], CU13, False, None, "not known"),
    ([], TorchFacts("2.13.0+cpu", None), True, True, "built at import"),
])
def test_cuda_major(builds: list[BuildFacts], torch: TorchFacts, jit: bool, ok: bool | None,
                    text: str) -> None:
    d = rule.cuda_major(builds, torch, jit=jit)
    assert d.ok is ok
    assert text in d.detail


@pytest.mark.parametrize(("oks", "want"), [
    ([True, True], "compatible"), ([], "compatible"), ([True, None], "unknown"),
    ([None, False, True], "incompatible"),
])
def test_verdict(oks: list[bool | None], want: str) -> None:
    assert rule.verdict(oks) == want


def test_facts_are_frozen_values() -> None:
    a = Requirement("mooncake.pg", ["x"], ["mooncake"])
    assert a == Requirement("mooncake.pg", ("x",), ("mooncake",))
    assert hash(a) == hash(Requirement("mooncake.pg", ("x",), ("mooncake",)))
    assert a != Requirement("mooncake.ep", ("x",), ("mooncake",))
    assert a != ("mooncake.pg", ("x",), ("mooncake",))
    with pytest.raises(AttributeError, match="frozen"):
        a.module = "mooncake.ep"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del a.names
    b = a.replace(module="mooncake.ep")
    assert (b.module, b.names, a.module) == ("mooncake.ep", ("x",), "mooncake.pg")
    assert BuildFacts("b", ["n"]).names == frozenset({"n"})
    assert BuildFacts("b").names_checked is None
    assert "cuda=13" in repr(FULL)


#: What the worker-start check may not load for the rule (see test_check's warm start).
_HEAVY = ("re", "enum", "json", "typing", "pathlib", "dataclasses", "ast", "inspect",
          "collections", "packaging", "pydantic", "networkx", "kb", "scrapers")


def test_importing_the_rule_loads_nothing_heavy() -> None:
    code = ("import sys\nbefore = set(sys.modules)\nimport moonpin.resolver.rule\n"
            "print(sorted(set(sys.modules) - before))\n")
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    loaded = set(json.loads(proc.stdout.replace("'", '"')))
    assert "moonpin.resolver.rule" in loaded  # control
    heavy = {m for m in loaded if m.split(".")[0] in _HEAVY}
    assert not heavy, sorted(heavy)


@pytest.mark.parametrize(("tags", "python", "arch", "want"), [
    ((("cp310",), ("abi3",), ("manylinux2014_x86_64",), ">=3.10"), "cp312", "x86_64", True),
    ((("cp310",), ("abi3",), ("manylinux2014_x86_64",), ">=3.10"), "cp39", "x86_64", False),
    ((("cp310",), ("abi3",), ("manylinux2014_x86_64",), ">=3.10"), "cp312", "aarch64", False),
    ((("cp310",), ("abi3",), ("manylinux2014_x86_64",), "<3.12"), "cp312", "x86_64", False),
    ((("py3",), ("none",), ("any",), ">=3.10"), "cp314", "aarch64", True),
    ((("py3",), ("none",), ("any",), ">=3.10"), "cp39", "aarch64", False),
    ((("py3",), ("none",), ("any",), "not a spec"), "cp39", "x86_64", True),
    ((("cp312",), ("cp312",), ("manylinux_2_28_aarch64",), None), "cp312", "aarch64", True),
    ((("cp312",), ("cp312",), ("manylinux_2_28_aarch64",), None), "cp313", "aarch64", False),
])
def test_wheel_covers_is_pip_s_tag_rule(tags: tuple[Any, ...], python: str, arch: str,
                                        want: bool) -> None:
    assert rule.wheel_covers(*tags, python, arch) is want


def test_install_failure_is_the_first_check_pip_itself_makes() -> None:
    assert rule.install_failure([("installable", True, ""), ("build for torch", False, "x"),
                                 ("CUDA major", False, "y")]) is None
    assert rule.install_failure([("wheel for python/platform", False,
                                  "f 0.4 has only a source archive for cp312 on x86_64"),
                                 ("torch requirement", False, "t")]) == "torch requirement: t"
    assert rule.install_failure([("torch requirement", None, "?")]) is None


@pytest.mark.parametrize(("required_by", "imported", "loaded"), [
    # the meta requires both backends exactly and loads the other's build: not loaded
    ([("nixl==1.5.1", "nixl-cu13==1.5.1")], False, False),
    # the meta loads this one's build: judged as any release
    ([("nixl==1.5.1", "nixl-cu12==1.5.1")], False, True),
    # nothing requires it: judged as any release (a backend pinned alone)
    ([], False, True),
    # a release requiring it loads no other's build (it has builds of its own)
    ([("a==1", None)], False, True),
    # one of two requirers loads it
    ([("a==1", "b==1"), ("c==1", "nixl-cu12==1.5.1")], False, True),
    # SGLang imports a package it installs: loaded whatever the meta picks
    ([("nixl==1.5.1", "nixl-cu13==1.5.1")], True, True),
])
def test_a_release_the_stack_requires_but_loads_in_no_import_is_not_judged_by_its_builds(
        required_by: list[tuple[str, str | None]], imported: bool, loaded: bool) -> None:
    d = rule.not_loaded("nixl-cu12==1.5.1", "2.14.1", required_by, imported)
    assert (d is None) == loaded
    if d is not None:
        assert d.ok is True
        assert "nixl-cu12==1.5.1 is installed (nixl==1.5.1 requires it) but not loaded" \
            in d.detail and "loads nixl-cu13==1.5.1 with torch 2.14.1" in d.detail
