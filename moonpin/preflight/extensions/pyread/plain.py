"""A package no loader rule reads, followed as a plain import (:func:`plain_import`): the
compiled modules ``import X`` reaches through the package's own modules, the functions and
classes their top-level code calls, and what it cannot follow said (a module imported by a
computed name, a ``ctypes`` load). Each file's facts are kept in the file-facts memo under its
stamp (:func:`moonpin.preflight.extensions.astread.reading`), so a warm start parses nothing.
``ast`` is imported only where a file is parsed."""

from __future__ import annotations

import os

from moonpin.preflight.extensions.astread import attr_path, parse, reading

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from collections.abc import Sequence
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["PLAIN_ASSUMED", "Build", "Missing", "Reached", "gpu_condition", "other_builds",
           "plain_import"]

#: the assumption every verdict of :func:`plain_import` makes, said on its line
PLAIN_ASSUMED = "read as a plain import; its __init__ code beyond imports not run"
#: the walk's bound on the package's files read (a package of thousands of modules imports
#: few of them at its top level; past this, what is left is said not followed)
_MAX_FILES = 200
#: calls that load what the walk cannot name, by the call's dotted name's tail
_DYNAMIC = (
    ("import_module", "imports a module by a computed name (importlib)"),
    ("__import__", "imports a module by a computed name (__import__)"),
    ("CDLL", "loads a library with ctypes"),
    ("PyDLL", "loads a library with ctypes"),
    ("LoadLibrary", "loads a library with ctypes"),
    ("ops.load_library", "loads a library with torch.ops.load_library"),
    ("classes.load_library", "loads a library with torch.classes.load_library"),
    ("cpp_extension.load", "compiles and loads a build at import (torch.utils.cpp_extension)"),
    ("cpp_extension.load_inline", "compiles and loads a build at import "
                                  "(torch.utils.cpp_extension)"),
    ("spec_from_file_location", "loads a module from a computed file (importlib.util)"),
    ("load_dynamic", "loads a build from a computed file (imp.load_dynamic)"),
    ("ExtensionFileLoader", "loads a build from a computed file (importlib.machinery)"),
)


class Build:
    """A compiled module a plain import reaches: its dotted ``module`` name, its ``file``,
    where it is imported (``by``: ``pkg/__init__.py:12``) and the ``except`` classes around
    that import (``caught``; ``"*"``: a bare ``except``; ``"?"``: under an ``if`` or a loop,
    so it may not run)."""

    __slots__ = ("by", "caught", "file", "module")

    def __init__(self, module: str, file: str, by: str, caught: Sequence[str]) -> None:
        self.module = module
        self.file = file
        self.by = by
        self.caught = tuple(caught)


class Missing:
    """A module of the package a plain import reaches that the importer does not find: its
    ``module``, ``by`` and ``caught`` as :class:`Build`'s, and ``other``: the files of that
    name the importer passes over (a build for another Python: ``_C.cpython-312-…so`` where
    the interpreter is 3.11)."""

    __slots__ = ("by", "caught", "module", "other")

    def __init__(self, module: str, by: str, caught: Sequence[str],
                 other: Sequence[str]) -> None:
        self.module = module
        self.by = by
        self.caught = tuple(caught)
        self.other = tuple(other)


class Reached:
    """What the plain import of one package reaches (:func:`plain_import`): ``builds`` (in
    the order met), ``missing`` modules, ``dynamic`` loads it cannot follow (``file:line
    what``), the Python ``files`` it runs, whether it imports ``torch``, ``others``: the
    other top-level packages it imports (not the standard library's), each with where it is
    first imported and that import's ``caught``, ``gpu_gates``: where the code it runs
    raises when no GPU is visible (``(file:line, the condition's call, certain)``; certain:
    not under another condition, :func:`gpu_condition`), and ``unread``: why it was not
    followed to its end (None: it was)."""

    __slots__ = ("builds", "dynamic", "files", "gpu_gates", "missing", "others", "torch",
                 "unread")

    def __init__(self) -> None:
        self.gpu_gates: list[tuple[str, str, bool]] = []
        self.builds: list[Build] = []
        self.missing: list[Missing] = []
        self.dynamic: list[str] = []
        self.files: list[str] = []
        self.others: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.torch = False
        self.unread: str | None = None


def _type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:`` (a body that never runs)."""
    return (attr_path(test) or "").rpartition(".")[2] == "TYPE_CHECKING"


def _bound(tree: ast.Module) -> list[str]:
    """The names a module's top level binds (its attributes ``from P import X`` may take),
    but not those ``from . import X`` binds: that is the submodule itself; ``"*"`` among
    them when any name may be bound (a ``from M import *``, a module ``__getattr__``)."""
    import ast

    bound: set[str] = set()
    todo = list(tree.body)
    while todo:  # statements only (the top level, into if/try/with/loop bodies)
        stmt = todo.pop()
        if (isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names)) or (
                isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__"):
            bound.add("*")
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
        elif isinstance(stmt, ast.Import):
            bound.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and (stmt.module or not stmt.level):
            bound.update(a.asname or a.name for a in stmt.names)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                bound.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo += getattr(stmt, field, None) or []
    return sorted(bound)


#: the calls whose answer says whether torch sees a usable GPU (by their dotted name's tail)
_GPU_CALLS = ("cuda.is_available", "cuda.device_count")


def gpu_condition(stmt: ast.stmt) -> tuple[int, str] | None:
    """(the line of the ``raise``, the call) when ``stmt`` raises where torch sees no GPU:
    ``if not torch.cuda.is_available(): raise …`` (or a comparison of
    ``torch.cuda.device_count()``: ``== 0``, ``< 1``), ``if torch.cuda.is_available(): …
    else: raise …``, ``assert torch.cuda.device_count() > 0``; None otherwise (read with
    ``ast``, nothing run)."""
    import ast

    test = stmt.test if isinstance(stmt, (ast.If, ast.Assert)) else None
    if test is None:
        return None
    call = next((attr_path(n.func) for n in ast.walk(test) if isinstance(n, ast.Call)
                 and (attr_path(n.func) or "").endswith(_GPU_CALLS)), None)
    if call is None:
        return None
    if isinstance(stmt, ast.Assert):
        return stmt.lineno, f"{call}()"
    negated = (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)) or (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
            test.comparators[0], ast.Constant) and (
            (isinstance(test.ops[0], (ast.Eq, ast.LtE)) and test.comparators[0].value == 0)
            or (isinstance(test.ops[0], ast.Lt) and test.comparators[0].value == 1)))
    assert isinstance(stmt, ast.If)
    branch = stmt.body if negated else stmt.orelse if isinstance(test, ast.Call) else []
    raised = next((b for b in branch if isinstance(b, ast.Raise)), None)
    return (raised.lineno, f"{call}()") if raised is not None else None


def _may_leave(stmt: ast.stmt) -> bool:
    """Whether a function's code may return (or raise) in ``stmt`` or under it, so that
    what follows it may not run (a function's own nested definitions aside)."""
    import ast

    if isinstance(stmt, (ast.Return, ast.Raise)):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    todo = list(ast.iter_child_nodes(stmt))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Return, ast.Raise)):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                              ast.Lambda, ast.expr)):
            todo.extend(ast.iter_child_nodes(n))
    return False


def _plain_facts(path: str, within: Confined, entry: str = "") -> dict[str, Any] | None:
    """One file's facts for :func:`plain_import`, plain values (kept in the file-facts
    memo): ``imports`` (``[module, level, names, line, caught]``) and ``dynamic``
    (``[line, what]``) of the code its import runs, ``calls`` (``[module, level, name,
    line, caught]``: the functions and classes imported from another module that code
    calls), ``gates`` (``[line, call, caught]``: where it raises when torch sees no GPU,
    :func:`gpu_condition`), and ``bound`` (:func:`_bound`). ``entry``: the code of that
    function instead (of that class, its ``__init__``), as another module's call runs it."""
    import ast

    from moonpin.preflight.pyimport.atimport import caught_names
    from moonpin.readers.pyast.astname import unparse

    tree = parse(path, within)
    if tree is None:
        return None
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef))}
    froms: dict[str, list[Any]] = {}  # name -> [module, level, its name there]
    imports: list[list[Any]] = []
    dynamic: list[list[Any]] = []
    xcalls: list[list[Any]] = []
    gates: list[list[Any]] = []
    called: list[str] = []

    def calls(node: ast.AST, caught: list[str]) -> None:
        for n in ast.walk(node):
            if not isinstance(n, ast.Call):
                continue
            if isinstance(n.func, ast.Name) and n.func.id in defs:
                called.append(n.func.id)
            elif isinstance(n.func, ast.Name) and n.func.id in froms:
                xcalls.append([*froms[n.func.id], n.lineno, caught])
            dotted = attr_path(n.func) or ""
            what = next((w for tail, w in _DYNAMIC
                         if dotted == tail or dotted.endswith("." + tail)), None)
            if what is None:
                continue
            first = n.args[0] if n.args else None
            if (dotted.rpartition(".")[2] == "import_module" and isinstance(first, ast.Constant)
                    and isinstance(first.value, str) and not first.value.startswith(".")):
                imports.append([first.value, 0, [], n.lineno, caught])  # a constant name
                continue
            shown = unparse(first)[:80] if first is not None else ""
            dynamic.append([n.lineno, what + (f": {shown}" if shown else "")])

    def walk(body: list[ast.stmt], caught: list[str]) -> None:
        for stmt in body:
            gate = gpu_condition(stmt)
            if gate is not None:
                gates.append([gate[0], gate[1], caught])
            if isinstance(stmt, ast.Import):
                imports.extend([a.name, 0, [], stmt.lineno, caught] for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                imports.append([stmt.module or "", stmt.level, [a.name for a in stmt.names],
                                stmt.lineno, caught])
                froms.update({(a.asname or a.name): [stmt.module or "", stmt.level, a.name]
                              for a in stmt.names if a.name != "*"})
            elif isinstance(stmt, ast.Try):
                walk(stmt.body, caught + caught_names(stmt.handlers))
                for part in (*(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                    walk(part, caught)
            elif isinstance(stmt, ast.If):  # "?": what runs under it may not run
                calls(stmt.test, caught)
                if not _type_checking(stmt.test):
                    walk(stmt.body, [*caught, "?"])
                walk(stmt.orelse, [*caught, "?"])
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                calls(stmt.iter, caught)
                walk(stmt.body, [*caught, "?"])
                walk(stmt.orelse, [*caught, "?"])
            elif isinstance(stmt, ast.While):
                calls(stmt.test, caught)
                walk(stmt.body, [*caught, "?"])
                walk(stmt.orelse, [*caught, "?"])
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    calls(item.context_expr, caught)
                walk(stmt.body, caught)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in stmt.decorator_list:
                    calls(d, caught)
            elif isinstance(stmt, ast.ClassDef):
                walk(stmt.body, caught)  # a class body runs at import
            else:
                calls(stmt, caught)
            if "?" not in caught and body is not tree.body and _may_leave(stmt):
                caught = [*caught, "?"]  # after a possible return: what follows may not run

    if not entry:
        walk(tree.body, [])
    elif entry in defs:
        called.append(entry)
    else:  # a class: its body ran at the module's import; a call runs its __init__
        init = next((m for c in tree.body if isinstance(c, ast.ClassDef) and c.name == entry
                     for m in c.body if isinstance(m, ast.FunctionDef)
                     and m.name == "__init__"), None)
        if init is not None:
            walk(init.body, [])
    done: set[str] = set()
    while called:  # the file's functions that code calls run at import too
        name = called.pop(0)
        if name not in done:
            done.add(name)
            walk(defs[name].body, [])
    return {"imports": imports, "dynamic": dynamic, "calls": xcalls, "gates": gates,
            "bound": _bound(tree)}


def other_builds(folder: str, stem: str, suffixes: Sequence[str]) -> list[str]:
    """Compiled files named ``stem`` in ``folder`` that the importer passes over: built for
    another Python (``stem.cpython-312-x86_64-linux-gnu.so`` where it takes ``-311``)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(stem + ".") and n.endswith(".so")
                  and not any(n == stem + s for s in suffixes))


def plain_import(found: Found, name: str, facts: Facts) -> Reached:
    """The plain import of the top-level ``name`` the importer found at ``found``, followed:
    which compiled modules it reaches (for a package no loader rule reads).

    Most torch extensions load in the plain way: ``import X`` runs ``X/__init__.py``, whose
    imports reach compiled modules (``from . import _C``, ``from .x_cpp import f``,
    ``import X.ops``) that CPython's importer finds by the interpreter's extension suffixes
    and ld.so loads into the process that holds torch. The walk finds each module as the
    importer does (:meth:`~moonpin.preflight.extensions.seam.Facts.module_file`: a package,
    then each extension suffix, then ``.py``, ``.pyc``), through the package's own modules:
    the top level of each file and the functions of the file its top level calls (into
    ``if``/``try``/``with``/loop and class bodies; an ``if TYPE_CHECKING:`` body never runs).
    ``from P import X`` takes ``X`` as a submodule when a file of that name is there (CPython
    imports it when ``P`` has no attribute ``X``; an attribute of the same name is rare),
    else as an attribute when ``P``'s top level binds it. Judging what it reached (the ld.so
    model, the torch process) is the caller's (:mod:`moonpin.preflight.extensions.verdict`).

    What it cannot follow it says rather than guesses (:attr:`Reached.dynamic`): a module
    imported by a computed name (``importlib.import_module(name)``, ``__import__``), a library
    loaded by ``ctypes`` or ``torch.ops.load_library``, a build compiled at import
    (``torch.utils.cpp_extension.load``). Imports of other top-level packages are not followed
    (their import is their own), except that importing torch is noted: the builds are then
    loaded into the process ``import torch`` built. Raises
    :class:`~moonpin.preflight.extensions.astread.Unrunnable` when a file the import certainly
    runs cannot be run (the caller says so, as for a rule's loader)."""
    import sys

    # the standard library's names (this interpreter's: the target's differ little)
    stdlib = frozenset({*getattr(sys, "stdlib_module_names", ()), "__future__"})
    out = Reached()
    shown = os.path.dirname(found.folder)
    suffixes = facts.suffixes
    if found.module:
        if not found.folder.endswith(".py"):  # the module is itself a build
            out.builds.append(Build(name, found.folder, f"import {name}", ()))
            return out
        queue: list[tuple[str, str, bool, str, tuple[str, ...]]] = [
            (found.folder, name, False, "", ())]
    else:
        queue = [(os.path.join(found.folder, "__init__.py"), name, True, "", ())]
    known: dict[str, str | None] = {name: queue[0][0]}  # module -> its file (None: namespace)
    facts_of: dict[str, dict[str, Any]] = {}

    def find(module: str, by: str, caught: Sequence[str], attr_ok: bool) -> None:
        """``module`` (of the package) imported: found as the importer finds it."""
        if module in known or found.module:
            return
        parent, _, stem = module.rpartition(".")
        folder = os.path.join(found.folder, *parent.split(".")[1:])
        path = facts.module_file(folder, stem) if os.path.isdir(folder) else None
        if path is None and os.path.isdir(os.path.join(folder, stem)):
            known[module] = None  # a namespace portion: nothing runs
            return
        if path is None and attr_ok:  # `from P import X`: X may be an attribute of P
            bound = facts_of.get(parent, {}).get("bound", ("*",))
            if stem in bound or "*" in bound:
                return  # bound, or may be, or P not read yet: not known to be missing
        known[module] = path
        if path is None:
            out.missing.append(Missing(module, by, caught, other_builds(folder, stem, suffixes)))
        elif path.endswith(".py"):
            queue.append((path, module, path.endswith("__init__.py"), "", tuple(caught)))
        elif not path.endswith(".pyc"):
            out.builds.append(Build(module, path, by, caught))

    def absolute(mod: str, level: int, base: str) -> str | None:
        if not level:
            return mod
        parts = base.split(".") if base else []
        head = parts[:len(parts) - (level - 1)]
        return ".".join([*head, mod] if mod else head) if head else None

    walked: set[tuple[str, str]] = set()
    while queue:
        path, module, package, entry, around = queue.pop(0)  # around: the caller's caught
        if (path, entry) in walked:
            continue
        walked.add((path, entry))
        if len(walked) > _MAX_FILES:
            out.unread = (f"the walk stops after {_MAX_FILES} of the package's files and "
                          f"functions; {module} and what it imports not followed")
            break
        if path not in out.files:
            out.files.append(path)
        got = reading("plain2-" + entry if entry else "plain2", path,
                      lambda p=path, e=entry: _plain_facts(p, facts.within, e),  # type: ignore[misc]
                      facts.within)
        rel = os.path.relpath(path, shown)
        if got is None:
            out.dynamic.append(f"{rel}: not read as Python here")
            continue
        if not entry:
            facts_of[module] = got
        base = module if package else module.rpartition(".")[0]
        out.dynamic += [f"{rel}:{line} {what}" for line, what in got.get("dynamic", ())]
        for line, call, caught in got.get("gates", ()):
            names = {*around, *caught} - {"?"}
            if not names:  # no except around it (one that may catch it: not claimed)
                out.gpu_gates.append((f"{rel}:{line}", str(call), "?" not in {*around,
                                                                             *caught}))
        for mod, level, names, line, caught in got.get("imports", ()):
            by = f"{rel}:{line}"
            mod = absolute(str(mod), int(level), base)
            if mod is None:
                continue  # past the top package: the import raises; not read here
            first = mod.split(".")[0]
            if first == "torch":
                out.torch = True
            if first != name:
                if first not in stdlib and first not in out.others:
                    out.others[first] = (by, tuple(caught))
                continue
            parts = mod.split(".")
            for i in range(2, len(parts) + 1):  # each package on the way, then the module
                find(".".join(parts[:i]), by, caught, attr_ok=False)
            f = known.get(mod, "")
            if f is None or mod == name or str(f).endswith("__init__.py"):  # a package
                for n in names:
                    if n != "*":
                        find(f"{mod}.{n}", by, caught, attr_ok=True)
        for mod, level, fn, _line, caught in got.get("calls", ()):  # another module's code
            mod = absolute(str(mod), int(level), base)
            target = known.get(mod) if mod is not None and mod.split(".")[0] == name else None
            if mod is not None and target is not None and target.endswith(".py"):
                queue.append((target, mod, target.endswith("__init__.py"), str(fn),
                              (*around, *caught)))
    return out
