"""FlashInfer's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import flashinfer`` (``flashinfer-python``) loads nothing prebuilt of its own: its
kernels come from ``flashinfer-cubin`` and ``flashinfer-jit-cache`` (or are compiled
later). What can stop the import is its version lock: a function of ``flashinfer/jit/env.py``
that raises unless ``FLASHINFER_DISABLE_VERSION_CHECK`` is set when a companion's
``__version__`` is not flashinfer's own (the jit-cache may add a ``+cuXXX`` local part:
0.7 allows what starts with ``f"{flashinfer_version}+"``, 0.6 anything that starts with
flashinfer's version, so 0.6.12 takes a jit-cache ``0.6.12.post1+cu130``: the argument of the
``startswith`` is read).
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


def _env_read(node: ast.AST) -> str | None:
    """``X`` of ``os.getenv("X")`` / ``os.environ.get("X")`` (None: neither)."""
    import ast

    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str) and (astread.attr_path(node.func) or "")
            in ("os.getenv", "os.environ.get", "getenv", "environ.get")):
        return node.args[0].value
    return None


def _guards(fn: ast.FunctionDef, target: ast.AST) -> list[str]:
    """The environment variables that make ``fn`` return before the statement holding
    ``target``: ``v = os.getenv("X")`` then ``if v: … return``, or ``if os.getenv("X"):
    … return`` (0.7's ``FLASHINFER_CUBIN_DIR``, read before the cubin package)."""
    import ast

    names: dict[str, str] = {}
    out: list[str] = []
    for stmt in fn.body:
        if any(n is target for n in ast.walk(stmt)):
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name) and (env := _env_read(stmt.value)):
            names[stmt.targets[0].id] = env
        elif isinstance(stmt, ast.If) and any(isinstance(x, ast.Return) for x in stmt.body):
            t = stmt.test
            env = _env_read(t) or (names.get(t.id) if isinstance(t, ast.Name) else None)
            if env:
                out.append(env)
    return out


def _tail(test: ast.AST) -> str | None:
    """What a version may carry after flashinfer's in ``test``: the constant text after the
    field of ``x.startswith(f"{v}+")`` (``"+"``), ``""`` for ``x.startswith(v)``; None: no
    ``startswith`` (the exact version only)."""
    import ast

    for n in ast.walk(test):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "startswith" and n.args):
            arg = n.args[0]
            if isinstance(arg, ast.JoinedStr):
                return "".join(str(v.value) for v in arg.values[1:]
                               if isinstance(v, ast.Constant))
            return ""
    return None


def _read(path: str, within: Confined) -> dict[str, Any] | None:
    """Each version check run at import: [companion module, caught, what may follow
    flashinfer's version (the ``startswith`` argument's text after it: ``"+"``, ``""``; None:
    only the exact version),
    the variables that skip it]. Two shapes are released: a checker function raising on
    its argument, called with ``<companion>.__version__`` (0.7), and the check written in
    the function that reads the companion, on ``<companion>.__version__`` or a name
    assigned from it (0.6)."""
    import ast

    tree = astread.parse(path, within)
    if tree is None:
        return None
    parents = _parents(tree)
    funcs = {fn.name: fn for fn in tree.body if isinstance(fn, ast.FunctionDef)}
    at_import = {t.value.func.id for t in tree.body  # type: ignore[attr-defined]
                 if isinstance(t, (ast.Assign, ast.AnnAssign)) and isinstance(
                     t.value, ast.Call) and isinstance(t.value.func, ast.Name)}
    checkers: dict[str, tuple[int, str | None]] = {}  # checker -> (argument index, tail)
    checks: list[list[Any]] = []
    for fn in funcs.values():
        versions: dict[str, str] = {}  # a name assigned <module>.__version__ -> module
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name):
                p = astread.attr_path(node.value) or ""
                if p.endswith(".__version__"):
                    versions[node.targets[0].id] = p.rsplit(".", 1)[0]
        for node in ast.walk(fn):
            if not (isinstance(node, ast.If) and any(
                    isinstance(n, ast.Constant) and n.value == _SWITCH
                    for n in ast.walk(node.test))
                    and any(isinstance(n, ast.Raise) for n in node.body)):
                continue
            local = _tail(node.test)
            module = None
            for n in ast.walk(node.test):
                p = astread.attr_path(n) or ""
                if p.endswith(".__version__"):
                    module = p.rsplit(".", 1)[0]
                elif isinstance(n, ast.Name) and n.id in versions:
                    module = versions[n.id]
                if module:
                    break
            params = [a.arg for a in fn.args.args]
            used = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            if module is not None:
                if fn.name in at_import:
                    checks.append([module, _caught(node, parents), local,
                                   _guards(fn, node)])
            elif any(p in used for p in params):
                checkers[fn.name] = (next(i for i, p in enumerate(params) if p in used),
                                     local)
    for name in sorted(at_import):
        caller = funcs.get(name)
        if caller is None:
            continue
        for call in ast.walk(caller):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in checkers):
                continue
            index, local = checkers[call.func.id]
            if index < len(call.args):
                p = astread.attr_path(call.args[index]) or ""
                if p.endswith(".__version__"):
                    checks.append([p.rsplit(".", 1)[0], _caught(call, parents), local,
                                   _guards(caller, call)])
    return {"checks": checks}


def _dist_of(facts: Facts, module: str) -> tuple[str, str] | None:
    name = module.replace("_", "-")
    d = facts.dists.get(name)
    return (d.name, d.version) if d is not None else None


def _on_index(facts: Facts, dist: str, version: str) -> bool | None:
    """Whether the knowledge base's resolved tables record ``dist`` ``version`` as a release
    pip can install from the index (:meth:`Facts.kb_on_index`; None: they hold no FlashInfer
    release). Tables that hold FlashInfer's and none of ``dist`` say the index has none (its
    recipe scrapes all three distributions: ``flashinfer-jit-cache`` is published on
    FlashInfer's own wheel site)."""
    return facts.kb_on_index(IMPORT, dist, version)


def _fix(facts: Facts, own: str, name: str) -> str:
    """The lines that make the companion ``name`` fit flashinfer-python: SGLang's pin of
    flashinfer-python when it is another release, then the companion at that version when
    the index has it, else the companion out (the import goes on without it: kernels are
    fetched or compiled at run time)."""
    pinned = facts.pin("sglang", DISTRIBUTIONS[0])
    want = pinned or own
    head = (f"pip install '{DISTRIBUTIONS[0]}=={pinned}' (the installed SGLang's pin)"
            if pinned and pinned != own else "")
    if _on_index(facts, name, want) is False:
        line = f"pip uninstall -y '{name}'" + (f" && {head}" if head else "")
        return line + ("" if head else f" (the index has no {name} {want})")
    if head:
        return f"pip install '{DISTRIBUTIONS[0]}=={pinned}' '{name}=={pinned}' (the installed " \
            "SGLang's pin)"
    return f"pip install '{name}=={own}' (or set {_SWITCH}=1)"


def pick(facts: Facts, found: Found) -> Pick:
    env_py = os.path.join(found.folder, "jit", "env.py")
    got = astread.reading("flashinfer3", env_py, lambda: _read(env_py, facts.within),
                          facts.within) if os.path.exists(env_py) else {"checks": []}
    if got is None:
        return Pick(unread=astread.unread(env_py, facts.within))
    own = facts.dists.get(DISTRIBUTIONS[0])
    if own is None:
        return Pick([Choice()], notes=["no flashinfer-python metadata: its version lock is "
                                       "not judged"])
    notes: list[str] = []
    warnings: list[str] = []
    off = bool(facts.env.get(_SWITCH))
    fix: str | None = None
    seen: set[str] = set()
    for module, caught, local, guards in got["checks"]:
        if module in seen:
            continue
        seen.add(module)
        companion = _dist_of(facts, module)
        if companion is None:
            continue
        name, version = companion
        skipped = [g for g in guards if facts.env.get(g)]
        if skipped:
            notes.append(f"{name} {version} is not read: {skipped[0]} is set")
            continue
        fits = version == own.version or (local is not None
                                          and version.startswith(own.version + local))
        if not fits and off:
            notes.append(f"{name} {version} is not flashinfer's {own.version}: "
                         f"{_SWITCH} is set, the check is off")
        elif not fits and caught:
            warnings.append(f"{name} {version} is not flashinfer's {own.version}: the import "
                            "ignores it (kernels are fetched or compiled at run time)")
            fix = fix or _fix(facts, own.version, name)
        elif not fits:
            return Pick([Choice(raises=f"RuntimeError: {name} version ({version}) does not "
                                f"match flashinfer version ({own.version})")],
                        fix=_fix(facts, own.version, name))
        else:
            notes.append(f"{name} {version} matches")
        cu = version.partition("+")[2]
        if cu.startswith("cu") and cu[2:].isdigit() and facts.cuda is not None \
                and int(cu[2:]) // 10 != facts.cuda:
            warnings.append(f"{name} {version} holds kernels for CUDA {int(cu[2:]) // 10}, "
                            f"torch's is CUDA {facts.cuda}: they fail when used")
    return Pick([Choice()], notes=notes, warnings=warnings, fix=fix)


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    return None
