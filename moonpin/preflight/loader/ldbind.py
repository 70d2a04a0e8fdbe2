"""Whether every symbol a mooncake build leaves undefined is bound when the loader maps it,
as ld.so binds them: in the lookup scope of the object that needs it (the executable's
global scope, then the breadth-first ``DT_NEEDED`` closure of the object dlopen loaded),
honouring symbol versions, through each definer's hash table (:mod:`moonpin.readers.elfsym`).

The builds are loaded into the process ``import torch`` left
(:mod:`moonpin.preflight.loader.loadchain`): torch's ``libtorch_global_deps.so`` in the
global scope (torch loads it ``RTLD_GLOBAL``), torch's libraries mapped by ``torch._C``.
What is checked: every undefined, non-weak symbol of every object a load maps under the
target's import folders, and each version an object needs from a library that defines
versions (glibc elf/dl-version.c: ``version `GLIBCXX_3.4.32' not found``). Python's
extensions are loaded with ``RTLD_NOW`` (``sys.getdlopenflags()``), so every reference
binds at import, functions included. Libraries the host provides (the NVIDIA driver) are
named, never read (:mod:`moonpin.preflight.loader.ldsym`).

Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo  # noqa: F401 - where bind's answers are kept
from moonpin.preflight.loader.ldsym import HOST_PROVIDED, host_provided

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["HOST_PROVIDED", "Binding", "bind", "demangle", "host_provided"]


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
    from moonpin.preflight.loader.loadchain import native_load
    from moonpin.preflight.pyimport.importer import find

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


_DEMANGLE: Any = None


def demangle(name: str) -> str:
    """The C++ name a mangled symbol stands for (libstdc++'s ``__cxa_demangle``), or the
    name itself when it is not mangled or cannot be demangled here."""
    global _DEMANGLE
    if not name.startswith("_Z") or len(name) > 4096:
        return name
    try:
        import ctypes
        import ctypes.util

        if _DEMANGLE is None:
            lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            fn = lib.__cxa_demangle
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_int)]
            _DEMANGLE = (fn, ctypes.CDLL(None).free)
        fn, free = _DEMANGLE
        status = ctypes.c_int(0)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return name
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            free(ctypes.c_void_p(ptr))
    except (OSError, AttributeError, ValueError):
        return name
