"""The worker's other native extensions (issue 39), each judged by its project's loader rule
read from its own files (moonpin/preflight/extensions/rules/): one class of fault per test, on
throwaway images whose builds gcc makes with chosen undefined symbols; each asserts a
verdict the same image with the fault removed does not get."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.lib.checkrun import run
from tests.lib.extimages import (
    COW,
    PARSE,
    add_deep_ep,
    add_flashinfer,
    add_nixl,
    add_sgl_kernel,
    gcc_so,
    torch_image,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

NIXL = ("--", "--moe-a2a-backend", "nixl")


def _site(tmp_path: Path, **kw: object) -> Path:
    return torch_image(tmp_path / "site", **kw)  # type: ignore[arg-type]


def test_nixl_loads_the_build_for_torchs_minor(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_nixl(site)
    r = run(site, *NIXL, ep=False)
    assert r.rc == 0, r.out
    line = r.line("nixl_ep")
    assert line.startswith("pass") and "nixl_ep_cpp_torch214" in line, r.out
    assert "nixl_ep picks nixl_ep_cu13 for torch's CUDA 13" in line


def test_nixl_without_a_build_for_torchs_minor_is_not_usable(tmp_path: Path) -> None:
    site = _site(tmp_path, version="2.15.0", sglang_requires=["torch==2.14.1"])
    add_nixl(site)
    r = run(site, *NIXL, ep=False)
    assert r.rc == 1, r.out
    line = r.line("nixl_ep")
    assert line.startswith("fail") and ("No module named 'nixl_ep_cu13.nixl_ep_cpp_torch215'"
                                        in line), r.out
    assert "builds for torch 2.12, 2.13, 2.14" in line
    # SGLang's pin, which has a build; never a CPU build of it (a bare == admits +cpu)
    assert "pip install 'torch==2.14.1,!=2.14.1+cpu'" in r.fixes()[0]


def _native_kb(tmp_path: Path) -> Path:
    """A knowledge base, with its resolved tables, that knows nixl-cu13 1.4.0 (builds up to
    torch 2.13) and 1.5.1 (a build for 2.14), the meta nixl 1.5.1 and 1.5.2 (newer, but the
    index cannot install it) (:func:`tests.resolver.test_which_native._kb`)."""
    from tests.lib.resolvedkb import resolved_kb
    from tests.resolver.test_which_native import _kb, _nixl_backend, _with_sglang_edges

    kb = _with_sglang_edges(_kb())
    kb = kb.model_copy(update={"native": (*kb.native,
                                          _nixl_backend(13, "1.4.0", ("211", "212", "213")))})
    folder = tmp_path / "kb"
    folder.mkdir()
    return resolved_kb(folder, kb)


def test_nixl_without_a_build_for_sglangs_torch_gets_the_release_that_has_one(
        tmp_path: Path) -> None:
    """The fix keeps the torch SGLang pins (its other extensions are built for it) and
    moves nixl to the newest release the knowledge base says has a build for it; without a
    KB that knows one, it falls back to a torch the installed nixl has builds for."""
    site = _site(tmp_path, sglang_requires=["torch==2.14.1"])
    add_nixl(site, version="1.4.0", minors=("211", "212", "213"))
    r = run(site, *NIXL, ep=False, kb=_native_kb(tmp_path))
    assert r.rc == 1 and r.line("nixl_ep").startswith("fail"), r.out
    assert r.fixes()[0].startswith("fix: pip install 'nixl==1.5.1'  # nixl-cu13 1.5.1 has a "
                                   "build for torch 2.14.1, SGLang's pin"), r.out
    from tests.lib.checkrun import small_kb

    (tmp_path / "bare").mkdir()
    bare = run(site, *NIXL, ep=False, kb=small_kb(tmp_path / "bare"))  # knows no nixl
    assert "pip install 'torch==2.13.*'" in bare.fixes()[0], bare.out


def test_nixl_requested_and_absent_is_not_usable(tmp_path: Path) -> None:
    site = _site(tmp_path)
    r = run(site, *NIXL, ep=False)
    assert r.rc == 1, r.out
    line = r.line("nixl_ep")
    assert line.startswith("fail  nixl_ep: not installed (--moe-a2a-backend nixl: sglang/"
                           "srt/layers/moe/token_dispatcher/nixl.py:2 imports nixl_ep)"), r.out
    # which release: the KB's answer (tests/preflight/test_extensions_kbfix.py)
    assert r.fixes() and r.fixes()[0].startswith("fix: pip install 'nixl")
    assert "nothing to check" not in r.out


def test_an_elastic_ep_choice_no_source_imports_a_package_for_is_no_failure(
        tmp_path: Path) -> None:
    """Issue 39: ``--elastic-ep-backend nixl`` alone imports nothing of nixl (no SGLang
    source tests the option against ``"nixl"``; the same-named token dispatcher is
    ``--moe-a2a-backend``'s): nixl absent is no failure, and the line says why."""
    site = _site(tmp_path)
    r = run(site, "--", "--elastic-ep-backend", "nixl", ep=False)
    assert r.rc == 0, r.out
    assert "nixl_ep" not in r.out
    assert ("skip  extensions: --elastic-ep-backend nixl: no test on its value in the "
            "installed SGLang's sources imports a package for it; nothing to judge\n"
            ) in r.out, r.out


def test_an_elastic_ep_choice_is_judged_by_the_import_under_its_test(tmp_path: Path) -> None:
    """A release that imports nixl_ep under ``if ... elastic_ep_backend == "nixl"``: the
    choice needs it, and the line names the file and line of that import."""
    site = _site(tmp_path)
    src = site / "sglang" / "srt" / "elastic_ep" / "scale.py"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("def scale(cfg):\n"
                   "    backend = cfg.elastic_ep_backend\n"
                   "    if backend != \"nixl\":\n"
                   "        return\n"
                   "    from nixl_ep import Buffer\n"
                   "    return Buffer\n")
    r = run(site, "--", "--elastic-ep-backend", "nixl", ep=False)
    assert r.rc == 1, r.out
    assert r.line("nixl_ep").startswith(
        "fail  nixl_ep: not installed (--elastic-ep-backend nixl: sglang/srt/elastic_ep/"
        "scale.py:5 imports nixl_ep)"), r.out


_PASSED_OVER = ("not a regular file: CPython's importer passes over it (a package whose "
                "__init__.py it is imports as an empty namespace package; a module is not "
                "found), so the loader in it never runs")


@pytest.mark.parametrize(("make", "said"), [
    (lambda p: os.mkfifo(p), f"is a FIFO, {_PASSED_OVER}"),
    (lambda p: p.symlink_to("/dev/zero"),
     f"is a symbolic link to a character device (/dev/zero), {_PASSED_OVER}"),
    (lambda p: p.symlink_to("/dev/null"),
     f"is a symbolic link to a character device (/dev/null), {_PASSED_OVER}"),
    (lambda p: p.symlink_to("gone.py"), "is a dangling symbolic link (to 'gone.py'), "
     + _PASSED_OVER),
    (lambda p: p.write_text("x = " + "(" * 100_000 + ")" * 100_000 + "\n"),
     "is past the parser's limits: the import raises SyntaxError: too many nested"),
    (lambda p: p.write_text("x = " + "-" * 100_000 + "1\n"),
     "is nested past the parser's limits: the import raises MemoryError"),
    (lambda p: p.write_text("x = " + "7" * 5000 + "\n"),
     "is past the parser's limits: the import raises SyntaxError: Exceeds the limit"),
    (lambda p: None, "is missing: its package imports as an empty namespace package, so the "
     "loader that file holds never runs"),
], ids=["fifo", "dev-zero", "dev-null", "dangling", "nested-parentheses", "nested-unary",
        "digits", "missing"])
def test_a_loader_file_the_import_cannot_run_fails_with_its_replacement(
        tmp_path: Path, make: Callable[[Path], None], said: str) -> None:
    """The backend's ``__init__.py``, whose code picks and loads the build. Missing, its
    package is a namespace package. CPython's finder
    takes only a regular file (``stat``, links followed) as a module or a package's
    ``__init__``: in front of any other the package imports as an empty namespace package
    and ``from nixl_ep import Buffer`` fails (seen on a real image: ``cannot import name
    'nixl_ep_cpp' from 'nixl_ep_cu13' (unknown location)``); a nesting bomb raises. Not
    "not judged" (exit 0): a failure with the lines that put the file back. Control: the
    same image with the regular file passes (test_nixl_loads_the_build_for_torchs_minor)."""
    site = _site(tmp_path)
    add_nixl(site)
    init = site / "nixl_ep_cu13" / "__init__.py"
    init.unlink()
    make(init)
    r = run(site, *NIXL, ep=False)
    assert r.rc == 1, r.out
    line = r.line("nixl_ep")
    assert line.startswith("fail") and f"`import nixl_ep` fails: {init} {said}" in line, r.out
    rm = f"rm {init} && " if os.path.lexists(init) else ""
    assert r.fixes()[0] == (f"fix: {rm}pip install --force-reinstall --no-deps "
                            "'nixl-cu13==1.5.1'"), r.out


@pytest.mark.parametrize(("add", "member", "args"), [
    (add_sgl_kernel, "sgl_kernel/load_utils.py", ()),
    (add_deep_ep, "deep_ep/__init__.py", ("--", "--moe-a2a-backend", "deepep")),
    (add_flashinfer, "flashinfer/jit/env.py", ()),
], ids=["sgl_kernel", "deep_ep", "flashinfer"])
def test_every_rules_loader_file_as_a_fifo_fails(tmp_path: Path, add: Callable[[Path], None],
                                                 member: str, args: tuple[str, ...]) -> None:
    """The same mechanism for each project's loader rule: the file it reads is the one the
    real import runs, so a FIFO there means its loader never runs."""
    site = _site(tmp_path, sglang_requires=["sglang-kernel==0.4.10"])
    add(site)
    name = member.split("/")[0]
    before = run(site, "--gpu-capability", "9.0", *args, ep=False)
    assert before.line(name).startswith(("pass", "warn")), before.out  # control
    path = site / member
    path.unlink()
    os.mkfifo(path)
    r = run(site, "--gpu-capability", "9.0", *args, ep=False)
    assert r.rc == 1 and r.line(name).startswith("fail"), r.out
    assert f"{path} is a FIFO, not a regular file" in r.line(name), r.out
    assert f"fix: rm {path}" in r.out


def test_a_torch_symbol_the_build_needs_missing_from_torchs_libraries(tmp_path: Path) -> None:
    site = _site(tmp_path, symbols=(PARSE,))  # this torch's c10 lacks materialize_cow_storage
    add_nixl(site)
    r = run(site, *NIXL, ep=False)
    assert r.rc == 1, r.out
    line = r.line("nixl_ep")
    assert line.startswith("fail") and f"undefined symbol: {COW}" in line, r.out
    assert "c10::StorageImpl::materialize_cow_storage()" in line


def test_sgl_kernel_built_for_another_torch(tmp_path: Path) -> None:
    """The sm100 build needs a symbol this torch dropped; the sm90 build does not: which one
    loads is the GPU's, so without one stated every choice is judged and said, and
    --gpu-capability picks one."""
    site = _site(tmp_path, symbols=(COW,), sglang_requires=["sglang-kernel==0.4.10",
                                                            "torch==2.14.1"])
    add_sgl_kernel(site, sm90_uses=(COW,), sm100_uses=(PARSE,), torch_pin="2.13.0")
    unknown = run(site, ep=False, env={"MOONPIN_GPU_CAPABILITY": "unknown"})
    line = unknown.line("sgl_kernel")
    assert unknown.rc == 1 and line.startswith("fail"), unknown.out
    assert "(for another GPU capability)" in line and f"undefined symbol: {PARSE}" in line
    assert "loads for GPU capability 9.0" in line
    assert "pip install 'torch==2.13.0,!=2.13.0+cpu'" in unknown.out  # the torch the kernel pins
    hopper = run(site, "--gpu-capability", "9.0", ep=False)
    assert hopper.rc == 0 and "loads sm90/common_ops.abi3.so" in hopper.line("sgl_kernel"), \
        hopper.out
    blackwell = run(site, "--gpu-capability", "10.0", ep=False)
    assert blackwell.rc == 1 and "sm100/common_ops.abi3.so" in blackwell.line("sgl_kernel")


def test_sgl_kernel_is_judged_without_a_launch_line_on_a_cuda_torch(tmp_path: Path) -> None:
    site = _site(tmp_path, sglang_requires=["sglang-kernel==0.4.10"])
    r = run(site, ep=False, env={"MOONPIN_GPU_CAPABILITY": "none"})
    assert r.rc == 1 and r.line("sgl_kernel").startswith("fail  sgl_kernel: not installed"), \
        r.out
    assert "pip install 'sglang-kernel==0.4.10'" in r.fixes()[0]
    add_sgl_kernel(site)
    r = run(site, ep=False, env={"MOONPIN_GPU_CAPABILITY": "none"})
    assert r.rc == 0 and "loads sm100/common_ops.abi3.so" in r.line("sgl_kernel"), r.out


def test_deep_ep_built_for_another_cuda_major(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_deep_ep(site, expected_cuda=12)
    launch = ("--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep")
    r = run(site, *launch, ep=False)
    assert r.rc == 1 and "requires CUDA 12, but PyTorch uses CUDA 13" in r.line("deep_ep"), \
        r.out
    shutil.rmtree(site / "deep_ep")
    add_deep_ep(site, expected_cuda=13)
    r = run(site, *launch, ep=False)
    assert r.rc == 0 and "loads deep_ep/_C" in r.line("deep_ep"), r.out
    nogpu = run(site, "--gpu-capability", "none", "--", "--moe-a2a-backend", "deepep",
                ep=False)
    assert nogpu.rc == 1 and "does not expose a usable CUDA device" in nogpu.line("deep_ep")


@pytest.mark.parametrize(("ignores", "env", "status"), [
    (False, {}, "fail"), (True, {}, "warn"),
    (False, {"FLASHINFER_DISABLE_VERSION_CHECK": "1"}, "pass")])
def test_flashinfer_version_skew(tmp_path: Path, ignores: bool, env: dict[str, str],
                                 status: str) -> None:
    """A cubin wheel at another version: a loader that raises fails the import, one that
    catches its own check goes on (a warning), the switch turns the check off."""
    site = _site(tmp_path)
    add_flashinfer(site, cubin="0.7.1", ignores=ignores)
    r = run(site, ep=False, env={"MOONPIN_GPU_CAPABILITY": "none", **env})
    line = r.line("flashinfer")
    assert line.startswith(status), r.out
    assert "flashinfer-cubin 0.7.1" in line or "flashinfer-cubin version (0.7.1)" in line
    same = _site(tmp_path / "same")
    add_flashinfer(same, cubin="0.7.2", ignores=ignores)
    assert run(same, ep=False, env={"MOONPIN_GPU_CAPABILITY": "none"}).line(
        "flashinfer").startswith("pass")


@pytest.mark.parametrize(("value", "deep"), [("1", True), ("off", False), ("", False)])
def test_nixl_deepbind_scope_follows_its_variable(tmp_path: Path, value: str,
                                                  deep: bool) -> None:
    site = _site(tmp_path)
    add_nixl(site)
    r = run(site, *NIXL, ep=False, env={"NIXL_UCX_DEEPBIND": value})
    line = r.line("nixl_ep")
    assert line.startswith("pass"), r.out
    assert ("RTLD_DEEPBIND" in line) is deep, line


def test_deepbind_looks_in_the_librarys_own_closure_first(tmp_path: Path) -> None:
    """ld.so's scope for an RTLD_DEEPBIND load: the object's own closure, then the global
    scope (the model's search order, as its report of an unbound symbol lists it)."""
    from moonpin.preflight.loader import ldproc

    lib = tmp_path / "lib"
    gcc_so(lib / "libglobal.so", defines=("g",), soname="libglobal.so")
    gcc_so(lib / "libown.so", defines=("o",), soname="libown.so")
    build = gcc_so(lib / "build.so", uses=("missing_fn",), needs=("libown.so",),
                   rpath="$ORIGIN")
    orders = {}
    for mode in (ldproc.RTLD_NOW, ldproc.RTLD_NOW | ldproc.RTLD_DEEPBIND):
        proc = ldproc.Process(machine=__import__("os").uname().machine,
                              owned=lambda p: p.startswith(str(lib)))
        assert proc.dlopen(str(lib / "libglobal.so"), ldproc.RTLD_NOW | ldproc.RTLD_GLOBAL
                           ).error is None
        got = proc.dlopen(str(build), mode)
        assert got.unbound and got.unbound[0][1] == "missing_fn"
        orders[mode] = got.unbound[0][3]
        proc.close()
    assert orders[ldproc.RTLD_NOW][0] == "libglobal.so"
    assert orders[ldproc.RTLD_NOW | ldproc.RTLD_DEEPBIND][:2] == ("build.so", "libown.so")


def _moriep(site: Path) -> None:
    """SGLang's token dispatcher for ``--moe-a2a-backend mori`` as 0.5.23 writes it: its
    package imported for type checkers at the top (never run) and where the backend is set
    up; a helper package (``aiter``) on one code path only."""
    disp = site / "sglang" / "srt" / "layers" / "moe" / "token_dispatcher"
    (disp / "moriep.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import mori\n\n"
        "def init_mori_op():\n    import mori\n    return mori.ops\n\n"
        "def _fast():\n    import aiter\n    return aiter\n")
    (disp / "ascend_tp.py").write_text("import torch\n")


def test_a_backend_no_rule_reads_is_judged_by_whether_its_package_is_there(
        tmp_path: Path) -> None:
    """A requested backend whose package has no loader rule here: absent, the worker dies
    setting the backend up (not usable, naming the import and the flag); present, found
    and its plain import followed; a backend that imports no package of its own: said, not
    judged (the helper a code path may import is not required)."""
    site = _site(tmp_path)
    _moriep(site)
    r = run(site, "--", "--moe-a2a-backend", "mori", ep=False)
    assert r.rc == 1, r.out
    line = r.line("mori")
    assert line.startswith("fail  mori: not installed (--moe-a2a-backend mori: sglang/srt/"
                           "layers/moe/token_dispatcher/moriep.py:6 imports mori)"), r.out
    assert "or choose another --moe-a2a-backend" in r.fixes()[0]
    assert "aiter" not in r.out
    (site / "mori").mkdir()
    (site / "mori" / "__init__.py").write_text("")
    r = run(site, "--", "--moe-a2a-backend", "mori", ep=False)
    # present: its plain import followed (tests/preflight/test_extensions_plain.py)
    assert r.rc == 0 and r.line("mori").startswith(f"pass  mori: at {site / 'mori'}"), r.out
    r = run(site, "--", "--moe-a2a-backend", "ascend_fuseep", ep=False)
    assert r.rc == 0 and "--moe-a2a-backend ascend_fuseep: no module of it" in r.out, r.out


def test_the_dynamo_line_reads_sglang_and_models_torch_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39's speed: on Dynamo's line (mooncake for elastic EP, nixl for MoE all-to-all)
    over an image with nixl and sgl_kernel, a cold check walks SGLang's package once (the
    backend choices are judged from what the walk read) and models `import torch` once
    (each extension's build is loaded into a copy of that process); its lines are those of
    the same check in a process of its own (subprocess, the CLI)."""
    from moonpin.preflight.installed import image_facts
    from moonpin.preflight.pyimport import importer, pyrun
    from moonpin.preflight.run import check_image

    site = _site(tmp_path)
    add_nixl(site)
    add_sgl_kernel(site)
    monkeypatch.setenv("MOONPIN_CHECK_SYSTEM_LIBS", str(site / "_no_system_libs"))
    monkeypatch.setenv("MOONPIN_CHECK_FORK", "0")
    walks: list[str] = []
    torches: list[str] = []
    real_walk, real_import = importer.package_sources, pyrun.Chain.import_module

    def walk(*a: object, **k: object) -> object:
        walks.append("sglang")
        return real_walk(*a, **k)  # type: ignore[arg-type]

    def imp(self: pyrun.Chain, name: str, by: object) -> object:
        if name == "torch" and getattr(by, "name", "") == "__main__":
            torches.append(name)
        return real_import(self, name, by)  # type: ignore[arg-type]

    monkeypatch.setattr(importer, "package_sources", walk)
    monkeypatch.setattr(image_facts, "package_sources", walk)
    monkeypatch.setattr(pyrun.Chain, "import_module", imp)
    launch = ["--moe-a2a-backend", "nixl"]
    report = check_image(elastic_ep_backend="mooncake", launch_args=launch,
                         site_packages=[site], deep=False, source_cache=False)
    lines = report.lines()
    assert any(x.startswith("pass  nixl_ep") for x in lines), lines
    assert any(x.startswith("pass  sgl_kernel") for x in lines), lines
    assert walks == ["sglang"] and torches == ["torch"], (walks, torches)
    alone = run(site, "--no-cache", "--", *launch)
    assert alone.lines == lines


def test_hostile_sglang_sources_are_said_unread_never_a_hang(tmp_path: Path) -> None:
    """A FIFO, a source that does not parse and a folder link loop among SGLang's sources:
    the check ends, and says what it could not read instead of guessing that the choice
    imports nothing."""
    site = _site(tmp_path)
    srt = site / "sglang" / "srt"
    srt.mkdir(parents=True, exist_ok=True)
    os.mkfifo(srt / "fifo.py")
    (srt / "broken.py").write_text("if cfg.elastic_ep_backend == 'nixl':\n    import x(\n")
    (srt / "loop").symlink_to(srt, target_is_directory=True)
    r = run(site, "--", "--elastic-ep-backend", "nixl", ep=False)
    assert r.rc == 0, r.out
    line = r.line("extensions")
    assert line.startswith("skip  extensions: --elastic-ep-backend nixl: a test on its value in "
                           "the installed SGLang's sources is unread (sglang/srt/broken.py: "
                           "SyntaxError"), r.out
    assert line.endswith(", and 1 more); not judged"), r.out  # the FIFO
    assert "nixl_ep" not in r.out


def test_a_source_past_the_read_cap_is_unread(tmp_path: Path) -> None:
    from moonpin.preflight.access.confined import NOWHERE
    from moonpin.preflight.extensions import wanted

    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "huge.py").write_bytes(b"# elastic_ep_backend\n" + b"x = 1\n" * 3_000_000)
    (srt / "ok.py").write_text("if cfg.elastic_ep_backend:\n    import nixl_ep\n")
    got, unread = wanted._under_tests(str(tmp_path / "sglang"), "--elastic-ep-backend",
                                      "nixl", NOWHERE)
    assert got == [("nixl_ep", 2, "sglang/srt/ok.py")]
    assert len(unread) == 1 and unread[0].startswith("sglang/srt/huge.py: unreadable: ")
    assert "over the 16 MiB limit" in unread[0]


def test_an_extension_that_loads_no_build_fails_where_torchs_own_import_fails(
        tmp_path: Path) -> None:
    """flashinfer loads nothing prebuilt at import, but imports torch: in an image where
    torch's own import fails (a system library its extension needs is missing: an image
    without libffi, hunt-D-root-noffi), ``import flashinfer`` fails too, and so does the
    torch line; no reinstall of an extension or its pins is offered for it (it would not
    mend torch): the fix says no record names the library's owner, and which object needs
    it."""
    import importlib.machinery

    site = _site(tmp_path)
    add_flashinfer(site)
    add_sgl_kernel(site)
    ok = run(site, "--gpu-capability", "9.0", ep=False)
    assert ok.rc == 0 and ok.line("flashinfer").startswith("pass"), ok.out
    link = tmp_path / "link"
    gcc_so(link / "libgone.so.8", soname="libgone.so.8")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    gcc_so(site / "torch" / f"_sysdep{suffix}", needs=("libgone.so.8",), link=link)
    init = site / "torch" / "__init__.py"
    init.write_text(init.read_text() + "from torch import _sysdep  # noqa: F401\n")
    r = run(site, "--gpu-capability", "9.0", ep=False)
    assert r.rc == 1, r.out
    line = r.line("flashinfer")
    assert line.startswith("fail") and "torch's import on the way fails" in line, r.out
    assert "libgone.so.8" in line, r.out
    assert "libgone.so.8" in r.line("sgl_kernel"), r.out
    assert r.line("torch").startswith("fail") and "libgone.so.8" in r.line("torch"), r.out
    assert "no owner found" in r.line("torch"), r.out
    fixes = r.fixes()
    assert len(fixes) == 3 and len(set(fixes)) == 1, r.out
    assert fixes[0].startswith("fix: install what provides libgone.so.8") and (
        f"_sysdep{suffix} needs it" in fixes[0]) and "pip " not in fixes[0], r.out
