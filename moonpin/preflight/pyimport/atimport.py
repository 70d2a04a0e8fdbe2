"""The code an import runs by calling into other modules, followed from the files with
``ast`` (never run): which standard-library modules it certainly imports on the way.

``import X`` runs X's top level, and that code calls: a decorator applied at import is a call
of the decorator (``@torch.compile(dynamic=True)`` runs ``torch.compile``'s body, and the
function it returns runs it again), and so are module-level calls, class bodies' and default
values' calls. A function reached by name from an imported module (``torch.compile``,
``from x import f; f()``, ``@f``, ``@f(...)``) runs its body, whose imports import modules
(each running its own top level, and so on) and whose calls run more functions. The real
import of ``deep_ep`` fails on a missing ``libbz2`` that way: ``deep_ep/utils/math.py``'s
``@torch.compile`` → ``torch._dynamo.optimize`` → ``get_compiler_fn``'s ``from
.repro.after_dynamo import …`` → … → ``networkx/utils/decorators.py``'s ``import bz2``.

What is followed (:func:`follow`), breadth-first from the modules given:

* a module's top level: its imports (each package on the way, then the module), its calls
  (into ``if``/``try``/``with``/loop and class bodies; an ``if TYPE_CHECKING:`` body never
  runs), its decorators and default values;
* a call whose callee is a name the module (or the calling function) binds: a function it
  defines, or one reached through its imports (``a.b.f`` finds the longest module prefix,
  then ``f`` in that module, through its re-exports); the function's body is then walked as
  a top level is (its own nested functions' bodies only when they are called by name);
* as CPython runs it: the code after an ``if`` that may ``return`` is taken to run (the
  evaluator's rule, :mod:`moonpin.preflight.pyimport.pyeval`), what is under an ``if``, a
  loop or an ``except`` may not; an import under a ``try`` whose handlers catch
  ``ImportError`` cannot fail the import (the same honouring as the import chain's); what
  may not run, or whose failure is caught, is not followed further (nothing under it can
  fail the import).

Only certain, uncaught imports of the standard library are handed to the caller (its loader
model loads their extension modules: :meth:`moonpin.preflight.pyimport.pyrun.Chain.at_import`).
Calls through values (``obj.method()``, a class's methods, a callable returned by a call)
are not followed, and neither is the standard library's own code. Bounded by a
:class:`Bounds` value (:data:`MAX_MODULES` modules and :data:`MAX_CALLS` functions unless one
is handed down); past a bound the walk says so, and what it read is no verdict.
Each file's facts are kept in the file-facts memo under its stamp. Only ``os`` at import."""

from __future__ import annotations

import os
import sys

from moonpin.kb.cache import facts_memo

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from collections.abc import Callable, Sequence
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.pyimport.metapath import Importer

__all__ = ["MAX_CALLS", "MAX_MODULES", "Bounds", "caught_names", "dotted", "follow",
           "function_facts", "module_facts"]

#: the modules whose top level a walk reads at most (torch's ``_dynamo`` with what it imports
#: is about 1,300)
MAX_MODULES = 4000
#: the functions a walk follows at most
MAX_CALLS = 4000
_CAP_SOURCE = 16 << 20


class Bounds:
    """How far a walk goes: the modules whose top level it reads at most (``modules``) and
    the functions it follows at most (``calls``); handed down as a value (a check's
    :attr:`moonpin.preflight.env.context.Context.bounds`), its ``repr`` part of what a
    remembered answer is keyed by."""

    __slots__ = ("calls", "modules")

    def __init__(self, modules: int = MAX_MODULES, calls: int = MAX_CALLS) -> None:
        self.modules = modules
        self.calls = calls

    def __repr__(self) -> str:
        return f"Bounds(modules={self.modules}, calls={self.calls})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bounds) and (self.modules, self.calls) == (
            other.modules, other.calls)

    def __hash__(self) -> int:
        return hash((self.modules, self.calls))

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
#: what this process read of each file already, by its stamp
_READ: dict[tuple[str, str, int, int, str | None], Any] = {}


def dotted(node: ast.AST) -> str | None:
    """``torch.version.cuda`` for that attribute chain (None: not a plain chain)."""
    import ast

    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def caught_names(handlers: list[ast.ExceptHandler]) -> list[str]:
    """The exception names ``except`` clauses name (the last part of a dotted one; ``"*"``:
    a bare ``except``), the one reading of them for every ``ast`` walk of imports."""
    import ast

    names: list[str] = []
    for h in handlers:
        if h.type is None:
            names.append("*")
        for n in ast.walk(h.type) if h.type is not None else ():
            if isinstance(n, (ast.Name, ast.Attribute)):
                names.append(n.id if isinstance(n, ast.Name) else n.attr)
    return names


def _guard(guard: str, *more: str) -> str:
    return ",".join(sorted({*filter(None, guard.split(",")), *more}))


class _Reader:
    """One file's facts: ``top`` (what its top level runs), ``defs`` (each function it
    defines at its top level: what its body runs) and ``bind`` (what each top-level name is:
    ``["m", module]``, ``["f", module, level, name]``, ``["d"]`` a function, ``["o"]``
    anything else). An item is ``["i", module, level, names, line, guard]`` (an import) or
    ``["c", dotted callee, line, guard]`` (a call); ``guard``: the exception names caught
    around it, ``?`` among them when it may not run."""

    def __init__(self) -> None:
        self.defs: dict[str, list[int]] = {}
        #: the names assigned in what was read (a function's own locals)
        self.stores: set[str] = set()

    def body(self, stmts: list[ast.stmt], guard: str, out: list[Any],
             bind: dict[str, list[Any]], keep_defs: bool) -> None:
        import ast

        for stmt in stmts:
            if isinstance(stmt, ast.Import):
                for a in stmt.names:
                    out.append(["i", a.name, 0, [], stmt.lineno, guard])
                    if a.asname:
                        bind[a.asname] = ["m", a.name]
                    else:
                        top = a.name.partition(".")[0]
                        bind[top] = ["m", top]
            elif isinstance(stmt, ast.ImportFrom):
                names = [a.name for a in stmt.names]
                out.append(["i", stmt.module or "", stmt.level, names, stmt.lineno, guard])
                for a in stmt.names:
                    if a.name != "*":
                        bind[a.asname or a.name] = ["f", stmt.module or "", stmt.level, a.name]
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in stmt.decorator_list:  # applied at definition: a call of each
                    self.calls(d, guard, out)
                    if not isinstance(d, ast.Call) and dotted(d):
                        out.append(["c", dotted(d), d.lineno, guard])
                for dv in [*stmt.args.defaults, *stmt.args.kw_defaults]:
                    if dv is not None:
                        self.calls(dv, guard, out)
                bind[stmt.name] = ["d"] if keep_defs else ["o"]
                if keep_defs:  # its body is read when it is called (:func:`function_facts`)
                    self.defs[stmt.name] = [stmt.lineno, stmt.end_lineno or stmt.lineno]
            elif isinstance(stmt, ast.ClassDef):
                for d in stmt.decorator_list:
                    self.calls(d, guard, out)
                    if not isinstance(d, ast.Call) and dotted(d):
                        out.append(["c", dotted(d), d.lineno, guard])
                for n in [*stmt.bases, *(k.value for k in stmt.keywords)]:
                    self.calls(n, guard, out)
                self.body(stmt.body, guard, out, {}, False)  # a class body runs at once
                bind[stmt.name] = ["o"]
            elif isinstance(stmt, ast.If):
                self.calls(stmt.test, guard, out)
                if (dotted(stmt.test) or "").rpartition(".")[2] != "TYPE_CHECKING":
                    self.body(stmt.body, _guard(guard, "?"), out, bind, keep_defs)
                self.body(stmt.orelse, _guard(guard, "?"), out, bind, keep_defs)
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                t: Any = stmt
                self.body(t.body, _guard(guard, *caught_names(t.handlers)), out, bind, keep_defs)
                for h in t.handlers:
                    self.body(h.body, _guard(guard, "?"), out, bind, keep_defs)
                self.body(t.orelse, guard, out, bind, keep_defs)
                self.body(t.finalbody, guard, out, bind, keep_defs)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                self.calls(stmt.iter if not isinstance(stmt, ast.While) else stmt.test,
                           guard, out)
                if not isinstance(stmt, ast.While):
                    self.calls(stmt.target, guard, out)
                self.body(stmt.body, _guard(guard, "?"), out, bind, keep_defs)
                self.body(stmt.orelse, _guard(guard, "?"), out, bind, keep_defs)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    self.calls(item.context_expr, guard, out)
                    if item.optional_vars is not None:
                        self.calls(item.optional_vars, guard, out)
                self.body(stmt.body, guard, out, bind, keep_defs)
            elif type(stmt).__name__ == "Match":
                m: Any = stmt
                self.calls(m.subject, guard, out)
                for case in m.cases:
                    self.body(case.body, _guard(guard, "?"), out, bind, keep_defs)
            else:
                self.calls(stmt, guard, out)
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    for tgt in targets:
                        for nm in ast.walk(tgt):
                            if isinstance(nm, ast.Name):
                                bind[nm.id] = ["o"]

    def calls(self, node: ast.AST, guard: str, out: list[Any]) -> None:
        """The calls an expression (or a simple statement) makes, in no particular order; a
        lambda's or a nested definition's body is not run by it. The names it assigns are
        kept (:attr:`stores`)."""
        import ast

        todo: list[ast.AST] = [node]
        while todo:
            n = todo.pop()
            if isinstance(n, ast.Call):
                callee = dotted(n.func)
                if callee is not None:
                    out.append(["c", callee, n.lineno, guard])
            elif isinstance(n, ast.Name):
                if isinstance(n.ctx, ast.Store):
                    self.stores.add(n.id)
                continue
            elif isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef,
                                ast.ClassDef, ast.Constant)):
                continue
            todo.extend(ast.iter_child_nodes(n))

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Any]:
        """What calling ``fn`` runs: ``[items, local binds]`` (its parameters and the names
        it assigns are its own, not the module's)."""
        items: list[Any] = []
        local: dict[str, list[Any]] = {}
        self.body(fn.body, "", items, local, False)
        a = fn.args
        for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if p is not None:
                local[p.arg] = ["o"]
        for name in self.stores:  # what it assigns is its own (but what it imports)
            if local.get(name, ["o"])[0] == "o":
                local[name] = ["o"]
        return [items, local]


def _tree(path: str, within: Confined) -> ast.Module | None:
    """The module's syntax tree as its top level runs it, its functions' bodies blanked
    (:func:`moonpin.readers.pyast.toplevel.top_level`)."""
    from moonpin.preflight.access.zipfs import read_source
    from moonpin.readers.pyast.toplevel import top_level

    try:
        data = read_source(path, cap=_CAP_SOURCE, what="Python source", within=within)
        return top_level(data, path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _read(path: str, within: Confined) -> dict[str, Any] | None:
    tree = _tree(path, within)
    if tree is None:
        return None
    r = _Reader()
    top: list[Any] = []
    bind: dict[str, list[Any]] = {}
    try:
        r.body(tree.body, "", top, bind, True)
    except RecursionError:  # nested past the stack: nothing claimed of it
        return None
    return {"top": top, "defs": r.defs, "bind": bind}


def _read_function(path: str, first: int, last: int, within: Confined) -> list[Any] | None:
    """The function defined on lines ``first``..``last`` of ``path`` (a top-level ``def``:
    at column 0), parsed alone, its lines as the file numbers them."""
    import ast

    from moonpin.preflight.access.zipfs import read_source

    try:
        data = read_source(path, cap=_CAP_SOURCE, what="Python source", within=within)
        lines = data.split(b"\n")[first - 1:last]
        head = data.split(b"\n", 2)[:2]  # a coding cookie is on one of the first two lines
        tree = ast.parse(b"\n".join([*(h for h in head if b"coding" in h and h.startswith(
            b"#")), *lines]), path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    fn = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    shift = first - fn.lineno
    for n in ast.walk(fn):
        if hasattr(n, "lineno"):
            n.lineno += shift
    try:
        return _Reader().function(fn)
    except RecursionError:
        return None


def _ok(v: Any) -> bool:
    return v is None or (isinstance(v, dict) and isinstance(v.get("top"), list)
                         and isinstance(v.get("defs"), dict) and isinstance(v.get("bind"), dict))


def _memo(kind: str, path: str, compute: Callable[[], Any], ok: Callable[[Any], bool],
          within: Confined) -> Any:
    """``compute()`` for the file at ``path`` as it is now, through the file-facts memo and
    this process's own copy; None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return compute()  # a module in a zip archive: read, not remembered
    here = (kind, path, st.st_size, st.st_mtime_ns, within.root)
    if here not in _READ:
        try:
            _READ[here] = facts_memo().get(kind, path, compute, ok, within=within.root)
        except OSError:
            _READ[here] = None
    got = _READ[here]
    return got if ok(got) else None


def module_facts(path: str, within: Confined) -> dict[str, Any] | None:
    """One module file's facts (:class:`_Reader`: its top level, its functions' lines, its
    names), through the file-facts memo (None: it cannot be read or parsed here)."""
    return _memo("atimport-v1", path, lambda: _read(path, within), _ok, within)  # type: ignore[no-any-return]


def function_facts(path: str, first: int, last: int, within: Confined) -> list[Any] | None:
    """What calling the top-level function on lines ``first``..``last`` of the module file
    ``path`` runs: ``[items, its local names]`` (:meth:`_Reader.function`), through the
    memo; that function alone is parsed."""
    return _memo(f"atimport-fn-v1-{first}-{last}", path,  # type: ignore[no-any-return]
                 lambda: _read_function(path, first, last, within),
                 lambda v: v is None or (isinstance(v, list) and len(v) == 2
                                         and isinstance(v[0], list) and isinstance(v[1], dict)),
                 within)


class _Step:
    """How the walk reached something: one step of its route (``file:line imports|calls
    what``), and the step before it."""

    __slots__ = ("file", "line", "parent", "verb", "what")

    def __init__(self, file: str, line: object, verb: str, what: str,
                 parent: _Step | None) -> None:
        self.file, self.line, self.verb, self.what = file, line, verb, what
        self.parent = parent

    def route(self, shown: Callable[[str], str]) -> list[str]:
        out = []
        s: _Step | None = self
        while s is not None:
            out.append(f"{shown(s.file)}:{s.line} {s.verb} {s.what}")
            s = s.parent
        return out[::-1]


def _caught_import(guard: str) -> bool:
    """Whether an import under ``guard`` may not run or cannot fail its importer: under a
    condition (``?``), or a handler that catches ``ImportError`` (by its bases)."""
    names = set(guard.split(",")) if guard else set()
    return "?" in names or bool(names & {"ImportError", "Exception", "BaseException"}) or any(
        n not in _BUILTIN_EXC for n in names)


#: the builtin exception names a handler may name that do not catch ``ImportError``
_BUILTIN_EXC = frozenset((
    "ModuleNotFoundError", "OSError", "EnvironmentError", "IOError", "FileNotFoundError",
    "ValueError", "AttributeError", "TypeError", "RuntimeError", "NotImplementedError",
    "LookupError", "KeyError", "IndexError", "AssertionError", "NameError", "SystemError",
    "UnicodeError", "SyntaxError", "PermissionError", "KeyboardInterrupt", "StopIteration",
    "ArithmeticError", "ZeroDivisionError", "OverflowError", "RecursionError", "MemoryError",
    "UnicodeDecodeError", "UnicodeEncodeError", "Warning", "DeprecationWarning",
    "UserWarning", "ImportWarning", "RuntimeWarning", "FutureWarning", "TimeoutError",
    "ConnectionError", "BrokenPipeError", "IsADirectoryError", "NotADirectoryError",
    "InterruptedError", "ChildProcessError", "ProcessLookupError", "BlockingIOError",
    "FileExistsError", "EOFError", "GeneratorExit", "SystemExit", "BufferError",
    "FloatingPointError", "ReferenceError", "TabError", "IndentationError", "UnboundLocalError",
    "StopAsyncIteration", "ConnectionResetError", "ConnectionAbortedError",
    "ConnectionRefusedError", "UnicodeTranslateError", "EncodingWarning", "BytesWarning",
    "ResourceWarning", "SyntaxWarning", "UnicodeWarning", "PendingDeprecationWarning"))


def follow(importer: Importer, starts: Sequence[str], std: Callable[[str, str, str, list[str]],
           None], *, within: Confined, seen: Callable[[str], None] | None = None,
           skip: set[str] | None = None, roots: Sequence[str] = (),
           bounds: Bounds | None = None) -> str | None:
    """Walk what importing each of ``starts`` runs, calls included (module doc), and hand
    ``std(stdlib module, the module whose code imports it, its file, the route)`` each
    standard-library module it certainly imports uncaught, in the order met (``std`` raises
    to stop the walk). ``importer``: the target's importer model; ``seen``: told each file
    and folder read; ``skip``: modules whose import was walked already (added to as this
    walk finishes one); ``roots``: the folders file names are shown relative to;
    ``bounds``: how far it goes (None: :class:`Bounds`' defaults). Returns why the walk
    stopped short (a bound), else None."""
    bounds = bounds if bounds is not None else Bounds()
    done_mod: dict[str, set[str]] = {}
    done_fn: dict[tuple[str, str], set[str]] = {}
    specs: dict[str, tuple[str | None, bool] | None] = {}
    skip = skip if skip is not None else set()
    # (kind, module, function, guard, step): "m" a module's import, "f" a function's call
    from collections import deque

    queue: deque[tuple[str, str, str, str, _Step | None]] = deque(
        ("m", s, "", "", None) for s in starts)
    std_done: set[str] = set()
    calls = 0

    def shown(path: str) -> str:
        for r in roots:
            if path.startswith(r.rstrip("/") + "/"):
                return os.path.relpath(path, r)
        parts = path.split("/")
        return "/".join(parts[-3:])

    def spec(name: str) -> tuple[str | None, bool] | None:
        """(the module's Python file or None, whether it is a package), None: not found."""
        if name not in specs:
            got = importer.find(name)
            if got is None:
                specs[name] = None
            else:
                f = got.origin
                py = f if f is not None and f.endswith(".py") else None
                if py is not None and seen is not None:
                    seen(py)
                    seen(os.path.dirname(py))
                specs[name] = (py, got.search is not None)
        return specs[name]

    def is_module(name: str) -> bool:
        return name.partition(".")[0] not in _STDLIB and spec(name) is not None

    def absolute(mod: str, level: int, package: str) -> str | None:
        if not level:
            return mod
        parts = package.split(".") if package else []
        if level - 1 >= len(parts) + (0 if package else 1):
            return None
        head = parts[:len(parts) - (level - 1)]
        return ".".join([*head, mod] if mod else head) or None

    def resolve(name: str, dotted: str, bind: dict[str, Any], local: dict[str, Any] | None,
                depth: int = 0) -> tuple[str, str] | None:
        """(module, function) a call of ``dotted`` in module ``name`` runs, else None."""
        head, _, rest = dotted.partition(".")
        b = (local or {}).get(head) or bind.get(head)
        if b is None or depth > 8:
            return None
        got = spec(name)
        package = name if got is not None and got[1] else name.rpartition(".")[0]
        if b[0] == "d":
            return (name, head) if not rest else None
        if b[0] == "m":
            mod = str(b[1])
        elif b[0] == "f":
            base = absolute(str(b[1]), int(b[2]), package)
            if base is None:
                return None
            if is_module(f"{base}.{b[3]}"):
                mod = f"{base}.{b[3]}"
            elif not rest:
                return _function_in(base, str(b[3]), depth)
            else:
                return None
        else:
            return None
        tail = rest.split(".") if rest else []
        while len(tail) > 1 and is_module(f"{mod}.{tail[0]}"):
            mod = f"{mod}.{tail.pop(0)}"
        if len(tail) != 1 or mod.partition(".")[0] in _STDLIB:
            return None
        if is_module(f"{mod}.{tail[0]}"):
            return None  # calling a module
        return _function_in(mod, tail[0], depth)

    def _function_in(mod: str, fn: str, depth: int) -> tuple[str, str] | None:
        """Function ``fn`` as module ``mod``'s top level binds it, through re-exports."""
        if mod.partition(".")[0] in _STDLIB:
            return None
        got = spec(mod)
        if got is None or got[0] is None:
            return None
        facts = module_facts(got[0], within)
        if facts is None:
            return None
        return resolve(mod, fn, facts["bind"], None, depth + 1)

    def run(name: str, items: list[Any], bind: dict[str, Any], local: dict[str, Any] | None,
            guard: str, step: _Step | None, file: str) -> None:
        got = spec(name)
        package = name if got is not None and got[1] else name.rpartition(".")[0]
        for item in items:
            if not isinstance(item, list) or not item:
                continue
            if item[0] == "i" and len(item) == 6:
                _, mod, level, names, line, inner = item
                target = absolute(str(mod), int(level), package)
                if target is None:
                    continue
                g = _guard(guard, *str(inner).split(","))
                if _caught_import(g):
                    continue  # it may not run, or its failure is caught: nothing under it fails
                here = _Step(file, line, "imports", target, step)
                if target.partition(".")[0] in _STDLIB:
                    if target not in std_done:
                        std_done.add(target)
                        std(target, name, file, here.route(shown))
                    continue
                queue.append(("m", target, "", g, here))
                for n in names if isinstance(names, list) else ():
                    if isinstance(n, str) and n != "*" and is_module(f"{target}.{n}"):
                        queue.append(("m", f"{target}.{n}", "", g,
                                      _Step(file, line, "imports", f"{target}.{n}", step)))
            elif item[0] == "c" and len(item) == 4:
                _, callee, line, inner = item
                g = _guard(guard, *str(inner).split(","))
                if _caught_import(g):
                    continue
                hit = resolve(name, str(callee), bind, local)
                if hit is not None:
                    queue.append(("f", hit[0], hit[1], g,
                                  _Step(file, line, "calls", str(callee), step)))

    while queue:
        kind, name, fn, guard, step = queue.popleft()
        if kind == "m":
            parts = name.split(".")
            chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
            for mod in chain:  # each package on the way, then the module
                if mod in skip and not guard:
                    continue
                seen_guards = done_mod.setdefault(mod, set())
                if guard in seen_guards or "" in seen_guards:
                    continue
                if len(done_mod) > bounds.modules:
                    return (f"the code its import runs was followed as far as "
                            f"{bounds.modules} modules ({mod} not read)")
                seen_guards.add(guard)
                got = spec(mod)
                if got is None or got[0] is None:
                    break  # not found (another reading says so), or not Python
                facts = module_facts(got[0], within)
                if facts is None:
                    continue
                run(mod, facts["top"], facts["bind"], None, guard, step, got[0])
                if not guard:
                    skip.add(mod)
        else:
            seen_guards = done_fn.setdefault((name, fn), set())
            if guard in seen_guards or "" in seen_guards:
                continue
            calls += 1
            if calls > bounds.calls:
                return (f"the code its import runs was followed as far as {bounds.calls} "
                        f"calls ({name}.{fn} not read)")
            seen_guards.add(guard)
            got = spec(name)
            if got is None or got[0] is None:
                continue
            facts = module_facts(got[0], within)
            span = facts["defs"].get(fn) if facts is not None else None
            entry = (function_facts(got[0], span[0], span[1], within)
                     if isinstance(span, list) and len(span) == 2
                     and all(type(x) is int for x in span) else None)
            if entry is None or facts is None:
                continue
            run(name, entry[0], facts["bind"], entry[1], guard, step, got[0])
    return None
