"""An image's root filesystem seen from outside it, as a process inside would see it:
every absolute path the image names resolved under the root, with chroot semantics.

:func:`resolve` maps a path of the image (``/usr/bin/python3``, a ``.pth`` line, an
editable finder's ``MAPPING`` value, a ``DT_RUNPATH`` entry, an ``/etc/ld.so.cache``
entry) to the host path under the root that the kernel would reach from inside a chroot:
symbolic links are followed component by component, an absolute target restarts at the
root, ``..`` stops at the root (``openat2(2)``'s ``RESOLVE_IN_ROOT``). The answer is
always under the root, lexically, and free of symbolic links but for a missing tail.
:func:`host_path` and :func:`host_paths` are what the check's readers call: the one way an
image path becomes a host path (:func:`image_path` the way back).

Only ``os`` at import: the importer model (:mod:`moonpin.preflight.pyimport.metapath`,
:mod:`~moonpin.preflight.pyimport.sitefiles`) and the loader model
(:mod:`moonpin.preflight.loader.ldso`) import it on the worker-start path.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MAX_LINKS", "RootError", "host_path", "host_paths", "image_path", "inside",
           "resolve"]

#: Symbolic links followed in one resolution at most (Linux: 40, path_resolution(7)).
MAX_LINKS = 40


class RootError(OSError):
    """A path of the image cannot be resolved (a symbolic link loop); the message names it."""


def resolve(root: str, path: str, *, follow: bool = True) -> str:
    """The host path under ``root`` that ``path`` (a path of the image; a relative one is
    taken from ``/``) names, symbolic links followed inside the root (the last component
    too unless ``follow=False``). A missing component ends the walk: the rest is joined
    as written (that path then does not exist). Raises :class:`RootError` on a loop."""
    root = root.rstrip("/") or "/"
    # the components still to walk, the next one last: popping and pushing a link's target
    # stay O(1) each, so a path of many components (a 1 MB ``.pth`` line) costs linear time
    todo = [p for p in reversed(path.split("/")) if p and p != "."]
    done: list[str] = []
    links = 0
    missing = False
    seen: dict[str, str | bool | None] = {}  # a folder's _lookup, asked once
    while todo:
        part = todo.pop()
        if part == "..":  # never above the root
            if done:
                done.pop()
            continue
        if missing:
            done.append(part)
            continue
        cand = root + "/" + "/".join([*done, part]) if done else root + "/" + part
        if cand not in seen:  # `a/../a/../…`: each path asked of the kernel once
            seen[cand] = _lookup(cand)
        target = seen[cand]
        if isinstance(target, str) and (todo or follow):
            links += 1
            if links > MAX_LINKS:
                raise RootError(40, f"{path!r} in the image root {root}: a symbolic link "
                                "loop (more than 40 links)", path)
            parts = [p for p in target.split("/") if p and p != "."]
            if target.startswith("/"):
                done = []
            todo.extend(reversed(parts))
            continue
        if target is None:
            missing = True
        done.append(part)
    return root + "/" + "/".join(done) if done else root


def _lookup(cand: str) -> str | bool | None:
    """A path's symbolic link target, True when it is there and not a link, None when it
    is not there (or is a link that cannot be read: the walk ends there, as for a missing
    component)."""
    if os.path.islink(cand):
        try:
            return os.readlink(cand)
        except OSError:
            return None
    return True if os.path.lexists(cand) else None


def inside(root: str, path: str) -> bool:
    """Whether the host ``path`` (symbolic links followed by the kernel) lies in ``root``."""
    real = os.path.realpath(path)
    base = os.path.realpath(root).rstrip("/")
    return real == base or real.startswith(base + "/")


def image_path(root: str, host: str) -> str:
    """The image's name of a host path under ``root`` (``/opt/venv/...``); others as given."""
    base = root.rstrip("/")
    if host == base:
        return "/"
    if host.startswith(base + "/"):
        return host[len(base):]
    return host


def host_path(root: str | None, path: str, base: str | None = None) -> str | None:
    """``path``, a path of the image (relative to the host folder ``base`` when given), as
    the host path it names: under ``root`` (:func:`resolve`; None when it cannot be resolved
    there, or is relative to a working folder the image does not say), else as written."""
    if root is None:
        return os.path.normpath(os.path.join(base, path) if base is not None else path)
    if base is not None:
        path = os.path.join(image_path(root, base), path)
    elif not path.startswith("/"):
        return None
    try:
        return resolve(root, path)
    except OSError:
        return None


def host_paths(root: str | None, paths: Sequence[str]) -> list[str]:
    """``paths`` of the image (absolute, relative to its ``/``, or host paths already under
    ``root``, as ``$ORIGIN`` gives them) as the host paths they name under ``root``, each that
    cannot be resolved left out; as given when ``root`` is None."""
    if root is None:
        return list(paths)
    out = []
    for p in paths:
        got = host_path(root, image_path(root, p), "/")
        if got is not None:
            out.append(got)
    return out
