#!/usr/bin/env python3
"""An unpacked image root (what ``umoci unpack`` or ``docker export`` leaves) holding a venv.

    python3 tests/realimg/hunt_root.py <venv> <root>

``<root>`` gets the minimal root :func:`tests.lib.umoci.pack_venv` packs (the venv's
interpreter, a few host libraries, the loader's configuration), the venv as ``/opt/venv``
(hard links: pip unlinks before it writes, so changing either never changes the other), the
interpreter's whole standard library (hard links) and the system libraries its own extension
modules link (``libbz2``, ``liblzma``…, as a distribution's base image has them), so that
``chroot <root> /opt/venv/bin/python`` runs the real import there; the stub driver as
``/stubs`` and ``probe_stack.py`` as ``/probe_stack.py``. Like a runtime image it has no CUDA
toolkit (no ``/usr/local/cuda``, no ``nvcc``, no ``which``). ``stack.sh --hunt-nixl`` makes
``$REALIMG/hunt-A-root-stack`` with it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from tests.lib.umoci import _minimal_root  # noqa: E402

SYSTEM = ("/lib/x86_64-linux-gnu/", "/usr/lib/x86_64-linux-gnu/")


def main(venv: Path, root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    _minimal_root(root, venv)
    (root / "opt").mkdir()
    subprocess.run(["cp", "-al", str(venv), str(root / "opt" / "venv")], check=True)
    home = Path(next(line.split("=", 1)[1].strip() for line in
                     (venv / "pyvenv.cfg").read_text().splitlines()
                     if line.startswith("home"))).parent
    std = root / str(home).lstrip("/") / "lib" / "python3.11"
    shutil.rmtree(std)
    subprocess.run(["cp", "-al", str(home / "lib" / "python3.11"), str(std)], check=True)
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    for so in (home / "lib" / "python3.11" / "lib-dynload").glob("*.so"):
        out = subprocess.run(["ldd", str(so)], capture_output=True, text=True).stdout
        for m in re.finditer(r"\s*(\S+) => (/\S+)", out):
            if not m.group(2).startswith(SYSTEM) or (lib / m.group(1)).exists():
                continue
            real = Path(m.group(2)).resolve()
            if not (lib / real.name).exists():
                shutil.copy2(real, lib / real.name)
            if real.name != m.group(1):
                os.symlink(real.name, lib / m.group(1))
    stubs = Path(os.environ.get("REALIMG", "/tmp/realimg")) / "stack-stubs"
    subprocess.run(["cp", "-a", str(stubs), str(root / "stubs")], check=True)
    shutil.copy2(HERE / "probe_stack.py", root / "probe_stack.py")
    for d in ("tmp", "proc", "dev"):
        (root / d).mkdir(exist_ok=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
