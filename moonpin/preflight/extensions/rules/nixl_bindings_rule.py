"""nixl's transfer agent: the loader rule of ``import nixl`` (:mod:`..seam`), what SGLang's PD
disaggregation (``--disaggregation-transfer-backend nixl``: ``srt/disaggregation/nixl/
conn.py`` imports ``nixl._api`` when its KV manager is made) and HiCache
(``--hicache-storage-backend nixl``: ``storage/nixl/hicache_nixl.py``) import, read from its
own files.

The meta package ``nixl`` (distribution ``nixl``, from 1.2.0) picks its backend package
``nixl_cu<major>`` for torch's CUDA major as ``nixl_ep``'s meta picks ``nixl_ep_cu<major>``
(:func:`moonpin.preflight.extensions.rules.nixl_rule.meta_backend`, the one reading of that
dispatch; "detected CUDA N but nixl-cuN is not installed" when it is missing), then imports
each name of its ``submodules`` list from it (``_bindings``, ``_utils``, ``logging``,
``_api``) and aliases it as ``nixl.<name>``. The backend's compiled modules are built per
Python, not per torch (``_bindings.cpython-311-x86_64-linux-gnu.so``, which links
``libnixl.so`` of ``.nixl_cu13.mesonpy.libs`` and, through it, gRPC and etcd of
``nixl_cu13.libs`` by its RPATH): which of them the import loads is read, never assumed —
those the backend's own modules import (its plain import,
:func:`moonpin.preflight.extensions.pyread.plain.plain_import`: ``__init__`` -> ``_api`` ->
``from . import _bindings``), then those of the meta's list, in that order, all into one
process. A ``nixl`` that is no meta package is followed the same way.
"""

from __future__ import annotations

import os

from moonpin.preflight.extensions.rules.nixl_rule import meta_backend
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["CHOICES", "DISTRIBUTIONS", "IMPLICIT", "IMPORT", "pick", "repair"]

IMPORT = "nixl"
#: the launch choices whose SGLang modules import ``nixl`` (the fallback of :mod:`..wanted`
#: when SGLang's sources cannot be read)
CHOICES = {"pd-disaggregation": ("nixl",), "hicache": ("nixl",)}
IMPLICIT = False
DISTRIBUTIONS = ("nixl",)

#: ``except`` classes that let a missing module's import go on (``?``: under a condition)
_GOES_ON = frozenset({"*", "?", "ImportError", "ModuleNotFoundError", "Exception",
                      "BaseException"})


def _goes_on(caught: Sequence[str]) -> bool:
    return bool(_GOES_ON.intersection(caught))


def pick(facts: Facts, found: Found) -> Pick:
    from moonpin.preflight.extensions.pyread import plain

    got = meta_backend(facts, found, IMPORT)
    if isinstance(got, Pick):
        return got
    backend, name, notes, meta = got
    reached = plain.plain_import(backend, name, facts)
    for m in reached.missing:
        if _goes_on(m.caught):
            continue
        other = (f" ({', '.join(m.other)} is there: built for another Python; this one "
                 f"takes {', '.join(facts.suffixes[:2])})" if m.other else "")
        parent, _, stem = m.module.rpartition(".")
        return Pick([Choice(raises=f"ImportError: cannot import name '{stem}' from "
                            f"'{parent}' ({m.by}){other}")], notes=notes,
                    fix=_reinstall(facts, backend.folder))
    files = [b.file for b in reached.builds if not _goes_on(b.caught)]
    for sub in meta["subs"] if backend is not found else ():
        path = facts.module_file(backend.folder, sub)
        if path is None:  # importlib.import_module(f"{backend}.{sub}") raises
            others = plain.other_builds(backend.folder, sub, facts.suffixes)
            other = (f" ({', '.join(others)} is there: built for another Python)"
                     if others else "")
            return Pick([Choice(raises=f"ModuleNotFoundError: No module named "
                                f"'{name}.{sub}'{other}")], notes=notes,
                        fix=_reinstall(facts, backend.folder))
        if not path.endswith((".py", ".pyc")) and path not in files:
            files.append(path)
    unread = reached.dynamic + ([reached.unread] if reached.unread else [])
    if unread and not files:
        return Pick(unread=f"{name} loads what this check cannot follow: {unread[0]}",
                    notes=notes)
    if files:
        notes.append(f"{name} is built for this Python, not for a torch")
    return Pick([Choice(files, every=True)] if files else [Choice()], notes=notes)


def _reinstall(facts: Facts, folder: str) -> str | None:
    """The distribution named like the package at ``folder`` (``nixl_cu13`` ->
    ``nixl-cu13``) installed again at its installed version (None: none is installed)."""
    from moonpin.preflight.installed.image_facts import canon

    dist = facts.dists.get(canon(os.path.basename(folder)))
    if dist is None:
        return None
    return f"pip install --force-reinstall --no-deps '{dist.name}=={dist.version}'"


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    """A build of the backend that does not load (a library it needs gone, a file
    damaged): its distribution again, at the installed version."""
    return _reinstall(facts, os.path.dirname(choice.files[0])) if choice.files else None
