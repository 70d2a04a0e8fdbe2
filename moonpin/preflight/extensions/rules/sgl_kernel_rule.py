"""sgl_kernel's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import sgl_kernel`` (distributions ``sglang-kernel``, formerly ``sgl-kernel``) runs its
``__init__.py``, and what that file does first to get ``common_ops`` decides the build,
read here in its top level's source order (function bodies left out):

* a call of a loader function, imported from a module beside it (``from
  sgl_kernel.load_utils import _load_architecture_specific_ops``) or defined in it: the
  function globs ``<subdir>/common_ops.*``, picking the sub-folder from the GPU's compute
  capability (``major * 10 + minor``; None without a usable GPU) through an ``if``/``elif``
  chain on it, takes the first compiled match (``.so`` names first), and on a failure falls
  back to ``common_ops.*`` beside it, then to ``import common_ops``; none loading raises
  ``ImportError``. The chain is read with ``ast`` (``== 90`` -> ``"sm90"``, ``is not None``
  -> any GPU, ``else``, or an f-string of the capability such as ``f"sm{cc}"``), and so is
  each glob; nothing is assumed about which folders a release ships (0.3.13 and later);
* a plain import of the sub-module (``from sgl_kernel import common_ops``, ``from . import
  common_ops``, ``import sgl_kernel.common_ops``): the importer's own search of the package
  folder, no GPU choice (the flat layout of older ``sgl-kernel`` releases).

Only the file the import runs counts: where both distributions were installed over the one
``sgl_kernel/`` folder, the later install's ``__init__.py`` is the one there, and a loader
module the other left beside it is never run.

The capability is the one fact the files cannot give: the check's ``--gpu-capability``
sets it; without it, every branch the chain can take is judged and the line says so.
"""

from __future__ import annotations

import os

from moonpin.preflight.extensions import astread
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from collections.abc import Iterator
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["CHOICES", "DISTRIBUTIONS", "IMPLICIT", "IMPORT", "pick", "repair"]

IMPORT = "sgl_kernel"
CHOICES: dict[str, tuple[str, ...]] = {}
IMPLICIT = True
DISTRIBUTIONS = ("sglang-kernel", "sgl-kernel")
_STEM = "common_ops"


def _branch_value(body: list[ast.stmt], var: str, cc: str) -> Any:
    """What a branch assigns to ``var``: a string, ("f", head) for ``f"{head}{cc}"``."""
    import ast

    for node in body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == var):
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                return v.value
            for head, names, joined in astread.fstring_heads(v):
                if joined is v and names == [cc]:
                    return ["f", head]
    return None


def _chain(fn: ast.FunctionDef, var: str) -> tuple[str, list[Any]] | None:
    """The ``if``/``elif`` chain assigning ``var``: (the capability's name, branches as
    (test, value)): test ``["eq", N]``, ``["gpu"]`` (``is not None``), ``["else"]``."""
    import ast

    for node in ast.walk(fn):
        if not isinstance(node, ast.If):
            continue
        branches: list[Any] | None = []
        cc: str | None = None
        cur = node
        while branches is not None:
            t = cur.test
            if not (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
                    and len(t.ops) == 1 and isinstance(t.comparators[0], ast.Constant)
                    and t.left.id == (cc or t.left.id)):
                branches = None
                break
            cc = t.left.id
            c = t.comparators[0].value
            if isinstance(t.ops[0], ast.Eq) and isinstance(c, int):
                test: list[Any] = ["eq", c]
            elif isinstance(t.ops[0], ast.IsNot) and c is None:
                test = ["gpu"]
            else:
                branches = None
                break
            branches.append([test, _branch_value(cur.body, var, cc)])
            if len(cur.orelse) == 1 and isinstance(cur.orelse[0], ast.If):
                cur = cur.orelse[0]
                continue
            if cur.orelse:
                branches.append([["else"], _branch_value(cur.orelse, var, cc)])
            break
        if branches and cc is not None and all(b[1] is not None for b in branches):
            return cc, branches
    return None


def _read(path: str, within: Confined, name: str | None = None) -> dict[str, Any] | None:
    """The loader function's reading (the one called ``name``; None: the first of the
    file's functions with the shape): the capability chain of the sub-folder, and the globs
    it tries (``[sub-folder variable or None, pattern]`` in order)."""
    import ast

    tree = astread.parse(path, within)
    if tree is None:
        return None
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or (name is not None and fn.name != name):
            continue
        consts = [n.value for n in ast.walk(fn) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and n.value.startswith(_STEM + ".")]
        if not consts:
            continue
        var = None  # the sub-folder variable: a Name joined before the pattern
        for node in ast.walk(fn):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                    and isinstance(node.right, ast.Constant) and node.right.value in consts
                    and isinstance(node.left, ast.BinOp)
                    and isinstance(node.left.right, ast.Name)):
                var = node.left.right.id
        chain = _chain(fn, var) if var else None
        if chain is None:
            continue
        return {"cc": chain[0], "branches": chain[1], "patterns": consts,
                "import_fallback": any(isinstance(n, ast.Import) and any(
                    a.name == _STEM for a in n.names) for n in ast.walk(fn))}
    return {}


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements a module's import runs, in source order: into ``if``/``try``/
    ``with`` bodies (every branch), never into a function or class body."""
    import ast

    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.For, ast.While)):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse,
                         stmt.finalbody):
                yield from _top_level(part)
        elif isinstance(stmt, ast.With):
            yield from _top_level(stmt.body)


def _entry(path: str, within: Confined, package: str) -> dict[str, Any] | None:
    """What the package's ``__init__.py`` does, in order, that may get ``common_ops``:
    ``["import", line]`` (a plain import of the sub-module) or ``["call", module, function,
    line]`` (a call at top level of a function imported from the sibling ``module``, or
    defined in the file itself: ``module`` None)."""
    import ast

    tree = astread.parse(path, within)
    if tree is None:
        return None
    steps: list[list[Any]] = []
    bound: dict[str, tuple[str | None, str]] = {}  # local name -> (sibling module, name)
    for stmt in _top_level(tree.body):
        if isinstance(stmt, ast.FunctionDef):
            bound[stmt.name] = (None, stmt.name)
        elif isinstance(stmt, ast.ImportFrom):
            mod = stmt.module or ""
            if stmt.level == 1:
                mod = f"{package}.{mod}" if mod else package
            elif stmt.level:
                continue
            for a in stmt.names:
                if mod == package and a.name == _STEM:
                    steps.append(["import", stmt.lineno])
                elif mod.startswith(package + ".") and "." not in mod[len(package) + 1:]:
                    bound[a.asname or a.name] = (mod[len(package) + 1:], a.name)
        elif isinstance(stmt, ast.Import):
            if any(a.name == f"{package}.{_STEM}" for a in stmt.names):
                steps.append(["import", stmt.lineno])
        else:
            for node in ast.walk(stmt):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in bound):
                    mod_name, fn = bound[node.func.id]
                    steps.append(["call", mod_name, fn, node.lineno])
    return {"steps": steps}


def _files(folder: str, pattern: str, shut: list[str] | None = None) -> list[str]:
    """``glob(folder/pattern)`` (a ``stem.*`` pattern), compiled files first as the loader
    orders them (any name holding ``.so``); a folder this process may not list is added to
    ``shut`` (glob finds nothing in it, as for the worker run as this user)."""
    import errno

    stem = pattern.rstrip("*")
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(stem))
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM) and shut is not None:
            shut.append(folder)
        return []
    files = [os.path.join(folder, n) for n in names]
    return [f for f in files if ".so" in f] + [f for f in files if ".so" not in f]


def _sub(value: Any, cc: int | None) -> str:
    return value if isinstance(value, str) else f"{value[1]}{cc}"


def _test(t: list[Any]) -> str:
    if t[0] == "eq":
        return f"capability {t[1] // 10}.{t[1] % 10}"
    return "any GPU" if t[0] == "gpu" else "no GPU"


def _branch(branches: list[Any], cc: int | None) -> Any:
    for test, value in branches:
        if (test[0] == "eq" and cc == test[1]) or (test[0] == "gpu" and cc is not None) \
                or test[0] == "else":
            return value
    return None


def _loader(facts: Facts, found: Found) -> tuple[dict[str, Any] | None, str, str | None]:
    """The loader ``import sgl_kernel`` runs: (its reading, the file it is in, why none
    could be read). A reading ``{"plain": path-or-None}`` is the plain import of the
    sub-module (the file the importer finds; None: none)."""
    init = os.path.join(found.folder, "__init__.py")
    package = os.path.basename(found.folder)
    entry = astread.reading("sgl-kernel-init", init,
                            lambda: _entry(init, facts.within, package), facts.within)
    if entry is None:
        return None, init, f"{init} cannot be read"
    for step in entry.get("steps", ()):
        if step[0] == "import":
            return {"plain": facts.module_file(found.folder, _STEM)}, init, None
        _, mod_name, fn, _line = step
        path = facts.module_file(found.folder, mod_name) if mod_name else init
        if path is None and mod_name is not None:
            path = os.path.join(found.folder, mod_name + ".py")
            if not os.path.lexists(path):  # the `from … import` before the call raises
                return {"missing": f"{os.path.basename(found.folder)}.{mod_name}"}, init, None
        if path is None or not path.endswith(".py"):  # a FIFO too: parse says what it is
            continue
        got = astread.reading(
            f"sgl-kernel-loader\0{fn}", path,
            lambda p=path, f=fn: _read(p, facts.within, f),  # type: ignore[misc]
            facts.within)
        if got:
            return got, path, None
    return None, init, (f"{init}: no common_ops loader this check reads (neither a loader "
                        "function it calls nor an import of common_ops)")


def _plain(facts: Facts, found: Found, path: str | None, where: str) -> Pick:
    """The plain import of ``common_ops`` from the package folder."""
    package = os.path.basename(found.folder)
    note = (f"{os.path.basename(where)} imports {package}.{_STEM} plainly: no choice by "
            "GPU")
    if path is None:
        return Pick([Choice(raises=f"ImportError: cannot import name '{_STEM}' from "
                            f"'{package}' (no {_STEM} module in {found.folder})")],
                    notes=[note], **_both(facts))
    if not any(path.endswith(s) for s in facts.suffixes):
        return Pick(unread=f"{path}: {package}.{_STEM} is not a compiled module",
                    notes=[note])
    return Pick([Choice([path])], notes=[note], **_both(facts))


def pick(facts: Facts, found: Found) -> Pick:
    reading, where, why = _loader(facts, found)
    if reading is None:
        return Pick(unread=why or f"{where}: no common_ops loader this check reads")
    if "plain" in reading:
        return _plain(facts, found, reading["plain"], where)
    if "missing" in reading:
        return Pick([Choice(raises=f"ModuleNotFoundError: No module named "
                            f"'{reading['missing']}'")], **_both(facts))
    branches = reading["branches"]
    if facts.gpu is not None or not facts.gpu_present:
        ccs: list[int | None] = [facts.gpu if facts.gpu_present else None]
    else:  # every branch a GPU of unknown capability can take
        ccs = [t[1] for t, _ in branches if t[0] == "eq"]
        other = next((c for c in range(10, 200) if c not in ccs), None)
        ccs.append(other)
    choices = []
    said: dict[str, list[str]] = {}
    shut: list[str] = []
    for cc in ccs:
        value = _branch(branches, cc)
        if value is None:
            continue
        sub = _sub(value, cc)
        files: list[str] = []
        for pattern in reading["patterns"]:
            files += [f for f in _files(os.path.join(found.folder, sub), pattern, shut)
                      if f not in files]
        for pattern in reading["patterns"]:
            files += [f for f in _files(found.folder, pattern, shut) if f not in files]
        when = (f"GPU capability {cc // 10}.{cc % 10}" if cc is not None and (
            facts.gpu is not None or any(t == ["eq", cc] for t, _ in branches))
            else "another GPU capability" if cc is not None else "no usable GPU")
        label = f"{sub}/" if files and os.path.dirname(files[0]).endswith(sub) else "./"
        said.setdefault(label, []).append(when)
        choices.append(Choice(files, when=when, raises=None if files else (
            f"ImportError: [sgl_kernel] CRITICAL: Could not load any {_STEM} library (no "
            f"{sub}/{_STEM}.* nor {_STEM}.* in {found.folder}"
            + (f"; {', '.join(dict.fromkeys(shut))}: not readable by this user, its glob "
               "finds nothing there" if shut else "") + ")")))
    if facts.gpu is None and facts.gpu_present:
        tests = "; ".join(f"{_test(t)} -> {v if isinstance(v, str) else v[1] + '<NN>'}"
                          for t, v in branches)
        note = (f"GPU capability not known here ({facts.gpu_said}): every choice of "
                f"{os.path.basename(where)} judged ({tests}); --gpu-capability picks one")
    else:
        note = f"judged for {facts.gpu_said}"
    both = _both(facts)
    owner = next((d for d in DISTRIBUTIONS if d in facts.dists), None)
    if shut and owner and "fix" not in both:  # pip puts the folder back as its wheel has it
        both["fix"] = (f"pip install --force-reinstall --no-deps "
                       f"'{owner}=={facts.dists[owner].version}' (its folders as the wheel "
                       "makes them)")
    return Pick(choices, notes=[note], **both)


def _both(facts: Facts) -> dict[str, Any]:
    """A :class:`Pick`'s warning and fix when more than one of :data:`DISTRIBUTIONS` is
    installed: one folder, each file the later install's (empty: one or none)."""
    installed = [d for d in DISTRIBUTIONS if d in facts.dists]
    if len(installed) < 2:
        return {}
    said = " and ".join(f"{d} {facts.dists[d].version}" for d in installed)
    return {"warnings": [f"{said} are both installed over the one {IMPORT}/ folder: each "
                         "file is the later install's, and uninstalling either deletes "
                         "files the other needs"],
            "fix": repair(facts, None, None)}


def repair(facts: Facts, pick: Pick | None, choice: Choice | None) -> str | None:
    """The torch the installed kernel pins (its METADATA), with SGLang's pin of the kernel
    when it is another release. When the installed distribution is not the one SGLang
    pins, or both are installed over the one folder, every installed one is uninstalled
    first (an uninstall deletes the files its RECORD lists, shared ones too) and SGLang's
    pinned release installed alone."""
    installed = [d for d in DISTRIBUTIONS if d in facts.dists]
    if not installed:
        return None
    dist = installed[0]
    pinned = next(((d, v) for d in DISTRIBUTIONS if (v := facts.pin("sglang", d))), None)
    if pinned is None and len(installed) > 1:
        pinned = (dist, facts.dists[dist].version)
    from moonpin.preflight.judge.fixes import torch_req

    sglang_torch = facts.pin("sglang", "torch")
    if pinned is not None and installed != [pinned[0]]:
        # SGLang's kernel is built for SGLang's torch: another torch here goes with it
        torch = (f" '{torch_req(sglang_torch)}'" if facts.pin("sglang", pinned[0])
                 and sglang_torch and sglang_torch != facts.torch_release() else "")
        return (f"pip uninstall -y {' '.join(installed)} && pip install "
                f"'{pinned[0]}=={pinned[1]}'{torch} (" + (
                    f"the installed SGLang's pin{'s' if torch else ''}"
                    if facts.pin("sglang", pinned[0]) else "one distribution alone") + ")")
    own = facts.pin(dist, "torch")
    sglang_kernel = facts.pin("sglang", dist)
    if sglang_kernel and sglang_kernel != facts.dists[dist].version and sglang_torch:
        return (f"pip install '{dist}=={sglang_kernel}' '{torch_req(sglang_torch)}' (the "
                "installed SGLang's pins)")
    if own and own != facts.torch_release():
        return (f"pip install '{torch_req(own)}' ({dist} {facts.dists[dist].version} pins it: "
                "its build binds that torch's C++ symbols)")
    if sglang_kernel and sglang_torch:
        return (f"pip install --force-reinstall '{dist}=={sglang_kernel}' "
                f"'{torch_req(sglang_torch)}' (the installed SGLang's pins)")
    return None
