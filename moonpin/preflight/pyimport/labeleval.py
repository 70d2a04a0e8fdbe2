"""A value a module's top level computes in a way the static readers do not follow (torch's
``__version__`` from an environment variable, or under a condition on the Python
version), evaluated with the import chain's evaluator
(:mod:`moonpin.preflight.pyimport.pyrun`, :mod:`moonpin.preflight.pyimport.pyeval`): read with
``ast``, never run; the standard library modelled, no extension module loaded, every
environment variable read recorded. Only ``os`` at import."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["value"]

#: A module evaluated here is at most this large (torch/version.py is ~300 bytes).
_CAP = 256 << 10


def value(file: str, module: str, attr: str, paths: Sequence[str], suffixes: Sequence[str],
          version: tuple[int, int], env: dict[str, str | None]) -> str | None:
    """``module.attr`` as ``file``'s top level binds it when ``module`` is imported, a
    string; None when it is not one this evaluation reaches (the import raises, a value is
    unknown, the file is past :data:`_CAP`). ``env`` receives each variable read."""
    from moonpin.preflight.loader import ldproc
    from moonpin.preflight.pyimport import pyrun
    from moonpin.preflight.pyimport.pyeval import UNKNOWN, Budget, Died, ModuleValue, Raised

    class _Unloaded(pyrun.Chain):
        """The chain's importer, loading no extension module (what one defines is
        unknown)."""

        def _load_ext(self, name: str, file: str, path: list[str] | None,
                      by: ModuleValue) -> ModuleValue:
            mod = self.modules[name] = ModuleValue(name, "ext", file, path)
            return mod

    try:
        if os.stat(file).st_size > _CAP:
            return None
    except OSError:
        return None
    proc = ldproc.Process(machine=os.uname().machine, owned=lambda p: False)
    chain = _Unloaded(proc, paths, request=module.partition(".")[0], suffixes=suffixes,
                      version=version)
    search = [os.path.dirname(file)] if os.path.basename(file).startswith("__init__.") \
        else None
    got: Any = UNKNOWN
    try:
        mod = chain.run_file(module, file, search)
        got = mod.globals.get(attr, UNKNOWN)
    except (Raised, Died, Budget, RecursionError, MemoryError):
        got = UNKNOWN
    finally:
        env.update(chain.env_read)
    return got if isinstance(got, str) and got.isprintable() and len(got) <= 256 else None
