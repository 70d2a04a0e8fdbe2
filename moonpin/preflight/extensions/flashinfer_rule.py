"""FlashInfer's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import flashinfer`` (``flashinfer-python``) loads nothing prebuilt of its own: its
kernels come from ``flashinfer-cubin`` and ``flashinfer-jit-cache`` (or are compiled
later). What can stop the import is its version lock: a function of ``flashinfer/jit/env.py``
that raises unless ``FLASHINFER_DISABLE_VERSION_CHECK`` is set when a companion's
``__version__`` is not flashinfer's own (the jit-cache may add a ``+cuXXX`` local part).
Whether the import fails or goes on without the companion depends on whether the call that
runs at import is inside a ``try`` catching what it raises: both shapes are released, and
both are read here with ``ast``. The versions are the installed distributions' METADATA;
the jit-cache's ``+cuXXX`` is compared with torch's CUDA major.
"""

from __future__ import annotations

import os

from moonpin.preflight.extensions import astread
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["CHOICES", "DISTRIBUTIONS", "IMPLICIT", "IMPORT", "pick", "repair"]

IMPORT = "flashinfer"
CHOICES = {"moe-a2a": ("flashinfer",)}
IMPLICIT = True
DISTRIBUTIONS = ("flashinfer-python",)
_SWITCH = "FLASHINFER_DISABLE_VERSION_CHECK"
_CATCHING = {"RuntimeError", "Exception", "BaseException"}


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    import ast

    out: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _caught(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether ``node`` sits in a ``try`` body whose handlers catch a ``RuntimeError``."""
    import ast

    child, cur = node, parents.get(id(node))
    while cur is not None and not isinstance(cur, ast.FunctionDef):
        if isinstance(cur, ast.Try) and any(child is s for s in cur.body):
            for h in cur.handlers:
                names = (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                         ) if h.type is not None else []
                if h.type is None or any(getattr(n, "id", getattr(n, "attr", None))
                                         in _CATCHING for n in names):
                    return True
        child, cur = cur, parents.get(id(cur))
    return False


def _read(path: str, within: Confined) -> dict[str, Any] | None:
    """Each version check called at import: [companion module, caught, local part allowed]."""
    import ast

    tree = astread.parse(path, within)
    if tree is None:
        return None
    checkers: dict[str, bool] = {}  # name -> allows a "+local" part
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and any(
                isinstance(n, ast.Constant) and n.value == _SWITCH for n in ast.walk(fn)) \
                and any(isinstance(n, ast.Raise) for n in ast.walk(fn)):
            checkers[fn.name] = any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "startswith" for n in ast.walk(fn))
    at_import = {t.value.func.id for t in tree.body  # type: ignore[attr-defined]
                 if isinstance(t, (ast.Assign, ast.AnnAssign)) and isinstance(
                     t.value, ast.Call) and isinstance(t.value.func, ast.Name)}
    parents = _parents(tree)
    checks: list[list[Any]] = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name not in at_import:
            continue
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in checkers):
                continue
            for arg in call.args:
                p = astread.attr_path(arg) or ""
                if p.endswith(".__version__"):
                    checks.append([p.rsplit(".", 1)[0], _caught(call, parents),
                                   checkers[call.func.id]])
    return {"checks": checks}


def _dist_of(facts: Facts, module: str) -> tuple[str, str] | None:
    name = module.replace("_", "-")
    d = facts.dists.get(name)
    return (d.name, d.version) if d is not None else None


def pick(facts: Facts, found: Found) -> Pick:
    env_py = os.path.join(found.folder, "jit", "env.py")
    got = astread.reading("flashinfer", env_py, lambda: _read(env_py, facts.within),
                          facts.within) if os.path.exists(env_py) else {"checks": []}
    if got is None:
        return Pick(unread=f"{env_py} cannot be read")
    own = facts.dists.get(DISTRIBUTIONS[0])
    if own is None:
        return Pick([Choice()], notes=["no flashinfer-python metadata: its version lock is "
                                       "not judged"])
    notes: list[str] = []
    warnings: list[str] = []
    off = bool(facts.env.get(_SWITCH))
    seen: set[str] = set()
    for module, caught, local in got["checks"]:
        if module in seen:
            continue
        seen.add(module)
        companion = _dist_of(facts, module)
        if companion is None:
            continue
        name, version = companion
        fits = version == own.version or (local and version.startswith(own.version + "+"))
        if not fits and off:
            notes.append(f"{name} {version} is not flashinfer's {own.version}: "
                         f"{_SWITCH} is set, the check is off")
        elif not fits and caught:
            warnings.append(f"{name} {version} is not flashinfer's {own.version}: the import "
                            "ignores it (kernels are fetched or compiled at run time)")
        elif not fits:
            return Pick([Choice(raises=f"RuntimeError: {name} version ({version}) does not "
                                f"match flashinfer version ({own.version})")],
                        fix=f"pip install '{name}=={own.version}'"
                        + (f" (or set {_SWITCH}=1)" if name else ""))
        else:
            notes.append(f"{name} {version} matches")
        cu = version.partition("+")[2]
        if cu.startswith("cu") and cu[2:].isdigit() and facts.cuda is not None \
                and int(cu[2:]) // 10 != facts.cuda:
            warnings.append(f"{name} {version} holds kernels for CUDA {int(cu[2:]) // 10}, "
                            f"torch's is CUDA {facts.cuda}: they fail when used")
    return Pick([Choice()], notes=notes, warnings=warnings)


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    return None
