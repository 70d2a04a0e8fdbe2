"""The native-extension readers on inline sources (spelled as the upstream files spell them)
and on built ELF objects."""

from __future__ import annotations

import pytest

from moonpin.readers.native import builds, keyeval, rules
from tests.lib.elfbuild import build_so

NIXL_BACKEND = '''import importlib
import os
import sys
from contextlib import contextmanager

import torch


def _deepbind_enabled() -> bool:
    value = os.getenv("NIXL_UCX_DEEPBIND", "0").strip().lower()
    return value not in {"0", "false"}


@contextmanager
def _rtld_deepbind_import():
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if not deepbind or not _deepbind_enabled():
        yield
        return
    old_flags = sys.getdlopenflags()
    sys.setdlopenflags(old_flags | deepbind)
    try:
        yield
    finally:
        sys.setdlopenflags(old_flags)


with _rtld_deepbind_import():
    _torch_mm = "".join(torch.__version__.split(".")[:2])
    _nixl_ep_cpp = importlib.import_module(
        f".nixl_ep_cpp_torch{_torch_mm}", __package__
    )
'''
NIXL_META = '''import importlib
from nixl_meta_utils import detect_cuda_major


def _load_ep_module() -> str:
    cuda_major = detect_cuda_major()
    if cuda_major is not None:
        mod_name = f"nixl_ep_cu{cuda_major}"
        return importlib.import_module(mod_name).__name__
    for mod_name in ("nixl_ep_cu13", "nixl_ep_cu12"):
        try:
            return importlib.import_module(mod_name).__name__
        except ImportError:
            continue
'''
SGL_LOADER = '''import glob
from pathlib import Path


def _load_architecture_specific_ops():
    compute_capability = _get_compute_capability()
    sgl_kernel_dir = Path(__file__).parent
    if compute_capability == 90:
        ops_subdir = "sm90"
    else:
        ops_subdir = "sm100"
    ops_pattern = str(sgl_kernel_dir / ops_subdir / "common_ops.*")
    raw = glob.glob(ops_pattern)
    alt_pattern = str(sgl_kernel_dir / "common_ops.*")
    raw_alt = glob.glob(alt_pattern)
    import common_ops
    return common_ops
'''
SGL_OLD = '''import ctypes
import os
import platform

SYSTEM_ARCH = platform.machine()
cuda_path = f"/usr/local/cuda/targets/{SYSTEM_ARCH}-linux/lib/libcudart.so.12"
if os.path.exists(cuda_path):
    ctypes.CDLL(cuda_path, mode=ctypes.RTLD_GLOBAL)

from sgl_kernel import common_ops
'''
FLASHINFER_ENV = '''import os


def _check_cubin_version(package_version):
    if (
        not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
        and package_version != flashinfer_version
    ):
        raise RuntimeError(f"flashinfer-cubin version ({package_version}) does not match")


def _get_cubin_dir():
    try:
        _check_cubin_version(flashinfer_cubin.__version__)
    except RuntimeError as error:
        logger.warning("Ignoring %s", error)


def _check_jit_cache_version(distribution, package_version):
    if (
        not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
        and package_version != flashinfer_version
        and not package_version.startswith(f"{flashinfer_version}+")
    ):
        raise RuntimeError(f"{distribution} version ({package_version}) does not match")


def _get_aot():
    _check_jit_cache_version("flashinfer-jit-cache", flashinfer_jit_cache.__version__)
'''
FI_DISTS = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")


def _tree(src: str) -> object:
    return rules.parse(src.encode(), "m.py")


def test_nixl_backend_dispatch_and_deepbind() -> None:
    t = _tree(NIXL_BACKEND)
    (d,) = rules.import_steps(t, "nixl_ep_cu13/__init__.py", "nixl_ep_cu13",  # type: ignore[arg-type]
                              frozenset())
    assert (d.kind, d.target) == ("dispatch", "nixl_ep_cu13.nixl_ep_cpp_torch{key}")
    assert d.key is not None and keyeval.evaluate(d.key, "2.14.1+cu130") == "214"
    (e,) = rules.env_steps(t, "nixl_ep_cu13/__init__.py")  # type: ignore[arg-type]
    assert (e.target, e.effect) == ("NIXL_UCX_DEEPBIND", "RTLD_DEEPBIND")


def test_no_dlopen_flags_no_env_step() -> None:
    assert rules.env_steps(_tree('import os\nos.getenv("X")\n'), "m.py") == []  # type: ignore[arg-type]


def test_nixl_meta_dispatch_then_alternatives_in_order() -> None:
    steps = rules.import_steps(_tree(NIXL_META), "nixl_ep/__init__.py", "nixl_ep",  # type: ignore[arg-type]
                               frozenset())
    assert [(s.kind, s.target, s.key) for s in steps] == [
        ("dispatch", "nixl_ep_cu{key}", "detect_cuda_major()"),
        ("import", "nixl_ep_cu13", None), ("import", "nixl_ep_cu12", None)]
    assert steps[0].condition == "cuda_major is not None"


def test_sgl_kernel_sm_choice_then_fallbacks() -> None:
    t = _tree(SGL_LOADER)
    globs = rules.glob_steps(t, "sgl_kernel/load_utils.py", "sgl_kernel")  # type: ignore[arg-type]
    assert [(g.target, g.condition) for g in globs] == [
        ("sgl_kernel/sm90/common_ops.*", "compute_capability == 90"),
        ("sgl_kernel/sm100/common_ops.*", "not (compute_capability == 90)"),
        ("sgl_kernel/common_ops.*", None)]
    imports = rules.import_steps(t, "sgl_kernel/load_utils.py", "sgl_kernel",  # type: ignore[arg-type]
                                 frozenset({"sgl_kernel.sm90.common_ops"}))
    assert [s.target for s in imports] == ["common_ops"]


def test_sgl_kernel_old_preload_and_plain_import() -> None:
    t = _tree(SGL_OLD)
    (p,) = rules.preload_steps(t, "sgl_kernel/__init__.py")  # type: ignore[arg-type]
    assert p.target == "/usr/local/cuda/targets/{key}-linux/lib/libcudart.so.12"
    assert (p.key, p.effect, p.condition) == ("platform.machine()", "RTLD_GLOBAL",
                                              "os.path.exists(cuda_path)")
    (i,) = rules.import_steps(t, "sgl_kernel/__init__.py", "sgl_kernel",  # type: ignore[arg-type]
                              frozenset({"sgl_kernel.common_ops"}))
    assert i.target == "sgl_kernel.common_ops"


def test_flashinfer_locks_raise_or_ignored() -> None:
    locks = rules.lock_steps(_tree(FLASHINFER_ENV), "flashinfer/jit/env.py", FI_DISTS)  # type: ignore[arg-type]
    got = {(s.target, s.condition, s.effect, s.key) for s in locks}
    assert got == {
        ("flashinfer-cubin", "exact", "ignore", "FLASHINFER_DISABLE_VERSION_CHECK"),
        ("flashinfer-jit-cache", "exact-or-local", "raise", "FLASHINFER_DISABLE_VERSION_CHECK")}


def test_deep_ep_plain_imports_and_constants() -> None:
    t = _tree("import deep_ep._C as _C\nfrom deep_ep._C import Config\n")
    steps = rules.import_steps(t, "deep_ep/__init__.py", "deep_ep",  # type: ignore[arg-type]
                               frozenset({"deep_ep._C"}))
    assert [(s.target, s.line) for s in steps] == [("deep_ep._C", 1), ("deep_ep._C", 2)]
    assert rules.constants(_tree("EXPECTED_CUDA_MAJOR = 13\nX = f()\n")) == {  # type: ignore[arg-type]
        "EXPECTED_CUDA_MAJOR": "13"}


@pytest.mark.parametrize("src", ["def (:", "x = '\\0'\0"])
def test_unparsable_source_raises_for_the_caller(src: str) -> None:
    with pytest.raises((SyntaxError, ValueError)):
        rules.parse(src.encode(), "m.py")


@pytest.mark.parametrize(("expr", "version", "want"), [
    ('"".join(torch.__version__.split(".")[:2])', "2.14.1", "214"),
    ('"".join(torch.__version__.split(".")[:2])', "2.9.0+cu128", "29"),
    ("torch.__version__.split('+')[0].replace('.', '_')", "2.13.0+cu130", "2_13_0"),
    ("f'{torch.__version__[:4]}x'", "2.14.1", "2.14x"),
    ("detect_cuda_major()", "2.14.1", None),  # a call of our own: never evaluated
    ("__import__('os').system('x')", "2.14.1", None),
    ("torch.__version__.split('.')[99]", "2.14.1", None),
    ("'a' * 10**9", "2.14.1", None),
])
def test_key_evaluation(expr: str, version: str, want: str | None) -> None:
    assert keyeval.evaluate(expr, version) == want


def test_build_facts_of_a_whole_object() -> None:
    so = build_so(needed=["libtorch.so", "libcudart.so.13"], strings=["x"])
    got = builds.read_build(so, len(so), "nixl_ep_cpp_torch214")
    assert got.cuda_major == 13 and got.needed_method == "dt_needed" and got.complete
    assert got.read_error is None


@pytest.mark.parametrize("data", [b"", b"not an elf at all" * 10, b"\x7fELF" + b"\0" * 12])
def test_build_facts_of_hostile_bytes(data: bytes) -> None:
    got = builds.read_build(data, max(len(data), 1), "m")
    assert got.read_error is not None and got.cuda_major is None


def test_cuda_major_needs_one_runtime() -> None:
    assert builds.cuda_major(("libcudart.so.12",)) == 12
    assert builds.cuda_major(("libcudart.so.12", "libcudart.so.13")) is None
    assert builds.cuda_major(()) is None
