"""Whether every symbol a mooncake build leaves undefined is bound when the loader maps it,
as ld.so binds them: in the lookup scope of the object that needs it (the executable's
global scope, then the breadth-first ``DT_NEEDED`` closure of the object dlopen loaded),
honouring symbol versions, through each definer's hash table (:mod:`moonpin.readers.elf.symbols`).

The builds are loaded into the process ``import torch`` left
(:mod:`moonpin.preflight.loader.loadchain`): torch's ``libtorch_global_deps.so`` in the
global scope (torch loads it ``RTLD_GLOBAL``), torch's libraries mapped by ``torch._C``.
What is checked: every undefined, non-weak symbol of every object a load maps under the
target's import folders, and each version an object needs from a library that defines
versions (glibc elf/dl-version.c: ``version `GLIBCXX_3.4.32' not found``). Python's
extensions are loaded with ``RTLD_NOW`` (``sys.getdlopenflags()``), so every reference
binds at import, functions included. Libraries the host provides (the NVIDIA driver) are
named, never read (:mod:`moonpin.preflight.loader.ldsym`). The binding itself is done by the
loader model (:meth:`moonpin.preflight.loader.ldproc.Process.dlopen`); this module names what it
found: a mangled symbol as the C++ name it stands for (:func:`demangle`).

Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

from moonpin.preflight.loader.ldsym import HOST_PROVIDED, host_provided

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["HOST_PROVIDED", "demangle", "host_provided"]


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
