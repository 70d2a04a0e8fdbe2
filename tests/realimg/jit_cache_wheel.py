#!/usr/bin/env python3
"""A stand-in ``flashinfer-jit-cache`` wheel of a given version (the index has no release of
it; FlashInfer publishes it on its own wheel site, which is not reachable here).

    python3 tests/realimg/jit_cache_wheel.py <dest-dir> <version>    # prints the wheel's path

It holds what ``flashinfer/jit/env.py`` reads of the real package at import: ``__version__``,
``get_jit_cache_dir()`` (0.6) and ``get_jit_cache_providers()`` (0.7: none), and no kernels.
``stack.sh --hunt-c`` installs it with an image's own pip (``--no-deps``).
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

INIT = '''"""A stand-in flashinfer-jit-cache (no kernels): what flashinfer's import reads."""
import os

__version__ = {version!r}


def get_jit_cache_dir():
    return os.path.join(os.path.dirname(__file__), "jit_cache")


def get_jit_cache_providers():
    return []
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(dest: Path, version: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    info = f"flashinfer_jit_cache-{version}.dist-info"
    files = {
        "flashinfer_jit_cache/__init__.py": INIT.format(version=version).encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: flashinfer-jit-cache\n"
                             f"Version: {version}\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: huntC\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = dest / f"flashinfer_jit_cache-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    print(path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2])
