"""The standard library's extension modules on the import chain (issue 39): ``import bz2``
in a walked module loads ``lib-dynload/_bz2…so``, which ld.so cannot load where the image
has no ``libbz2.so.1.0``; the import then fails as the real one does, unless an ``except
ImportError`` around it (the walked one, or the standard library's own: ``decimal``,
``json``) lets it pass. Found by the importer model on the image's ``sys.path``, loaded by
the loader model; checked against the real import in a ``chroot`` of a minimal root (this
interpreter's standard library hard-linked, the host's C libraries it needs but bz2's, lzma's,
sqlite's copied; as root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from moonpin.preflight.env.context import Context
from moonpin.preflight.env.rootfs import ImageConfig, target_for
from moonpin.preflight.loader.loadchain import native_load
from tests.preflight.test_image_preload import EXT, PY, _root

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)


def _real(root: Path) -> str:
    chroot = shutil.which("chroot")
    if os.geteuid() != 0 or chroot is None:
        pytest.skip("the real import is run in a chroot: needs root")
    code = "try:\n    import pkg\n    print('ok')\nexcept ImportError as e:\n    print(e)\n"
    proc = subprocess.run([chroot, str(root), "/opt/venv/bin/python", "-c", code],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/opt/venv/bin:/usr/bin:/bin"})
    return proc.stdout.strip() or proc.stderr.strip()


def _model(root: Path) -> str:
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin", "LD_PRELOAD=/opt/pre/libfull.so"],
                      entrypoint=["/opt/venv/bin/python"])
    ctx = Context.of(target_for(str(root), cfg))
    site = root / f"opt/venv/lib/python{PY}/site-packages"
    res = native_load([str(site / EXT)], ctx.paths, "pkg", python=ctx.python,
                      suffixes=ctx.ext_suffixes, machine=ctx.machine, root=ctx.root,
                      ld_path=ctx.ld_path, sites=ctx.sites, version=ctx.version,
                      importer=ctx.importer, preload=ctx.preload)
    if res.chain_error is not None:
        return res.chain_error[2]
    return "ok"


CASES = [
    ("import bz2\n", "libbz2.so.1.0"),
    ("try:\n    import bz2\nexcept ImportError:\n    bz2 = None\n", None),
    ("from bz2 import BZ2File\n", "libbz2.so.1.0"),
    ("import lzma\n", "liblzma.so.5"),
    ("import sqlite3\n", "libsqlite3.so.0"),  # sqlite3 -> sqlite3.dbapi2 -> _sqlite3
    ("import ctypes\n", None),  # libffi is there
    ("import decimal, json, hashlib, math\n", None),  # guarded, or there
    ("import shutil\n", None),  # its `import bz2` is guarded
    ("def later():\n    import bz2\n", None),
]


@pytest.mark.parametrize(("source", "missing"), CASES)
def test_a_stdlib_extension_module_is_loaded_as_the_real_import_loads_it(
        tmp_path: Path, source: str, missing: str | None) -> None:
    root = _root(tmp_path)
    for lib in ("libbz2", "liblzma", "libsqlite3"):  # none of them in the minimal root
        assert not list((root / "usr/lib/x86_64-linux-gnu").glob(f"{lib}.so*"))
    pkg = root / f"opt/venv/lib/python{PY}/site-packages/pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(source)
    real, model = _real(root), _model(root)
    if missing is None:
        assert real == "ok" and model == "ok", (real, model)
    else:
        assert f"{missing}: cannot open shared object file" in real, real
        assert f"{missing}: cannot open shared object file" in model, model


def test_a_root_without_libffi_fails_ctypes_and_what_imports_it(tmp_path: Path) -> None:
    """torch's ``__init__`` imports ctypes at its top level: an image without libffi
    cannot import torch, nor anything that imports it."""
    root = _root(tmp_path)
    for f in (root / "usr/lib/x86_64-linux-gnu").glob("libffi.so*"):
        f.unlink()
    pkg = root / f"opt/venv/lib/python{PY}/site-packages/pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import ctypes\n")
    real, model = _real(root), _model(root)
    assert "libffi.so.8: cannot open shared object file" in real, real
    assert "libffi.so.8: cannot open shared object file" in model, model


#: the decorator module of the cases below: its function imports a submodule whose top level
#: imports bz2 (``@torch.compile`` -> ``torch._dynamo``… -> ``networkx`` -> ``import bz2``, in
#: small: code run at import by a call into another module, issue 39's libbz2 root)
HELPER = {
    "helper/__init__.py": "def deco(fn=None, **kw):\n    from helper import compiler\n"
                          "    return fn if fn is not None else deco\n\n"
                          "def setup():\n    import lzma\n",
    "helper/compiler.py": "from .graphs import plot\n",
    "helper/graphs.py": "import bz2\n\ndef plot():\n    pass\n",
}
CALL_CASES = [
    ({"pkg/__init__.py": "from helper import deco\n\n@deco\ndef f():\n    pass\n"},
     "libbz2.so.1.0"),
    ({"pkg/__init__.py": "import helper\n\n@helper.deco(dynamic=True)\ndef f():\n    pass\n"},
     "libbz2.so.1.0"),
    # a module-level call into a module the chain runs itself (a top-level one imported by
    # the package): its evaluator already followed that call
    ({"pkg/__init__.py": "import helper as h\nh.setup()\n"}, "liblzma.so.5"),
    ({"pkg/__init__.py": "try:\n    from helper import deco\n\n    @deco\n    def f():\n"
                         "        pass\nexcept ImportError:\n    f = None\n"}, None),
    ({"pkg/__init__.py": "from helper import deco\n\ndef later():\n    deco()\n"}, None),
    ({"pkg/__init__.py": "import other\n\ndef f(n=0):\n    return f(n + 1) if n else 0\n\nf()\n",
      "other/__init__.py": "import pkg\n\ndef g():\n    import os\n    if os.environ.get('X'):"
                           "\n        import lzma\n    g2()\n\ndef g2():\n    g()\n"}, None),
]


@pytest.mark.parametrize(("files", "missing"), CALL_CASES)
def test_code_run_at_import_by_a_call_loads_what_it_imports(
        tmp_path: Path, files: dict[str, str], missing: str | None) -> None:
    """A decorator applied at import, a module-level call: the called function's imports
    run at import, and the standard library's extension modules they reach are loaded."""
    root = _root(tmp_path)
    site = root / f"opt/venv/lib/python{PY}/site-packages"
    for rel, text in {**HELPER, **files}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    real, model = _real(root), _model(root)
    if missing is None:
        assert real == "ok" and model == "ok", (real, model)
    else:
        assert f"{missing}: cannot open shared object file" in real, real
        assert f"{missing}: cannot open shared object file" in model, model
        if "deco" in files["pkg/__init__.py"]:  # the evaluator does not apply decorators
            assert " calls " in model and "the way there" in model, model
