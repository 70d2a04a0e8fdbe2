"""The rules (:class:`moonpin.kb.launch.Rule`) of SGLang's launch arguments, read with ``ast``: the
``assert`` and ``raise`` statements of ``ServerArgs``' methods (and of the arg_groups
hooks), with their guards, inlined locals, messages, reads and the writes before them
(:class:`RuleWalker`; :func:`reads_of`, :func:`fstring`, :func:`is_self`).

The rules it follows are in :mod:`moonpin.readers.launch.server_args`'s docstring, which puts
the pieces together and re-exports :func:`reads_of`. Nothing is imported or executed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from typing import Literal

from moonpin.kb.launch import Rule, Write
from moonpin.readers.launch.values import EXPR, name_of
from moonpin.readers.pyast.astname import unparse

__all__ = ["RuleWalker", "fstring", "is_self", "reads_of"]


# ---------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------


class _Inline(ast.NodeTransformer):
    def __init__(self, env: dict[str, ast.expr]) -> None:
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if isinstance(node.ctx, ast.Load) and node.id in self.env:
            return self.env[node.id]
        return node


def _inline(node: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    import copy

    return _Inline(env).visit(copy.deepcopy(node))  # type: ignore[no-any-return]


_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
}


def _negate(node: ast.expr) -> ast.expr:
    """``not node``, folding ``not not x`` and flipping single comparisons."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return node.operand
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return ast.Compare(
            left=node.left, ops=[_FLIP[type(node.ops[0])]()], comparators=node.comparators
        )
    return ast.UnaryOp(op=ast.Not(), operand=node)


def is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def reads_of(node: ast.AST) -> list[str]:
    """``X`` for every ``self.X`` read (not ``self.m(...)``) and ``self._resolved().X``."""
    called: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            called.add(id(n.func))
    out: list[str] = []
    for n in ast.walk(node):
        if not isinstance(n, ast.Attribute) or id(n) in called:
            continue
        if is_self(n.value):
            out.append(n.attr)
        elif isinstance(n.value, ast.Call) and (
            (isinstance(n.value.func, ast.Attribute) and is_self(n.value.func.value))
            or any(is_self(a) for a in n.value.args)
        ):
            out.append(n.attr)
    return list(dict.fromkeys(out))


def fstring(node: ast.JoinedStr, env: dict[str, ast.expr]) -> str:
    parts: list[str] = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
        elif isinstance(v, ast.FormattedValue):
            # keep !r / !s / !a: SGLang's messages quote values with !r
            conv = "!" + chr(v.conversion) if v.conversion > 0 else ""
            parts.append("{" + unparse(_inline(v.value, env)) + conv + "}")
    return "".join(parts)


def _message(node: ast.expr | None, env: dict[str, ast.expr]) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return fstring(node, env)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _message(node.left, env) + _message(node.right, env)
    return unparse(node)


def _and(parts: Sequence[ast.expr]) -> str | None:
    if not parts:
        return None
    return " and ".join(
        f"({unparse(p)})"
        if isinstance(p, ast.BoolOp) and isinstance(p.op, ast.Or)
        else unparse(p)
        for p in parts
    )


def _returns(body: Sequence[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)


class RuleWalker:
    """Rules of one function. An ``if ...: return`` guards the statements after it, and a
    raise inside an ``except`` handler is no rule (it fires when the ``try`` failed).
    ``hooks`` adds what the arg_groups hooks need (see :func:`hook_rules`):
    ``declare_resolution`` writes."""

    def __init__(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, path: str, *, hooks: bool = False
    ) -> None:
        self.func = func
        self.path = path
        self.hooks = hooks
        self.env: dict[str, ast.expr] = {}
        self.writes: list[Write] = []
        self.rules: list[Rule] = []

    def run(self) -> list[Rule]:
        self.block(self.func.body, [])
        return self.rules

    def block(self, body: Iterable[ast.stmt], guards: list[ast.expr]) -> None:
        guards = list(guards)
        for stmt in body:
            test = _inline(stmt.test, self.env) if isinstance(stmt, ast.If) else None
            self.stmt(stmt, guards)
            if isinstance(stmt, ast.Return):
                return
            if isinstance(stmt, ast.If) and test is not None:
                body_returns, else_returns = _returns(stmt.body), _returns(stmt.orelse)
                if body_returns and else_returns:
                    return
                if body_returns:
                    guards.append(_negate(test))
                elif else_returns:
                    guards.append(test)

    def _emit(
        self,
        kind: Literal["assert", "raise"],
        cond: ast.expr,
        guards: list[ast.expr],
        msg: ast.expr | None,
        line: int,
    ) -> None:
        reads: list[str] = reads_of(cond)
        for g in guards:
            reads.extend(reads_of(g))
        rd = tuple(dict.fromkeys(reads))
        writes = tuple(w for w in self.writes if w.attr in rd)
        self.rules.append(
            Rule(
                kind=kind,
                condition=unparse(cond),
                message=_message(msg, self.env),
                reads=rd,
                guard=_and(guards),
                function=self.func.name,
                line=line,
                path=self.path,
                writes=writes,
            )
        )

    def stmt(self, stmt: ast.stmt, guards: list[ast.expr]) -> None:
        if isinstance(stmt, ast.Assert):
            cond = _negate(_inline(stmt.test, self.env))
            self._emit("assert", cond, guards, stmt.msg, stmt.lineno)
        elif isinstance(stmt, ast.Raise):
            if stmt.exc is None:
                return
            msg: ast.expr | None = None
            if isinstance(stmt.exc, ast.Call) and stmt.exc.args:
                msg = stmt.exc.args[0]
            if guards:
                self._emit("raise", guards[-1], guards[:-1], msg, stmt.lineno)
            else:
                self._emit("raise", ast.Constant(value=True), [], msg, stmt.lineno)
        elif isinstance(stmt, ast.If):
            test = _inline(stmt.test, self.env)
            self.block(stmt.body, [*guards, test])
            if stmt.orelse:
                self.block(stmt.orelse, [*guards, _negate(test)])
        elif isinstance(stmt, ast.Assign):
            value = _inline(stmt.value, self.env)
            for t in stmt.targets:
                if isinstance(t, ast.Name) and len(stmt.targets) == 1:
                    self.env[t.id] = value
                elif isinstance(t, ast.Attribute) and is_self(t.value):
                    self.writes.append(Write(t.attr, unparse(value), _and(guards), stmt.lineno))
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            t = stmt.target
            if isinstance(t, ast.Attribute) and is_self(t.value):
                self.writes.append(Write(t.attr, EXPR, _and(guards), stmt.lineno))
            elif isinstance(t, ast.Name):
                if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                    self.env[t.id] = _inline(stmt.value, self.env)
                else:
                    self.env.pop(t.id, None)
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            self.block(stmt.body, guards)
            self.block(stmt.orelse, guards)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self.block(stmt.body, guards)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.block(getattr(stmt, "body", []), guards)
            # A raise in an except handler fires when the try body failed, not when the
            # guards hold: no rule of ours can say when that is.
            self.block(getattr(stmt, "orelse", []), guards)
            self.block(getattr(stmt, "finalbody", []), guards)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                self.block(case.body, guards)
        elif self.hooks and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            name = name_of(call.func) or ""
            if name.rsplit(".", 1)[-1] == "declare_resolution" and call.args and is_self(
                call.args[0]
            ):
                for k in call.keywords:
                    if k.arg is not None:
                        text = unparse(_inline(k.value, self.env))
                        self.writes.append(Write(k.arg, text, _and(guards), stmt.lineno))
