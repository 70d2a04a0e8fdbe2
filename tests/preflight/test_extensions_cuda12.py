"""Fix lines on a CUDA 12 worker, found on real images of one (``tests/test_image_hunt_h.py``:
torch 2.10.0, the index's newest CUDA 12 build, under SGLang 0.5.10): each test fails on the
commit before its fix, and holds the line that was right where it still is.

* nixl's meta package imports ``nixl_ep_cu<torch's CUDA major>``. nixl-cu12 1.5.1 has builds
  for torch 2.11-2.13, but the index's torch of those releases is a CUDA 13 build: the old
  fix ``pip install 'torch==2.13.*'`` made the meta import ``nixl_ep_cu13`` (not installed).
* The meta nixl 1.5.1 beside nixl-cu13 only, under that torch: the old fix installed the
  nixl-cu12 1.5.1 the meta requires, which has no build for torch 2.10 (carried out on the
  real image: ``No module named 'nixl_ep_cu12.nixl_ep_cpp_torch210'``).
* sgl-kernel 0.3.21 in place of the sglang-kernel 0.4.1 SGLang pins, under a torch SGLang
  does not pin: the old fix installed sglang-kernel 0.4.1 alone, whose build binds torch
  2.9.1's C++ symbols (SGLang's pin), not 2.10.0's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from moonpin.resolver.tables.documents import TORCH_NAME
from moonpin.resolver.tables.reading import file_sha256, stamped
from tests.lib.checkrun import run, small_kb
from tests.lib.extimages import add_nixl, add_sgl_kernel, torch_image
from tests.lib.images import add_dist

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

NIXL = ("--", "--moe-a2a-backend", "nixl")


def _kb(tmp_path: Path, torch_cuda: dict[str, int], nixl_cu12: tuple[str, ...],
        cuda: int = 12) -> Path:
    """A KB whose index has torch ``{version: CUDA major}`` for this machine, and
    nixl-cu<cuda> 1.5.1 (required by the meta nixl 1.5.1) with a build per torch minor of
    ``nixl_cu12``."""
    tmp_path.mkdir(exist_ok=True)
    kb = small_kb(tmp_path)
    # the check asks these facts of the KB's resolved torch table (``kb resolve`` writes it),
    # never of the whole KB (which here does not hold them)
    arch = os.uname().machine
    table = {"torch": [{"version": v, "variants": [[arch, c, "", ""]]}
                       for v, c in torch_cuda.items()],
             "sglang": [], "builds": {f"nixl-cu{cuda}": {"1.5.1": [
                 [f"nixl_ep_cu{cuda}.nixl_ep_cpp_torch{m}", f"=={m[0]}.{m[1:]}.*"]
                 for m in nixl_cu12]}}}
    (tmp_path / "resolved").mkdir(exist_ok=True)
    (tmp_path / "resolved" / TORCH_NAME).write_bytes(stamped(table, file_sha256(kb)))
    return kb


#: the index as the shipped KB records it: CUDA 12 torch up to 2.10.0, CUDA 13 after
INDEX = {"2.9.1": 12, "2.10.0": 12, "2.11.0": 13, "2.12.0": 13, "2.13.0": 13}


def _cuda12(tmp_path: Path) -> Path:
    return torch_image(tmp_path / "site", version="2.10.0", cuda=12,
                       sglang_requires=["torch==2.9.1"])


def test_nixl_names_no_torch_whose_index_build_links_another_cuda(tmp_path: Path) -> None:
    site = _cuda12(tmp_path)
    add_nixl(site, cuda=12, minors=("211", "212", "213"))
    r = run(site, *NIXL, ep=False, kb=_kb(tmp_path / "kb", INDEX, ("211", "212", "213")))
    line = r.line("nixl_ep")
    assert r.rc == 1 and "No module named 'nixl_ep_cu12.nixl_ep_cpp_torch210'" in line, r.out
    fix = r.fixes()[0]
    assert "torch==" not in fix and "pip" not in fix, r.out
    assert ("nixl_ep_cu12 has builds for torch 2.11, 2.12, 2.13, whose builds there link "
            "CUDA 13, not torch's CUDA 12") in fix, r.out
    assert "`moonpin which nixl --torch 2.10.0 --why`" in fix, r.out
    # where the index's torch 2.13 keeps torch's CUDA, that torch is the fix
    same = run(site, *NIXL, ep=False, kb=_kb(tmp_path / "kb2", {**INDEX, "2.13.0": 12},
                                             ("211", "212", "213")))
    assert same.fixes()[0].startswith("fix: pip install 'torch==2.13.*'"), same.out


def test_the_backend_the_meta_requires_is_not_installed_without_a_build_for_torch(
        tmp_path: Path) -> None:
    site = _cuda12(tmp_path)
    add_nixl(site, cuda=13, minors=("212", "213", "214"))  # the meta and nixl-cu13 only
    r = run(site, *NIXL, ep=False, kb=_kb(tmp_path / "kb", INDEX, ("211", "212", "213")))
    assert "detected CUDA 12 but nixl-cu12 is not installed" in r.line("nixl_ep"), r.out
    fix = r.fixes()[0]
    assert "nixl-cu12==1.5.1" not in fix, r.out
    assert ("nixl-cu12 1.5.1 (the release the installed nixl requires) has no build for "
            "torch 2.10.0: installed alone, `import nixl_ep` would still fail") in fix, r.out
    # a nixl-cu12 1.5.1 with a build for torch 2.10 is the fix
    fits = run(site, *NIXL, ep=False, kb=_kb(tmp_path / "kb2", INDEX, ("210", "211")))
    assert fits.fixes()[0] == "fix: pip install 'nixl-cu12==1.5.1'", fits.out
    # a table of another KB (the KB changed since `kb resolve`) is not read: the plain line,
    # as without a KB, never the old table's facts
    stale = _kb(tmp_path / "kb3", INDEX, ("211", "212", "213"))
    stale.write_text(stale.read_text().replace("0.3.9", "0.3.10"))
    old = run(site, *NIXL, ep=False, kb=stale)
    assert old.fixes()[0] == "fix: pip install 'nixl-cu12==1.5.1'", old.out


def test_the_backend_the_meta_requires_comes_with_the_torch_it_has_a_build_for(
        tmp_path: Path) -> None:
    """torch 2.15.0 (CUDA 13) under an SGLang pinning 2.14.1, the meta nixl 1.5.1 beside
    nixl-cu12 only: nixl-cu13 1.5.1 (builds for 2.12-2.14) alone would not load; with
    SGLang's torch it does, and the index's 2.14.1 is CUDA 13: the two in one line."""
    site = torch_image(tmp_path / "site", version="2.15.0", sglang_requires=["torch==2.14.1"])
    add_nixl(site, cuda=12, minors=("211", "212", "213"))
    add_dist(site, "nixl", "1.5.1", requires=["nixl-cu12==1.5.1", "nixl-cu13==1.5.1"])
    index = {"2.14.1": 13, "2.15.0": 13}
    r = run(site, *NIXL, ep=False, kb=_kb(tmp_path / "kb", index, ("212", "213", "214"), 13))
    assert "detected CUDA 13 but nixl-cu13 is not installed" in r.line("nixl_ep"), r.out
    assert r.fixes()[0].startswith("fix: pip install 'nixl-cu13==1.5.1' "
                                   "'torch==2.14.1,!=2.14.1+cpu'  # SGLang's own pin"), r.out


def test_sglangs_kernel_in_place_of_another_comes_with_sglangs_torch(tmp_path: Path) -> None:
    missing = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"
    site = torch_image(tmp_path / "site", version="2.10.0", cuda=12,
                       sglang_requires=["torch==2.9.1", "sglang-kernel==0.4.1"])
    add_sgl_kernel(site, sm90_uses=(missing,), sm100_uses=(missing,))
    shutil.rmtree(next(site.glob("sglang_kernel-*.dist-info")))
    add_dist(site, "sgl-kernel", "0.3.21")
    r = run(site, ep=False)
    assert r.line("sgl_kernel").startswith("fail  sgl_kernel: sgl-kernel 0.3.21"), r.out
    assert r.fixes()[0] == ("fix: pip uninstall -y sgl-kernel && pip install "
                            "'sglang-kernel==0.4.1' 'torch==2.9.1,!=2.9.1+cpu'  # the "
                            "installed SGLang's pins"), r.out
