"""Where SGLang keeps what a backend option's choice imports: the options
(:data:`BACKEND_FLAGS`), the folder of a module per choice, and the attribute each option is
kept in. Nothing else is imported: the runtime check reads these at worker start
(:mod:`moonpin.preflight.extensions.wanted`)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BACKEND_FLAGS", "DISPATCHERS", "NO_BACKEND", "backend_dest", "backend_member",
           "backend_modules"]


#: Where an SGLang release keeps the module each MoE all-to-all backend imports
#: (``<backend>.py``).
DISPATCHERS = "sglang/srt/layers/moe/token_dispatcher/"
#: The launch options whose choice names a backend SGLang imports a package for, each with
#: the folder where SGLang keeps a module per choice (None: it keeps none). For every one of
#: them, what a choice imports is also read where the sources test the option's value
#: (:mod:`moonpin.readers.launch.guarded`). ``--elastic-ep-backend`` keeps no module: no
#: release up to 0.5.23 compares it with ``"nixl"`` (nixl is reached through
#: ``--moe-a2a-backend nixl``, which scale-up asserts), and its ``mooncake`` choice imports
#: ``mooncake.pg`` under ``if ... elastic_ep_backend == "mooncake"``, not through the token
#: dispatcher of that name.
BACKEND_FLAGS: dict[str, str | None] = {"--elastic-ep-backend": None,
                                        "--moe-a2a-backend": DISPATCHERS}
#: Choices that name no backend.
NO_BACKEND = frozenset({"none", ""})


def backend_dest(flag: str) -> str:
    """The attribute SGLang keeps a backend option in (``--elastic-ep-backend`` ->
    ``elastic_ep_backend``: ``arg_utils.py``'s rule, as :mod:`.flags` mirrors it)."""
    return flag.lstrip("-").replace("-", "_")


def backend_modules(names: Iterable[str], folder: str = DISPATCHERS) -> list[str]:
    """The members of ``names`` that are modules of ``folder`` (not its sub-folders'), in
    order: those :func:`backend_member` chooses among."""
    return sorted(n for n in names if n.startswith(folder) and n.endswith(".py")
                  and "/" not in n[len(folder):])


def backend_member(names: Iterable[str], backend: str,
                   folder: str = DISPATCHERS) -> str | None:
    """The member of ``names`` (paths relative to the site-packages folder or wheel) whose
    module the choice ``backend`` imports: ``<folder><backend>.py``, else the first by
    name of the modules there whose name starts with it (``mori`` -> ``moriep.py``); None
    for no backend, or a release without such a module."""
    if backend in NO_BACKEND or "/" in backend or backend.startswith("."):
        return None
    present = set(backend_modules(names, folder))
    exact = folder + backend + ".py"
    if exact in present:
        return exact
    found = sorted(n for n in present if n[len(folder):].startswith(backend))
    return found[0] if found else None
