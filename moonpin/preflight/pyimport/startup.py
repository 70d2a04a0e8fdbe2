"""A ``.pth`` ``import`` line that ends the interpreter while ``site`` starts it.

``site.addpackage`` runs every ``import`` line of every ``.pth`` file of a site folder at each
start, and catches ``Exception`` only: a line that raises ``SystemExit`` (``sys.exit(3)``,
``raise SystemExit``) or ``KeyboardInterrupt`` stops the interpreter with "Fatal Python error:
init_import_site", and ``os._exit(0)`` / ``os.abort()`` end the process on the spot; either
way no program runs, SGLang's worker included. Read with ``ast``, never run; only what the
line certainly does is claimed: its top-level statements in order, up to the first that may
do something else than import a standard-library module. (:mod:`sitefiles` keeps each line's
answer with the file's other facts, and finds the first such line ``site`` reaches.)
"""

from __future__ import annotations

import sys

__all__ = ["line_exit"]

#: Exceptions ``site`` does not catch (not subclasses of ``Exception``).
_UNCAUGHT = frozenset({"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException",
                       "BaseExceptionGroup"})
#: Calls that end the interpreter (``site`` runs the line in its own namespace, which has
#: ``sys`` and ``os`` imported).
_ENDS = {("sys", "exit"): "SystemExit", ("os", "_exit"): "os._exit", ("os", "abort"): "os.abort"}


def line_exit(line: str) -> str | None:
    """What an ``import`` line certainly does that ends the interpreter (the statement, as
    written), or None."""
    import ast

    from moonpin.readers.pyast.astname import unparse

    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    for node in tree.body:
        if isinstance(node, ast.Import) and all(a.name.partition(".")[0] in std
                                                for a in node.names):
            continue
        if isinstance(node, ast.Raise):
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.id if isinstance(exc, ast.Name) else None
            return unparse(node) if name in _UNCAUGHT else None
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and (f.value.id, f.attr) in _ENDS):
                return unparse(node)
        return None
    return None
