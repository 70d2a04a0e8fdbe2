"""The imports a Python module certainly runs when it is imported, read with ``ast``.

Importing a module executes its top level: every ``import``/``from … import`` there runs,
except where the code says it may not. This reader keeps the ones that *certainly* run, so
that a module missing among them means the import fails (``ModuleNotFoundError``), as the
importer would find out:

* top-level statements, ``with`` bodies and class bodies run;
* an ``if``/``else`` runs one branch: an import certainly runs only when both branches run it
  (``if TYPE_CHECKING:`` with no ``else`` runs nothing);
* a ``try`` with handlers guards its body: what it imports runs, and a failure of a kind the
  handlers catch (``ImportError`` for a missing module, ``SyntaxError`` for one that does not
  compile) is quiet; a handler that catches everything (bare, ``Exception``,
  ``BaseException``) makes the body's imports irrelevant; ``finally`` runs;
* function bodies, loops and ``match`` arms may not run;
* ``importlib.import_module("literal")`` and ``__import__("literal")`` called at the top level
  are imports too (a computed name is not read);
* a ``raise`` reached that way makes every import of the module fail.

Whether the module compiles is told as CPython tells it (``compile()``), with the line. Only
the standard library (and :mod:`.astname`); nothing read is executed.
"""

from __future__ import annotations

import ast

from moonpin.readers.pyast.astname import type_checking

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Import", "any_imports", "binding", "certain_imports", "named_imports",
           "read_module", "resolve_binding"]

class Import:
    """One import that runs when the module is imported: ``module`` as written (``level``
    leading dots removed), the names of a ``from`` import, its line, and ``guard``: the
    exception names the ``try`` around it catches (``""``: none; joined by ``,``). An import
    under a handler that catches everything (bare, ``Exception``, ``BaseException``) is not
    kept: nothing it does can fail the module."""

    __slots__ = ("guard", "level", "line", "module", "names")

    def __init__(self, module: str, names: tuple[str, ...], level: int, line: int,
                 guard: str = "") -> None:
        self.module = module
        self.names = names
        self.level = level
        self.line = line
        self.guard = guard

    def dump(self) -> tuple[str, tuple[str, ...], int, int, str]:
        return (self.module, self.names, self.level, self.line, self.guard)


def _handler_names(handlers: list[ast.ExceptHandler]) -> frozenset[str] | None:
    """The exception names the handlers catch; None when one catches everything (bare,
    ``Exception``, ``BaseException``, or a name this reader cannot read)."""
    out: set[str] = set()
    for h in handlers:
        if h.type is None:
            return None
        names = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        for n in names:
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(
                n, ast.Attribute) else None
            if name is None or name in ("Exception", "BaseException"):
                return None
            out.add(name)
    return frozenset(out)


def _call_import(node: ast.AST) -> str | None:
    """``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")``."""
    if not isinstance(node, ast.Call) or len(node.args) != 1 or node.keywords:
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    arg = node.args[0]
    if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) \
            and isinstance(arg.value, str) and arg.value and not arg.value.startswith("."):
        return arg.value
    return None


def _key(i: Import) -> tuple[str, tuple[str, ...], int, str]:
    return (i.module, i.names, i.level, i.guard)


def _raised(node: ast.Raise) -> str:
    """The name of the exception a ``raise`` raises (a bare ``raise`` outside a handler is a
    ``RuntimeError``)."""
    exc = node.exc
    if exc is None:
        return "RuntimeError"
    if isinstance(exc, ast.Call):
        exc = exc.func
    if isinstance(exc, ast.Name):
        return exc.id
    if isinstance(exc, ast.Attribute):
        return exc.attr
    return "Exception"


class _Run:
    """What a block certainly does: its imports, and a ``raise`` it certainly reaches
    (line 0: none; what follows it does not run) with the exception's name."""

    __slots__ = ("imports", "raised", "raises")

    def __init__(self, imports: list[Import] | None = None, raises: int = 0,
                 raised: str = "") -> None:
        self.imports = imports or []
        self.raises = raises
        self.raised = raised


def _block(body: list[ast.stmt]) -> _Run:
    out = _Run()
    for node in body:
        got = _stmt(node)
        out.imports.extend(got.imports)
        if got.raises:
            out.raises, out.raised = got.raises, got.raised
            break
    return out


def _guarded(imports: list[Import], names: frozenset[str]) -> list[Import]:
    return [Import(i.module, i.names, i.level, i.line,
                   ",".join(sorted(names | set(filter(None, i.guard.split(","))))))
            for i in imports]


def _stmt(node: ast.stmt) -> _Run:
    if isinstance(node, ast.Import):
        return _Run([Import(a.name, (), 0, node.lineno) for a in node.names])
    if isinstance(node, ast.ImportFrom):
        if node.module == "__future__":
            return _Run()
        return _Run([Import(node.module or "", tuple(a.name for a in node.names), node.level,
                            node.lineno)])
    if isinstance(node, ast.Raise):
        return _Run(raises=node.lineno, raised=_raised(node))
    if isinstance(node, ast.If):
        then, other = _block(node.body), _block(node.orelse)
        keys = {_key(i) for i in other.imports}
        both = [i for i in then.imports if _key(i) in keys]
        if then.raises and other.raises:
            return _Run(both, max(then.raises, other.raises),
                        then.raised if then.raised == other.raised else "Exception")
        return _Run(both)
    if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
        handlers = getattr(node, "handlers", [])
        if handlers:  # what the body does may be caught: only by what the handlers name
            names = _handler_names(handlers)
            body = _block([*getattr(node, "body", []), *getattr(node, "orelse", [])])
            out = _Run() if names is None else _Run(_guarded(body.imports, names))
        else:
            out = _block(getattr(node, "body", []))
        final = _block(getattr(node, "finalbody", []))
        out.imports.extend(final.imports)
        if final.raises and not out.raises:
            out.raises, out.raised = final.raises, final.raised
        return out
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return _block(node.body)
    if isinstance(node, ast.ClassDef):
        return _block(node.body)
    if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)) and node.value is not None:
        name = _call_import(node.value)
        if name is not None:
            return _Run([Import(name, (), 0, node.lineno)])
    return _Run()


def read_module(source: bytes, filename: str, check_compile: bool = True
                ) -> tuple[list[Import], str | None, dict[str, tuple[Any, ...]], bool]:
    """One parse of ``source``: the imports that certainly run when it is imported; why
    importing it certainly fails (it does not compile, or its top level certainly reaches a
    ``raise``; None: neither); how its top level binds each name (:func:`binding`'s kinds,
    ``("other",)`` for a binding not followed); and whether it can make names some way not
    read here (a star import, a module ``__getattr__``, ``globals()``, ``exec``…).
    ``check_compile=False`` when CPython already holds a valid bytecode cache of this very
    source (it will not compile it again), so only the parse is paid."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as e:  # IndentationError and TabError are SyntaxErrors
        where = f" (line {e.lineno})" if e.lineno else ""
        return [], f"{type(e).__name__}: {e.msg}{where}", {}, True
    except (ValueError, RecursionError, MemoryError) as e:  # a NUL byte; nesting too deep
        return [], f"{type(e).__name__}: {e}", {}, True
    if check_compile:  # what only the compiler finds (symbol table: 'return' outside a def…)
        try:
            compile(tree, filename, "exec", dont_inherit=True)
        except SyntaxError as e:
            where = f" (line {e.lineno})" if e.lineno else ""
            return [], f"{type(e).__name__}: {e.msg}{where}", {}, True
        except (ValueError, RecursionError, MemoryError) as e:
            return [], f"{type(e).__name__}: {e}", {}, True
    run = _block(tree.body)
    seen: set[tuple[str, tuple[str, ...], int, str]] = set()
    out: list[Import] = []
    for i in run.imports:
        if _key(i) not in seen:
            seen.add(_key(i))
            out.append(i)
    bound: dict[str, tuple[Any, ...]] = {}
    for node in tree.body:  # in order: a later binding replaces an earlier one
        for name in _names_bound(node):
            bound[name] = _binds(node, name, bound) or ("other",)
    error = (f"raises {run.raised} at line {run.raises}, at every import" if run.raises
             else None)
    return out, error, bound, _opaque(tree)


def certain_imports(source: bytes, filename: str, check_compile: bool = True
                    ) -> tuple[list[Import], str | None]:
    """The imports that certainly run when ``source`` is imported, and why importing it
    certainly fails (:func:`read_module`)."""
    imports, error, _, _ = read_module(source, filename, check_compile)
    return imports, error


def any_imports(source: bytes, filename: str) -> list[tuple[str, int]]:
    """Every absolute import written anywhere in ``source`` (function bodies, branches and
    ``try`` blocks too: the imports a code path *may* run, such as SGLang's token
    dispatchers importing their backend's package when first used; not those under ``if
    TYPE_CHECKING:``, which no code path runs), as (module, line) in
    the order written; ``importlib.import_module("literal")`` included. Empty when the
    source does not parse (:func:`read_module` says why)."""
    return [(m, line) for m, _, line in named_imports(source, filename)]


def named_imports(source: bytes, filename: str) -> list[tuple[str, tuple[str, ...], int]]:
    """:func:`any_imports` with the names each imports: ``(module, names, line)``, names
    empty for ``import x`` and a computed import, ``("*",)`` for a star import."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[tuple[str, tuple[str, ...], int]] = []
    never = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
             and type_checking(block.test) for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in never:
            continue  # under ``if TYPE_CHECKING:``: for type checkers, never run
        if isinstance(node, ast.Import):
            out += [(a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, tuple(a.name for a in node.names), node.lineno))
        else:
            name = _call_import(node)
            if name is not None:
                out.append((name, (), getattr(node, "lineno", 0)))
    return sorted(out, key=lambda m: m[2])


def _names_bound(node: ast.stmt) -> list[str]:
    """The names a top-level statement may bind."""
    if isinstance(node, ast.Import):
        return [a.asname or a.name.partition(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names if a.name != "*"]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return []  # an annotation alone binds nothing
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n for t in targets for n in _target_names(t)]
    if isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor,
                         ast.While)) or type(node).__name__ in ("TryStar", "Match"):
        inner = [s for field in ("body", "orelse", "finalbody") for s in getattr(node, field, [])]
        inner += [s for h in getattr(node, "handlers", []) for s in h.body]
        inner += [s for c in getattr(node, "cases", []) for s in c.body]
        return [n for s in inner for n in _names_bound(s)]
    return []


def _target_names(t: ast.expr) -> list[str]:
    """The names an assignment target binds (``a``, ``a, b``, ``*rest``; not ``x.a``)."""
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    if isinstance(t, ast.Starred):
        return _target_names(t.value)
    return []


def _opaque(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)) or (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name == "__getattr__") or (
                isinstance(node, ast.Name) and node.id in ("globals", "exec", "setattr",
                                                          "vars", "locals")):
            return True
    return False


def binding(source: bytes, filename: str, name: str) -> tuple[Any, ...] | None:
    """How the top level of ``source`` binds ``name`` (its last unconditional binding):
    ``("const", value)`` for a literal, ``("from", level, module, attr)`` for ``from module
    import attr as name``, ``("name", other)`` for ``name = other`` (or ``name =
    Wrapper(other)``: torch's ``TorchVersion(internal_version)`` is a ``str`` holding its
    argument), ``("absent",)`` when nothing in the module can bind it; None when it binds it
    some way not followed here (conditionally, computed, through ``globals()``…)."""
    _, _, bound, opaque = read_module(source, filename, check_compile=False)
    return resolve_binding(bound, opaque, name)


def resolve_binding(bound: dict[str, tuple[Any, ...]], opaque: bool, name: str
                    ) -> tuple[Any, ...] | None:
    """:func:`binding` from :func:`read_module`'s bindings and opacity."""
    got = bound.get(name)
    if got is None:
        return None if opaque else ("absent",)
    return None if got[0] == "other" else got


def _binds(node: ast.stmt, name: str, before: dict[str, tuple[Any, ...]] | None = None
           ) -> tuple[Any, ...] | None:
    """What ``node`` binds ``name`` to (``("other",)``: something not followed), or None
    when it does not bind it. ``before``: the module's bindings so far (a value computed
    from them, ``f"{_base}+cu130"``, is folded, :func:`_fold`)."""
    if isinstance(node, ast.ImportFrom):
        for a in node.names:
            if (a.asname or a.name) == name:
                return ("from", node.level, node.module or "", a.name)
        return None
    if isinstance(node, ast.Import):
        return ("other",) if any((a.asname or a.name.partition(".")[0]) == name
                                 for a in node.names) else None
    targets: list[ast.expr] = []
    value: ast.expr | None = None
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets, value = [node.target], node.value
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ("other",) if node.name == name else None
    elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
        inner = [s for field in ("body", "orelse", "finalbody") for s in getattr(node, field, [])]
        inner += [s for h in getattr(node, "handlers", []) for s in h.body]
        return ("other",) if any(_binds(s, name) is not None for s in inner) else None
    if value is not None and isinstance(value, (ast.Tuple, ast.List)):
        for t in targets:  # `_major, _minor = 2, 13`: each name its own element
            if isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == len(value.elts) and \
                    not any(isinstance(e, ast.Starred) for e in (*t.elts, *value.elts)):
                for e, v in zip(t.elts, value.elts, strict=True):
                    if isinstance(e, ast.Name) and e.id == name:
                        got = _fold(v, before or {}, 0)
                        return ("other",) if got is _NO or isinstance(got, tuple) else (
                            "const", got)
    if not any(isinstance(t, ast.Name) and t.id == name for t in targets) or value is None:
        return None
    if isinstance(value, ast.Constant) and isinstance(value.value, (str, int, float, bool)):
        return ("const", value.value)
    folded = _fold(value, before or {}, 0)
    if folded is not _NO:
        return ("const", folded)
    if isinstance(value, ast.Name):
        return ("name", value.id)
    if (isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords
            and isinstance(value.args[0], ast.Name)):
        return ("name", value.args[0].id)
    return ("other",)


_NO = object()
#: The longest string a folded value may be (a version label is a few dozen characters).
_FOLD_MAX = 4096


def _fold(node: ast.expr, before: dict[str, tuple[Any, ...]], depth: int) -> Any:
    """The value of a constant expression as CPython computes it, from literals and the
    module's earlier constant bindings: f-strings, ``+``, ``%``, ``"...".format(...)``,
    ``sep.join([...])``, ``str(x)`` (torch's ``version.py`` as a custom build writes it:
    ``__version__ = f"{_base}+{_suffix}"``, ``'2.13.0' + '+cu130'``); ``_NO`` when it is
    anything else (a call of the module's own, an environment lookup, a condition)."""
    if depth > 32:
        return _NO
    got: Any = _NO
    if isinstance(node, ast.Constant):
        got = node.value if isinstance(node.value, (str, int, float, bool)) else _NO
    elif isinstance(node, ast.Name):
        b = before.get(node.id)
        got = b[1] if b is not None and b[0] == "const" and len(b) == 2 else _NO
    elif isinstance(node, (ast.Tuple, ast.List)):
        items = [_fold(e, before, depth + 1) for e in node.elts]
        got = _NO if any(i is _NO for i in items) else tuple(items)
    elif isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
                continue
            if not isinstance(v, ast.FormattedValue):
                return _NO
            x = _fold(v.value, before, depth + 1)
            spec = "" if v.format_spec is None else _fold(v.format_spec, before, depth + 1)
            if x is _NO or not isinstance(spec, str) or isinstance(x, tuple) or not _small(
                    spec):
                return _NO
            conv = {-1: x, 115: str(x), 114: repr(x), 97: ascii(x)}.get(v.conversion, _NO)
            if conv is _NO:
                return _NO
            try:
                parts.append(format(conv, spec))
            except (ValueError, TypeError):
                return _NO
        got = "".join(parts)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        a, b = _fold(node.left, before, depth + 1), _fold(node.right, before, depth + 1)
        if a is _NO or b is _NO:
            return _NO
        try:
            if isinstance(node.op, ast.Add) and type(a) is type(b) and isinstance(
                    a, (str, int)):
                got = a + b
            elif isinstance(node.op, ast.Mod) and isinstance(a, str) and _small(a):
                got = a % b
        except (ValueError, TypeError, KeyError, OverflowError):
            return _NO
    elif isinstance(node, ast.Call):
        got = _fold_call(node, before, depth)
    if isinstance(got, str) and len(got) > _FOLD_MAX:
        return _NO
    if isinstance(got, int) and not isinstance(got, bool) and abs(got) > 1 << 64:
        return _NO
    return got


def _fold_call(node: ast.Call, before: dict[str, tuple[Any, ...]], depth: int) -> Any:
    """``"...".format(...)``, ``sep.join(items)`` and ``str(x)`` of folded values."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords):
        return _NO
    args = [_fold(a, before, depth + 1) for a in node.args]
    kwargs = {k.arg: _fold(k.value, before, depth + 1) for k in node.keywords if k.arg}
    if any(a is _NO for a in (*args, *kwargs.values())):
        return _NO
    f = node.func
    if isinstance(f, ast.Name) and f.id == "str" and f.id not in before and len(args) == 1 \
            and not kwargs and not isinstance(args[0], tuple):
        return str(args[0])
    if not isinstance(f, ast.Attribute):
        return _NO
    obj = _fold(f.value, before, depth + 1)
    if not isinstance(obj, str):
        return _NO
    try:
        if f.attr == "format" and _small(obj) and all(
                isinstance(a, (str, int, float)) for a in (*args, *kwargs.values())):
            return obj.format(*args, **kwargs)
        if f.attr == "join" and len(args) == 1 and not kwargs and isinstance(args[0], tuple) \
                and all(isinstance(a, str) for a in args[0]):
            return obj.join(args[0])
    except (ValueError, TypeError, KeyError, IndexError):
        return _NO
    return _NO


def _small(text: str) -> bool:
    """Whether every number written in a format string or spec is at most
    :data:`_FOLD_MAX` (a width of a billion would make the string a gigabyte)."""
    run = ""
    for ch in text + " ":
        if ch.isdigit():
            run += ch
            if len(run) > 5:
                return False
        elif run:
            if int(run) > _FOLD_MAX:
                return False
            run = ""
    return True
