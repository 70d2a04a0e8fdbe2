"""A launch backend's package that no loader rule here reads (issue 39: ``--moe-a2a-backend
mori`` imports ``mori``), judged by following its plain import
(:func:`moonpin.preflight.extensions.pyread.plain.plain_import`): each compiled module its
imports reach loaded into the process ``import torch`` built, as the ruled ones are. Each
case on a throwaway image whose builds gcc makes with chosen undefined symbols and
libraries; before this path every one of them said "found; its build is not judged"."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.lib.checkrun import run
from tests.lib.extimages import COW, PARSE, gcc_so, torch_image
from tests.lib.images import add_dist, ext_suffix

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

MORI = ("--", "--moe-a2a-backend", "mori")


def _site(tmp_path: Path, symbols: tuple[str, ...] = (COW, PARSE)) -> Path:
    """torch 2.14.1 whose libc10 defines ``symbols``, and SGLang's dispatcher for
    ``--moe-a2a-backend mori``, which imports ``mori`` where the backend is set up."""
    site = torch_image(tmp_path / "site", symbols=symbols)
    disp = site / "sglang" / "srt" / "layers" / "moe" / "token_dispatcher"
    (disp / "moriep.py").write_text("def init_mori_op():\n    import mori\n    return mori\n")
    return site


def _mori(site: Path, init: str, builds: dict[str, tuple[str, ...]] | None = None,
          needs: tuple[str, ...] = ("libc10.so",), suffix: str | None = None) -> Path:
    """A ``mori`` package: its ``__init__.py``, and a gcc build per dotted name in
    ``builds`` (relative to the package) calling those undefined symbols, linked to
    torch's libc10 by ``$ORIGIN`` as a torch extension is."""
    pkg = site / "mori"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(init)
    for dotted, uses in (builds or {}).items():
        parts = dotted.split(".")
        folder = pkg.joinpath(*parts[:-1])
        depth = "/".join([".."] * (len(parts)))
        gcc_so(folder / f"{parts[-1]}{suffix or ext_suffix()}", uses=uses,
               needs=[n for n in needs if n == "libc10.so"], link=site / "torch" / "lib",
               rpath=f"$ORIGIN/{depth}/torch/lib")
        for n in needs:
            if n != "libc10.so":  # a library the build needs and nothing ships
                gcc_so(site / "_made" / n, soname=n)
                shutil.copy(site / "torch" / "lib" / "libc10.so", site / "_made")
                gcc_so(folder / f"{parts[-1]}{suffix or ext_suffix()}", uses=uses,
                       needs=list(needs), link=site / "_made",
                       rpath=f"$ORIGIN/{depth}/torch/lib")
    add_dist(site, "mori", "0.1.0", requires=["torch==2.9.1"],
             files=["mori/__init__.py"])
    return pkg


def test_a_build_its_init_imports_is_loaded_into_torchs_process(tmp_path: Path) -> None:
    """``from . import _C`` binding a torch symbol torch's libc10 defines: passes, naming
    the build and the assumption; the same build under a torch that lacks the symbol (a
    build made for another torch): not usable, the undefined symbol named."""
    site = _site(tmp_path)
    _mori(site, "import torch\nfrom . import _C\n", {"_C": (COW,)})
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 0 and line.startswith(f"pass  mori: at {site / 'mori'} "), r.out
    assert "read as a plain import; its __init__ code beyond imports not run" in line
    assert f"loads mori/_C{ext_suffix()}" in line and "undefined symbols bind" in line

    other = _site(tmp_path / "other", symbols=(PARSE,))
    _mori(other, "import torch\nfrom . import _C\n", {"_C": (COW,)})
    r = run(other, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 1 and line.startswith("fail  mori: at "), r.out
    assert (f"`import mori` fails: mori/__init__.py:2 imports mori._C: mori/_C{ext_suffix()}: "
            f"undefined symbol: {COW}") in line, r.out
    assert "mori 0.1.0 requires torch==2.9.1, torch here is 2.14.1+cu130" in line
    assert "or choose another --moe-a2a-backend" in r.fixes()[0]


def test_builds_reached_through_submodules_and_called_functions(tmp_path: Path) -> None:
    """The import followed through the package's own modules: ``from .ops import f`` runs
    ``ops.py``, whose ``_load()`` (called at its top level) imports ``ops_ext``; a module
    imported only for type checkers, or in a function nothing calls, is not reached."""
    site = _site(tmp_path, symbols=(PARSE,))
    pkg = _mori(site, "import torch\nfrom .ops import f\n"
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import _typed\n"
                "def later():\n    from . import _later\n",
                {"kernels.ops_ext": (COW,), "_typed": (COW,), "_later": (COW,)})
    (pkg / "kernels").mkdir(exist_ok=True)
    (pkg / "kernels" / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("def _load():\n    from .kernels import ops_ext\n"
                                "    return ops_ext\n\nf = _load()\n")
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 1 and "mori/ops.py:2 imports mori.kernels.ops_ext" in line, r.out
    assert "_typed" not in line and "_later" not in line
    (pkg / "ops.py").write_text("f = 1\n")
    r = run(site, *MORI, ep=False)
    assert r.rc == 0 and r.line("mori").startswith("pass"), r.out
    assert "no compiled module reached by its imports" in r.line("mori")


def test_a_missing_library_fails_and_a_caught_failure_warns(tmp_path: Path) -> None:
    """A build whose ``DT_NEEDED`` library nothing on the loader's paths has: the import
    fails; the same import inside ``try: … except ImportError:``: the package imports
    without it (a warning, not a failure)."""
    site = _site(tmp_path)
    pkg = _mori(site, "import torch\nfrom ._C import op\n", {"_C": ()},
                needs=("libc10.so", "libmori_rt.so.1"))
    shutil.rmtree(site / "_made")
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 1 and "libmori_rt.so.1 (needed by" in line and "cannot be found" in line, \
        r.out
    (pkg / "__init__.py").write_text("import torch\ntry:\n    from ._C import op\n"
                                     "except ImportError:\n    op = None\n")
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 0 and line.startswith("warn") and "inside a try whose except catches" \
        in line, r.out


def test_a_build_for_another_python_is_not_found(tmp_path: Path) -> None:
    """The only ``_C`` is tagged for another CPython: the importer passes over it and
    ``from . import _C`` raises; said with the file that is there."""
    site = _site(tmp_path)
    other = ".cpython-39-x86_64-linux-gnu.so"
    _mori(site, "import torch\nfrom . import _C\n", {"_C": (COW,)}, suffix=other)
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 1, r.out
    assert ("mori/__init__.py:2 imports mori._C: ModuleNotFoundError: No module named "
            f"'mori._C' (_C{other} is there: built for another Python") in line, r.out


@pytest.mark.parametrize("init", [
    "import os, torch\ntorch.ops.load_library(os.path.join(os.path.dirname(__file__), "
    "'_C.so'))\n",
    "import ctypes, os\n_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "
    "'libmori.so'))\n",
    "import importlib\n_ext = importlib.import_module('mori.' + 'ext')\n",
], ids=["torch.ops.load_library", "ctypes", "importlib"])
def test_a_dynamic_load_is_said_not_judged(tmp_path: Path, init: str) -> None:
    """What the import loads by a computed path or name is not followed: said "not
    judged" (a skip), never a pass."""
    site = _site(tmp_path)
    _mori(site, init)
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 0 and line.startswith("skip") and "not judged: mori/__init__.py:2 " in line, \
        r.out


def test_an_init_the_import_cannot_run_fails(tmp_path: Path) -> None:
    """``mori/__init__.py`` a FIFO: CPython passes over it, ``mori`` is an empty namespace
    package, and SGLang's ``mori.ops`` is not there (as for a ruled loader)."""
    import os

    site = _site(tmp_path)
    pkg = _mori(site, "")
    (pkg / "__init__.py").unlink()
    os.mkfifo(pkg / "__init__.py")
    r = run(site, *MORI, ep=False)
    assert r.rc == 1 and "is a FIFO, not a regular file" in r.line("mori"), r.out


def test_a_function_of_another_module_the_init_calls_is_followed(tmp_path: Path) -> None:
    """``from .load_utils import load`` then ``ops = load()`` at the top level (sglang-
    kernel's shape): what ``load`` does runs at import. Loading a build from a computed
    file there is said not judged, never "no compiled module reached" (a pass); a build
    it imports plainly is judged."""
    site = _site(tmp_path, symbols=(PARSE,))
    pkg = _mori(site, "import torch\nfrom .load_utils import load\nops = load()\n",
                {"_C": (COW,)})
    (pkg / "load_utils.py").write_text(
        "import importlib.util, os\n\ndef load():\n"
        "    spec = importlib.util.spec_from_file_location('_C', os.path.join("
        "os.path.dirname(__file__), 'x.so'))\n    return spec\n")
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 0 and line.startswith("skip"), r.out
    assert ("not judged: mori/load_utils.py:4 loads a module from a computed file "
            "(importlib.util)") in line, r.out
    (pkg / "load_utils.py").write_text("def load():\n    from . import _C\n    return _C\n")
    r = run(site, *MORI, ep=False)
    assert r.rc == 1 and "mori/load_utils.py:2 imports mori._C" in r.line("mori"), r.out
    # a class the top level makes: its __init__ runs (torch-memory-saver's shape)
    (pkg / "__init__.py").write_text("from .entry import Saver\nsaver = Saver()\n")
    (pkg / "entry.py").write_text("class Saver:\n    def __init__(self):\n"
                                  "        from . import _C\n        self.c = _C\n")
    r = run(site, *MORI, ep=False)
    assert r.rc == 1 and "mori/entry.py:3 imports mori._C" in r.line("mori"), r.out


def test_a_name_a_star_import_or_module_getattr_may_bind_is_not_missing(
        tmp_path: Path) -> None:
    """``from .mla import f`` where ``mla/__init__.py`` binds ``f`` by ``from ._core import
    *`` (flashinfer's shape) or a module ``__getattr__``: no module ``mla.f`` is needed
    (a missing one is said only where no file and no binding can provide the name)."""
    site = _site(tmp_path)
    pkg = _mori(site, "from .mla import f\n")
    (pkg / "mla").mkdir()
    (pkg / "mla" / "__init__.py").write_text("from ._core import *\n")
    (pkg / "mla" / "_core.py").write_text("def f():\n    return 1\n")
    r = run(site, *MORI, ep=False)
    assert r.rc == 0 and r.line("mori").startswith("pass"), r.out
    (pkg / "mla" / "__init__.py").write_text("def __getattr__(name):\n    return name\n")
    r = run(site, *MORI, ep=False)
    assert r.rc == 0 and r.line("mori").startswith("pass"), r.out


def test_another_package_its_code_certainly_imports_is_there(tmp_path: Path) -> None:
    """``import safetensors`` at a module's top level, on the whole ``sys.path`` of the
    interpreter (``--python``) that lacks it: the import raises ModuleNotFoundError
    (kt-kernel 0.7.2 installed without its requirements). Not said where it may not run
    (under an ``if``, caught), nor where only ``--site-packages`` folders are read."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    torch_image(site)
    disp = site / "sglang" / "srt" / "layers" / "moe" / "token_dispatcher"
    (disp / "moriep.py").write_text("def init_mori_op():\n    import mori\n    return mori\n")
    pkg = _mori(site, "import torch\nfrom .loader import load\n")
    (pkg / "loader.py").write_text("import safetensors\n\ndef load():\n    return 1\n")

    def check() -> subprocess.CompletedProcess[str]:
        from tests.lib.checkrun import ROOT

        env = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "VIRTUAL_ENV")}
        env["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
        return subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python",
                               str(venv / "bin" / "python"), "--no-deep", *MORI],
                              cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)

    r = check()
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("`import mori` fails: mori/loader.py:1 imports safetensors: ModuleNotFoundError: "
            "No module named 'safetensors'") in r.stdout, r.stdout
    (pkg / "loader.py").write_text("import sys\nif sys.platform == 'win32':\n"
                                   "    import safetensors\n")
    r = check()
    assert r.returncode == 0, r.stdout + r.stderr
    # after an early return (flashinfer 0.7.2's jit/env.py: `if not has_flashinfer_jit_cache():
    # return ()` before `import flashinfer_jit_cache`), in a function its top level calls
    (pkg / "loader.py").write_text("def _providers():\n    if not _has():\n        return ()\n"
                                   "    import safetensors\n    return (safetensors,)\n\n"
                                   "def _has():\n    return False\n\n"
                                   "PROVIDERS = _providers()\n")
    r = check()
    assert r.returncode == 0, r.stdout + r.stderr
    (pkg / "loader.py").write_text("import safetensors\n")
    run_site = run(site, *MORI, ep=False)  # --site-packages: it may be elsewhere in the image
    assert run_site.rc == 0 and "safetensors" not in run_site.out, run_site.out


def test_a_top_level_build_it_imports_is_loaded(tmp_path: Path) -> None:
    """``import mori_cpp``, a compiled module at the top of ``sys.path`` (sgl-deep-ep 0.1.0's
    ``deep_ep_cpp`` shape): loaded into torch's process like the package's own builds."""
    site = _site(tmp_path, symbols=(PARSE,))
    _mori(site, "import torch\nimport mori_cpp\n")
    gcc_so(site / f"mori_cpp{ext_suffix()}", uses=(COW,), needs=["libc10.so"],
           link=site / "torch" / "lib", rpath="$ORIGIN/torch/lib")
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert r.rc == 1 and (f"mori/__init__.py:2 imports mori_cpp: mori_cpp{ext_suffix()}: "
                          f"undefined symbol: {COW}") in line, r.out


#: a package whose ``__init__`` checks for a GPU at import (sgl-deep-ep's
#: ``check_prerequisites`` in small): its function raises when torch sees none
GATED = {
    "__init__.py": "from .prereq import check as _check\n\n_check(need=1)\n"
                   "import torch\nfrom . import _C\n",
    "prereq.py": "def check(*, need):\n    import torch\n    if not torch.version.cuda:\n"
                 "        raise ImportError('no CUDA')\n    if not torch.cuda.is_available():\n"
                 "        raise ImportError('no usable CUDA device')\n",
}


@pytest.mark.parametrize(("gpu", "status"), [("9.0", "pass"), ("none", "skip")])
def test_an_import_that_raises_without_a_gpu_states_the_assumption(
        tmp_path: Path, gpu: str, status: str) -> None:
    """Code its import runs raises where ``torch.cuda.is_available()`` is False: with a GPU
    assumed the line says so and is judged as on a host with one (before: a pass that said
    nothing of it, wrong on a host without a GPU); with none assumed it is not judged, the
    raise being past another one its code may take; with that other one gone, it fails."""
    site = _site(tmp_path)
    pkg = _mori(site, GATED["__init__.py"], {"_C": (COW,)})
    (pkg / "prereq.py").write_text(GATED["prereq.py"])
    r = run(site, "--gpu-capability", gpu, *MORI, ep=False)
    line = r.line("mori")
    assert line.startswith(status), r.out
    assert ("its import raises without a visible GPU (mori/prereq.py:6: "
            "torch.cuda.is_available())") in line, r.out
    if gpu == "9.0":
        assert r.rc == 0 and f"loads mori/_C{ext_suffix()}" in line, r.out
        assert "judged as on a host with one (GPU capability 9.0" in line, r.out
    else:
        assert r.rc == 0 and "not judged: " in line, r.out
        (pkg / "prereq.py").write_text("import torch\n\ndef check(*, need):\n"
                                       "    assert torch.cuda.device_count() >= need\n")
        r = run(site, "--gpu-capability", gpu, *MORI, ep=False)
        line = r.line("mori")
        assert r.rc == 1 and line.startswith("fail"), r.out
        assert ("`import mori` fails: its import raises without a visible GPU "
                "(mori/prereq.py:4: torch.cuda.device_count()), and none is assumed") in line
        assert r.fixes() == ["fix: its import needs a usable GPU: run the check where the "
                             "worker runs, or say the GPU with --gpu-capability (e.g. 9.0)"]
    # caught where it is called: nothing is said of it
    (pkg / "__init__.py").write_text("try:\n    from .prereq import check as _check\n"
                                     "    _check(need=1)\nexcept ImportError:\n    pass\n"
                                     "import torch\nfrom . import _C\n")
    r = run(site, "--gpu-capability", gpu, *MORI, ep=False)
    assert "without a visible GPU" not in r.line("mori") and r.rc == 0, r.out
