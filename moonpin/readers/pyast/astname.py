"""The dotted name of an ``ast`` expression, and its text, on their own: the launch-argument
evaluator (the runtime check's, too) needs them, and :mod:`moonpin.readers.pyast.usage` costs
it milliseconds to import."""

from __future__ import annotations

import ast

__all__ = ["dotted", "shown", "type_checking", "unparse"]


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


def shown(value: object, conv: str = "r") -> str:
    """``repr(value)`` (``conv`` ``"r"``), ``ascii`` (``"a"``) or ``str`` (``"s"``), also
    for an int past CPython's int-string limit (a hex literal in a read source, see
    :func:`unparse`), whose decimal spelling raises ValueError: its first hex digits and
    its size."""
    try:
        return repr(value) if conv == "r" else ascii(value) if conv == "a" else str(value)
    except ValueError:
        if type(value) is int:
            return f"{hex(value)[:18]}… (an int of {value.bit_length()} bits)"
        raise


def unparse(node: ast.AST) -> str:
    """``ast.unparse(node)``, also where it raises on an int literal: CPython's limit on
    int-string conversion (``sys.set_int_max_str_digits``, 4,300 digits by default) bounds
    only the bases that are not a power of two, so a 5,000-digit hex literal parses, while
    ``ast.unparse`` writes every int with ``repr``, in decimal, and raises ValueError. Such
    an int is written in hex, as a source can spell it."""
    try:
        return ast.unparse(node)
    except ValueError:
        pass

    class _Hex(ast.NodeTransformer):
        def visit_Constant(self, c: ast.Constant) -> ast.AST:
            if type(c.value) is int:
                try:
                    repr(c.value)
                except ValueError:  # past the decimal limit: its hex spelling, verbatim
                    return ast.Name(id=hex(c.value))
            return c

    import copy

    return ast.unparse(_Hex().visit(copy.deepcopy(node)))
