from __future__ import annotations

import pytest

from moonpin.readers.pyast.loader import analyze_loader, cpp_string_names
from tests.lib.images import LOADER_HEAD, loader_text

HEAD = LOADER_HEAD


def loader(*args: str) -> str:
    return loader_text(*args)


@pytest.mark.parametrize(
    ("text", "templates"),
    [
        (loader('"mooncake.ep" + version_suffix'), ["mooncake.ep_{torch}"]),  # 0.3.8
        (loader('"mooncake.ep" + version_suffix', '"mooncake.pg" + version_suffix'),
         ["mooncake.ep_{torch}", "mooncake.pg_{torch}"]),  # 0.3.9 .. 0.3.12
        (loader('"mooncake._ep"', '"mooncake.pg" + version_suffix'),
         ["mooncake._ep", "mooncake.pg_{torch}"]),  # 0.3.13
        (loader('f"mooncake.pg{version_suffix}"'), ["mooncake.pg_{torch}"]),
    ],
)
def test_prebuilt_schemes(text: str, templates: list[str]) -> None:
    s = analyze_loader(text, "mooncake/ep.py", "mooncake.ep")
    assert s.kind == "prebuilt"
    assert [i.template for i in s.imports] == templates
    assert s.version_regex == r"\d+(?:\.\d+)*"
    assert s.separator == "_"
    assert all("was not built against torch==" in (i.on_missing or "") for i in s.imports)


def test_other_separator_is_read_not_assumed() -> None:
    text = loader('"mooncake.pg" + version_suffix').replace('replace(".", "_")',
                                                           'replace(".", "")')
    s = analyze_loader(text, "mooncake/pg.py", "mooncake.pg")
    assert (s.kind, s.separator) == ("prebuilt", "")


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "mod = importlib.import_module(compute_name())\n",  # a target we cannot evaluate
        "import torch\nfrom ._pg import *\n",  # no import_module at all
        loader('"mooncake.pg" + version_suffix').replace("torch_version.replace",
                                                         "torch_version.upper().replace"),
        "def (:\n",
    ],
)
def test_unrecognised_loaders_are_unknown(text: str) -> None:
    assert analyze_loader(text, "mooncake/pg.py", "mooncake.pg").kind == "unknown"


def test_jit_compile_loader() -> None:
    text = '''
import shutil
import torch
_SOURCE_NAMES = ("pg_py.cpp", "mooncake_backend.cpp")

def _build():
    from torch.utils.cpp_extension import CUDA_HOME, load
    if shutil.which("ninja") is None:
        raise ImportError("needs ninja")
    if not CUDA_HOME:
        raise ImportError("needs nvcc")
    return load(name="x", sources=[])
'''
    shipped = ["mooncake/_pg_jit/pg_py.cpp", "mooncake/_pg_jit/mooncake_backend.cpp",
               "mooncake/_pg_jit/other.h", "mooncake/pg.py"]
    s = analyze_loader(text, "mooncake/pg.py", "mooncake.pg", shipped)
    assert s.kind == "jit-compile"
    assert "ninja" in s.toolchain
    assert any("nvcc" in t for t in s.toolchain)
    assert s.sources == ("mooncake/_pg_jit/mooncake_backend.cpp", "mooncake/_pg_jit/pg_py.cpp")


def test_cpp_string_names() -> None:
    src = b'''m.def("set_transfer_engine", &f);
py::class_<MooncakeBackend::MooncakeBackendOptions, c10::intrusive_ptr<X>>(
    m, "MooncakeBackendOptions")
register_backend("mooncake-cpu", py::cpp_function(g));
printf("not a name: %d\\n");'''
    names = cpp_string_names(src)
    assert {"set_transfer_engine", "MooncakeBackendOptions", "mooncake-cpu"} <= names
    assert not any(" " in n for n in names)
