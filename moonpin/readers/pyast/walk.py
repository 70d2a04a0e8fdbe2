"""The syntax-tree walk behind :func:`moonpin.readers.pyast.usage.analyze_source`: :class:`Walker`
visits one parsed module, tracks scopes, ``try`` guards and ``TYPE_CHECKING`` blocks, and yields the
mooncake imports, the calls of what they bind and the process-group backend literals.

It implements the rules of :mod:`moonpin.readers.pyast.usage`'s docstring (import forms, optional vs
hard, alternatives, calls, backend literals), on the fact types and constants of
:mod:`moonpin.readers.pyast.facts`. Analysed code is never imported or executed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

from moonpin.readers.pyast.astname import dotted, type_checking, unparse
from moonpin.readers.pyast.facts import (
    MOONCAKE_ROOT,
    MOONCAKE_SUBMODULES,
    PG_FUNCTIONS,
    BackendLiteral,
    CallFact,
    ImportFact,
    classify_feature,
)

__all__ = ["Walker"]


_BACKEND_VALUES = frozenset({"mooncake", "mooncake-cpu"})
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_NON_PG_BACKEND_MARKERS = (
    "transfer",
    "storage",
    "store",
    "cache",
    "linker",
    "a2a",
    "attention",
    "dataset",
    "allocator",
    "sampling",
    "grammar",
    "lora",
    "load",
)
_NON_PG_FEATURES = frozenset({"pd-disaggregation", "hicache"})
_EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
_IMPORT_MODULE_CALLS = frozenset(
    {"importlib.import_module", "import_module", "__import__", "importlib.__import__"}
)
# ast.TryStar (except*) only exists from Python 3.11 on; the project supports 3.10.
_TRY_TYPES: tuple[type[ast.stmt], ...] = tuple(
    t for t in (getattr(ast, "Try", None), getattr(ast, "TryStar", None)) if t is not None
)
_FIND_SPEC_CALLS = frozenset({"importlib.util.find_spec", "util.find_spec", "find_spec"})



def _is_mooncake(module: str | None) -> bool:
    return module is not None and (module == MOONCAKE_ROOT
                                   or module.startswith(MOONCAKE_ROOT + "."))


def _is_submodule_name(name: str) -> bool:
    return name in MOONCAKE_SUBMODULES or name.startswith("mooncake_") or name.startswith("pg_")


def _str_const(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _dynamic_target(call: ast.Call) -> tuple[str, tuple[str, ...], bool] | None:
    """(module, fromlist names, is_probe) for a literal dynamic mooncake import."""
    callee = dotted(call.func)
    if callee is None or not call.args:
        return None
    is_probe = callee in _FIND_SPEC_CALLS
    if not (is_probe or callee in _IMPORT_MODULE_CALLS):
        return None
    target = _str_const(call.args[0])
    if target is None:
        return None
    if target.startswith(".") and callee.endswith("import_module"):
        # import_module(".pg", "mooncake"): resolve against the package.
        package = _str_const(call.args[1]) if len(call.args) > 1 else None
        for kw in call.keywords:
            if kw.arg == "package":
                package = _str_const(kw.value)
        if package is None:
            return None
        target = package + target if target != "." else package
    if not _is_mooncake(target):
        return None
    names: tuple[str, ...] = ()
    if callee.endswith("__import__"):
        fromlist = call.args[3] if len(call.args) > 3 else None
        for kw in call.keywords:
            if kw.arg == "fromlist":
                fromlist = kw.value
        if isinstance(fromlist, (ast.List, ast.Tuple)):
            names = tuple(s for s in (_str_const(e) for e in fromlist.elts) if s is not None)
    return target, names, is_probe


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types: Sequence[ast.expr] = (
        handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    )
    for t in types:
        name = dotted(t)
        if name is not None and name.rsplit(".", 1)[-1] in _IMPORT_ERRORS:
            return True
    return False


def _always_leaves(stmts: Sequence[ast.stmt]) -> bool:
    """True when every path through *stmts* ends in raise / process exit."""
    for stmt in stmts:
        if isinstance(stmt, ast.Raise):
            return True
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and dotted(stmt.value.func) in _EXIT_CALLS
        ):
            return True
        if (
            isinstance(stmt, ast.If)
            and stmt.orelse
            and _always_leaves(stmt.body)
            and _always_leaves(stmt.orelse)
        ):
            return True
    return False


def _backend_subject_ok(subject: str | None) -> bool:
    if subject is None:
        return False
    last = subject.rsplit(".", 1)[-1].lower()
    if "backend" not in last:
        return False
    return not any(m in last for m in _NON_PG_BACKEND_MARKERS)


def _subject(node: ast.expr) -> str | None:
    """Readable name of a compared operand: ``a.b`` or ``get_exec().moe.x_backend``."""
    name = dotted(node)
    if name is not None or not isinstance(node, ast.Attribute):
        return name
    # SGLang reads config through accessors (get_exec().moe.elastic_ep_backend).
    return unparse(node)


def _is_pg_function(callee: str | None) -> bool:
    if callee is None:
        return False
    parts = callee.split(".")
    if parts[-1] not in PG_FUNCTIONS:
        return False
    # Storage/embedding factories in SGLang also have register_backend("mooncake");
    # only torch's Backend.register_backend names a process-group backend.
    return parts[-1] != "register_backend" or (len(parts) > 1 and parts[-2] == "Backend")


def _target_names(target: ast.expr) -> Iterator[str]:
    """Plain names bound by an assignment target (for shadowing)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


# --------------------------------------------------------------------------
# The walk


@dataclass
class _Scope:
    kind: str  # "module" | "class" | "function"
    qualname: str | None
    parent: _Scope | None
    # local name -> (module, object path or None for a module binding)
    mooncake: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    other: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> tuple[str, str | None] | None:
        scope: _Scope | None = self
        first = True
        while scope is not None:
            # Class bodies are invisible to the functions nested in them.
            if first or scope.kind != "class":
                if name in scope.mooncake:
                    return scope.mooncake[name]
                if name in scope.other:
                    return None
            first = False
            scope = scope.parent
        return None


@dataclass
class _Guard:
    """One enclosing construct relevant for optionality / alternatives."""

    try_id: int
    in_body: bool  # False: inside an import-catching handler
    falls_back: bool  # some import-catching handler survives


@dataclass
class _RawImport:
    module: str
    names: tuple[str, ...]
    alias: str | None
    line: int
    scope: _Scope
    guards: tuple[_Guard, ...]
    type_checking: bool
    dynamic: bool
    probe: bool


class Walker:
    def __init__(self, path: str) -> None:
        self.path = path
        self.imports: list[_RawImport] = []
        self.calls: list[tuple[ast.Call, _Scope]] = []
        self.backends: list[BackendLiteral] = []

    # -- generic traversal -------------------------------------------------

    def walk(self, tree: ast.Module) -> None:
        module_scope = _Scope("module", None, None)
        self._body(tree.body, module_scope, (), False)

    def _body(
        self,
        stmts: Iterable[ast.stmt],
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
    ) -> None:
        for stmt in stmts:
            self._stmt(stmt, scope, guards, tc)

    def _stmt(self, stmt: ast.stmt, scope: _Scope, guards: tuple[_Guard, ...], tc: bool) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope.other.add(stmt.name)
            # Decorators and defaults run where the def statement runs.
            for expr in [*stmt.decorator_list, *stmt.args.defaults]:
                self._expr(expr, scope, guards)
            for d in stmt.args.kw_defaults:
                if d is not None:
                    self._expr(d, scope, guards)
            inner = _Scope("function", self._qual(scope, stmt.name), scope)
            args = stmt.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                inner.other.add(a.arg)
            for va in (args.vararg, args.kwarg):
                if va is not None:
                    inner.other.add(va.arg)
            # A try around a def does not guard its body: it runs later.
            self._body(stmt.body, inner, (), tc)
            return
        if isinstance(stmt, ast.ClassDef):
            scope.other.add(stmt.name)
            for expr in [*stmt.decorator_list, *stmt.bases]:
                self._expr(expr, scope, guards)
            for kw in stmt.keywords:
                self._expr(kw.value, scope, guards)
            inner = _Scope("class", self._qual(scope, stmt.name), scope)
            # The class body runs right away, so enclosing guards still apply.
            self._body(stmt.body, inner, guards, tc)
            return
        if isinstance(stmt, ast.Import):
            self._import(stmt, scope, guards, tc)
            return
        if isinstance(stmt, ast.ImportFrom):
            self._import_from(stmt, scope, guards, tc)
            return
        if isinstance(stmt, _TRY_TYPES):
            # ast.TryStar (3.11+) has exactly the fields of ast.Try.
            self._try(cast(ast.Try, stmt), scope, guards, tc)
            return
        if isinstance(stmt, ast.If) and type_checking(stmt.test):
            self._expr(stmt.test, scope)
            self._body(stmt.body, scope, guards, True)
            self._body(stmt.orelse, scope, guards, tc)
            return
        self._bindings(stmt, scope)
        self._assign_literals(stmt, scope)
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
        ):
            # `pg = importlib.import_module("mooncake.pg")` binds a module.
            found = _dynamic_target(stmt.value)
            if found is not None and not found[2]:
                scope.mooncake[stmt.targets[0].id] = (found[0], None)
        # Generic statement: visit expressions, recurse into nested blocks.
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                if value and all(isinstance(v, ast.stmt) for v in value):
                    self._body(value, scope, guards, tc)
                    continue
                for v in value:
                    self._node(v, scope, guards, tc)
            elif name != "ctx":
                self._node(value, scope, guards, tc)

    def _node(self, value: object, scope: _Scope, guards: tuple[_Guard, ...], tc: bool) -> None:
        if isinstance(value, ast.stmt):
            self._stmt(value, scope, guards, tc)
        elif isinstance(value, ast.expr):
            self._expr(value, scope, guards)
        elif isinstance(value, ast.AST):
            # withitem, match_case, comprehension, keyword, ...
            for _, sub in ast.iter_fields(value):
                if isinstance(sub, list):
                    if sub and all(isinstance(v, ast.stmt) for v in sub):
                        self._body(sub, scope, guards, tc)
                    else:
                        for v in sub:
                            self._node(v, scope, guards, tc)
                else:
                    self._node(sub, scope, guards, tc)
            if isinstance(value, ast.withitem) and value.optional_vars is not None:
                scope.other.update(_target_names(value.optional_vars))
            if isinstance(value, ast.ExceptHandler) and value.name:
                scope.other.add(value.name)

    def _expr(self, expr: ast.expr, scope: _Scope, guards: tuple[_Guard, ...] = ()) -> None:
        # Iterative so that long flat chains (a + b + ... ) cost no recursion;
        # lambdas and comprehensions share the enclosing scope, which is
        # good enough for name resolution here.
        stack: list[ast.AST] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call):
                self.calls.append((node, scope))
                self._dynamic_import(node, scope, guards)
                self._call_literals(node, scope)
            elif isinstance(node, ast.Compare):
                self._compare_literals(node, scope)
            elif isinstance(node, ast.NamedExpr):
                scope.other.update(_target_names(node.target))
            stack.extend(ast.iter_child_nodes(node))

    @staticmethod
    def _qual(scope: _Scope, name: str) -> str:
        return name if scope.qualname is None else f"{scope.qualname}.{name}"

    def _bindings(self, stmt: ast.stmt, scope: _Scope) -> None:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            targets = [stmt.target]
        elif isinstance(stmt, (ast.Global, ast.Nonlocal)):
            return
        for t in targets:
            scope.other.update(_target_names(t))

    # -- try / imports -----------------------------------------------------

    def _try(
        self,
        stmt: ast.Try,
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
    ) -> None:
        catching = [h for h in stmt.handlers if _catches_import_error(h)]
        if catching:
            falls_back = any(not _always_leaves(h.body) for h in catching)
            body_guard = _Guard(id(stmt), True, falls_back)
            handler_guard = _Guard(id(stmt), False, False)
            self._body(stmt.body, scope, (*guards, body_guard), tc)
        else:
            handler_guard = None
            self._body(stmt.body, scope, guards, tc)
        for h in stmt.handlers:
            if h.name:
                scope.other.add(h.name)
            if h.type is not None:
                self._expr(h.type, scope, guards)
            if handler_guard is not None and h in catching:
                self._body(h.body, scope, (*guards, handler_guard), tc)
            else:
                self._body(h.body, scope, guards, tc)
        self._body(stmt.orelse, scope, guards, tc)
        self._body(stmt.finalbody, scope, guards, tc)

    def _record(
        self,
        module: str,
        names: tuple[str, ...],
        alias: str | None,
        line: int,
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
        *,
        dynamic: bool = False,
        probe: bool = False,
    ) -> None:
        self.imports.append(
            _RawImport(module, names, alias, line, scope, guards, tc, dynamic, probe)
        )

    def _import(
        self, stmt: ast.Import, scope: _Scope, guards: tuple[_Guard, ...], tc: bool
    ) -> None:
        for a in stmt.names:
            if not _is_mooncake(a.name):
                scope.other.add(a.asname or a.name.split(".", 1)[0])
                continue
            self._record(a.name, (), a.asname, stmt.lineno, scope, guards, tc)
            if a.asname:
                scope.mooncake[a.asname] = (a.name, None)
            else:
                # `import mooncake.pg` binds the top-level package name.
                scope.mooncake[MOONCAKE_ROOT] = (MOONCAKE_ROOT, None)

    def _import_from(
        self,
        stmt: ast.ImportFrom,
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
    ) -> None:
        module = stmt.module
        if stmt.level or not _is_mooncake(module):
            for a in stmt.names:
                if a.name != "*":
                    scope.other.add(a.asname or a.name)
            return
        assert module is not None  # _is_mooncake(None) is False
        plain: list[ast.alias] = []
        for a in stmt.names:
            if module == MOONCAKE_ROOT and _is_submodule_name(a.name):
                sub = f"{MOONCAKE_ROOT}.{a.name}"
                self._record(sub, (), a.asname, stmt.lineno, scope, guards, tc)
                scope.mooncake[a.asname or a.name] = (sub, None)
            else:
                plain.append(a)
        if not plain:
            return
        names = tuple(a.name for a in plain)
        alias = plain[0].asname if len(plain) == 1 else None
        self._record(module, names, alias, stmt.lineno, scope, guards, tc)
        for a in plain:
            if a.name != "*":
                scope.mooncake[a.asname or a.name] = (module, a.name)

    def _dynamic_import(self, call: ast.Call, scope: _Scope, guards: tuple[_Guard, ...]) -> None:
        found = _dynamic_target(call)
        if found is None:
            return
        module, names, probe = found
        self._record(
            module,
            names,
            None,
            call.lineno,
            scope,
            guards,
            False,
            dynamic=True,
            probe=probe,
        )

    # -- backend literals --------------------------------------------------

    def _add_backend(
        self, value: str, line: int, scope: _Scope, context: str, subject: str | None
    ) -> None:
        feature = classify_feature(self.path, scope.qualname)
        if context != "pg-call" and feature in _NON_PG_FEATURES:
            # There "mooncake" names the KV transfer / storage backend, not a
            # torch process-group backend (checked against SGLang releases).
            return
        self.backends.append(
            BackendLiteral(
                value=value,
                path=self.path,
                line=line,
                function=scope.qualname,
                context=context,
                subject=subject,
                feature=feature,
            )
        )

    def _call_literals(self, call: ast.Call, scope: _Scope) -> None:
        callee = dotted(call.func)
        is_pg = _is_pg_function(callee)
        if is_pg:
            for arg in call.args:
                s = _str_const(arg)
                if s in _BACKEND_VALUES:
                    assert s is not None
                    self._add_backend(s, arg.lineno, scope, "pg-call", callee)
        for kw in call.keywords:
            if kw.arg != "backend":
                continue
            s = _str_const(kw.value)
            if s in _BACKEND_VALUES:
                assert s is not None
                context = "pg-call" if is_pg else "backend="
                self._add_backend(s, kw.value.lineno, scope, context, callee)

    def _compare_literals(self, node: ast.Compare, scope: _Scope) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            pair = (operands[i], operands[i + 1])
            for lit_side, other in (pair, pair[::-1]):
                subject = _subject(other)
                if not _backend_subject_ok(subject):
                    continue
                for lit in self._literals_in(lit_side):
                    self._add_backend(lit[0], lit[1], scope, "compare", subject)

    @staticmethod
    def _literals_in(node: ast.expr) -> list[tuple[str, int]]:
        elts: Sequence[ast.expr] = (
            node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        )
        found: list[tuple[str, int]] = []
        for e in elts:
            s = _str_const(e)
            if s in _BACKEND_VALUES:
                assert s is not None
                found.append((s, e.lineno))
        return found

    def _assign_literals(self, stmt: ast.stmt, scope: _Scope) -> None:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            return
        s = _str_const(value)
        if s not in _BACKEND_VALUES:
            return
        assert s is not None
        for t in targets:
            subject = dotted(t)
            if _backend_subject_ok(subject):
                self._add_backend(s, value.lineno, scope, "assign", subject)

    # -- resolution --------------------------------------------------------

    def resolve_calls(self, known_modules: set[str]) -> list[CallFact]:
        facts: list[CallFact] = []
        for call, scope in self.calls:
            callee = dotted(call.func)
            if callee is None:
                continue
            root, *attrs = callee.split(".")
            binding = scope.lookup(root)
            if binding is None:
                continue
            module, obj = binding
            if obj is not None:
                name = ".".join([obj, *attrs])
            else:
                # Walk down submodules as far as they are known modules.
                while len(attrs) > 1 and f"{module}.{attrs[0]}" in known_modules:
                    module = f"{module}.{attrs.pop(0)}"
                if not attrs:
                    continue  # calling a module object: not meaningful
                name = ".".join(attrs)
            facts.append(
                CallFact(
                    module=module,
                    name=name,
                    path=self.path,
                    line=call.lineno,
                    function=scope.qualname,
                    positional=sum(1 for a in call.args if not isinstance(a, ast.Starred)),
                    keywords=tuple(k.arg for k in call.keywords if k.arg is not None),
                    starred=any(isinstance(a, ast.Starred) for a in call.args)
                    or any(k.arg is None for k in call.keywords),
                )
            )
        return facts

    def import_facts(self) -> list[ImportFact]:
        # Per try statement: modules imported in its body and in its handlers.
        body_mods: dict[int, set[str]] = {}
        handler_mods: dict[int, set[str]] = {}
        for raw in self.imports:
            for g in raw.guards:
                target = body_mods if g.in_body else handler_mods
                target.setdefault(g.try_id, set()).add(raw.module)
        facts: list[ImportFact] = []
        for raw in self.imports:
            alts: set[str] = set()
            for g in raw.guards:
                other = handler_mods if g.in_body else body_mods
                alts |= other.get(g.try_id, set())
            alts.discard(raw.module)
            guarded = any(g.in_body for g in raw.guards)
            falls_back = any(g.in_body and g.falls_back for g in raw.guards)
            function = raw.scope.qualname
            facts.append(
                ImportFact(
                    module=raw.module,
                    names=raw.names,
                    alias=raw.alias,
                    path=self.path,
                    line=raw.line,
                    function=function,
                    optional=falls_back or raw.type_checking or raw.probe,
                    alternatives=tuple(sorted(alts)),
                    feature=classify_feature(self.path, function, raw.module),
                    dynamic=raw.dynamic,
                    type_checking=raw.type_checking,
                    guarded=guarded,
                    probe=raw.probe,
                )
            )
        return facts
