"""Evaluate a loader rule's key expression for one ``torch.__version__``, without Python.

nixl's backend imports ``nixl_ep_cpp_torch{key}`` with ``key =
"".join(torch.__version__.split(".")[:2])`` (``nixl_ep_cu13/__init__.py``). To tell which
torch releases a build named ``..._torch214`` serves, the scraper evaluates the expression
as the file spells it for each torch release on the index. Only what such expressions use
is understood: string and integer constants, ``torch.__version__``, the ``str`` methods
below, subscripts and slices, list/tuple displays and f-strings. Anything else is
:class:`KeyError`-free ``None``: the key cannot be evaluated (never guessed).
"""

from __future__ import annotations

import ast
from typing import Any

__all__ = ["evaluate", "torch_version_expr"]

_STR_METHODS = frozenset({"split", "join", "replace", "partition", "rpartition", "strip",
                          "lstrip", "rstrip", "lower", "upper", "rsplit"})
_MAX_LEN = 4096  # no result of these expressions is longer; a bound on hostile input


def torch_version_expr(node: ast.AST) -> bool:
    """Whether ``node`` is ``torch.__version__`` (or ``torch.version.__version__``)."""
    return isinstance(node, ast.Attribute) and node.attr == "__version__" and (
        (isinstance(node.value, ast.Name) and node.value.id == "torch")
        or (isinstance(node.value, ast.Attribute) and node.value.attr == "version"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "torch"))


class _Unknown(Exception):
    pass


def evaluate(expr: str, torch_version: str) -> str | None:
    """The value of ``expr`` (a Python expression as a rule records it) when
    ``torch.__version__ == torch_version``, as a string; None when it cannot be told."""
    if len(expr) > _MAX_LEN:
        return None
    try:
        tree = ast.parse(expr, mode="eval")
        value = _eval(tree.body, torch_version, 0)
    except (_Unknown, SyntaxError, ValueError, TypeError, IndexError, RecursionError,
            MemoryError):  # what the str methods and subscripts raise on odd operands
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) else None


def _eval(node: ast.AST, tv: str, depth: int) -> Any:
    if depth > 32:
        raise _Unknown
    d = depth + 1
    if torch_version_expr(node):
        return tv
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, tv, d) for e in node.elts]
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            got = _eval(v.value, tv, d) if isinstance(v, ast.FormattedValue) else _eval(v, tv, d)
            parts.append(str(got))
        return _bounded("".join(parts))
    if isinstance(node, ast.Subscript):
        base = _eval(node.value, tv, d)
        if not isinstance(base, (str, list)):
            raise _Unknown
        if isinstance(node.slice, ast.Slice):
            bounds = [None if b is None else _eval(b, tv, d)
                      for b in (node.slice.lower, node.slice.upper, node.slice.step)]
            if not all(b is None or (isinstance(b, int) and not isinstance(b, bool))
                       for b in bounds):
                raise _Unknown
            return base[slice(*bounds)]
        i = _eval(node.slice, tv, d)
        if not isinstance(i, int) or isinstance(i, bool):
            raise _Unknown
        return base[i]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in _STR_METHODS and not node.keywords:
        obj = _eval(node.func.value, tv, d)
        args = [_eval(a, tv, d) for a in node.args]
        if not isinstance(obj, str) or len(args) > 2:
            raise _Unknown
        if node.func.attr == "join":
            if len(args) != 1 or not isinstance(args[0], list) \
                    or not all(isinstance(a, str) for a in args[0]):
                raise _Unknown
            return _bounded(obj.join(args[0]))
        if not all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in args):
            raise _Unknown
        out = getattr(obj, node.func.attr)(*args)
        return list(out) if isinstance(out, tuple) else out
    raise _Unknown


def _bounded(s: str) -> str:
    if len(s) > _MAX_LEN:
        raise _Unknown
    return s
