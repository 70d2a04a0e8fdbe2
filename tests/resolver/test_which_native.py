"""``which`` of the worker's other native extensions (issue 39), on a small KB built here
whose facts mirror the artifacts checked by hand on the index (2026-12-06):

* ``nixl-cu13`` 1.5.1 ships ``nixl_ep_cu13/nixl_ep_cpp_torch212|213|214`` per CPython
  (cp310-cp314), linking libcudart.so.13; ``nixl-cu12`` 1.5.1 torch211|212|213, CUDA 12;
  both ``Requires-Dist: torch`` unpinned.
* the meta ``nixl`` 1.5.1 (py3-none-any, no build) pins ``nixl-cu12==1.5.1`` and
  ``nixl-cu13==1.5.1``; ``nixl`` 1.5.2 pins ``==1.5.2`` of both, which the index lacks:
  uninstallable.
* ``sglang-kernel`` 0.4.10 (cp310-abi3) pins ``torch==2.14.1``; 0.4.1 pins nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moonpin.api import which
from moonpin.kb import store
from moonpin.kb.errors import UsageError
from moonpin.kb.models import (
    LoaderRule,
    NativeBuild,
    NativeRelease,
    NativeWheel,
    RuleStep,
    UnmetRequirement,
)
from moonpin.resolver import native, rule, stacks
from moonpin.resolver.graph import CompatGraph
from tests.lib.resolvedkb import resolved_kb
from tests.resolver.kbslice import build_kb

PYTHONS = ("cp310", "cp311", "cp312", "cp313", "cp314")
KEY = "''.join(torch.__version__.split('.')[:2])"


def _artifact(filename: str) -> Any:
    from moonpin.kb.models import Artifact

    return Artifact(filename=filename, url=f"https://index.invalid/packages/{filename}",
                    sha256="0" * 64, size=1000)


def _nixl_backend(major: int, version: str, minors: tuple[str, ...]) -> NativeRelease:
    pkg = f"nixl_ep_cu{major}"
    wheels = []
    for py in PYTHONS:
        for arch in ("x86_64", "aarch64"):
            abi = f"cpython-{py[2:]}-{arch}-linux-gnu"
            wheels.append(NativeWheel(
                artifact=_artifact(f"nixl_cu{major}-{version}-{py}-{py}-manylinux_2_28_{arch}"
                                   ".whl"),
                python_tags=(py,), abi_tags=(py,), platform_tags=(f"manylinux_2_28_{arch}",),
                requires_python=">=3.10", requires_dist=("torch", "numpy"),
                torch_requirements=("torch",),
                rules=(LoaderRule(package=pkg, members=(f"{pkg}/__init__.py",), steps=(
                    RuleStep(kind="env", target="NIXL_UCX_DEEPBIND", effect="RTLD_DEEPBIND",
                             member=f"{pkg}/__init__.py", line=30),
                    RuleStep(kind="dispatch", target=f"{pkg}.nixl_ep_cpp_torch{{key}}",
                             key=KEY, member=f"{pkg}/__init__.py", line=51, order=1))),),
                builds=tuple(NativeBuild(
                    member=f"{pkg}/nixl_ep_cpp_torch{mm}.{abi}.so",
                    module=f"{pkg}.nixl_ep_cpp_torch{mm}", abi=abi,
                    torch=f"=={mm[0]}.{mm[1:]}.*", torch_from="filename", torch_key=mm,
                    needed=(f"libcudart.so.{major}",), needed_method="dt_needed",
                    cuda_major=major) for mm in minors),
                packages=(f"nixl_cu{major}", pkg)))
    return NativeRelease(project="nixl", dist=f"nixl-cu{major}", version=version,
                         wheels=tuple(wheels))


def _nixl_meta(version: str, unmet: tuple[str, ...] = ()) -> NativeRelease:
    w = NativeWheel(
        artifact=_artifact(f"nixl-{version}-py3-none-any.whl"), python_tags=("py3",),
        abi_tags=("none",), platform_tags=("any",), requires_python=">=3.10",
        requires_dist=(f"nixl-cu12=={version}", f"nixl-cu13=={version}"),
        rules=(LoaderRule(package="nixl_ep", members=("nixl_ep/__init__.py",), steps=(
            RuleStep(kind="dispatch", target="nixl_ep_cu{key}", key="detect_cuda_major()",
                     condition="cuda_major is not None", member="nixl_ep/__init__.py",
                     line=20),
            RuleStep(kind="import", target="nixl_ep_cu13", member="nixl_ep/__init__.py",
                     line=25, order=1))),),
        packages=("nixl", "nixl_ep"))
    return NativeRelease(project="nixl", dist="nixl", version=version, wheels=(w,),
                         uninstallable=tuple(UnmetRequirement(
                             requirement=f"{d}=={version}",
                             reason=f"the index has no {d} release matching =={version} "
                                    "(newest: 1.5.1)") for d in unmet))


def _kernel(version: str, pin: str | None, cuda: int) -> NativeRelease:
    wheels = []
    for arch in ("x86_64", "aarch64"):
        wheels.append(NativeWheel(
            artifact=_artifact(f"sglang_kernel-{version}-cp310-abi3-manylinux2014_{arch}.whl"),
            python_tags=("cp310",), abi_tags=("abi3",), platform_tags=(f"manylinux2014_{arch}",),
            requires_python=">=3.10", requires_dist=(f"torch{pin}",) if pin else (),
            torch_requirements=(f"torch{pin}",) if pin else (),
            rules=(LoaderRule(package="sgl_kernel", members=("sgl_kernel/load_utils.py",),
                              steps=(RuleStep(kind="glob", target="sgl_kernel/sm90/common_ops.*",
                                              condition="compute_capability == 90",
                                              member="sgl_kernel/load_utils.py", line=40),)),),
            builds=tuple(NativeBuild(
                member=f"sgl_kernel/{sm}/common_ops.abi3.so", module=f"sgl_kernel.{sm}.common_ops",
                abi="abi3", torch=pin, torch_from="requires-dist" if pin else None,
                needed=(f"libcudart.so.{cuda}",), needed_method="dt_needed", cuda_major=cuda)
                for sm in ("sm90", "sm100")),
            packages=("sgl_kernel",)))
    return NativeRelease(project="sglang-kernel", dist="sglang-kernel", version=version,
                         wheels=tuple(wheels))


def _kb() -> Any:
    kb = build_kb({
        "sglang": [{"version": "0.5.23", "torch": ["torch==2.14.1"]}],
        "torch": [{"version": v, "cuda": {"x86_64": 13, "aarch64": 13}}
                  for v in ("2.12.0", "2.13.0", "2.14.1", "2.15.0")]})
    return kb.model_copy(update={"native": (
        _nixl_meta("1.5.2", unmet=("nixl-cu12", "nixl-cu13")), _nixl_meta("1.5.1"),
        _nixl_backend(13, "1.5.1", ("212", "213", "214")),
        _nixl_backend(12, "1.5.1", ("211", "212", "213")),
        _kernel("0.4.10", "==2.14.1", 13), _kernel("0.4.1", None, 12))})


@pytest.fixture(scope="module")
def g() -> CompatGraph:
    return CompatGraph(_kb())


def _reqs(cands: Any) -> list[str]:
    return [c.requirement for c in cands]


def test_nixl_cu13_151_has_builds_for_torch_212_to_214_only(g: CompatGraph) -> None:
    for t in ("2.12.0", "2.13.0", "2.14.1"):
        res = native.which_native(g, "nixl-cu13", torch=t)
        assert _reqs(res.compatible) == ["nixl-cu13==1.5.1"], t
        covered = {(w.python, w.arch) for w in res.compatible[0].wheels or ()}
        assert covered == {(p, a) for p in PYTHONS for a in ("x86_64", "aarch64")}
    res = native.which_native(g, "nixl-cu13", torch="2.15.0")
    assert not res.compatible and res.recommended() is None
    (why,) = res.excluded
    assert why.reason is not None and why.reason.startswith("build for torch:")
    assert "torch 2.15.0" in why.reason and "==2.14.*" in why.reason


def test_meta_nixl_is_judged_by_the_backend_of_torchs_cuda_major(g: CompatGraph) -> None:
    res = native.which_native(g, "nixl", torch="2.14.1", python="3.12", arch="x86_64",
                              as_imported=True)
    # nixl-cu12 has no torch214: the meta still works, it loads nixl_ep_cu13 (torch is CUDA
    # 13); nixl-cu13 alone installs no nixl_ep, what the project is imported as
    assert _reqs(res.compatible) == ["nixl==1.5.1"]
    assert _reqs(native.which_native(g, "nixl-cu13", torch="2.14.1", python="3.12",
                                     arch="x86_64").compatible) == ["nixl-cu13==1.5.1"]
    meta = next(c for c in res.compatible if c.dist == "nixl")
    assert any("nixl-cu13==1.5.1" in n for n in meta.notes or ())
    reasons = {c.requirement: c.reason for c in res.excluded}
    assert reasons["nixl==1.5.2"] is not None and reasons["nixl==1.5.2"].startswith(
        "installable:") and "nixl-cu13==1.5.2" in reasons["nixl==1.5.2"]
    assert (reasons["nixl-cu12==1.5.1"] or "").startswith("module present:")
    alone = native.which_native(g, "nixl-cu12", torch="2.14.1", python="3.12", arch="x86_64")
    reasons = {c.requirement: c.reason for c in alone.excluded}
    assert (reasons["nixl-cu12==1.5.1"] or "").startswith("build for torch:")


def test_cuda_major_of_torch_decides_between_backends(g: CompatGraph) -> None:
    # torch 2.12.0 labelled +cu126: the cu12 build loads, the cu13 one links the wrong runtime
    res = native.which_native(g, "nixl", torch="2.12.0+cu126", python="3.12", arch="x86_64",
                              as_imported=True)
    meta = next(c for c in res.compatible if c.requirement == "nixl==1.5.1")
    assert any("nixl-cu12==1.5.1" in n for n in meta.notes or ()), meta.notes
    for dist in ("nixl-cu12", "nixl-cu13"):  # each backend alone, as it installs
        res = native.which_native(g, dist, torch="2.12.0+cu126", python="3.12",
                                  arch="x86_64")
        assert dist != "nixl-cu12" or "nixl-cu12==1.5.1" in _reqs(res.compatible)
        reasons = {c.requirement: c.reason or "" for c in res.excluded}
        assert dist != "nixl-cu13" or reasons["nixl-cu13==1.5.1"].startswith("CUDA major:")


def test_sglang_kernel_0410_pins_torch_2141(g: CompatGraph) -> None:
    res = native.which_native(g, "sglang-kernel", torch="2.14.1")
    assert _reqs(res.compatible) == ["sglang-kernel==0.4.10"]
    assert {w.python for w in res.compatible[0].wheels or ()} >= {"cp310", "cp314"}  # abi3
    (unk,) = res.unknown  # 0.4.1 says nothing of its torch: never guessed
    assert unk.version == "0.4.1" and "nothing says which torch" in (unk.reason or "")
    moved = native.which_native(g, "sgl_kernel", torch="2.15.0")
    assert not moved.compatible
    assert "does not satisfy sglang-kernel 0.4.10's 'torch==2.14.1'" in (
        moved.excluded[0].reason or "")


def test_names_resolve_from_the_kb(g: CompatGraph) -> None:
    assert native.dists_named(g, "nixl") == ("nixl", ["nixl", "nixl-cu12", "nixl-cu13"])
    assert native.dists_named(g, "nixl-cu13") == ("nixl", ["nixl-cu13"])
    assert native.dists_named(g, "nixl_ep") == ("nixl", ["nixl"])
    assert native.dists_named(g, "sgl_kernel") == ("sglang-kernel", ["sglang-kernel"])
    with pytest.raises(UsageError, match="not 'nixx'"):
        native.dists_named(g, "nixx")


def test_sglang_gives_the_torch_it_admits(g: CompatGraph) -> None:
    res = native.which_native(g, "sglang-kernel", sglang="0.5.23")
    assert res.query["torch"] == ["2.14.1"] and res.query["sglang"] == "0.5.23"
    assert _reqs(res.compatible) == ["sglang-kernel==0.4.10"]
    with pytest.raises(UsageError, match="needs --torch"):
        native.which_native(g, "nixl")


def test_rule_decides_build_for_torch() -> None:
    builds = [rule.NativeTarget("a/x_torch214.so", "==2.14.*", "filename")]
    assert rule.native_build("x", builds, "2.14.1+cu130", "w.whl").ok is True
    assert rule.native_build("x", builds, "2.15.0", "w.whl").ok is False
    assert rule.native_build("x", [rule.NativeTarget("a/x.so")], "2.15.0", "w.whl").ok is None
    assert rule.native_build("x", [], "2.15.0", "w.whl").ok is True  # pure Python
    assert rule.torch_admitted("k", [("torch", "")], "2.99.0").ok is True  # unpinned
    assert rule.torch_admitted("k", [("torch==2.14.1", "==2.14.1")], "2.14.0").ok is False


def test_api_and_cli_answer_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb_file = tmp_path / "kb.json"
    store.save(_kb(), kb_file)
    res = which("nixl-cu13", torch="2.14.1", kb=kb_file)
    assert res.recommended() == {"requirement": "nixl-cu13==1.5.1",
                                 "reason": "the newest that fits"}
    from moonpin.cli.main import main

    code = main(["--kb", str(kb_file), "which", "nixl-cu13", "--torch", "2.14.1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc == json.loads(json.dumps(res.to_json()))
    code = main(["--kb", str(kb_file), "which", "nixl-cu13", "--torch", "2.15.0"])
    out = capsys.readouterr().out
    assert code == 1 and "none compatible" in out and "build for torch" in out


SHIPPED = Path(__file__).resolve().parents[2] / "data" / "kb.json"


def test_shipped_kb_agrees_with_the_artifacts_checked_by_hand() -> None:
    """The shipped KB (scraped from the index) says what the artifacts said when read by
    hand; read from its derived facts, as a query does (no pydantic)."""
    from moonpin.resolver.tables import documents

    facts = documents.load_facts(SHIPPED)
    assert facts is not None and facts.native, "the derived facts lack the native releases"
    for t in ("2.12.0", "2.13.0", "2.14.1"):
        res = which("nixl-cu13", torch=t, python="3.12", arch="x86_64", kb=SHIPPED)
        assert res.recommended() == {"requirement": "nixl-cu13==1.5.1",
                                     "reason": "the newest that fits"}, t
    moved = which("nixl-cu13", torch="2.15.0", python="3.12", arch="x86_64", kb=SHIPPED)
    assert "nixl-cu13==1.5.1" not in _reqs(moved.compatible)
    meta = which("nixl", torch="2.14.1", kb=SHIPPED, dist="nixl")
    assert "installable:" in next(c.reason or "" for c in meta.excluded if c.version == "1.5.2")
    assert meta.recommended() == {"requirement": "nixl==1.5.1", "reason": "the newest that fits"}
    kernel = which("sgl_kernel", torch="2.14.1", kb=SHIPPED)
    assert _reqs(kernel.compatible)[:1] == ["sglang-kernel==0.4.10"]
    older = which("sglang-kernel", torch="2.13.0", kb=SHIPPED, dist="sglang-kernel")
    assert "'torch==2.14.1'" in next(c.reason or "" for c in older.excluded
                                     if c.version == "0.4.10")
    deep = which("deep_ep", sglang="0.5.23", kb=SHIPPED)
    assert deep.recommended() == {"requirement": "sgl-deep-ep==0.1.2.post1",
                                  "reason": "the newest that fits"}


def _flashinfer(dist: str, version: str, locks: bool, effect: str = "ignore",
                ) -> NativeRelease:
    steps = (RuleStep(kind="lock", target="flashinfer-cubin",
                      key="FLASHINFER_DISABLE_VERSION_CHECK", condition="exact",
                      effect=effect, member="flashinfer/jit/env.py", line=82),) if locks else ()
    w = NativeWheel(
        artifact=_artifact(f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"),
        python_tags=("py3",), abi_tags=("none",), platform_tags=("any",),
        requires_python=">=3.10", requires_dist=("torch",) if locks else (),
        torch_requirements=("torch",) if locks else (),
        rules=(LoaderRule(package="flashinfer", members=("flashinfer/jit/env.py",),
                          steps=steps),) if locks else (),
        packages=("flashinfer",) if locks else ("flashinfer_cubin",))
    return NativeRelease(project="flashinfer", dist=dist, version=version, wheels=(w,))


@pytest.fixture(scope="module")
def stack_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kb = _kb()
    kb = kb.model_copy(update={"native": (*kb.native, _flashinfer("flashinfer-python", "0.7.2",
                                                                  True),
                                          _flashinfer("flashinfer-python", "0.6.0", True,
                                                      "raise"),
                                          _flashinfer("flashinfer-cubin", "0.6.13", False))})
    return resolved_kb(tmp_path_factory.mktemp("stack"), kb)


def test_explain_a_stack_one_check_per_extension(stack_kb: Path) -> None:
    from moonpin.api import explain

    res = explain("sglang==0.5.23", "torch==2.14.1", "nixl-cu13==1.5.1",
                  "sglang-kernel==0.4.10", python="3.12", arch="x86_64", kb=stack_kb)
    assert res.verdict == "compatible", res.reasons
    assert [c["name"] for c in res.checks] == ["torch requirement", "nixl-cu13==1.5.1",
                                               "sglang-kernel==0.4.10"]
    assert "nixl_ep_cpp_torch214.cpython-312-x86_64" in res.checks[1]["detail"]
    moved = explain("sglang==0.5.23", "torch==2.15.0", "nixl-cu13==1.5.1",
                    "sglang-kernel==0.4.10", python="3.12", arch="x86_64", kb=stack_kb)
    assert moved.verdict == "incompatible"
    assert [c["ok"] for c in moved.checks] == [False, False, False]
    assert moved.checks[1]["detail"].startswith("build for torch:")
    assert "'torch==2.14.1'" in moved.checks[2]["detail"]


def test_explain_a_stack_judges_flashinfers_lock(stack_kb: Path) -> None:
    from moonpin.api import explain

    warn = explain("sglang==0.5.23", "flashinfer-python==0.7.2", "flashinfer-cubin==0.6.13",
                   kb=stack_kb)
    lock = next(c for c in warn.checks if c["name"] == "flashinfer-python lock")
    assert lock["ok"] is True and "ignores flashinfer-cubin 0.6.13" in lock["detail"]
    refused = explain("sglang==0.5.23", "flashinfer-python==0.6.0", "flashinfer-cubin==0.6.13",
                      kb=stack_kb)
    assert refused.verdict == "incompatible"
    assert any(r.startswith("flashinfer-python lock:") for r in refused.reasons)


def test_cli_explain_and_which_take_extension_names(
        stack_kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from moonpin.cli.main import main

    code = main(["--kb", str(stack_kb), "explain", "sglang==0.5.23", "torch==2.14.1",
                 "nixl==1.5.2", "--python", "3.12", "--arch", "x86_64"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("sglang 0.5.23 + nixl==1.5.2 + torch 2.14.1 on cp312 "
                                        "x86_64: INCOMPATIBLE")
    assert "[FAIL] nixl==1.5.2: installable:" in out
    code = main(["--kb", str(stack_kb), "which", "nixl", "--dist", "nixl-cu13", "--torch",
                 "2.13", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["query"]["dists"] == ["nixl-cu13"]
    assert doc["recommended"]["requirement"] == "nixl-cu13==1.5.1"
    with pytest.raises(SystemExit) as exit_:
        main(["--kb", str(stack_kb), "explain", "sglang==0.5.23", "nixl-cu13==1.5.9"])
    assert exit_.value.code == 2 and "nixl-cu13==1.5.1" in capsys.readouterr().err


def _with_sglang_edges(kb: Any) -> Any:
    """sglang 0.5.23 as its own files say: ``Requires-Dist: sglang-kernel==0.4.10``, and
    ``--moe-a2a-backend nixl`` / ``--elastic-ep-backend nixl`` importing ``nixl_ep``
    (``token_dispatcher/nixl.py:41``)."""
    from moonpin.kb.models import BackendImport, DistPin, LaunchBackend

    member = "sglang/srt/layers/moe/token_dispatcher/nixl.py"
    s = kb.sglang[0].model_copy(update={
        "extension_pins": (DistPin(dist="sglang-kernel", requirement="sglang-kernel==0.4.10",
                                   member="sglang-0.5.23.dist-info/METADATA", line=271),
                           DistPin(dist="nixl", requirement="nixl; extra == 'nixl'",
                                   member="sglang-0.5.23.dist-info/METADATA", line=272)),
        "launch_backends": tuple(LaunchBackend(
            flag=flag, choice="nixl", member=member,
            imports=(BackendImport(module="torch", line=3),
                     BackendImport(module="nixl_ep", names=("Buffer",), line=41)))
            for flag in ("--elastic-ep-backend", "--moe-a2a-backend"))})
    return kb.model_copy(update={"sglang": (s,)})


@pytest.fixture(scope="module")
def eg() -> CompatGraph:
    kb = _with_sglang_edges(_kb())
    g = CompatGraph(kb.model_copy(update={"native": (
        *kb.native, _kernel("0.4.9", "==2.14.1", 13))}))
    stacks.attach(g)
    return g


def test_sglang_s_own_pin_is_an_edge(eg: CompatGraph) -> None:
    """Issue 39: SGLang's Requires-Dist pin of an extension decides which of its releases
    go with it, beside the torch both admit (0.4.9 loads with torch 2.14.1 too)."""
    alone = native.which_native(eg, "sglang-kernel", torch="2.14.1")
    assert _reqs(alone.compatible) == ["sglang-kernel==0.4.10", "sglang-kernel==0.4.9"]
    res = native.which_native(eg, "sglang-kernel", sglang="0.5.23")
    assert _reqs(res.compatible) == ["sglang-kernel==0.4.10"]
    why = next(c.reason or "" for c in res.excluded if c.version == "0.4.9")
    assert why.startswith("sglang's requirement: sglang 0.5.23 requires "
                          "'sglang-kernel==0.4.10'"), why


def test_the_package_a_launch_choice_imports_is_an_edge(eg: CompatGraph) -> None:
    """SGLang imports ``nixl_ep``: nixl-cu13 alone installs ``nixl_ep_cu13`` only, so with
    ``--sglang`` the meta ``nixl`` is the answer (as without it, the project being imported
    as ``nixl_ep``), nixl-cu13 said excluded by SGLang's import; an extra-only pin does not
    bind."""
    alone = native.which_native(eg, "nixl", torch="2.14.1", as_imported=True)
    assert alone.recommended()["requirement"] == "nixl==1.5.1"
    # what a pin of a backend may move to: any of the project's distributions that loads
    loads = native.which_native(eg, "nixl", torch="2.14.1")
    assert "nixl-cu13==1.5.1" in _reqs(loads.compatible)
    res = native.which_native(eg, "nixl", torch="2.14.1", sglang="0.5.23")
    assert res.recommended() == {"requirement": "nixl==1.5.1",
                                 "reason": "the newest that fits"}
    why = next(c.reason or "" for c in res.excluded if c.dist == "nixl-cu13")
    assert "sglang 0.5.23 imports nixl_ep (--elastic-ep-backend nixl: " in why, why
    assert "token_dispatcher/nixl.py:41)" in why


def test_explain_of_a_stack_holds_sglang_s_edges(eg: CompatGraph) -> None:
    got = native.explain_stack(eg, "0.5.23", [("nixl-cu13", "1.5.1"),
                                              ("sglang-kernel", "0.4.9")],
                               torch="2.14.1", python="cp312", arch="x86_64")
    details = {c.name: c.detail for c in got["checks"]}
    assert details["nixl-cu13==1.5.1"].startswith("sglang's import: ")
    assert details["sglang-kernel==0.4.9"].startswith("sglang's requirement: ")
    ok = native.explain_stack(eg, "0.5.23", [("nixl", "1.5.1"), ("sglang-kernel", "0.4.10")],
                              torch="2.14.1", python="cp312", arch="x86_64")
    assert [c.ok for c in ok["checks"]] == [True, True, True]


def test_rule_pinned_by() -> None:
    assert rule.pinned_by("sglang 1", "k", "0.4.7", []).ok is True
    assert rule.pinned_by("sglang 1", "k", "0.4.7", [("k==0.4.7", "==0.4.7")]).ok is True
    d = rule.pinned_by("sglang 1", "k", "0.4.8", [("k==0.4.7", "==0.4.7")])
    assert d.ok is False and "'k==0.4.7'" in d.detail
    assert rule.pinned_by("sglang 1", "k", "0.4.7", [("k @ bad", None)]).ok is None


def test_a_set_holds_only_where_sglang_s_pinned_extensions_install(
        eg: CompatGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """sglang 0.5.23 requires sglang-kernel==0.4.10, which requires torch==2.14.1: pip
    installs no set at another torch, whatever mooncake says."""
    s = eg.find_sglang("0.5.23")
    assert s is not None
    assert native.pins_hold(eg, s, "2.14.1", "cp312", "x86_64") == (True, "")
    ok, why = native.pins_hold(eg, s, "2.15.0", "cp312", "x86_64")
    assert ok is False and why.startswith("sglang-kernel: "), why
    from moonpin.resolver import query

    rows = [{"sglang": "0.5.23", "torch": t, "dist": "mooncake-transfer-engine",
             "mooncake": "0.3.13", "python": "cp312", "arch": "x86_64"}
            for t in ("2.14.1", "2.15.0")]
    monkeypatch.setattr(query, "triples", lambda g, **kw: rows)
    assert [r["torch"] for r in native.triples(eg)] == ["2.14.1"]


def test_a_stack_provides_sglang_s_import_through_any_of_its_releases(eg: CompatGraph) -> None:
    got = native.explain_stack(eg, "0.5.23", [("nixl", "1.5.1"), ("nixl-cu13", "1.5.1")],
                               torch="2.14.1", python="cp312", arch="x86_64")
    assert [c.ok for c in got["checks"]] == [True, True, True], got["checks"]


@pytest.mark.parametrize("spec", ["==0.4.10", "==2.14.1", "==2.14.1+cu130", "== 1.0",
                                  "==1.0.*", "===1.0", ">=1.0,<2", "==bad!", "==1!2.0",
                                  "==1.0rc1", "==1.0"])
@pytest.mark.parametrize("version", ["0.4.10", "0.4.10.0", "0.4.9", "2.14.1", "2.14.1+cu130",
                                     "1.0", "1.0rc1", "1.0.post1", "1.0.3", "2.0"])
def test_the_rule_s_exact_pin_shortcut_decides_as_packaging(spec: str, version: str) -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        want: bool | None = SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        want = None
    rule._CONTAINS.clear()
    assert rule._contains(spec, version) is want
