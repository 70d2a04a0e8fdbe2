"""torch's own import, as its line says it (issue 39): the code ``import torch`` runs at
import by calls into other modules is followed as an extension's is
(:mod:`moonpin.preflight.pyimport.atimport`); where that walk stops at its bounds
(``Context.bounds``), what it did not read may fail the import, and the torch line says
"not judged" with how far it went, never "pass" (before: pass). A minimal image root without
``libbz2``, judged by the whole check (``--rootfs``) in this process."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from moonpin.preflight.pyimport.atimport import Bounds
from tests.lib.extimages import torch_image

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: the modules the decorator's function imports in a chain, the last of which imports bz2
CHAIN = 30


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)


def _root(tmp_path: Path) -> Path:
    """A minimal root (no libbz2) whose ``/opt/venv`` holds a torch whose ``__init__``
    applies ``torch._deco.deco`` at import, which imports ``torch._m0`` … ``torch._m30``;
    the last one imports bz2."""
    from tests.lib.umoci import venv_root

    root, venv = venv_root(tmp_path)
    assert not list((root / "usr/lib/x86_64-linux-gnu").glob("libbz2.so*"))
    site = torch_image(venv / f"lib/python{PY}/site-packages")
    torch = site / "torch"
    init = torch / "__init__.py"
    init.write_text(init.read_text() + "\nfrom torch._deco import deco\n\n\n@deco\n"
                    "def _f():\n    pass\n")
    (torch / "_deco.py").write_text("def deco(fn=None):\n    from torch import _m0\n"
                                    "    return fn\n")
    for i in range(CHAIN):
        (torch / f"_m{i}.py").write_text(f"from torch import _m{i + 1}\n")
    (torch / f"_m{CHAIN}.py").write_text("import bz2\n")
    (root / "proc").mkdir(exist_ok=True)
    return root


def _line(root: Path, bounds: Bounds | None) -> tuple[str, str, str | None]:
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image

    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin", "CUDA_HOME=/usr/local/cuda"],
                      entrypoint=["/opt/venv/bin/python"])
    rep = check_image(elastic_ep_backend="mooncake", rootfs=str(root), config=cfg,
                      deep=False, gpu="9.0", bounds=bounds)
    line = next(c for c in rep.checks if c.name == "torch")
    return line.status, line.message, line.fix


def test_torchs_walk_stopped_at_its_bound_is_not_judged(tmp_path: Path) -> None:
    root = _root(tmp_path)
    status, message, _ = _line(root, None)  # the whole way read: the real failure
    assert status == "fail", message
    assert "libbz2.so.1.0" in message, message
    status, message, fix = _line(root, Bounds(modules=10))
    assert status == "skip", message  # was: pass
    assert message.startswith("torch 2.14.1+cu130, CUDA 13"), message
    assert "; not judged: the import chain was not followed to its end (the code its " \
        "import runs was followed as far as 10 modules (torch._m" in message, message
    assert "may import a module that does not load here (_bz2, " in message, message
    assert fix is None
