"""Throwaway site-packages trees that look like worker images to ``moonpin check``.

Each helper writes real files: dist-info folders with METADATA (and RECORD), a fake
``torch`` package, a ``mooncake`` package with real-shaped loaders (``pg.py``/``ep.py``
read ``torch.__version__`` through a regex and ``importlib.import_module`` the build) and
builds either as minimal real ELF objects (:func:`tests.lib.elfbuild.build_so`, named with
the running interpreter's extension suffix) or as ``.py`` stand-ins, and ``sglang`` sources
that import the process-group module.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from importlib import machinery
from pathlib import Path

from tests.lib.elfbuild import build_so

__all__ = [
    "CACHED_JIT_LOADER",
    "JIT_LOADER",
    "KEYED_JIT_LOADER",
    "LOADER_HEAD",
    "PG_NAMES",
    "add_dist",
    "add_mooncake",
    "add_sglang",
    "add_torch",
    "ext_suffix",
    "healthy_image",
    "jit_key",
    "jit_site",
    "python_torch_c",
]

#: What SGLang 0.5.x imports from mooncake.pg.
PG_NAMES = ("MooncakeBackendOptions", "get_peer_state", "join_group", "recover_ranks",
            "set_transfer_engine")

LOADER_HEAD = '''import importlib
import re

import torch

torch_version = re.match(r"\\d+(?:\\.\\d+)*", torch.__version__).group()
version_suffix = "_" + torch_version.replace(".", "_")
'''
_LOADER_TRY = '''
try:
    backend_module = importlib.import_module({arg})
except ModuleNotFoundError:
    raise ImportError(f"Mooncake was not built against torch=={{torch_version}}.")
globals().update({{k: v for k, v in backend_module.__dict__.items() if not k.startswith("_")}})
'''

JIT_LOADER = '''import shutil
import torch
_SOURCE_NAMES = ("pg_py.cpp", "mooncake_backend.cpp")


def _build():
    from torch.utils.cpp_extension import CUDA_HOME, load
    if shutil.which("ninja") is None:
        raise ImportError("compiling mooncake.pg needs ninja")
    if not CUDA_HOME:
        raise ImportError("compiling mooncake.pg needs nvcc")
    return load(name="mooncake_pg", sources=list(_SOURCE_NAMES))


_m = _build()
'''

#: mooncake 0.3.14's compiling loader with its cache folder (``MOONCAKE_PG_JIT_DIR``, else
#: ``Path.home()/.cache/mooncake/pg_jit``), the function the check reads the folder from.
CACHED_JIT_LOADER = JIT_LOADER + '''

def _cache_root():
    configured = os.environ.get("MOONCAKE_PG_JIT_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "mooncake" / "pg_jit"
'''

#: :data:`CACHED_JIT_LOADER` with the key folder it caches under computed as 0.3.14's
#: ``_cache_key`` does (the same statements, written for the tests): a sha256 of torch's
#: version constants, its C++ ABI, the backend, the core library's real path and bytes, the
#: interpreter's cache tag and each source's name and bytes, 20 hex digits
KEYED_JIT_LOADER = CACHED_JIT_LOADER + '''
_HEADER_NAMES = ("pg.h",)


def _source_dir():
    return Path(__file__).with_name("_pg_jit")


def _cache_key(source_dir, core_path, backend):
    digest = hashlib.sha256()
    digest.update(torch.__version__.encode())
    digest.update(str(torch.version.cuda).encode())
    digest.update(str(getattr(torch.version, "musa", None)).encode())
    digest.update(str(torch._C._GLIBCXX_USE_CXX11_ABI).encode())
    digest.update(str(torch.version.git_version).encode())
    digest.update(backend.encode())
    digest.update(str(core_path.resolve()).encode())
    digest.update(str(sys.implementation.cache_tag).encode())
    digest.update(core_path.read_bytes())
    for name in (*_SOURCE_NAMES, *_HEADER_NAMES):
        digest.update(name.encode())
        digest.update(_source_path(source_dir, name).read_bytes())
    return digest.hexdigest()[:20]


def _cache_directory(source_dir, core_path, backend):
    return _cache_root() / _cache_key(source_dir, core_path, backend)


_core = Path(__file__).with_name("libmooncake_pg.so")
'''


def jit_key(pkg: Path, core_path: str, label: str, cuda: str | None, git: str | None,
            tag: str, backend: str = "cuda") -> str:
    """The key :data:`KEYED_JIT_LOADER` computes for the mooncake folder ``pkg`` whose core
    library is ``core_path`` to the worker (its real path there), computed here by hand."""
    import hashlib

    d = hashlib.sha256()
    for part in (label, str(cuda), "None", "True", str(git), backend, core_path, tag):
        d.update(part.encode())
    d.update((pkg / "libmooncake_pg.so").read_bytes())
    for name in ("pg_py.cpp", "mooncake_backend.cpp", "pg.h"):
        d.update(name.encode())
        d.update((pkg / "_pg_jit" / name).read_bytes())
    return d.hexdigest()[:20]


#: The machine the stand-in objects are built for: this one's, where build_so can.
MACHINE = platform.machine() if platform.machine() in ("x86_64", "aarch64") else "x86_64"


def ext_suffix() -> str:
    """The running interpreter's preferred extension-module suffix (``.cpython-312-…so``)."""
    return machinery.EXTENSION_SUFFIXES[0]


def add_dist(site: Path, name: str, version: str, *, requires: Sequence[str] = (),
             files: Sequence[str] = ()) -> Path:
    """A ``<name>-<version>.dist-info`` with METADATA and a RECORD listing ``files``."""
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (folder / "METADATA").write_text("\n".join(lines) + "\n")
    record = [f"{f},," for f in files] + [f"{folder.name}/METADATA,,", f"{folder.name}/RECORD,,"]
    (folder / "RECORD").write_text("\n".join(record) + "\n")
    return folder


def python_torch_c(site: Path) -> None:
    """``torch._C`` as a ``.py`` stand-in: a deep probe imports torch for real, and the
    stand-in ELF objects cannot be ``dlopen``-ed (nor then are torch's libraries mapped)."""
    pkg = site / "torch"
    for f in pkg.glob("_C.*"):
        f.unlink()
    (pkg / "_C.py").write_text("")


def add_torch(site: Path, version: str = "2.13.0", cuda: int | None = 13,
              version_py: bool = True, native: bool = True) -> None:
    """A torch with its metadata (a real wheel's CUDA requirement) and, unless
    ``version_py=False``, the ``torch/version.py`` every real build ships. ``native``:
    its ``torch._C`` is an ELF extension whose closure maps ``torch/lib`` (else a ``.py``
    stand-in, :func:`python_torch_c`)."""
    requires = []
    if cuda == 13:
        requires.append('cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"')
    elif cuda is not None:
        requires.append(f'nvidia-cuda-runtime-cu{cuda}=={cuda}.8.90; platform_system == "Linux"')
    pkg = site / "torch"
    (pkg / "distributed").mkdir(parents=True, exist_ok=True)
    # As torch's own: torch.__version__ bound through torch_version.py (from version.py), and
    # `import torch` loads torch._C, whose closure maps torch's libraries (a build needing
    # libtorch.so finds it loaded).
    if version_py:
        (pkg / "__init__.py").write_text(
            "from torch.torch_version import __version__ as __version__\n\n"
            "from torch._C import *  # noqa: F403\n")
        (pkg / "torch_version.py").write_text(
            "from torch.version import __version__ as internal_version\n\n\n"
            "class TorchVersion(str):\n    pass\n\n\n"
            "__version__ = TorchVersion(internal_version)\n")
    else:
        (pkg / "__init__.py").write_text(
            f'__version__ = "{version}"\n\nfrom torch._C import *  # noqa: F403\n')
    if version_py:
        label = {None: None, 13: "13.0"}.get(cuda, f"{cuda}.8")
        (pkg / "version.py").write_text(
            "from typing import Optional\n\n"
            f"__version__ = '{version}'\ndebug = False\n"
            f"cuda: Optional[str] = {label!r}\nhip: Optional[str] = None\n")
    # torch's own entries are lists; register_backend stores what real mooncake builds
    # register: tuples, e.g. 'mooncake': ('cuda',).
    (pkg / "distributed" / "__init__.py").write_text(
        "class Backend:\n"
        "    backend_capability = {'gloo': ['cpu'], 'nccl': ['cuda']}\n\n"
        "    @classmethod\n"
        "    def register_backend(cls, name, func, extended_api=False, devices=None):\n"
        "        cls.backend_capability[name] = tuple(devices or ('cpu',))\n")
    # The libraries a mooncake build links against, where a real image has them: torch's
    # own in torch/lib, the CUDA runtime in the pip CUDA packages (nvidia/*/lib).
    libs = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"]
    if cuda is not None:
        libs += ["libc10_cuda.so", "libtorch_cuda.so"]
    for lib in libs:
        (pkg / "lib").mkdir(exist_ok=True)
        (pkg / "lib" / lib).write_bytes(build_so(needed=[], strings=[], machine=MACHINE))
    cudart = [f"libcudart.so.{cuda}"] if cuda is not None else []
    (pkg / "lib" / "libtorch_python.so").write_bytes(build_so(
        needed=[*libs[:3], *libs[4:], *cudart], strings=[], runpath=None,
        rpath=f"$ORIGIN:$ORIGIN/../../nvidia/cu{cuda}/lib", machine=MACHINE))
    if native:
        (pkg / f"_C{ext_suffix()}").write_bytes(build_so(
            needed=["libtorch_python.so"], strings=[], runpath=None, rpath="$ORIGIN/lib",
            machine=MACHINE))
    else:
        python_torch_c(site)
    if cuda is not None:
        cudart = site / "nvidia" / f"cu{cuda}" / "lib" / f"libcudart.so.{cuda}"
        cudart.parent.mkdir(parents=True, exist_ok=True)
        cudart.write_bytes(build_so(needed=[], strings=[], machine=MACHINE))
    add_dist(site, "torch", version, requires=requires,
             files=["torch/__init__.py", "torch/distributed/__init__.py",
                    f"torch/_C{ext_suffix()}", *(f"torch/lib/{lib}" for lib in libs)])


def loader_text(*targets: str) -> str:
    """A real-shaped prebuilt loader importing each target expression in turn."""
    return LOADER_HEAD + "".join(_LOADER_TRY.format(arg=t) for t in targets)


def _standin(names: Sequence[str], backends: Sequence[str]) -> str:
    out = ["import torch.distributed as dist", ""]
    for n in names:
        if n[:1].isupper():
            out += [f"class {n}:", "    pass", ""]
        else:
            out += [f"def {n}(*args, **kwargs):", "    return None", ""]
    out += [f'dist.Backend.register_backend("{b}", lambda *a: None, devices=["cuda"])'
            for b in backends]
    return "\n".join(out) + "\n"


def add_mooncake(site: Path, *, dist: str = "mooncake-transfer-engine-cuda13",
                 version: str = "0.3.13.post1", loaders: Sequence[str] = ("pg", "ep"),
                 torch_builds: Sequence[str] = ("2.12.0", "2.13.0"),
                 names: Sequence[str] = PG_NAMES,
                 backends: Sequence[str] = ("mooncake", "mooncake-cpu"),
                 cuda: int | None = 13, kind: str = "so", jit: bool = False,
                 needed: Sequence[str] = ()) -> list[str]:
    """The mooncake package and its dist-info; returns the files written (relative)."""
    pkg = site / "mooncake"
    pkg.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {"mooncake/__init__.py": b""}
    for ld in loaders:
        if jit:
            text = JIT_LOADER
        else:
            text = loader_text(f'"mooncake.{ld}" + version_suffix')
        files[f"mooncake/{ld}.py"] = text.encode()
    if jit:
        for src in ("pg_py.cpp", "mooncake_backend.cpp"):
            # the names its pybind11 module binds and the backends it registers, as
            # 0.3.14's pg_py.cpp has them
            files[f"mooncake/_pg_jit/{src}"] = "".join(
                f'm.def("{n}", &f);\n' for n in (*names, *backends)).encode()
    for ld in ([] if jit else loaders):
        for t in torch_builds:
            stem = f"{ld}_{t.replace('.', '_')}"
            if kind == "so":
                libs = [f"libcudart.so.{cuda}"] if cuda else []
                machine = platform.machine()
                data = build_so(needed=[*libs, "libtorch.so", *needed],
                                strings=[*names, *backends],
                                machine=machine if machine in ("x86_64", "aarch64") else "x86_64")
                files[f"mooncake/{stem}{ext_suffix()}"] = data
            else:
                files[f"mooncake/{stem}.py"] = _standin(names, backends).encode()
    for rel, data in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    add_dist(site, dist, version, files=list(files))
    if kind == "py" and (site / "torch").is_dir():
        python_torch_c(site)  # a deep probe imports it all for real
    return list(files)


SGLANG_PARALLEL_STATE = '''import torch.distributed as dist

from mooncake.{module} import MooncakeBackendOptions


def init_elastic(group_ranks, backend):
    opts = MooncakeBackendOptions()
    device_group = dist.new_group(group_ranks, backend="mooncake", pg_options=opts)
    cpu_group = dist.new_group(group_ranks, backend="mooncake-cpu")
    return device_group, cpu_group
'''

SGLANG_ELASTIC = '''from mooncake import {module} as mooncake_pg


def recover(group, ranks):
    mooncake_pg.recover_ranks(group, ranks)
    mooncake_pg.join_group(group)
    return mooncake_pg.get_peer_state(group)


def attach(engine):
    mooncake_pg.set_transfer_engine(engine)
'''


def add_sglang(site: Path, version: str = "0.5.23", module: str = "pg") -> None:
    files = {
        "sglang/__init__.py": f'__version__ = "{version}"\n',
        "sglang/srt/__init__.py": "",
        "sglang/srt/distributed/__init__.py": "",
        "sglang/srt/distributed/parallel_state.py": SGLANG_PARALLEL_STATE.format(module=module),
        "sglang/srt/elastic_ep/__init__.py": "",
        "sglang/srt/elastic_ep/elastic_ep.py": SGLANG_ELASTIC.format(module=module),
        "sglang/srt/server_args.py": 'CHOICES = ["none", "mooncake"]\n',
    }
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    add_dist(site, "sglang", version, files=list(files))


def healthy_image(site: Path, **mooncake: object) -> Path:
    """torch 2.13.0 (CUDA 13), mooncake-transfer-engine-cuda13 0.3.13.post1, SGLang 0.5.23."""
    site.mkdir(parents=True, exist_ok=True)
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, **mooncake)  # type: ignore[arg-type]
    return site


def jit_site(tmp_path: Path) -> Path:
    """A site folder at ``tmp_path/site``: torch, SGLang and mooncake 0.3.14 whose
    ``mooncake.pg`` compiles its adapter (:data:`CACHED_JIT_LOADER`) against its
    ``libmooncake_pg.so``; no adapter cached."""
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, version="0.3.14", jit=True)
    (site / "mooncake" / "pg.py").write_text(CACHED_JIT_LOADER)
    (site / "mooncake" / "libmooncake_pg.so").write_bytes(build_so(needed=[], strings=[]))
    return site
