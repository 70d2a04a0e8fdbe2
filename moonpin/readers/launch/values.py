"""Literal values in SGLang's ``server_args.py`` and its arg_groups files, read with ``ast``:
what :mod:`moonpin.readers.launch.server_args` records for a default or a choice. :func:`literal_of`
evaluates a node with module constants resolved (:func:`module_constants`), else gives
:data:`NOT_LITERAL`; :func:`recorded_value` turns that into the recorded value (:data:`EXPR`
for anything else); :func:`name_of` is the dotted name of a node.

Shared by the flag reader (:mod:`moonpin.readers.launch.flags`), the rule reader
(:mod:`moonpin.readers.launch.rules`) and :mod:`moonpin.readers.launch.server_args` itself.
Nothing is imported or executed.
"""

from __future__ import annotations

import ast

__all__ = ["EXPR", "NOT_LITERAL", "literal_of", "module_constants", "name_of", "recorded_value"]


EXPR = "<expr>"


# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

NOT_LITERAL = object()


def literal_of(node: ast.expr | None, env: dict[str, object]) -> object:
    """Literal value of ``node`` with module constants resolved, else ``NOT_LITERAL``."""
    if node is None:
        return NOT_LITERAL
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, NOT_LITERAL)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return env.get(f"{node.value.id}.{node.attr}", NOT_LITERAL)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [literal_of(e, env) for e in node.elts]
        if any(i is NOT_LITERAL for i in items):
            return NOT_LITERAL
        return list(items) if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = literal_of(node.operand, env)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else NOT_LITERAL
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = literal_of(node.left, env), literal_of(node.right, env)
        if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            return [*left, *right]
        return NOT_LITERAL
    if isinstance(node, ast.Dict):
        return NOT_LITERAL
    return NOT_LITERAL


def module_constants(tree: ast.Module, seed: dict[str, object]) -> dict[str, object]:
    env: dict[str, object] = dict(seed)
    for stmt in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name):
            v = literal_of(value, env)
            if v is not NOT_LITERAL:
                env[target.id] = v
    return env


def recorded_value(v: object) -> object:
    """Literal -> recorded default (lists become tuples so Flag stays hashable)."""
    if v is NOT_LITERAL:
        return EXPR
    if isinstance(v, list):
        return tuple(v)
    return v


def name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = name_of(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
