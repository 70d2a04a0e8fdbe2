"""sgl_kernel as ``import sgl_kernel`` runs it: the ``__init__.py`` in the folder decides
which ``common_ops`` loads, whichever loader module lies beside it. The shapes are the
releases' own (read on the index's wheels): ``sgl-kernel`` 0.3.4's ``__init__.py`` imports
``sgl_kernel.common_ops`` plainly (one flat build, CUDA 12); ``sglang-kernel`` 0.4.10's calls
``load_utils._load_architecture_specific_ops``, which globs ``sm90/`` or ``sm100/``. Both
distributions install into the one ``sgl_kernel/`` folder, so after both the files are the
later install's (``tests/realimg/stack.sh`` builds the real ones: ``hunt-k-*``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.lib.checkrun import run
from tests.lib.extimages import COW, PARSE, add_sgl_kernel, gcc_so, torch_image
from tests.lib.images import add_dist

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: sgl-kernel 0.3.4's sgl_kernel/__init__.py, the lines up to its build's import
OLD_INIT = '''import ctypes
import os
import platform

import torch

SYSTEM_ARCH = platform.machine()

cuda_path = f"/usr/local/cuda/targets/{SYSTEM_ARCH}-linux/lib/libcudart.so.12"
if os.path.exists(cuda_path):
    ctypes.CDLL(cuda_path, mode=ctypes.RTLD_GLOBAL)

from sgl_kernel import common_ops
from sgl_kernel.allreduce import *
'''
GPU = {"MOONPIN_GPU_CAPABILITY": "none"}


def _site(tmp_path: Path) -> Path:
    """torch 2.14.1 (its c10 defines PARSE, not COW) under an SGLang pinning
    sglang-kernel 0.4.10."""
    return torch_image(tmp_path / "site", symbols=(PARSE,),
                       sglang_requires=["sglang-kernel==0.4.10", "torch==2.14.1"])


def add_old_sgl_kernel(site: Path, uses: tuple[str, ...]) -> None:
    """sgl-kernel 0.3.4's layout over ``site``: its ``__init__.py`` and one flat build
    calling ``uses`` (the files another install left stay)."""
    pkg = site / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(OLD_INIT)
    (pkg / "allreduce.py").write_text("")
    gcc_so(pkg / "common_ops.abi3.so", uses=uses, needs=["libc10.so"],
           link=site / "torch" / "lib", rpath="$ORIGIN/../torch/lib")
    add_dist(site, "sgl-kernel", "0.3.4")


def test_an_old_flat_sgl_kernel_is_judged_by_its_plain_import(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_old_sgl_kernel(site, uses=(COW,))  # a symbol this torch lacks
    r = run(site, ep=False, env=GPU)
    line = r.line("sgl_kernel")
    assert r.rc == 1 and line.startswith("fail  sgl_kernel: sgl-kernel 0.3.4"), r.out
    assert f"sgl_kernel/common_ops.abi3.so: undefined symbol: {COW}" in line
    assert "imports sgl_kernel.common_ops plainly" in line
    # the distribution SGLang pins is the other one: the old one out, the pinned one in
    assert r.fixes()[0].startswith("fix: ") and (
        "pip uninstall -y sgl-kernel && " in r.fixes()[0]
        and "pip install 'sglang-kernel==0.4.10'" in r.fixes()[0]), r.out
    ok = _site(tmp_path / "ok")
    add_old_sgl_kernel(ok, uses=(PARSE,))
    r = run(ok, ep=False, env=GPU)
    assert r.rc == 0 and "loads sgl_kernel/common_ops.abi3.so" in r.line("sgl_kernel"), r.out


def test_with_both_distributions_the_init_in_the_folder_decides(tmp_path: Path) -> None:
    """sglang-kernel then sgl-kernel: the old ``__init__.py`` runs, the flat build is
    loaded (sm100's, which loads, is never tried); the other order loads sm100 and warns
    that the folder holds both. The fix takes both out and puts the pinned one in."""
    old_last = _site(tmp_path / "a")
    add_sgl_kernel(old_last, sm90_uses=(PARSE,), sm100_uses=(PARSE,))
    add_old_sgl_kernel(old_last, uses=(COW,))
    r = run(old_last, ep=False, env=GPU)
    line = r.line("sgl_kernel")
    assert r.rc == 1 and line.startswith("fail"), r.out
    assert f"sgl_kernel/common_ops.abi3.so: undefined symbol: {COW}" in line, line
    assert "both installed" in line
    fix = r.fixes()[0]
    assert "pip uninstall -y sglang-kernel sgl-kernel && " in fix and \
        "pip install 'sglang-kernel==0.4.10'" in fix, r.out

    new_last = _site(tmp_path / "b")
    add_old_sgl_kernel(new_last, uses=(COW,))
    add_sgl_kernel(new_last, sm90_uses=(PARSE,), sm100_uses=(PARSE,))
    r = run(new_last, ep=False, env=GPU)
    line = r.line("sgl_kernel")
    assert r.rc == 0 and line.startswith("warn") and "loads sm100/common_ops.abi3.so" in line, \
        r.out
    assert "both installed" in line and "pip uninstall -y sglang-kernel sgl-kernel" in r.out


def test_a_loader_module_the_init_imports_that_is_gone(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_sgl_kernel(site)
    (site / "sgl_kernel" / "load_utils.py").unlink()
    r = run(site, ep=False, env=GPU)
    line = r.line("sgl_kernel")
    assert r.rc == 1 and "ModuleNotFoundError: No module named 'sgl_kernel.load_utils'" in line, \
        r.out


def test_the_missing_library_named_is_the_first_ld_so_meets(tmp_path: Path) -> None:
    """Two libraries the build needs are gone: ld.so stops at the first of its DT_NEEDED
    (breadth first), not the first by name; the real dlopen says which."""
    import ctypes

    site = _site(tmp_path)
    add_old_sgl_kernel(site, uses=(PARSE,))
    build = site / "sgl_kernel" / "common_ops.abi3.so"
    link = tmp_path / "link"
    for name in ("libzz_gone.so.12", "libaa_gone.so.12"):
        gcc_so(link / name, soname=name)
    shutil.copy(site / "torch" / "lib" / "libc10.so", link / "libc10.so")
    gcc_so(build, uses=(PARSE,), needs=["libzz_gone.so.12", "libaa_gone.so.12", "libc10.so"],
           link=link, rpath="$ORIGIN/../torch/lib")
    shutil.rmtree(link)
    with pytest.raises(OSError) as real:
        ctypes.CDLL(str(build))
    assert "libzz_gone.so.12" in str(real.value)
    r = run(site, ep=False, env=GPU)
    assert r.rc == 1 and "libzz_gone.so.12 (needed by common_ops.abi3.so) cannot be found" \
        in r.line("sgl_kernel"), r.out


ELEMENTWISE = '''import torch

try:
    import flashinfer.norm as _flashinfer_norm

    _has_flashinfer = True
except {caught}:
    _has_flashinfer = False


def rmsnorm():
    return _has_flashinfer
'''


@pytest.mark.parametrize(("caught", "cubin", "status"), [
    ("ImportError", "0.7.1", "fail"), ("Exception", "0.7.1", "pass"),
    ("ImportError", "0.7.2", "pass")])
def test_an_extension_imported_on_sgl_kernels_way_fails_it(tmp_path: Path, caught: str,
                                                           cubin: str, status: str) -> None:
    """sglang-kernel 0.4.10's ``elementwise.py`` (imported by its ``__init__.py`` after
    common_ops) tries ``import flashinfer.norm`` and catches only ImportError: a flashinfer
    whose version lock raises RuntimeError takes ``import sgl_kernel`` down with it
    (hunt-fi-0612cubin, real)."""
    from tests.lib.extimages import add_flashinfer

    site = _site(tmp_path)
    add_sgl_kernel(site)
    pkg = site / "sgl_kernel"
    (pkg / "elementwise.py").write_text(ELEMENTWISE.format(caught=caught))
    with (pkg / "__init__.py").open("a") as f:
        f.write("from sgl_kernel.elementwise import (\n    rmsnorm,\n)\n")
    add_flashinfer(site, cubin=cubin)
    r = run(site, ep=False, env=GPU)
    line = r.line("sgl_kernel")
    assert line.startswith(status), r.out
    if status == "fail":
        assert "sgl_kernel/elementwise.py:4 imports flashinfer, whose import raises " \
            "RuntimeError (its except catches ImportError, not that)" in line, line
        assert r.line("flashinfer").startswith("fail")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_build_folder_the_checks_user_cannot_list(tmp_path: Path) -> None:
    """Checked live as an unprivileged user, ``sm100/`` mode 000: the loader's glob finds
    nothing there (no PermissionError), falls back and raises its CRITICAL ImportError; the
    fix reinstalls the distribution, which puts the folder back as the wheel makes it
    (hunt-k-unreadable, real: import as nobody fails, root's pip line mends it)."""
    import sysconfig
    import tempfile

    from tests.lib.checkrun import NOBODY, ROOT, Run, python_for_nobody

    python = python_for_nobody()
    if python is None:
        pytest.skip("no interpreter of this Python version the unprivileged user can run")
    where = Path(tempfile.mkdtemp(prefix="moonpin-user-"))
    try:
        where.chmod(0o755)
        site = _site(where)
        add_sgl_kernel(site)
        for p in [where, *where.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        env = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "PYTHONPATH")}
        env.update(PYTHONPATH=os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
                   HOME=str(where / "home"), MOONPIN_GPU_CAPABILITY="none")

        def check() -> Run:
            return Run(subprocess.run(
                [python, "-m", "moonpin.preflight", "--site-packages", str(site), "--no-deep"],
                cwd=ROOT, capture_output=True, text=True, env=env, timeout=120, user=NOBODY,
                group=NOBODY))

        assert check().line("sgl_kernel").startswith("pass")  # control
        (site / "sgl_kernel" / "sm100").chmod(0)
        r = check()
        line = r.line("sgl_kernel")
        assert r.rc == 1 and "CRITICAL: Could not load any common_ops library" in line, r.out
        assert "sm100: not readable by this user" in line
        assert "pip install --force-reinstall --no-deps 'sglang-kernel==0.4.10'" in r.fixes()[0]
    finally:
        for p in [where, *where.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(where)
