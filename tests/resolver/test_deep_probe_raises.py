"""Issue 38 (6): the deep probe reports an import that raises anything (RecursionError,
MemoryError, SystemExit, KeyboardInterrupt), exits the interpreter, or never returns, as a
failure, whatever the image's metadata holds: a NUL byte in torch's METADATA (its
distribution then does not read) does not make torch "not installed" when its folder is
what ``import torch`` finds (on ee40e57 the probe was skipped and the check passed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lib.checkrun import run
from tests.lib.images import healthy_image

RAISES = {
    "recursion": "def _f(n):\n    return _f(n + 1)\n_f(0)\n",
    "memory": "raise MemoryError\n",
    "systemexit": "raise SystemExit(0)\n",
    "keyboard": "raise KeyboardInterrupt\n",
    "exit": "import os\nos._exit(0)\n",
    "hang": "import time\nwhile True:\n    time.sleep(1)\n",
}


def _site(tmp_path: Path, nul: bool) -> Path:
    site = healthy_image(tmp_path / "site", kind="py")
    if nul:
        md = next(site.glob("torch-*.dist-info")) / "METADATA"
        md.write_bytes(md.read_bytes().replace(b"Name: ", b"Name: \x00", 1))
    return site


@pytest.mark.parametrize("nul", [True, False], ids=["NUL in METADATA", "clean METADATA"])
@pytest.mark.parametrize("kind", list(RAISES))
def test_an_import_that_raises_anything_is_a_failure(tmp_path: Path, kind: str,
                                                     nul: bool) -> None:
    site = _site(tmp_path, nul)
    init = site / "torch" / "__init__.py"
    init.write_text(RAISES[kind] + init.read_text())
    r = run(site, "--deep-timeout", "5", deep=True)
    assert r.rc == 1, r.out
    assert r.status("deep probe") == "fail", r.out


def test_a_nul_in_metadata_alone_is_no_failure(tmp_path: Path) -> None:
    """Control: the same image with a torch that imports: the probe runs and passes."""
    r = run(_site(tmp_path, True), deep=True)
    assert r.status("deep import") == "pass", r.out
    assert r.rc == 0, r.out
