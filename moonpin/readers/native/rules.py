"""A package's loader rule, read with ``ast`` from its own Python files (never imported).

Each ``*_steps`` function takes one parsed member and returns :class:`moonpin.kb.models.
RuleStep` records in source order; a project's recipe (``moonpin.scrapers.projects``)
says which of them to run on which members. What each recognises, as the upstream files
spell it (read on the index's wheels, see docs/DEVELOPERS.md "What is scraped"):

* :func:`import_steps`: ``from . import x``, ``import a.b``, ``from a.b import n`` of a
  module that is a build of the wheel (or a package the recipe names), and
  ``importlib.import_module(...)`` with a literal, an f-string (a ``dispatch`` step: nixl's
  ``f".nixl_ep_cpp_torch{_torch_mm}"``, ``f"nixl_ep_cu{cuda_major}"``) or a loop variable
  over a tuple of literals (alternatives, in order). A name used in an f-string is replaced
  by the expression last assigned to it in the same function (the ``key``).
* :func:`glob_steps`: ``glob.glob(str(<package dir> / <subdir> / "common_ops.*"))`` where
  ``<subdir>`` is assigned a literal on several branches of an ``if`` chain: one step per
  branch, its test as the condition (sgl_kernel's ``sm90``/``sm100`` choice).
* :func:`preload_steps`: ``ctypes.CDLL(<path>, mode=...)``.
* :func:`env_steps`: ``os.getenv("X")`` / ``os.environ.get("X")`` in a module that changes
  ``sys.setdlopenflags`` with an ``RTLD_*`` flag: the flag is the effect (nixl's
  ``NIXL_UCX_DEEPBIND`` -> ``RTLD_DEEPBIND``).
* :func:`raise_steps`: ``if <test>: raise`` in the named functions (``require`` steps).
* :func:`lock_steps`: ``if not os.getenv("X") and a != b [and not a.startswith(f"{b}+")]:
  raise`` (flashinfer's version checks), with whether a caller catches the error.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from moonpin.kb.models import RuleStep
from moonpin.readers.pyast.astname import unparse

__all__ = [
    "constants",
    "env_steps",
    "glob_steps",
    "import_steps",
    "lock_steps",
    "parse",
    "preload_steps",
    "raise_steps",
]

_MAX_ALTERNATIVES = 16


def parse(data: bytes, member: str) -> ast.Module:
    """The syntax tree of a member; SyntaxError/ValueError (not Python, NUL bytes) and
    RecursionError/MemoryError (nested too deep) propagate for the caller to record."""
    return ast.parse(data, filename=member)


class _Scope:
    """The innermost function and the guard of every node of one tree."""

    def __init__(self, tree: ast.Module) -> None:
        self.function: dict[int, str | None] = {}
        self.guard: dict[int, str | None] = {}
        self.assigned: dict[tuple[str | None, str], list[tuple[ast.expr, str | None]]] = {}
        #: node -> the loop variables over literal tuples around it (name -> items)
        self.loops: dict[int, dict[str, list[ast.expr]]] = {}
        self._walk(tree)

    def _walk(self, node: ast.AST) -> None:
        Loops = dict[str, list[ast.expr]]
        stack: list[tuple[ast.AST, str | None, str | None, Loops]] = [(node, None, None, {})]
        while stack:
            n, f, g, lv = stack.pop()
            self.function[id(n)] = f
            self.guard[id(n)] = g
            self.loops[id(n)] = lv
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{f}.{n.name}" if f else n.name
                for c in reversed(n.body):
                    stack.append((c, name, None, {}))
                continue
            if isinstance(n, ast.If):
                test = _text(n.test)
                stack.append((n.test, f, g, lv))
                for c in reversed(n.orelse):
                    stack.append((c, f, _both(g, f"not ({test})"), lv))
                for c in reversed(n.body):
                    stack.append((c, f, _both(g, test), lv))
                continue
            if isinstance(n, ast.Try):
                for h in reversed(n.handlers):
                    caught = _text(h.type) if h.type is not None else "BaseException"
                    for c in reversed(h.body):
                        stack.append((c, f, _both(g, f"the try body raised {caught}"), lv))
                for c in reversed([*n.body, *n.orelse, *n.finalbody]):
                    stack.append((c, f, g, lv))
                continue
            if isinstance(n, ast.Assign) and len(n.targets) == 1 \
                    and isinstance(n.targets[0], ast.Name):
                self.assigned.setdefault((f, n.targets[0].id), []).append((n.value, g))
            if isinstance(n, ast.For) and isinstance(n.target, ast.Name) \
                    and isinstance(n.iter, (ast.Tuple, ast.List)):
                inner = {**lv, n.target.id: list(n.iter.elts)}
                for c in reversed(n.body):
                    stack.append((c, f, g, inner))
                for c in reversed(n.orelse):
                    stack.append((c, f, g, lv))
                continue
            for child in reversed(list(ast.iter_child_nodes(n))):
                stack.append((child, f, g, lv))

    def values(self, fn: str | None, name: str) -> list[tuple[ast.expr, str | None]]:
        """What ``name`` is assigned in function ``fn`` (else at module level)."""
        return self.assigned.get((fn, name)) or self.assigned.get((None, name)) or []


def _both(a: str | None, b: str) -> str:
    return b if a is None else f"({a}) and ({b})"


def _text(node: ast.AST) -> str:
    text = unparse(node)
    return text if len(text) <= 400 else text[:397] + "..."


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    return ast.walk(tree)


def _absolute(name: str, package: str, level: int = 0) -> str:
    """``name`` relative to ``package`` (``level`` dots) made absolute."""
    if level <= 0:
        return name
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, name] if name else base)


def _template(node: ast.expr, scope: _Scope, fn: str | None) -> tuple[str, str | None] | None:
    """(text with ``{key}``, key expression) of a literal or f-string; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, None
    if isinstance(node, ast.JoinedStr):
        out, key = [], None
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                if key is not None:
                    return None  # two computed parts: not a rule this reader records
                key = _key(v.value, scope, fn)
                out.append("{key}")
            elif isinstance(v, ast.Constant):
                out.append(str(v.value))
        return "".join(out), key
    return None


def _key(node: ast.expr, scope: _Scope, fn: str | None) -> str:
    if isinstance(node, ast.Name):
        vals = scope.values(fn, node.id)
        if len(vals) == 1:
            return _text(vals[-1][0])
    return _text(node)


def import_steps(tree: ast.Module, member: str, package: str,
                 modules: frozenset[str]) -> list[RuleStep]:
    """Imports of ``modules`` (the wheel's build modules and the packages the recipe
    names, dotted) and computed imports, in ``member`` of ``package``."""
    scope = _Scope(tree)
    out: list[RuleStep] = []
    lasts = {m.rsplit(".", 1)[-1] for m in modules}

    def step(kind: str, target: str, node: ast.AST, key: str | None = None) -> None:
        out.append(RuleStep(kind=kind, target=target, key=key,  # type: ignore[arg-type]
                            condition=scope.guard.get(id(node)), member=member,
                            line=getattr(node, "lineno", 0),
                            function=scope.function.get(id(node)), order=len(out)))

    for node in sorted((n for n in _walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom,
                                                                 ast.Call))),
                       key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules or a.name in lasts:
                    step("import", a.name, node)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", package, node.level)
            if base in modules:
                step("import", base, node)
                continue
            for a in node.names:
                full = f"{base}.{a.name}" if base else a.name
                if full in modules:
                    step("import", full, node)
        elif _is_import_module(node):
            assert isinstance(node, ast.Call)
            fn = scope.function.get(id(node))
            rel = package if len(node.args) > 1 else ""
            arg = node.args[0] if node.args else None
            loop = scope.loops.get(id(node), {})
            if isinstance(arg, ast.Name) and arg.id in loop:
                for alt in loop[arg.id][:_MAX_ALTERNATIVES]:
                    t = _template(alt, scope, fn)
                    if t is not None:
                        step("import", _resolve(t[0], rel), node)
                continue
            if isinstance(arg, ast.Name):
                vals = scope.values(fn, arg.id)
                arg = vals[-1][0] if len(vals) == 1 else None
            t = _template(arg, scope, fn) if arg is not None else None
            if t is not None:
                target = _resolve(t[0], rel)
                step("dispatch" if t[1] is not None else "import", target, node, t[1])
    return out


def _resolve(target: str, package: str) -> str:
    if target.startswith(".") and package:
        dots = len(target) - len(target.lstrip("."))
        return _absolute(target[dots:], package, dots)
    return target


def _is_import_module(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name == "import_module"


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        inner = f.value
        head = inner.id if isinstance(inner, ast.Name) else (
            inner.attr if isinstance(inner, ast.Attribute) else "")
        return f"{head}.{f.attr}"
    return f.id if isinstance(f, ast.Name) else ""


def glob_steps(tree: ast.Module, member: str, package: str) -> list[RuleStep]:
    """``glob.glob(<path built from the package folder>)`` calls, one step per branch."""
    scope = _Scope(tree)
    out: list[RuleStep] = []
    for node in sorted((n for n in _walk(tree) if isinstance(n, ast.Call)
                        and _call_name(n) == "glob.glob" and n.args),
                       key=lambda n: (n.lineno, n.col_offset)):
        fn = scope.function.get(id(node))
        arg = node.args[0]
        if isinstance(arg, ast.Name):
            vals = scope.values(fn, arg.id)
            arg = vals[-1][0] if len(vals) == 1 else arg
        for path, cond in _paths(arg, scope, fn, package, 0):
            g = scope.guard.get(id(node))
            out.append(RuleStep(kind="glob", target=path,
                                condition=cond if g is None else _both(g, cond or "True")
                                if cond else g,
                                member=member, line=node.lineno, function=fn, order=len(out)))
    return out


def _paths(node: ast.expr, scope: _Scope, fn: str | None, package: str,
           depth: int) -> list[tuple[str, str | None]]:
    """The paths ``node`` can build, each with the branch condition that picks it."""
    if depth > 16:
        return [(f"{{{_text(node)}}}", None)]
    if isinstance(node, ast.Call) and _call_name(node) in ("str", "os.fspath") and node.args:
        return _paths(node.args[0], scope, fn, package, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        out = []
        for a, ca in _paths(node.left, scope, fn, package, depth + 1):
            for b, cb in _paths(node.right, scope, fn, package, depth + 1):
                cond = ca if cb is None else cb if ca is None else f"({ca}) and ({cb})"
                out.append((f"{a}/{b}", cond))
        return out[:_MAX_ALTERNATIVES]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.value, None)]
    if _text(node) in ("Path(__file__).parent", "pathlib.Path(__file__).parent",
                       "os.path.dirname(__file__)",
                       "os.path.dirname(os.path.abspath(__file__))"):
        return [(package.replace(".", "/"), None)]
    if isinstance(node, ast.Name):
        vals = scope.values(fn, node.id)
        if vals and all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                        for v, _ in vals):
            return [(str(v.value), g) for v, g in vals  # type: ignore[attr-defined]
                    ][:_MAX_ALTERNATIVES]
        if len(vals) == 1:
            return _paths(vals[0][0], scope, fn, package, depth + 1)
    return [(f"{{{_text(node)}}}", None)]


def preload_steps(tree: ast.Module, member: str) -> list[RuleStep]:
    """``ctypes.CDLL(path, mode=...)``: a library loaded before the build."""
    scope = _Scope(tree)
    out: list[RuleStep] = []
    for node in sorted((n for n in _walk(tree) if isinstance(n, ast.Call)
                        and _call_name(n) in ("ctypes.CDLL", "CDLL") and n.args),
                       key=lambda n: (n.lineno, n.col_offset)):
        fn = scope.function.get(id(node))
        arg = node.args[0]
        if isinstance(arg, ast.Name):
            vals = scope.values(fn, arg.id)
            arg = vals[-1][0] if len(vals) == 1 else arg
        t = _template(arg, scope, fn)
        target, key = t if t is not None else ("{key}", _text(arg))
        mode = next((kw.value for kw in node.keywords if kw.arg == "mode"), None)
        effect = None
        if mode is not None:
            effect = mode.attr if isinstance(mode, ast.Attribute) else _text(mode)
        out.append(RuleStep(kind="preload", target=target, key=key, effect=effect,
                            condition=scope.guard.get(id(node)), member=member,
                            line=node.lineno, function=fn, order=len(out)))
    return out


def _env_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and _call_name(node) in ("os.getenv", "environ.get") \
            and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def env_steps(tree: ast.Module, member: str) -> list[RuleStep]:
    """Environment variables that change the ``dlopen`` flags the build is opened with."""
    if not any(isinstance(n, ast.Call) and _call_name(n) == "sys.setdlopenflags"
               and n.args and isinstance(n.args[0], ast.BinOp) for n in _walk(tree)):
        return []  # the module never adds a flag to dlopen's
    names: set[str] = set()
    for n in _walk(tree):
        if isinstance(n, ast.Call) and _call_name(n) == "getattr" and len(n.args) >= 2 \
                and isinstance(n.args[1], ast.Constant) and str(n.args[1].value).startswith(
                    "RTLD_"):
            names.add(str(n.args[1].value))
        if isinstance(n, ast.Attribute) and n.attr.startswith("RTLD_"):
            names.add(n.attr)
    scope = _Scope(tree)
    out: list[RuleStep] = []
    for n in sorted((n for n in _walk(tree) if _env_name(n) is not None),
                    key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        out.append(RuleStep(kind="env", target=_env_name(n) or "",
                            effect="|".join(sorted(names)) or None,
                            condition=scope.guard.get(id(n)), member=member,
                            line=getattr(n, "lineno", 0), function=scope.function.get(id(n)),
                            order=len(out)))
    return out


def raise_steps(tree: ast.Module, member: str, functions: frozenset[str]) -> list[RuleStep]:
    """``if <test>: raise ...`` in ``functions``: conditions that fail the import."""
    scope = _Scope(tree)
    out: list[RuleStep] = []
    for n in _walk(tree):
        if isinstance(n, ast.If) and scope.function.get(id(n)) in functions \
                and any(isinstance(b, ast.Raise) for b in n.body):
            out.append(RuleStep(kind="require", target=_text(n.test), effect="raise",
                                condition=_text(n.test), member=member, line=n.lineno,
                                function=scope.function.get(id(n))))
    out.sort(key=lambda s: s.line)
    return [s.model_copy(update={"order": i}) for i, s in enumerate(out)]


def constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = <literal>`` assignments, as ``repr`` text."""
    out = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(
                n.targets[0], ast.Name) and isinstance(n.value, ast.Constant):
            out[n.targets[0].id] = repr(n.value.value)
    return out


def lock_steps(tree: ast.Module, member: str, dists: tuple[str, ...]) -> list[RuleStep]:
    """Version locks: ``if not os.getenv(X) and ... v != w ...: raise`` against one of
    ``dists`` (named in the message, or passed by every caller as a literal)."""
    scope = _Scope(tree)
    callers = _callers(tree, scope)
    out: list[RuleStep] = []
    for n in _walk(tree):
        if not (isinstance(n, ast.If) and isinstance(n.test, ast.BoolOp)
                and isinstance(n.test.op, ast.And)
                and any(isinstance(b, ast.Raise) for b in n.body)):
            continue
        env = next((_env_name(v.operand) for v in n.test.values
                    if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not)
                    and _env_name(v.operand)), None)
        if env is None or not any(
                (isinstance(v, ast.Compare) and any(isinstance(o, ast.NotEq) for o in v.ops))
                or "startswith" in _text(v) for v in n.test.values):
            continue  # a guard that compares no versions
        kind = _comparison(n.test)
        fn = scope.function.get(id(n))
        raise_node = next(b for b in n.body if isinstance(b, ast.Raise))
        named = _dists_in(raise_node, dists)
        if not named and fn is not None:
            calls = callers.get(fn.rsplit(".", 1)[-1], ())
            named = sorted({d for call in calls for d in _dists_in(call, dists)})
            if not named:  # passed by value: what the callers pass, as they spell it
                named = sorted({_text(c.args[0]) for c in calls if c.args})
        caught = _caught(n, fn, scope, callers, tree, 0)
        for d in named or ["?"]:
            out.append(RuleStep(kind="lock", target=d, key=env, condition=kind,
                                effect="ignore" if caught else "raise", member=member,
                                line=n.lineno, function=fn))
    out.sort(key=lambda s: (s.line, s.target))
    return [s.model_copy(update={"order": i}) for i, s in enumerate(out)]


def _comparison(test: ast.BoolOp) -> str:
    """``exact-or-local`` when a ``startswith`` of an f-string ending in ``+`` allows a local
    version label, ``prefix`` for another ``startswith``, else ``exact``."""
    for c in ast.walk(test):
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) \
                and c.func.attr == "startswith" and c.args:
            a = c.args[0]
            if isinstance(a, ast.JoinedStr) and a.values and isinstance(
                    a.values[-1], ast.Constant) and str(a.values[-1].value).endswith("+"):
                return "exact-or-local"
            return "prefix"
    return "exact"


def _dists_in(node: ast.AST, dists: tuple[str, ...]) -> list[str]:
    found = []
    for c in ast.walk(node):
        if isinstance(c, ast.Constant) and isinstance(c.value, str):
            found += [d for d in dists if c.value.startswith(d + " ") or c.value == d]
    return sorted(set(found))


def _callers(tree: ast.Module, scope: _Scope) -> dict[str, list[ast.Call]]:
    out: dict[str, list[ast.Call]] = {}
    for n in _walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            out.setdefault(n.func.id, []).append(n)
    return out


_CATCHES = frozenset({"RuntimeError", "Exception", "BaseException"})


def _caught(node: ast.AST, fn: str | None, scope: _Scope,
            callers: dict[str, list[ast.Call]], tree: ast.Module, depth: int) -> bool:
    """Whether the raise of ``node`` is caught without re-raising: around it in its own
    function, or, in this module, around every call of its function (or of theirs)."""
    if _in_catching_try(node, tree):
        return True
    if fn is None or depth > 8:
        return False
    calls = callers.get(fn.rsplit(".", 1)[-1], [])
    return bool(calls) and all(
        _caught(c, scope.function.get(id(c)), scope, callers, tree, depth + 1) for c in calls)


def _in_catching_try(target: ast.AST, tree: ast.Module) -> bool:
    for t in _walk(tree):
        if not isinstance(t, ast.Try):
            continue
        if not any(target is c for b in t.body for c in ast.walk(b)):
            continue
        for h in t.handlers:
            names = {x.id for x in ast.walk(h.type) if isinstance(x, ast.Name)} \
                if h.type is not None else {"BaseException"}
            if names & _CATCHES and not any(isinstance(s, ast.Raise) for s in h.body):
                return True
    return False
