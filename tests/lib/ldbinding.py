"""The loader model asked the way tests ask it, through the one model the check uses: symbol
binding of builds loaded into the process ``import torch`` leaves
(:func:`moonpin.preflight.loader.loadchain.native_load`), and ``dlopen`` of a build in a process
of nothing else (:class:`moonpin.preflight.loader.ldproc.Process`). Not part of moonpin: only
tests call these."""

from __future__ import annotations

import os
from collections.abc import Sequence

from moonpin.preflight.loader import ldproc, ldso
from moonpin.preflight.loader.loadchain import native_load
from moonpin.preflight.pyimport.importer import find

__all__ = ["Binding", "bind", "dlopen_alone"]


class Binding:
    """What :func:`bind` found. ``unbound``: (object, symbol, version or "", the objects
    searched) for each reference nothing binds; ``versions``: (object, version, library
    path, the newest version of that kind it defines) for each missing version; counts;
    ``skipped``: why nothing was bound (a library not found, torch's import failing)."""

    __slots__ = ("host", "objects", "refs", "skipped", "unbound", "versions")

    def __init__(self) -> None:
        self.unbound: list[tuple[str, str, str, tuple[str, ...]]] = []
        self.versions: list[tuple[str, str, str, str]] = []
        self.host: list[str] = []
        self.objects = 0
        self.refs = 0
        self.skipped: str | None = None


def bind(builds: Sequence[str], paths: Sequence[str], interpreter: str | None,
         suffixes: Sequence[str] = (".so",), machine: str | None = None,
         root: str | None = None, ld_path: Sequence[str] | None = None) -> Binding:
    """Bind what ``builds`` (and the image's objects they load) leave undefined, as
    importing them in ``interpreter`` after ``import torch`` would (module doc).
    ``root``: the image's root folder; ``ld_path``: its ``LD_LIBRARY_PATH`` (default: this
    process's)."""
    module = "torch" if find(paths, "torch", None, root) is not None else None
    got = native_load(builds, paths, module, python=interpreter, suffixes=suffixes,
                      machine=machine, root=root, ld_path=ld_path)
    out = Binding()
    out.unbound, out.versions, out.host = got.unbound, got.versions, got.host
    out.objects, out.refs = got.bound, got.refs
    if got.chain_error is not None:
        out.skipped = f"`import {module}` fails: {got.chain_error[2]}"
    elif got.missing or got.bad:
        out.skipped = ("a library the loader cannot find (" + ", ".join(sorted(
            [*got.missing, *map(os.path.basename, got.bad)])) + "): symbols are bound once "
            "it is there")
    return out


def dlopen_alone(build: str, machine: str, root: str | None = None) -> ldproc.Outcome:
    """``dlopen(build)`` in a process that has nothing else mapped, with this process's
    ``LD_LIBRARY_PATH`` and no loader cache (``root``: an image's root folder): what it finds
    missing, what it cannot map, and the objects it maps (``objects``)."""
    proc = ldproc.Process(machine=machine, owned=lambda p: False, root=root,
                          ld_path=ldso.env_ld_path(), cache={})
    try:
        return proc.dlopen(build, ldproc.RTLD_NOW)
    finally:
        proc.close()
