"""The fix line of an extension the launch line needs and that is missing, or installed and
not loading, from the knowledge base's resolved tables (what ``moonpin which`` answers):
the release that fits this environment (its SGLang, torch release and CUDA major, Python,
platform), SGLang's own pin when they agree, what would fit when nothing does, and the
honest line when the tables do not hold the question. Each image is a throwaway one
(tests/lib/extimages.py); each KB is written with its tables as ``kb resolve`` leaves it."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.lib.checkrun import run, small_kb
from tests.lib.extimages import add_sgl_kernel, torch_image
from tests.lib.resolvedkb import resolved_kb
from tests.resolver.kbslice import build_kb
from tests.resolver.test_which_native import _kb, _kernel, _with_sglang_edges

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

NIXL = ("--", "--moe-a2a-backend", "nixl")
#: how the tables name this interpreter and machine (a ``--site-packages`` check's own)
HERE = f"cp{sys.version_info[0]}{sys.version_info[1]} {os.uname().machine}"
#: what the meta nixl 1.5.1 of the test KB requires exactly
BRINGS = "it installs nixl-cu12 1.5.1, nixl-cu13 1.5.1 with it (its exact requirements)"
#: a torch C++ symbol the test torch does not define (sglang-kernel 0.4.8's, torch 2.13's)
GONE = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"


def _write(folder: Path, kb: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return resolved_kb(folder, kb)


@pytest.fixture(scope="module")
def edged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SGLang 0.5.23 (torch==2.14.1, sglang-kernel==0.4.10, nixl_ep imported by
    ``--moe-a2a-backend nixl``), the meta nixl 1.5.1 and 1.5.2 (which the index cannot
    install), nixl-cu12/-cu13 1.5.1 (builds for torch 2.11-2.14), sglang-kernel 0.4.10."""
    return _write(tmp_path_factory.mktemp("edged"), _with_sglang_edges(_kb()))


@pytest.fixture(scope="module")
def unpinned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same releases with an SGLang 0.5.23 that pins no extension, and sglang-kernel
    0.4.8 (``torch==2.13.0``) beside 0.4.10."""
    kb = _kb()
    kb = kb.model_copy(update={"native": (*kb.native, _kernel("0.4.8", "==2.13.0", 13))})
    return _write(tmp_path_factory.mktemp("unpinned"), kb)


@pytest.mark.parametrize("ep", [False, True], ids=["extensions only", "with mooncake"])
def test_a_missing_extension_gets_the_release_the_kb_says_fits(
        tmp_path: Path, edged: Path, ep: bool) -> None:
    """Before: ``pip install 'nixl'`` (no release named: pip takes the newest, and nothing
    says it has a build for this torch)."""
    site = torch_image(tmp_path / "site", sglang_requires=["torch==2.14.1"])
    r = run(site, *NIXL, ep=ep, kb=edged)
    assert r.rc == 1 and r.line("nixl_ep").startswith("fail  nixl_ep: not installed"), r.out
    fix = next(f for f in r.fixes() if "nixl" in f)
    assert fix == ("fix: pip install 'nixl==1.5.1'  # the knowledge base's newest release "
                   f"that fits sglang 0.5.23, torch 2.14.1 (CUDA 13), {HERE}; {BRINGS}"), r.out


def test_sglangs_pin_wins_where_the_kb_agrees(tmp_path: Path, edged: Path) -> None:
    """sglang-kernel absent, the installed SGLang pins 0.4.10 and the tables say 0.4.10
    fits: the pin, said as agreed. Before: the pin alone."""
    site = torch_image(tmp_path / "site",
                       sglang_requires=["torch==2.14.1", "sglang-kernel==0.4.10"])
    r = run(site, ep=False, kb=edged)
    assert r.rc == 1, r.out
    assert r.fixes() == ["fix: pip install 'sglang-kernel==0.4.10'  # the installed SGLang's "
                         "pin; the knowledge base agrees: it fits sglang 0.5.23, torch 2.14.1 "
                         f"(CUDA 13), {HERE}"], r.out


def test_an_installed_release_without_a_build_for_torch_gets_the_one_that_has_it(
        tmp_path: Path, unpinned: Path) -> None:
    """sglang-kernel 0.4.8 (``torch==2.13.0``) under the torch 2.14.1 SGLang pins, which
    pins no kernel: the kernel the tables say fits, torch left as SGLang wants it. Before:
    ``pip install 'torch==2.13.0'`` (the kernel's own pin), which breaks SGLang's."""
    site = torch_image(tmp_path / "site", sglang_requires=["torch==2.14.1"])
    add_sgl_kernel(site, version="0.4.8", torch_pin="2.13.0", sm90_uses=(GONE,),
                   sm100_uses=(GONE,))
    r = run(site, ep=False, kb=unpinned)
    assert r.rc == 1 and r.line("sgl_kernel").startswith("fail"), r.out
    assert r.fixes() == ["fix: pip install 'sglang-kernel==0.4.10'  # the knowledge base's "
                         "newest release that fits sglang 0.5.23, torch 2.14.1 (CUDA 13), "
                         f"{HERE}"], r.out
    # the release that fits, installed: the KB names nothing (what fails is not the release)
    fits = torch_image(tmp_path / "fits", sglang_requires=["torch==2.14.1"])
    add_sgl_kernel(fits, version="0.4.10", torch_pin="2.14.1", sm90_uses=(GONE,),
                   sm100_uses=(GONE,))
    again = run(fits, ep=False, kb=unpinned)
    assert again.rc == 1 and "knowledge base" not in again.out, again.out


def test_nothing_fits_this_torch_names_the_torch_sglang_admits(
        tmp_path: Path, edged: Path) -> None:
    """torch 2.15.0 (no nixl build for it) under an SGLang that requires 2.14.1: that torch
    and the nixl that fits it, in one line."""
    site = torch_image(tmp_path / "site", version="2.15.0", sglang_requires=["torch==2.14.1"])
    r = run(site, *NIXL, ep=False, kb=edged)
    assert r.rc == 1, r.out
    fix = next(f for f in r.fixes() if "nixl" in f)
    assert fix.startswith("fix: pip install 'torch==2.14.1,!=2.14.1+cpu' 'nixl==1.5.1'  # no "
                          "release of nixl the knowledge base records fits sglang 0.5.23, "
                          f"torch 2.15.0 (CUDA 13), {HERE} (newest: nixl 1.5.1: "), r.out
    assert fix.endswith(f"sglang 0.5.23 admits torch 2.14.1, which nixl 1.5.1 fits; {BRINGS}")


def test_nothing_fits_anywhere_is_said_plainly(tmp_path: Path) -> None:
    """An SGLang that requires torch 2.15.0, for which no nixl has a build: no pip line,
    the verdict and exit code unchanged."""
    kb = _kb()
    other = build_kb({"sglang": [{"version": "0.5.23", "torch": ["torch==2.15.0"]}],
                      "torch": [{"version": v, "cuda": {"x86_64": 13, "aarch64": 13}}
                                for v in ("2.14.1", "2.15.0")]})
    path = _write(tmp_path / "kb", other.model_copy(update={"native": kb.native}))
    site = torch_image(tmp_path / "site", version="2.15.0", sglang_requires=["torch==2.15.0"])
    r = run(site, *NIXL, ep=False, kb=path)
    assert r.rc == 1 and r.line("nixl_ep").startswith("fail  nixl_ep: not installed"), r.out
    (fix,) = r.fixes()
    assert fix.startswith("fix: no release of nixl the knowledge base records fits sglang "
                          f"0.5.23, torch 2.15.0 (CUDA 13), {HERE} (newest: nixl 1.5.1: build "
                          "for torch:"), r.out
    assert fix.endswith("`moonpin which nixl --sglang 0.5.23 --torch 2.15.0 --why` says why "
                        "each"), r.out


HONEST = ("fix: pip install 'nixl'  # no installed file pins a release: check that it has a "
          "build for torch 2.14.1 with `moonpin which nixl`, or run the check again after")


def test_without_the_tables_answer_the_line_stays_honest(tmp_path: Path, edged: Path) -> None:
    """With the tables, the release; without them (no KB, a KB without tables, one older
    than the installed SGLang, a torch label they cannot answer for), today's line."""
    site = torch_image(tmp_path / "site", sglang_requires=["torch==2.14.1"])
    assert "'nixl==1.5.1'" in run(site, *NIXL, ep=False, kb=edged).fixes()[0]
    older = _kb().model_copy(update={"sglang": tuple(
        s.model_copy(update={"version": "0.5.22"}) for s in _kb().sglang)})
    for kb in (tmp_path / "absent" / "kb.json", small_kb(tmp_path),
               _write(tmp_path / "older", older)):
        r = run(site, *NIXL, ep=False, kb=kb)
        assert r.rc == 1 and r.fixes()[0] == HONEST, (kb, r.out)
    cpu = torch_image(tmp_path / "cpu", cuda=None, sglang_requires=["torch==2.14.1"])
    (cpu / "torch" / "version.py").write_text(
        (cpu / "torch" / "version.py").read_text().replace("'2.14.1'", "'2.14.1+cpu'"))
    r = run(cpu, *NIXL, ep=False, kb=edged)
    assert "knowledge base's" not in r.out, r.out


def test_a_warm_start_sees_another_kb(tmp_path: Path, edged: Path) -> None:
    """The extensions' memo stamps the KB file: a KB replaced under the same path (its
    tables with it) is another answer, not the kept line."""
    from tests.preflight.test_extensions_warm import start, warm

    site = torch_image(tmp_path / "site", version="2.15.0", sglang_requires=["torch==2.14.1"])
    folder = tmp_path / "kb"
    shutil.copytree(edged.parent, folder)
    kb = folder / "kb.json"
    before = warm(site, *NIXL, kb=kb)
    assert "'torch==2.14.1,!=2.14.1+cpu' 'nixl==1.5.1'" in before.out, before.out
    time.sleep(0.02)
    other = build_kb({"sglang": [{"version": "0.5.23", "torch": ["torch==2.15.0"]}],
                      "torch": [{"version": v, "cuda": {"x86_64": 13, "aarch64": 13}}
                                for v in ("2.14.1", "2.15.0")]})
    shutil.rmtree(folder)
    _write(folder, other.model_copy(update={"native": _kb().native}))
    after = start(site, *NIXL, kb=kb)
    fresh = start(site, *NIXL, "--no-cache", kb=kb)
    assert after.walked and (after.rc, after.out) == (fresh.rc, fresh.out)
    assert "fix: no release of nixl" in after.out, after.out
