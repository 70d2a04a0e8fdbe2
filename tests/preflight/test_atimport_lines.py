"""The code an extension's import (and torch's own) runs by calls into other modules, as its
line says it (issue 39): followed where one of the interpreter's own extension modules does
not load (a minimal image root without ``libbz2``: ``_bz2``), through a decorator applied at
import whose function imports a long chain of modules ending in ``import bz2``. Judged by
the whole check of the root (``--rootfs``), in this process."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from moonpin.preflight.pyimport.atimport import Bounds
from tests.lib.extimages import add_deep_ep, torch_image

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: deep_ep's ``__init__`` applies a decorator at import (``@torch.compile`` in small)
DECORATED = "\nfrom helper import deco\n\n\n@deco\ndef _f():\n    pass\n"
#: the decorator's function imports a chain of modules, the last of which imports bz2
CHAIN = 30


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)


def _root(tmp_path: Path, into: str = "deep_ep") -> Path:
    """A minimal root (no libbz2) whose ``/opt/venv`` holds torch and a deep_ep, the
    ``__init__`` of package ``into`` applying ``helper.deco``, which imports ``helper.m0`` …
    ``helper.m30``; the last one imports bz2."""
    from tests.lib.umoci import venv_root

    root, venv = venv_root(tmp_path)
    assert not list((root / "usr/lib/x86_64-linux-gnu").glob("libbz2.so*"))
    site = torch_image(venv / f"lib/python{PY}/site-packages")
    add_deep_ep(site)
    init = site / into / "__init__.py"
    init.write_text(init.read_text() + DECORATED)
    helper = site / "helper"
    helper.mkdir()
    (helper / "__init__.py").write_text("def deco(fn=None):\n    from helper import m0\n"
                                        "    return fn\n")
    for i in range(CHAIN):
        (helper / f"m{i}.py").write_text(f"from helper import m{i + 1}\n")
    (helper / f"m{CHAIN}.py").write_text("import bz2\n")
    (root / "proc").mkdir(exist_ok=True)
    return root


def _line(root: Path, bounds: Bounds | None, name: str = "deep_ep"
          ) -> tuple[str, str, str | None]:
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image

    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin", "CUDA_HOME=/usr/local/cuda"],
                      entrypoint=["/opt/venv/bin/python"])
    rep = check_image(elastic_ep_backend=None, rootfs=str(root), config=cfg, deep=False,
                      gpu="9.0", launch_args=["--moe-a2a-backend", "deepep"], bounds=bounds)
    line = next(c for c in rep.checks if c.name == name)
    return line.status, line.message, line.fix


def test_a_walk_stopped_at_its_bound_is_not_judged(tmp_path: Path) -> None:
    """Past its bounds, the walk of the code run at import has not read what may fail the
    import: the line says "not judged" and how far it went, never "pass" (before: pass)."""
    root = _root(tmp_path)
    status, message, fix = _line(root, None)  # the whole way read: the real failure
    assert status == "fail", message
    assert "libbz2.so.1.0" in message and "calls deco" in message, message
    status, message, fix = _line(root, Bounds(modules=10))
    assert status == "skip", message
    assert "loads deep_ep/_C" in message, message
    assert ("not judged: the code its import runs was followed as far as 10 modules "
            "(helper.m" in message), message
    assert "may import a module that does not load here (_bz2, " in message, message
    assert fix is None
    status, message, _ = _line(root, Bounds(calls=0))
    assert status == "skip" and "as far as 0 calls (helper.deco not read)" in message, message


def test_torchs_own_walk_stopped_at_its_bound_is_not_judged(tmp_path: Path) -> None:
    """The same walk of the code ``import torch`` runs at import (torch's ``__init__``
    applying the decorator): its line says "not judged" where the walk stopped at its bounds,
    as an extension's does (before: pass; ``load_problem`` did not read ``Report.note``)."""
    root = _root(tmp_path, into="torch")
    status, message, _ = _line(root, None, "torch")  # the whole way read: the real failure
    assert status == "fail" and "libbz2.so.1.0" in message, message
    status, message, fix = _line(root, Bounds(modules=10), "torch")
    assert status == "skip", message
    assert message.startswith("torch 2.14.1+cu130, CUDA 13"), message
    assert "; not judged: the import chain was not followed to its end (the code its " \
        "import runs was followed as far as 10 modules (helper.m" in message, message
    assert "may import a module that does not load here (_bz2, " in message, message
    assert fix is None
