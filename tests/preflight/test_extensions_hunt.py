"""Shapes of nixl and deep_ep that real releases have and the first rules did not read,
found by building images of them from the index's wheels (``tests/test_image_hunt_nixl.py``):
each test fails on the commit before its rule learnt the shape.

* nixl before 1.3.1 ships one build and imports it by name (``from . import nixl_ep_cpp``):
  in ``nixl_ep_cu13/`` behind the meta package (1.3.0), or in ``nixl_ep/`` itself, shipped by
  ``nixl-cu13`` (1.0.1-1.2.0). The check said "not judged"; the real import of either under
  torch 2.14 fails with ``undefined symbol: …materialize_cow_storage…``.
* sgl-deep-ep 0.1.2's ``__init__`` asserts a CUDA home at import (``find_cuda_home``):
  ``CUDA_HOME``/``CUDA_PATH``, ``which nvcc``, or ``/usr/local/cuda``. The check said the
  import works in an image with none of them; it raises ``AssertionError`` there."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.lib.checkrun import run
from tests.lib.extimages import COW, add_deep_ep, add_nixl, gcc_so, torch_image
from tests.lib.images import add_dist, ext_suffix

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

NIXL = ("--", "--moe-a2a-backend", "nixl")
DEEPEP = ("--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep")

#: nixl-cu13 1.3.0's nixl_ep_cu13/__init__.py (and 1.2.0's nixl_ep/__init__.py), as shipped
_PLAIN_BACKEND = '''import torch

from . import nixl_ep_cpp as _nixl_ep_cpp
from .buffer import Buffer
from .utils import EventOverlap

topk_idx_t = getattr(_nixl_ep_cpp, "topk_idx_t", torch.int64)
Config = _nixl_ep_cpp.Config
'''


def _plain_nixl(site: Path, *, meta: bool) -> Path:
    """nixl 1.3.0's shape (``meta``: the meta ``nixl_ep`` over ``nixl_ep_cu13/``) or 1.2.0's
    (``nixl_ep/`` itself from ``nixl-cu13``): one build, calling ``COW``. Returns the build."""
    if meta:
        add_nixl(site, version="1.3.0", minors=())
        back = site / "nixl_ep_cu13"
    else:
        back = site / "nixl_ep"
        back.mkdir(parents=True)
        add_dist(site, "nixl-cu13", "1.2.0", requires=["torch", "numpy"],
                 files=["nixl_ep/__init__.py"])
    (back / "__init__.py").write_text(_PLAIN_BACKEND)
    return gcc_so(back / f"nixl_ep_cpp{ext_suffix()}", uses=[COW], needs=["libc10.so"],
                  link=site / "torch" / "lib", rpath="$ORIGIN/../torch/lib")


def _kb_with_nixl_151(tmp_path: Path) -> Path:
    """A knowledge base, with its resolved tables, whose nixl 1.5.1 (the meta, providing
    ``nixl_ep``) pins nixl-cu13 1.5.1, which has a CUDA 13 build for torch 2.12-2.14 on every
    CPython 3.10-3.14, and whose SGLang 0.5.23 imports ``nixl_ep`` for ``--moe-a2a-backend
    nixl`` (:func:`tests.resolver.test_which_native._kb`, with SGLang's edges)."""
    from tests.lib.resolvedkb import resolved_kb
    from tests.resolver.test_which_native import _kb, _with_sglang_edges

    folder = tmp_path / "kb"
    folder.mkdir()
    return resolved_kb(folder, _with_sglang_edges(_kb()))


@pytest.mark.parametrize("meta", [True, False], ids=["1.3.0-meta", "1.2.0-in-nixl_ep"])
def test_nixls_one_plain_build_is_judged(tmp_path: Path, meta: bool) -> None:
    site = torch_image(tmp_path / "site", symbols=())  # torch 2.14 lacks the COW symbol
    build = _plain_nixl(site, meta=meta)
    r = run(site, *NIXL, ep=False, kb=_kb_with_nixl_151(tmp_path))
    line = r.line("nixl_ep")
    assert r.rc == 1 and line.startswith("fail"), r.out
    assert f"undefined symbol: {COW}" in line, line
    assert f"imports its one build {build.name} (not chosen by torch's version)" in line
    # the meta package of a release with a build for this torch: it brings its nixl-cu13;
    # where nixl_ep/ is nixl-cu13's own, the upgrade removes its __init__.py: written again
    again = "" if meta else " && pip install --force-reinstall --no-deps 'nixl==1.5.1'"
    assert r.fixes()[0].startswith(f"fix: pip install 'nixl==1.5.1'{again}  # nixl-cu13 1.5.1 "
                                   "has a build for torch 2.14.1 and CUDA 13"), r.out
    # the same build where torch still exports the symbol loads
    ok = torch_image(tmp_path / "ok", symbols=(COW,))
    _plain_nixl(ok, meta=meta)
    r = run(ok, *NIXL, ep=False)
    assert r.rc == 0 and r.line("nixl_ep").startswith("pass"), r.out
    assert f"loads {build.parent.name}/{build.name}" in r.line("nixl_ep")


def test_an_old_nixl_cu13_over_the_newest_meta_gets_the_meta_written_again(
        tmp_path: Path) -> None:
    """nixl-cu13 1.2.0 installed after the meta nixl 1.5.1: its nixl_ep/__init__.py (the plain
    one) replaced the meta's. pip leaves the meta, already at 1.5.1, alone while upgrading
    nixl-cu13 removes that file: the line writes the meta again (seen with real pip)."""
    site = torch_image(tmp_path / "site", symbols=())
    _plain_nixl(site, meta=False)
    add_dist(site, "nixl", "1.5.1", requires=["nixl-cu12==1.5.1", "nixl-cu13==1.5.1"])
    r = run(site, *NIXL, ep=False, kb=_kb_with_nixl_151(tmp_path))
    assert r.rc == 1 and f"undefined symbol: {COW}" in r.line("nixl_ep"), r.out
    assert r.fixes()[0].startswith("fix: pip install 'nixl==1.5.1' && pip install "
                                   "--force-reinstall --no-deps 'nixl==1.5.1'"), r.out


def test_a_release_without_a_wheel_for_this_python_is_not_offered(tmp_path: Path) -> None:
    """nixl-cu13 1.5.1 has builds for torch 2.14, but no wheel for this interpreter's Python:
    pip cannot install it here. The rule's line came from the KB's raw facts, which it read
    beside the resolved tables (any wheel's builds, whatever its Python), and offered
    ``pip install 'nixl==1.5.1'``; it now asks the tables (``moonpin which``'s reading),
    which say no release fits this Python, as the KB's own line says."""
    from tests.lib.resolvedkb import resolved_kb
    from tests.resolver.test_which_native import _kb, _with_sglang_edges

    here = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    kb = _with_sglang_edges(_kb())
    kb = kb.model_copy(update={"native": tuple(
        r.model_copy(update={"wheels": tuple(w for w in r.wheels if here not in w.python_tags)})
        for r in kb.native)})
    folder = tmp_path / "kb"
    folder.mkdir()
    site = torch_image(tmp_path / "site", symbols=())
    _plain_nixl(site, meta=True)
    r = run(site, *NIXL, ep=False, kb=resolved_kb(folder, kb))
    assert r.rc == 1 and f"undefined symbol: {COW}" in r.line("nixl_ep"), r.out
    assert not any("nixl==1.5.1" in f for f in r.fixes()), r.out


def test_nixls_plain_build_missing(tmp_path: Path) -> None:
    site = torch_image(tmp_path / "site")
    _plain_nixl(site, meta=True).unlink()
    r = run(site, *NIXL, ep=False)
    assert r.rc == 1 and ("its loader raises ModuleNotFoundError: No module named "
                          "'nixl_ep_cu13.nixl_ep_cpp'") in r.line("nixl_ep"), r.out


def test_no_newer_release_is_offered_for_a_broken_build_of_the_newest(tmp_path: Path) -> None:
    """A per-torch build that does not bind under the torch SGLang pins, in the release the
    KB's newest fitting one is: no ``pip install nixl==`` of what is installed."""
    site = torch_image(tmp_path / "site", symbols=(), sglang_requires=["torch==2.14.1"])
    add_nixl(site, version="1.5.1")
    r = run(site, *NIXL, ep=False, kb=_kb_with_nixl_151(tmp_path))
    assert r.rc == 1 and "undefined symbol" in r.line("nixl_ep"), r.out
    assert not any("nixl==1.5.1" in f for f in r.fixes()), r.out


_FIND_CUDA_HOME = '''

import functools
import os
import subprocess


@functools.lru_cache()
def find_cuda_home():
    cuda_home = os.environ.get('CUDA_HOME') or os.environ.get('CUDA_PATH')
    if cuda_home is None:
        try:
            with open(os.devnull, 'w') as devnull:
                nvcc = subprocess.check_output(['which', 'nvcc'], stderr=devnull).decode()
                cuda_home = os.path.dirname(os.path.dirname(nvcc))
        except Exception:
            cuda_home = '{folder}'
            if not os.path.exists(cuda_home):
                cuda_home = None
    assert cuda_home is not None
    return cuda_home


def init_jit():
    import deep_ep._C as _C
    _C.init_jit(os.path.dirname(os.path.abspath(__file__)), find_cuda_home())


init_jit()
'''


def _exe(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


@pytest.mark.parametrize(("env", "tools", "folder", "loads"), [
    ({}, (), False, False),
    ({"CUDA_HOME": "/opt/cuda"}, (), False, True),
    ({"CUDA_PATH": "/x"}, (), False, True),
    ({"CUDA_HOME": ""}, (), False, False),           # empty is unset to its `or`
    ({}, ("which", "nvcc"), False, True),
    ({}, ("nvcc",), False, False),                   # no `which` to ask: its except path
    ({}, (), True, True),
], ids=["none", "CUDA_HOME", "CUDA_PATH", "empty", "nvcc-on-PATH", "no-which", "folder"])
def test_deep_ep_asserts_a_cuda_home_at_import(tmp_path: Path, env: dict[str, str],
                                               tools: tuple[str, ...], folder: bool,
                                               loads: bool) -> None:
    site = torch_image(tmp_path / "site")
    add_deep_ep(site)
    home = tmp_path / "usr-local-cuda"
    init = site / "deep_ep" / "__init__.py"
    init.write_text(init.read_text() + _FIND_CUDA_HOME.replace("{folder}", str(home)))
    if folder:
        home.mkdir()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for t in tools:
        _exe(bin_ / t)
    full = {"CUDA_HOME": "", "CUDA_PATH": "", "PATH": str(bin_), **env}
    r = run(site, *DEEPEP, ep=False, env=full)
    line = r.line("deep_ep")
    if loads:
        assert r.rc == 0 and line.startswith("pass") and "loads deep_ep/_C" in line, r.out
    else:
        assert r.rc == 1 and "AssertionError (deep_ep's find_cuda_home() finds no CUDA home: "\
            "neither CUDA_HOME nor CUDA_PATH is set" in line, r.out
        assert r.fixes()[0].startswith("fix: set CUDA_HOME to the image's CUDA toolkit"), r.out


def test_deep_ep_without_the_assertion_is_judged_as_before(tmp_path: Path) -> None:
    """A deep_ep whose ``__init__`` has no such function (DeepEP's own, older sgl-deep-ep)."""
    site = torch_image(tmp_path / "site")
    add_deep_ep(site)
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "", "CUDA_PATH": "",
                                          "PATH": os.devnull})
    assert r.rc == 0 and "loads deep_ep/_C" in r.line("deep_ep"), r.out


def test_a_cuda_home_made_later_is_seen_by_the_next_start(tmp_path: Path) -> None:
    """The kept verdict (the walk's memo) holds the stamps of what was tested: the fallback
    folder appearing, or ``nvcc`` put on ``PATH``, changes the next start's verdict."""
    site = torch_image(tmp_path / "site")
    add_deep_ep(site)
    home = tmp_path / "usr-local-cuda"
    init = site / "deep_ep" / "__init__.py"
    init.write_text(init.read_text() + _FIND_CUDA_HOME.replace("{folder}", str(home)))
    bin_ = tmp_path / "bin"
    _exe(bin_ / "which")
    env = {"CUDA_HOME": "", "CUDA_PATH": "", "PATH": str(bin_),
           "MOONPIN_CACHE_DIR": str(tmp_path / "cache")}
    assert run(site, *DEEPEP, ep=False, env=env).rc == 1
    assert run(site, *DEEPEP, ep=False, env=env).rc == 1  # kept
    _exe(bin_ / "nvcc")
    r = run(site, *DEEPEP, ep=False, env=env)
    assert r.rc == 0 and r.line("deep_ep").startswith("pass"), r.out
    (bin_ / "nvcc").unlink()
    assert run(site, *DEEPEP, ep=False, env=env).rc == 1
    home.mkdir()
    r = run(site, *DEEPEP, ep=False, env=env)
    assert r.rc == 0 and r.line("deep_ep").startswith("pass"), r.out


def _record(dist_info: Path, files: dict[str, bytes]) -> None:
    """``dist_info``'s RECORD listing ``files`` as a wheel's installer writes them (each
    with the sha256 and size of the bytes its own wheel shipped)."""
    import base64
    import hashlib

    lines = [f"{rel},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"  # noqa: E501
             for rel, data in files.items()]
    lines += [f"{dist_info.name}/METADATA,,", f"{dist_info.name}/RECORD,,"]
    (dist_info / "RECORD").write_text("\n".join(lines) + "\n")


#: the meta nixl's own nixl_ep/__init__.py (it picks the CUDA-major backend), as 1.5.1 ships
#: it in shape; what matters here is only that its bytes are not nixl-cu13 1.2.0's
_META_INIT = (b"from nixl_meta_utils import detect_cuda_major\n"
              b"_backend = __import__(f'nixl_ep_cu{detect_cuda_major()}')\n")


@pytest.mark.parametrize("same_size", [False, True], ids=["sizes differ", "same size"])
def test_the_line_names_the_distribution_that_wrote_nixl_ep(tmp_path: Path,
                                                          same_size: bool) -> None:
    """nixl-cu13 1.2.0 installed after the meta nixl 1.5.1: both RECORDs list
    ``nixl_ep/__init__.py``; the file on disk is nixl-cu13's (its size and sha256), so the
    line names nixl-cu13 1.2.0, not the meta (seen in the real image hunt-meta151-cu13120:
    RECORD sizes 2882 and 1190, the file 1190). ``same size``: only the digest tells them
    apart. The control: the meta's own file is named the meta's."""
    site = torch_image(tmp_path / "site", symbols=())
    _plain_nixl(site, meta=False)
    init = site / "nixl_ep" / "__init__.py"
    plain = init.read_bytes()
    meta = _META_INIT
    if same_size:
        meta = (meta + b"#" * len(plain))[:len(plain)]
        assert len(meta) == len(plain) and meta != plain
    _record(add_dist(site, "nixl", "1.5.1", requires=["nixl-cu13==1.5.1"]),
            {"nixl_ep/__init__.py": meta, "nixl_meta_utils.py": b""})
    _record(site / "nixl_cu13-1.2.0.dist-info", {"nixl_ep/__init__.py": plain})
    r = run(site, *NIXL, ep=False, kb=_kb_with_nixl_151(tmp_path))
    line = r.line("nixl_ep")
    assert line.startswith(f"fail  nixl_ep: nixl-cu13 1.2.0 at {site / 'nixl_ep'}:"), r.out
    assert f"undefined symbol: {COW}" in line
    # the control: the meta's bytes on disk (its own nixl_ep over nixl_ep_cu13/)
    ok = torch_image(tmp_path / "ok", symbols=(COW,))
    add_nixl(ok)
    own = (ok / "nixl_ep" / "__init__.py").read_bytes()
    _record(ok / "nixl-1.5.1.dist-info", {"nixl_ep/__init__.py": own})
    _record(ok / "nixl_cu13-1.5.1.dist-info", {"nixl_ep/__init__.py": plain})  # claims it too
    r = run(ok, *NIXL, ep=False)
    assert r.line("nixl_ep").startswith(f"pass  nixl_ep: nixl 1.5.1 at {ok / 'nixl_ep'}:"), r.out


@pytest.mark.parametrize("size", ["9" * 5000, "²", "1" * 20, "-1", ""])
def test_a_record_size_no_file_has_is_left_out(size: str) -> None:
    """A RECORD line whose size no file has (5,000 digits stopped ``int()`` and with it the
    whole check, naming the owner of ``nixl_ep/``) is a line without a digest; a real line
    beside it still reads."""
    from moonpin.preflight.installed.image_facts import record_hashes

    got = record_hashes([f"nixl_ep/__init__.py,sha256=abc,{size}",
                         "nixl_ep/x.py,sha256=def,1190"])
    assert got == {"nixl_ep/x.py": ("def", 1190)}
