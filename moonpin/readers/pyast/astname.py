"""The dotted name of an ``ast`` expression, on its own: the launch-argument evaluator (the
runtime check's, too) needs it, and :mod:`moonpin.readers.pyast.usage` costs it milliseconds to
import."""

from __future__ import annotations

import ast

__all__ = ["dotted", "type_checking"]


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` test is ``TYPE_CHECKING`` (``typing.TYPE_CHECKING``, any module's):
    false at run time, so its body is for type checkers and never runs."""
    name = dotted(test)
    return name is not None and name.rsplit(".", 1)[-1] == "TYPE_CHECKING"
