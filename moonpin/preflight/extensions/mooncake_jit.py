"""What a loader that compiles its extension at first import will do in this image, read
from the loader's own source and the files on disk (nothing is imported).

Such a loader (mooncake-transfer-engine-cuda13 0.3.14's ``mooncake/pg.py``) keeps the
compiled adapter in a cache folder it names in its source: an environment variable
(``os.environ.get("..._JIT_DIR")``) or a folder under the home (``Path.home() / ...``). An
adapter it compiled for this image links the image's own ``mooncake/`` folder through its
``DT_RUNPATH`` (the loader passes ``-Wl,-rpath,<mooncake folder>``), which is how a light
check tells an adapter of this image from one of another. The folder is the judged
worker's, not this process's: an image's configured ``Env`` and its user's home under its
root, with the adapter's ``DT_RUNPATH`` read as a path of the image. The toolchain it
needs depends on torch's flavour: the MUSA and MACA tools only for a MUSA or MACA torch.
"""

from __future__ import annotations

import os

from moonpin.preflight.access import chroot as rootfs
from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["cache_roots", "compiled_adapters", "home_of", "tools_for"]

#: Subfolders of a cache root looked at, at most (one per compiled key).
_MAX_KEYS = 256


def cache_roots(scheme: dict[str, list[str]], env: Mapping[str, str], home: str) -> list[str]:
    """The cache folder the loader would use in the judged environment, as a path of it:
    the first of its variables set in ``env`` (the worker's environment: an image's
    configured ``Env``, this process's for this machine), else its folder under ``home``
    (``Path.home()``: ``HOME``, else the user's passwd entry; :func:`home_of`). A relative
    value names a folder of the worker's working directory, which is not known: none."""
    for name in scheme.get("env") or ():
        value = env.get(name)
        if value:
            if value == "~" or value.startswith("~/"):  # Path.expanduser
                value = home.rstrip("/") + value[1:]
            return [os.path.normpath(value)] if value.startswith("/") else []
    parts = scheme.get("home") or []
    if parts:
        return [os.path.join(home, *parts)]
    return []


def home_of(env: Mapping[str, str], uid: int, root: str | None) -> str:
    """``Path.home()`` of the worker: its ``HOME``; else, in an image (``root``), the one
    its runtime sets from the image's ``/etc/passwd``
    (:func:`moonpin.preflight.env.rootfs.user_home`); else this process's user's."""
    if env.get("HOME"):
        return env["HOME"]
    if root is None:  # this process is the worker: its user's passwd entry
        return os.path.expanduser("~")
    from moonpin.preflight.env.rootfs import user_home

    return user_home(root, uid)


def compiled_adapters(roots: Sequence[str], mooncake_pkg: str,
                      within: Confined = NOWHERE) -> list[str]:
    """Compiled adapters under ``roots`` (paths of the judged environment: under
    ``within``'s image root, resolved there) built for the environment whose ``mooncake/``
    folder is ``mooncake_pkg`` (a host path): shared objects whose DT_RUNPATH (or
    DT_RPATH) names that folder, as a path of the same environment. Returns host paths.
    Every folder and file is reached through the image's own links, never out of its
    root."""
    from moonpin.preflight.loader.ldso import read_dynamic

    top = within.root

    def here(path: str) -> str | None:  # a path of the environment, as a host path
        if top is None:
            return os.path.realpath(path)
        try:
            return rootfs.resolve(top, path)
        except OSError:  # a link loop: the loader cannot reach it either
            return None

    # the package's host path, found through the image's links already: only the root's
    # own prefix is made canonical (Confined holds the root as its real path)
    want = here(rootfs.image_path(top, os.path.realpath(mooncake_pkg)) if top is not None
                else mooncake_pkg)
    out: list[str] = []
    for root in roots:
        folder = here(root)
        if folder is None:
            continue
        try:
            keys = sorted(e.name for e in os.scandir(folder))[:_MAX_KEYS]
        except OSError:
            continue
        for name in keys:
            key = here(os.path.join(root, name))
            try:
                if key is None or not os.path.isdir(key):
                    continue
                files = sorted(e.name for e in os.scandir(key) if e.name.endswith(".so"))
            except OSError:
                continue
            for so in files:
                path = here(os.path.join(root, name, so))
                if path is None or not os.path.isfile(path):
                    continue
                try:
                    _, runpath, rpath, problem = read_dynamic(path, within=within)
                except OSError:
                    continue
                if problem is None and want is not None and any(
                        here(d) == want for d in (*runpath, *rpath)
                        if d.startswith("/") and "$" not in d and "\0" not in d):
                    out.append(path)
    return out


def tools_for(toolchain: Sequence[str], consts: dict[str, object] | None) -> list[str]:
    """The tools of ``toolchain`` (the scraped labels) this torch needs: those of MUSA or
    MACA only for a torch whose ``torch/version.py`` says it is one."""
    consts = consts or {}
    flavours = {f for f in ("MUSA", "MACA") if consts.get(f.lower())}
    return [t for t in toolchain
            if not any(f in t for f in ("MUSA", "MACA")) or any(f in t for f in flavours)]
