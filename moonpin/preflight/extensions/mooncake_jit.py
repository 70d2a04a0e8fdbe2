"""What a loader that compiles its extension at first import will do in this image, read
from the loader's own source and the files on disk (nothing is imported).

Such a loader (mooncake-transfer-engine-cuda13 0.3.14's ``mooncake/pg.py``) keeps the
compiled adapter in a cache folder it names in its source: an environment variable
(``os.environ.get("..._JIT_DIR")``) or a folder under the home (``Path.home() / ...``). An
adapter it compiled for this image links the image's own ``mooncake/`` folder through its
``DT_RUNPATH`` (the loader passes ``-Wl,-rpath,<mooncake folder>``), which is how a light
check tells an adapter of this image from one of another. The toolchain it needs depends
on torch's flavour: the MUSA and MACA tools only for a MUSA or MACA torch.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["cache_roots", "compiled_adapters", "tools_for"]

#: Subfolders of a cache root looked at, at most (one per compiled key).
_MAX_KEYS = 256


def cache_roots(scheme: dict[str, list[str]]) -> list[str]:
    """The cache folder the loader would use here: the first of its variables that is set,
    else its folder under this user's home."""
    for name in scheme.get("env") or ():
        value = os.environ.get(name)
        if value:
            return [os.path.expanduser(value)]
    parts = scheme.get("home") or []
    if parts:
        return [os.path.join(os.path.expanduser("~"), *parts)]
    return []


def compiled_adapters(roots: Sequence[str], mooncake_pkg: str,
                      within: Confined = NOWHERE) -> list[str]:
    """Compiled adapters under ``roots`` built for the image whose ``mooncake/`` folder is
    ``mooncake_pkg``: shared objects whose DT_RUNPATH (or DT_RPATH) names that folder."""
    from moonpin.preflight.loader.ldso import read_dynamic

    want = os.path.realpath(mooncake_pkg)
    out: list[str] = []
    for root in roots:
        try:
            keys = sorted(os.scandir(root), key=lambda e: e.name)[:_MAX_KEYS]
        except OSError:
            continue
        for key in keys:
            try:
                if not key.is_dir():
                    continue
                files = sorted(e.path for e in os.scandir(key.path)
                               if e.name.endswith(".so") and e.is_file())
            except OSError:
                continue
            for so in files:
                try:
                    _, runpath, rpath, problem = read_dynamic(so, within=within)
                except OSError:
                    continue
                if problem is None and any(os.path.realpath(d) == want
                                           for d in (*runpath, *rpath) if d and "$" not in d
                                           and "\0" not in d):
                    out.append(so)
    return out


def tools_for(toolchain: Sequence[str], consts: dict[str, object] | None) -> list[str]:
    """The tools of ``toolchain`` (the scraped labels) this torch needs: those of MUSA or
    MACA only for a torch whose ``torch/version.py`` says it is one."""
    consts = consts or {}
    flavours = {f for f in ("MUSA", "MACA") if consts.get(f.lower())}
    return [t for t in toolchain
            if not any(f in t for f in ("MUSA", "MACA")) or any(f in t for f in flavours)]
