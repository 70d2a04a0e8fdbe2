"""Small ``ast`` readings the loader rules share: a loader file parsed (never run), the
f-strings it builds module names with, ``"".join(v.split(".")[:N])``, ``os.getenv``
defaults, sets of string constants, the imports a package's top levels run (a package no
rule reads is followed by :mod:`moonpin.preflight.extensions.pyread`). Each reading of
a file is kept in the file-facts memo (:func:`moonpin.kb.cache.facts_memo`) under the
file's stamp, so a warm start parses nothing. ``ast`` is imported only where a file is
parsed."""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

    from moonpin.preflight.access.identity import Identity

__all__ = ["Unrunnable", "attr_path", "denied", "env_defaults", "fstring_heads", "imports_run",
           "join_split", "mentions", "parse", "reading", "str_sets", "unread"]

_CAP = 4 << 20  # a loader file; a bigger one is not a loader


def reading(kind: str, path: str, compute: Callable[[], dict[str, Any] | None],
            within: Confined = NOWHERE) -> dict[str, Any] | None:
    """``compute()`` (a rule's reading of the file at ``path``: plain values) for the file
    as it is now, remembered under its stamp; None when it cannot be read."""
    try:
        got = facts_memo().get(f"ext-{kind}-v1", path, compute,
                               lambda v: v is None or isinstance(v, dict), within=within.root)
    except OSError:  # no stamp (a dangling link, say): read unremembered, as the import would
        got = compute()
    return got if isinstance(got, dict) else None


class Unrunnable(Exception):
    """A loader file the real import cannot run: ``why`` its loader never runs (CPython's
    finder passes over it) or what CPython raises reading it."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def parse(path: str, within: Confined = NOWHERE, *, top: bool = False) -> ast.Module | None:
    """The file at ``path`` parsed (None: unreadable, too big, or not Python as this
    interpreter reads it); ``top``: only what its top level runs is wanted, its functions'
    bodies may be left unparsed (:func:`moonpin.readers.pyast.toplevel.top_level`: then a
    parser's limit passed inside one is not seen). Raises :class:`Unrunnable` where the
    real import cannot run it, whichever CPython runs it:

    * it is a package's missing ``__init__.py``: the package imports as an empty namespace
      package;
    * it is not a regular file (a FIFO, a link to ``/dev/zero`` or ``/dev/null``, a
      dangling link, a folder): CPython's ``FileFinder`` takes a module or a package's
      ``__init__`` only when ``stat`` (links followed) says regular file, so the module is
      not found, or its package imports as an empty namespace package, and the loader in
      it never runs;
    * it cannot be read by this process (a check run as the worker's user): the import
      raises ``PermissionError`` (a check of another user's files asks :func:`denied`);
    * its source is nested past the parser's own limits (``SyntaxError: too many nested
      parentheses``, ``MemoryError``) or an int literal past the digits limit (CPython
      3.10.7 and later), which the import raises."""
    import ast
    import stat

    from moonpin.preflight.installed.image_facts import kind_of, read_bytes

    if not os.path.lexists(path):
        if os.path.basename(path) == "__init__.py" and os.path.isdir(os.path.dirname(path)):
            raise Unrunnable(path, "missing: its package imports as an empty namespace "
                             "package, so the loader that file holds never runs")
        return None
    try:
        if (os.path.islink(path) and not os.path.exists(path)) or not stat.S_ISREG(
                os.stat(path).st_mode):
            raise Unrunnable(path, f"{kind_of(path)}, not a regular file: CPython's "
                             "importer passes over it (a package whose __init__.py it is "
                             "imports as an empty namespace package; a module is not "
                             "found), so the loader in it never runs")
        data = read_bytes(path, _CAP, "loader", within)
    except OSError as e:
        import errno

        if e.errno in (errno.EACCES, errno.EPERM):  # checked as the worker's own user
            import sys

            from moonpin.preflight.pyimport import pycode

            # SourceLoader.get_code only stats a source whose valid bytecode cache it can
            # read, and runs the cache: the import goes on, what it does is not read here
            if path.endswith(".py") and pycode.runs(path, sys.version_info[:2]) is not None:
                return None
            raise Unrunnable(path, f"not readable by this process's user (uid "
                             f"{os.geteuid()}): the import raises PermissionError") from None
        return None
    try:
        if top:
            from moonpin.readers.pyast.toplevel import top_level

            return top_level(data, path)
        return ast.parse(data, path)
    except (RecursionError, MemoryError) as e:
        raise Unrunnable(path, f"nested past the parser's limits: the import raises "
                         f"{type(e).__name__}") from None
    except SyntaxError as e:  # another Python's newer syntax is not this one's to judge
        # the parser's fixed limits, every CPython's; and the decimal digits of an int
        # literal, which every CPython since 3.10.7 caps (4,300 by default)
        if str(e.msg).startswith(("too many ", "Exceeds the limit")):
            raise Unrunnable(path, f"past the parser's limits: the import raises "
                             f"{type(e).__name__}: {e.msg}") from None
        return None
    except ValueError:  # a NUL byte: the import raises too, but the file says nothing
        return None


def unread(path: str, within: Confined = NOWHERE) -> str:
    """``path`` and why a rule has no reading of it, in words (said where :func:`parse`,
    or :func:`reading` over it, gave None): what the confined read refuses ("is 2,147,483,648
    bytes, over the 4 MiB limit for a loader", "lies outside the image root", "is a FIFO
    (named pipe), not a regular file"), what the parser says (a NUL byte, another Python's
    syntax: the import may raise), else that it holds nothing this check reads. Read again
    only on that path: a rule's reading of a healthy file never asks."""
    import ast

    from moonpin.preflight.installed.image_facts import read_bytes

    try:
        data = read_bytes(path, _CAP, "loader", within)
    except OSError as e:
        return f"{path} {getattr(e, 'reason', None) or 'cannot be read: ' + str(e.strerror)}"
    try:
        ast.parse(data, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        said = e.msg if isinstance(e, SyntaxError) else str(e) or type(e).__name__
        return f"{path} does not parse as this Python reads it ({type(e).__name__}: {said})"
    return f"{path} holds no loading this check reads"


def denied(paths: Iterable[str], who: Identity, root: str | None,
           version: tuple[int, int] | None = None) -> Unrunnable | None:
    """The first of ``paths`` (the files an import runs or maps) the worker's user ``who``
    cannot reach, judged by their modes as the kernel and the importer would: the folder the
    importer lists to find it (:meth:`~moonpin.preflight.access.identity.Identity.may_list`),
    then the file (:meth:`~moonpin.preflight.access.identity.Identity.may_read`; for a ``.py``,
    its bytecode cache instead when CPython of ``version`` takes it), as an :class:`Unrunnable`:
    its import raises ``PermissionError`` (a module or package ``__init__``) or ``ImportError:
    …: cannot open shared object file: Permission denied`` (a build). None: every one is
    readable (always so for root)."""
    for path in paths:
        # the importer lists the folder that holds the name (a package's: its parent) first
        listed = os.path.dirname(path)
        if os.path.basename(path).startswith("__init__."):
            listed = os.path.dirname(listed)
        if not who.may_list(listed, root):
            return Unrunnable(listed, f"not listable by the worker's user ({who.said}): the "
                              "importer finds nothing in it, so the import raises "
                              "ModuleNotFoundError")
        if path.endswith(".py") and version is not None:
            # SourceLoader.get_code takes a valid bytecode cache it can read without
            # reading the source (it only stats it), and reads the source when it cannot
            from moonpin.preflight.pyimport import pycode

            pyc = pycode.runs(path, version)
            if pyc is not None and who.may_read(pyc, root):
                continue
        if not who.may_read(path, root):
            return Unrunnable(path, f"not readable by the worker's user ({who.said}): the "
                              "import raises PermissionError" if not path.endswith(".so")
                              else f"not readable by the worker's user ({who.said}): the "
                              "import raises ImportError (cannot open shared object file: "
                              "Permission denied)")
    return None


def fstring_heads(tree: ast.AST) -> Iterator[tuple[str, list[str], ast.JoinedStr]]:
    """Each f-string made of one constant head and formatted names (``f"nixl_ep_cu{m}"``):
    (head, the names formatted, the node)."""
    import ast

    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr) or not node.values:
            continue
        head = node.values[0]
        if not (isinstance(head, ast.Constant) and isinstance(head.value, str)):
            continue
        names = [v.value.id for v in node.values[1:] if isinstance(v, ast.FormattedValue)
                 and isinstance(v.value, ast.Name)]
        if len(names) == len(node.values) - 1:
            yield head.value, names, node


def attr_path(node: ast.AST) -> str | None:
    """``torch.version.cuda`` for that attribute chain (None: not a plain chain): the
    importer model's one reading (:func:`moonpin.preflight.pyimport.atimport.dotted`)."""
    from moonpin.preflight.pyimport.atimport import dotted

    return dotted(node)


def join_split(node: ast.AST) -> tuple[str, str, str, int] | None:
    """``SEP.join(SRC.split(BY)[:N])`` read as (SEP, SRC's dotted name, BY, N)."""
    import ast

    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join" and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str) and len(node.args) == 1):
        return None
    sub = node.args[0]
    if not (isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Slice)
            and sub.slice.lower is None and isinstance(sub.slice.upper, ast.Constant)
            and isinstance(sub.slice.upper.value, int)):
        return None
    call = sub.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "split" and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
        return None
    src = attr_path(call.func.value)
    if src is None:
        return None
    return node.func.value.value, src, call.args[0].value, sub.slice.upper.value


def env_defaults(tree: ast.AST) -> dict[str, str | None]:
    """Each ``os.getenv(NAME[, DEFAULT])`` / ``os.environ.get(...)`` with a constant name:
    NAME -> DEFAULT (None: no default, or not a constant)."""
    import ast

    out: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            continue
        f = attr_path(node.func) or ""
        if f not in ("os.getenv", "os.environ.get", "getenv", "environ.get"):
            continue
        default = node.args[1] if len(node.args) > 1 else None
        out.setdefault(node.args[0].value, default.value if isinstance(
            default, ast.Constant) and isinstance(default.value, str) else None)
    return out


def str_sets(tree: ast.AST) -> list[list[str]]:
    """Every set or tuple literal made only of strings (the values a loader compares
    with), in the order written."""
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            out.append([e.value for e in node.elts])  # type: ignore[attr-defined]
    return out


def mentions(tree: ast.AST) -> set[str]:
    """Every string constant and attribute name in ``tree`` (what it mentions)."""
    import ast

    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def _file_imports(path: str, within: Confined) -> dict[str, Any] | None:
    """The imports a module's top level runs (into ``if``/``try``/``with`` bodies, never a
    function's), in order: ``[module, level, names, line, caught]``, ``caught`` the class
    names the ``except`` clauses around it name (``"*"``: a bare ``except``)."""
    import ast

    from moonpin.preflight.pyimport.atimport import caught_names

    tree = parse(path, within, top=True)
    if tree is None:
        return None
    out: list[list[Any]] = []

    def walk(body: list[ast.stmt], caught: list[str]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                for a in stmt.names:
                    out.append([a.name, 0, [], stmt.lineno, caught])
            elif isinstance(stmt, ast.ImportFrom):
                out.append([stmt.module or "", stmt.level, [a.name for a in stmt.names],
                            stmt.lineno, caught])
            elif isinstance(stmt, ast.Try):
                walk(stmt.body, [*caught, *caught_names(stmt.handlers)])
                for part in (*(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                    walk(part, caught)
            elif isinstance(stmt, (ast.If, ast.For, ast.While)):
                walk(stmt.body, caught)
                walk(stmt.orelse, caught)
            elif isinstance(stmt, ast.With):
                walk(stmt.body, caught)

    walk(tree.body, [])
    return {"imports": out}


def imports_run(folder: str, package: str, names: Iterable[str],
                within: Confined = NOWHERE) -> list[tuple[str, str, int, list[str]]]:
    """Each import of one of the top-level ``names`` that ``import <package>`` (the package
    in ``folder``) runs, following the package's own modules its top levels import, in the
    order met: (the name, the file, the line, the ``except`` classes around it). Files the
    import could not run are passed over (the rule judging the package says so)."""
    wanted = set(names)
    out: list[tuple[str, str, int, list[str]]] = []
    queue = [(os.path.join(folder, "__init__.py"), package)]
    seen: set[str] = set()

    def module(dotted: str) -> list[tuple[str, str]]:
        """The files ``import <dotted>`` (inside the package) runs: each package
        ``__init__.py`` on the way and the module."""
        parts = dotted.split(".")[1:]
        files = []
        for i in range(1, len(parts) + 1):
            base = os.path.join(folder, *parts[:i])
            if os.path.isfile(os.path.join(base, "__init__.py")):
                files.append((os.path.join(base, "__init__.py"), ".".join([package, *parts[:i]])))
            elif i == len(parts) and os.path.isfile(base + ".py"):
                files.append((base + ".py", ".".join([package, *parts[:i - 1]])))
        return files

    while queue:
        path, pkg = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            got = reading("imports", path, lambda p=path: _file_imports(p, within),  # type: ignore[misc]
                          within)
        except Unrunnable:
            continue
        for mod, level, froms, line, caught in (got or {}).get("imports", ()):
            if level:
                head = pkg.split(".")[:len(pkg.split(".")) - (level - 1)]
                mod = ".".join([*head, mod] if mod else head)
            top = mod.split(".")[0]
            if top in wanted:
                out.append((top, path, line, list(caught)))
            elif top == package:
                targets = [mod] + [f"{mod}.{n}" for n in froms if n != "*"]
                for t in targets:
                    queue.extend(f for f in module(t) if f[0] not in seen)
    return out
