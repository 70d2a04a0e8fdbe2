"""An image's root filesystem seen from outside it, as a process inside would see it:
every absolute path the image names resolved under the root, with chroot semantics.

:func:`resolve` maps a path of the image (``/usr/bin/python3``, a ``.pth`` line, an
editable finder's ``MAPPING`` value, a ``DT_RUNPATH`` entry, an ``/etc/ld.so.cache``
entry) to the host path under the root that the kernel would reach from inside a chroot:
symbolic links are followed component by component, an absolute target restarts at the
root, ``..`` stops at the root (``openat2(2)``'s ``RESOLVE_IN_ROOT``). The answer is
always under the root, lexically, and free of symbolic links but for a missing tail.

Only ``os`` at import: :mod:`moonpin.preflight.pyimport.importer` and
:mod:`moonpin.preflight.loader.ldso` call it on the
worker-start path, and only when a root is given.
"""

from __future__ import annotations

import os

__all__ = ["MAX_LINKS", "RootError", "image_path", "inside", "resolve"]

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
