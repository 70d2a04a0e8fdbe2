"""Throwaway images of the worker's other native extensions (issue 39) for ``moonpin check``:
a torch whose libraries are gcc-built with chosen C++ symbols, and nixl, sgl_kernel,
deep_ep and flashinfer packages shaped as their releases are (loader files written here in
the same shapes the rules read, builds gcc-built with chosen undefined symbols)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.lib.images import add_dist, add_torch, ext_suffix

__all__ = ["COW", "PARSE", "add_deep_ep", "add_flashinfer", "add_nixl", "add_sgl_kernel",
           "gcc_so", "nixl_meta", "torch_image"]

#: torch C++ symbols the builds bind (c10::StorageImpl's and torch::jit's, as the public
#: reports name them)
COW = "_ZN3c1011StorageImpl23materialize_cow_storageEv"
PARSE = "_ZN5torch3jit17parseSchemaOrNameERKSsb"


def gcc_so(out: Path, *, defines: Sequence[str] = (), uses: Sequence[str] = (),
           needs: Sequence[str] = (), rpath: str | None = None, soname: str | None = None,
           link: Path | None = None) -> Path:
    """An ELF shared object gcc builds: ``defines`` as functions, ``uses`` called (left
    undefined), ``needs`` as DT_NEEDED (found in ``link`` at build time)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name + ".c")
    code = "".join(f"int {d}(void) {{ return 0; }}\n" for d in defines)
    code += "".join(f"extern int {u}(void);\n" for u in uses)
    code += "int ext_use(void) { return 0" + "".join(f" + {u}()" for u in uses) + "; }\n"
    src.write_text(code)
    cmd = ["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out), str(src),
           "-Wl,--no-as-needed", "-Wl,--allow-shlib-undefined"]
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    if rpath:
        cmd += [f"-Wl,-rpath,{rpath}", "-Wl,--enable-new-dtags"]
    for n in needs:
        cmd += [f"-L{link or out.parent}", f"-l:{n}"]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return out


def torch_image(site: Path, version: str = "2.14.1", cuda: int | None = 13,
                symbols: Sequence[str] = (COW, PARSE), sglang_requires: Sequence[str] = ()
                ) -> Path:
    """torch ``version`` (its label ``version+cu<cuda>0``) whose ``libc10.so`` defines
    ``symbols``; an SGLang 0.5.23 whose METADATA requires ``sglang_requires``."""
    add_torch(site, version, cuda=cuda, native=False)
    lib = site / "torch" / "lib"
    gcc_so(lib / "libc10.so", defines=symbols, soname="libc10.so")
    if cuda is not None:
        label = f"{version}+cu{cuda}0"
        vp = site / "torch" / "version.py"
        vp.write_text(vp.read_text().replace(f"'{version}'", f"'{label}'"))
    pkg = site / "sglang"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('__version__ = "0.5.23"\n')
    disp = pkg / "srt" / "layers" / "moe" / "token_dispatcher"
    disp.mkdir(parents=True, exist_ok=True)
    (disp / "nixl.py").write_text("def _load():\n    from nixl_ep import Buffer\n"
                                  "    return Buffer\n")
    (disp / "deepep.py").write_text("try:\n    from deep_ep import Buffer\n"
                                    "except ImportError:\n    Buffer = None\n")
    add_dist(site, "sglang", "0.5.23", requires=sglang_requires)
    return site


def nixl_meta(backend: str = "nixl_ep_cu", *, load: str = "_load_ep_module",
              fallback: Sequence[str] = ("nixl_ep_cu13", "nixl_ep_cu12"),
              skipped: str = "ImportError", none: str = "No usable nixl_ep CUDA backend found",
              subs: Sequence[str] = ()) -> str:
    """A nixl meta package's ``__init__.py`` in the shape its releases have (1.5.1's
    ``nixl_ep/__init__.py`` by default; ``nixl/__init__.py`` with ``backend="nixl_cu"``):
    ``load`` imports ``f"{backend}{cuda_major}"`` for the CUDA major
    ``nixl_meta_utils.detect_cuda_major`` says, else each of ``fallback`` in turn
    (``skipped``: the exception that passes over one), else raises ImportError(``none``);
    ``subs``: the submodules it then imports from the backend and aliases
    (``nixl.<sub>``)."""
    def quoted(names: Sequence[str]) -> str:
        return ", ".join(f'"{n}"' for n in names)

    tail = "" if not subs else (
        f"\nsubmodules = [{quoted(subs)}]\n"
        "for sub_name in submodules:\n"
        '    module = importlib.import_module(f"{_pkg.__name__}.{sub_name}")\n'
        '    sys.modules[f"nixl.{sub_name}"] = module\n')
    return f'''import importlib
import sys

from nixl_meta_utils import detect_cuda_major


def {load}():
    cuda_major = detect_cuda_major()
    if cuda_major is not None:
        pip_name = f"nixl-cu{{cuda_major}}"
        mod_name = f"{backend}{{cuda_major}}"
        try:
            return importlib.import_module(mod_name).__name__
        except ModuleNotFoundError as e:
            raise ImportError(f"detected CUDA {{cuda_major}} but {{pip_name}} is not installed")
    for mod_name in ({quoted(fallback)}):
        try:
            return importlib.import_module(mod_name).__name__
        except {skipped}:
            continue
    raise ImportError("{none}")


_pkg = sys.modules[{load}()]
''' + tail


_BACKEND = '''import importlib
import os
import sys
from contextlib import contextmanager

import torch


def _deepbind_enabled():
    value = os.getenv("NIXL_UCX_DEEPBIND", "0").strip().lower()
    return value not in {"0", "false", "no", "off"}


@contextmanager
def _scope():
    flag = getattr(os, "RTLD_DEEPBIND", 0)
    if not flag or not _deepbind_enabled():
        yield
        return
    old = sys.getdlopenflags()
    sys.setdlopenflags(old | flag)
    try:
        yield
    finally:
        sys.setdlopenflags(old)


with _scope():
    _torch_mm = "".join(torch.__version__.split(".")[:2])
    _cpp = importlib.import_module(f".nixl_ep_cpp_torch{_torch_mm}", __package__)
'''


def add_nixl(site: Path, version: str = "1.5.1", cuda: int = 13,
             minors: Sequence[str] = ("212", "213", "214"), uses: Sequence[str] = (COW,),
             own: Sequence[str] = ()) -> None:
    """The ``nixl`` meta package and ``nixl-cu<cuda>`` with a build per torch minor, each
    needing libc10.so (through torch/lib) and calling ``uses``; ``own``: functions its own
    vendored library defines (for the DEEPBIND scope)."""
    (site / "nixl_ep").mkdir(parents=True, exist_ok=True)
    (site / "nixl_ep" / "__init__.py").write_text(nixl_meta())
    (site / "nixl_meta_utils.py").write_text("def detect_cuda_major():\n    return None\n")
    add_dist(site, "nixl", version, requires=[f"nixl-cu12=={version}", f"nixl-cu{cuda}=="
                                               f"{version}"])
    back = site / f"nixl_ep_cu{cuda}"
    back.mkdir(parents=True, exist_ok=True)
    (back / "__init__.py").write_text(_BACKEND)
    libs = site / f".nixl_cu{cuda}.libs"
    needs = ["libc10.so"]
    if own:
        gcc_so(libs / "libucx_own.so", defines=own, soname="libucx_own.so")
        needs.append("libucx_own.so")
    link = site / "_link"
    link.mkdir(exist_ok=True)
    for f in (site / "torch" / "lib").glob("libc10.so"):
        (link / f.name).write_bytes(f.read_bytes())
    if own:
        (link / "libucx_own.so").write_bytes((libs / "libucx_own.so").read_bytes())
    for mm in minors:
        gcc_so(back / f"nixl_ep_cpp_torch{mm}{ext_suffix()}", uses=uses, needs=needs,
               link=link, rpath=f"$ORIGIN/../torch/lib:$ORIGIN/../.nixl_cu{cuda}.libs")
    for f in link.iterdir():
        f.unlink()
    link.rmdir()
    add_dist(site, f"nixl-cu{cuda}", version, requires=["torch", "numpy"],
             files=[f"nixl_ep_cu{cuda}/__init__.py"])


_LOAD_UTILS = '''import glob
from pathlib import Path

import torch


def _get_compute_capability():
    if not torch.cuda.is_available():
        return None
    return 90


def _load_architecture_specific_ops():
    compute_capability = _get_compute_capability()
    sgl_kernel_dir = Path(__file__).parent
    if compute_capability == 90:
        ops_subdir = "sm90"
    elif compute_capability is not None:
        ops_subdir = "sm100"
    else:
        ops_subdir = "sm100"
    matching = glob.glob(str(sgl_kernel_dir / ops_subdir / "common_ops.*"))
    alt = glob.glob(str(sgl_kernel_dir / "common_ops.*"))
    return matching, alt
'''


def add_sgl_kernel(site: Path, version: str = "0.4.10", torch_pin: str = "2.14.1",
                   sm90_uses: Sequence[str] = (PARSE,), sm100_uses: Sequence[str] = (PARSE,)
                   ) -> None:
    pkg = site / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("from sgl_kernel.load_utils import "
                                     "_load_architecture_specific_ops\n"
                                     "common_ops = _load_architecture_specific_ops()\n")
    (pkg / "load_utils.py").write_text(_LOAD_UTILS)
    for sub, uses in (("sm90", sm90_uses), ("sm100", sm100_uses)):
        gcc_so(pkg / sub / "common_ops.abi3.so", uses=uses, needs=["libc10.so"],
               link=site / "torch" / "lib", rpath="$ORIGIN/../../torch/lib")
    add_dist(site, "sglang-kernel", version, requires=[f"torch=={torch_pin}"])


_DEEP_INIT = '''from ._build_info import EXPECTED_CUDA_MAJOR as _EXPECTED_CUDA_MAJOR
from .prerequisites import check_prerequisites as _check_prerequisites

if _EXPECTED_CUDA_MAJOR is not None:
    _check_prerequisites(expected_cuda_major=_EXPECTED_CUDA_MAJOR)

import torch

from deep_ep._C import Config
'''

_PREREQ = '''def check_prerequisites(*, expected_cuda_major):
    import torch
    major = int(torch.version.cuda.split(".")[0])
    if major != expected_cuda_major:
        raise ImportError("This wheel requires another CUDA")
    if not torch.cuda.is_available():
        raise ImportError("The NVIDIA driver does not expose a usable CUDA device")
'''


def add_deep_ep(site: Path, expected_cuda: int = 13, needs: Sequence[str] = ("libc10.so",),
                uses: Sequence[str] = ()) -> None:
    pkg = site / "deep_ep"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(_DEEP_INIT)
    (pkg / "_build_info.py").write_text(f"EXPECTED_CUDA_MAJOR = {expected_cuda}\n")
    (pkg / "prerequisites.py").write_text(_PREREQ)
    link = site / "nvidia" / "cu13" / "lib"
    gcc_so(pkg / f"_C{ext_suffix()}", uses=uses, needs=[n for n in needs if n == "libc10.so"],
           link=site / "torch" / "lib", rpath="$ORIGIN/../torch/lib")
    del link
    add_dist(site, "sgl-deep-ep", "0.1.2.post1", requires=["torch==2.14.1"])


_ENV = '''import os

from ..version import __version__ as flashinfer_version


def has_flashinfer_cubin():
    import importlib.util
    return importlib.util.find_spec("flashinfer_cubin") is not None


def _check_cubin_version(package_version):
    if (not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
            and package_version != flashinfer_version):
        raise RuntimeError("flashinfer-cubin version does not match flashinfer version")


def _get_cubin_dir():
    if has_flashinfer_cubin():
        import flashinfer_cubin
{body}
    return None


FLASHINFER_CUBIN_DIR = _get_cubin_dir()
'''
_RAISING = "        _check_cubin_version(flashinfer_cubin.__version__)\n"
_IGNORING = ("        try:\n            _check_cubin_version(flashinfer_cubin.__version__)\n"
             "        except RuntimeError:\n            pass\n")


def add_flashinfer(site: Path, version: str = "0.7.2", cubin: str | None = "0.7.2",
                   ignores: bool = False) -> None:
    """flashinfer-python ``version`` whose cubin check raises (or, ``ignores``, is caught),
    and flashinfer-cubin ``cubin`` (None: not installed)."""
    pkg = site / "flashinfer"
    (pkg / "jit").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("from .jit import env\n")
    (pkg / "version.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "jit" / "__init__.py").write_text("")
    (pkg / "jit" / "env.py").write_text(_ENV.format(body=_IGNORING if ignores else _RAISING))
    add_dist(site, "flashinfer-python", version, requires=["torch"])
    if cubin is not None:
        (site / "flashinfer_cubin").mkdir(exist_ok=True)
        (site / "flashinfer_cubin" / "__init__.py").write_text(f'__version__ = "{cubin}"\n')
        add_dist(site, "flashinfer-cubin", cubin)
