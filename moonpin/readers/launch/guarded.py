"""The imports SGLang runs under a test on a launch argument's value, read with ``ast``.

Pure: source bytes in, facts out; nothing is imported or run. One file at a time
(:func:`read_file`), for one option's attribute name (``dest``: ``elastic_ep_backend``);
then :func:`for_choice` says which of those imports one choice makes SGLang run.

What a *test on the argument* is here (the shapes SGLang 0.5.4-0.5.23 use; anything else
naming ``dest`` is said "unread", never guessed):

* the argument: any attribute ``<x>.<dest>`` (``self.server_args.elastic_ep_backend``,
  ``get_global_server_args().elastic_ep_backend``, ``get_exec().moe.elastic_ep_backend``),
  a bare name ``<dest>`` (a parameter SGLang passes it through by its own name:
  ``dist_barrier_after_load(elastic_ep_backend=...)``), and a local bound from either
  (``backend = cfg.elastic_ep_backend``);
* compared with string literals or ``None``: ``==``/``!=``/``is``/``is not``, ``in``/``not in``
  a tuple, list or set of them; its own truth (``if cfg.elastic_ep_backend:``);
* combined with ``and``/``or``/``not``, other conditions being unknown; a local bound to such
  a condition (``use_mooncake_te = (... or cfg.elastic_ep_backend == "mooncake")``, the latest
  assignment in statement order wins, as :mod:`moonpin.readers.launch.rules` does);
* where it guards an import: the ``if`` body (its ``else``: the test's negation), what
  follows an ``if`` whose body ends in ``return``/``raise`` (an early-return guard), or
  an ``assert``; a ``def`` or ``class`` under a test carries it into its body.

Each import under such a test gets its truth for every value the file's tests name, plus
:data:`OTHER` (a choice no test here names) and :data:`NONE` (``None``): 2 runs (as far as
the tests on the argument go), 1 may run (other conditions decide), 0 does not, -1 unread.
An import belongs to a choice when the choice makes it likelier to run than the option's
default does (:func:`for_choice`): ``cfg.elastic_ep_backend is not None`` counts for every
choice, ``A or backend == "x"`` for ``x`` only. The default is the one SGLang's own
declaration gives (a class-level ``<dest>: ... = <literal>``, found in the same files).

Only imports of packages outside SGLang and the standard library are kept (what the worker
must have installed), as :func:`moonpin.readers.launch.server_args.backend_imports` does.
Calls are not followed: an import inside a function called under the test is not seen (the
import under ``if ... == "mooncake"`` in 0.5.23's ``mooncake_transfer_engine.py`` is)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from typing import NamedTuple

from moonpin.readers.pyast.astname import unparse

__all__ = ["NONE", "OTHER", "GuardedImport", "Reading", "Unread", "default_of", "for_choice",
           "mentions", "read_file"]

#: The truth key of a choice no test of the file names.
OTHER = "\0other"
#: The truth key of ``None`` (an option whose default is None and not passed).
NONE = "\0none"
#: Locals bound to locals bound to ...: past this many, the test is unread.
_DEPTH = 32
_FALSE, _MAYBE, _TRUE, _UNREAD = 0, 1, 2, -1
_FLAG = "flag"  # a local that is the argument itself


class GuardedImport(NamedTuple):
    """An import under a test on the argument: ``module`` as written, the ``names`` of a
    ``from`` import, its ``line``, the ``test``'s line (the innermost test naming the
    argument), and its truth per value (key, 0/1/2/-1: see the module's docstring)."""

    member: str
    module: str
    names: tuple[str, ...]
    line: int
    test: int
    truth: tuple[tuple[str, int], ...]


class Unread(NamedTuple):
    """A test naming the argument whose shape is not understood, above an import."""

    member: str
    line: int
    text: str
    module: str


class Reading(NamedTuple):
    """What :func:`read_file` found in one file: its guarded imports, the tests it could
    not read, the defaults it declares for the argument, and why it could not be read."""

    imports: tuple[GuardedImport, ...] = ()
    unread: tuple[Unread, ...] = ()
    defaults: tuple[str | None, ...] = ()
    error: str | None = None


def mentions(source: bytes, dest: str) -> bool:
    """Whether a file may hold a test on ``dest`` (cheap, before parsing)."""
    return dest.encode() in source


def _named(node: ast.AST, dest: str) -> bool:
    """Whether ``node`` (an expression) names the argument anywhere in any way."""
    for n in ast.walk(node):
        if ((isinstance(n, ast.Name) and dest in n.id)
                or (isinstance(n, ast.Attribute) and dest in n.attr)
                or (isinstance(n, ast.Constant) and n.value == dest)):
            return True
    return False


def _literals(node: ast.expr) -> list[str | None] | None:
    """The string literals (or None) ``node`` is: one, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out: list[str | None] = []
        for e in node.elts:
            got = _literals(e)
            if got is None or len(got) != 1:
                return None
            out += got
        return out
    return None


class _File:
    """One file's reading: the walk of its statements with the conditions above each."""

    def __init__(self, tree: ast.Module, member: str, dest: str, lines: set[int]) -> None:
        self.member, self.dest = member, dest
        #: the lines whose text names the argument: an expression elsewhere cannot name it
        #: (only a local bound from it can), so it is not walked
        self.lines = lines
        self.keys = self._keys(tree)
        self.imports: list[GuardedImport] = []
        self.unread: dict[tuple[int, str], Unread] = {}
        self.defaults: list[str | None] = []

    def _near(self, e: ast.expr) -> bool:
        """Whether ``e`` spans a line naming the argument."""
        end = getattr(e, "end_lineno", None) or e.lineno
        return any(n in self.lines for n in range(e.lineno, end + 1))

    # -- which values the file's tests name ----------------------------------------------
    def _keys(self, tree: ast.Module) -> tuple[str, ...]:
        """The string literals the file's tests (and bindings on lines naming the argument)
        compare with: only those expressions are walked (all of a tree's cost ~5x the parse)."""
        out = {OTHER, NONE}
        todo: list[ast.AST] = [tree]
        while todo:
            node = todo.pop()
            for st in ast.iter_child_nodes(node):
                if not isinstance(st, ast.stmt):
                    continue
                todo.append(st)
                if isinstance(st, (ast.If, ast.While, ast.Assert)):
                    e: ast.expr | None = st.test
                elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                    e = st.value if st.value is not None and self._near(st.value) else None
                else:
                    continue
                for n in ast.walk(e) if e is not None else ():
                    # a test on the argument, or on a local (maybe bound from it)
                    if isinstance(n, ast.Compare) and (isinstance(n.left, ast.Name)
                                                       or _named(n, self.dest)):
                        for side in (n.left, *n.comparators):
                            out.update(v for v in _literals(side) or () if isinstance(v, str))
        return tuple(sorted(out))

    # -- the truth of a condition ----------------------------------------------------------
    def _is_flag(self, e: ast.expr, env: dict[str, object]) -> bool:
        if isinstance(e, ast.Attribute):
            return e.attr == self.dest
        if isinstance(e, ast.Name):
            return env.get(e.id) == _FLAG or (e.id == self.dest and e.id not in env)
        return False

    def _mentions(self, e: ast.expr, env: dict[str, object]) -> bool:
        return _named(e, self.dest) or any(
            isinstance(n, ast.Name) and n.id in env for n in ast.walk(e))

    def truth(self, e: ast.expr, key: str, env: dict[str, object], depth: int = 0) -> int:
        """0/1/2, or -1 (unread), of ``e`` when the argument is ``key``."""
        value: str | object | None = None if key == NONE else (object() if key == OTHER
                                                               else key)
        if depth > _DEPTH:
            return _UNREAD
        if self._is_flag(e, env):
            return _TRUE if isinstance(value, object) and value not in (None, "") else _FALSE
        if isinstance(e, ast.Name) and isinstance(env.get(e.id), dict):
            return env[e.id].get(key, _UNREAD)  # type: ignore[attr-defined,no-any-return]
        if isinstance(e, ast.Constant):
            return _TRUE if e.value else _FALSE
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            t = self.truth(e.operand, key, env, depth + 1)
            return t if t in (_UNREAD, _MAYBE) else 2 - t
        if isinstance(e, ast.BoolOp):
            got = [self.truth(v, key, env, depth + 1) for v in e.values]
            stop, go = (_FALSE, min) if isinstance(e.op, ast.And) else (_TRUE, max)
            if stop in got:
                return stop
            return _UNREAD if _UNREAD in got else go(got)
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            left, right, op = e.left, e.comparators[0], e.ops[0]
            if self._is_flag(right, env) and not isinstance(op, (ast.In, ast.NotIn)):
                left, right = right, left
            if self._is_flag(left, env):
                lits = _literals(right)
                if lits is None:
                    return _UNREAD
                if isinstance(op, (ast.Eq, ast.Is, ast.In)):
                    hit = value in lits
                elif isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
                    hit = value not in lits
                else:
                    return _UNREAD
                if isinstance(op, (ast.In, ast.NotIn)) != isinstance(right, (
                        ast.Tuple, ast.List, ast.Set)):
                    return _UNREAD  # ``x in "abc"`` / ``x == ("a",)``: not a choice test
                return _TRUE if hit else _FALSE
        return _UNREAD if self._mentions(e, env) else _MAYBE

    # -- the walk ----------------------------------------------------------------------------
    def walk(self, body: list[ast.stmt], conds: list[tuple[ast.expr, int, dict[str, object]]],
             env: dict[str, object], in_class: bool = False) -> None:
        conds = list(conds)
        for st in body:
            if isinstance(st, ast.If):
                # each test with the locals as they are where it is made
                self.walk(st.body, [*conds, (st.test, st.lineno, dict(env))], env)
                negated = ast.UnaryOp(op=ast.Not(), operand=st.test)
                self.walk(st.orelse, [*conds, (negated, st.lineno, dict(env))], env)
                if not st.orelse and st.body and isinstance(st.body[-1], (ast.Return,
                                                                          ast.Raise)):
                    conds.append((negated, st.lineno, dict(env)))
            elif isinstance(st, ast.Assert):
                conds.append((st.test, st.lineno, dict(env)))
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                self._record(st, conds)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = {k: v for k, v in env.items()}
                for a in (*st.args.posonlyargs, *st.args.args, *st.args.kwonlyargs):
                    inner.pop(a.arg, None)
                self.walk(st.body, conds, inner)
            elif isinstance(st, ast.ClassDef):
                self.walk(st.body, conds, dict(env), in_class=True)
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        self._bind(t.id, st.value, env)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                if (in_class and st.target.id == self.dest and isinstance(
                        st.value, ast.Constant) and isinstance(st.value.value, (str, type(None)))):
                    self.defaults.append(st.value.value)
                if st.value is not None:
                    self._bind(st.target.id, st.value, env)
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
                self.walk(st.body, conds, env)
                self.walk(st.orelse, conds, env)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                self.walk(st.body, conds, env)
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                self.walk(st.body, conds, env)  # type: ignore[attr-defined]
                for h in st.handlers:  # type: ignore[attr-defined]
                    self.walk(h.body, conds, env)
                self.walk(st.orelse, conds, env)  # type: ignore[attr-defined]
                self.walk(st.finalbody, conds, env)  # type: ignore[attr-defined]
            elif isinstance(st, ast.Match):
                for case in st.cases:
                    self.walk(case.body, conds, env)

    def _bind(self, name: str, value: ast.expr, env: dict[str, object]) -> None:
        if not env and not self._near(value):  # names neither the argument nor a local of it
            env.pop(name, None)
            return
        # a literal only this binding compares with: a key from now on (a local bound
        # before has no truth for it: unread, never guessed)
        more = {v for n in ast.walk(value) if isinstance(n, ast.Compare)
                for side in (n.left, *n.comparators) for v in _literals(side) or ()
                if isinstance(v, str)} - set(self.keys)
        if more:
            self.keys = tuple(sorted({*self.keys, *more}))
        if self._is_flag(value, env):
            env[name] = _FLAG
        elif self._mentions(value, env):
            env[name] = {k: self.truth(value, k, env) for k in self.keys}
        else:
            env.pop(name, None)

    def _record(self, st: ast.Import | ast.ImportFrom,
                conds: list[tuple[ast.expr, int, dict[str, object]]]) -> None:
        if isinstance(st, ast.ImportFrom):
            if st.level or not st.module:
                return
            found = [(st.module, tuple(a.name for a in st.names))]
        else:
            found = [(a.name, ()) for a in st.names]
        found = [(m, n) for m, n in found if m.split(".")[0] not in sys.stdlib_module_names
                 and m.split(".")[0] != "sglang"]
        on = [(c, line, env) for c, line, env in conds if self._mentions(c, env)]
        if not found or not on:
            return
        truth: list[tuple[str, int]] = []
        for key in self.keys:
            got = [self.truth(c, key, env) for c, _, env in conds]
            t = _FALSE if _FALSE in got else _UNREAD if _UNREAD in got else min(got)
            truth.append((key, t))
        for m, names in found:
            if any(t == _UNREAD for _, t in truth):
                for c, line, env in on:
                    if any(self.truth(c, k, env) == _UNREAD for k in self.keys):
                        text = unparse(c)
                        text = text if len(text) <= 200 else text[:197] + "..."
                        self.unread.setdefault((line, m), Unread(self.member, line, text, m))
            self.imports.append(GuardedImport(self.member, m, names, st.lineno, on[-1][1],
                                              tuple(truth)))


def read_file(source: bytes | str, member: str, dest: str) -> Reading:
    """The imports of ``source`` (the file ``member``) under tests on the attribute
    ``dest``; ``Reading(error=...)`` when it does not parse or nests too deep."""
    if isinstance(source, bytes) and not mentions(source, dest):
        return Reading()
    try:
        tree = ast.parse(source, filename=member)
        text = source if isinstance(source, bytes) else source.encode("utf-8", "replace")
        lines = {i for i, ln in enumerate(text.splitlines(), 1) if dest.encode() in ln}
        f = _File(tree, member, dest, lines)
        f.walk(tree.body, [], {})
    except (SyntaxError, ValueError) as exc:
        return Reading(error=f"{member}: {type(exc).__name__}: {exc}")
    except (RecursionError, MemoryError):
        return Reading(error=f"{member}: nested too deeply to read")
    return Reading(tuple(f.imports), tuple(f.unread.values()), tuple(f.defaults))


def default_of(readings: Iterable[Reading]) -> str | None:
    """The argument's default as SGLang declares it (the most frequent class-level
    declaration in ``readings``; None when none declares it)."""
    counts: dict[str | None, int] = {}
    for r in readings:
        for d in r.defaults:
            counts[d] = counts.get(d, 0) + 1
    if not counts:
        return None
    return sorted(counts, key=lambda d: (-counts[d], d or ""))[0]


def _key(value: str | None, keys: dict[str, int]) -> str:
    if value is None:
        return NONE
    return value if value in keys else OTHER


def for_choice(readings: Iterable[Reading], choice: str, default: str | None
               ) -> tuple[list[GuardedImport], list[Unread]]:
    """The imports ``choice`` makes SGLang run, of those ``readings`` found (each more
    likely to run with ``choice`` than with ``default``), and the unread tests above an
    import that might belong to it."""
    got: list[GuardedImport] = []
    unread: list[Unread] = []
    for r in readings:
        for i in r.imports:
            keys = dict(i.truth)
            mine, base = keys[_key(choice, keys)], keys[_key(default, keys)]
            if mine == _UNREAD or base == _UNREAD:
                if mine != _FALSE:
                    unread += [u for u in r.unread if u.module == i.module
                               and u not in unread]
            elif mine > base:
                got.append(i)
    return got, unread
