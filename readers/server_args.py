"""Static (``ast``-only) extraction of SGLang launch-argument facts from ``server_args.py``.

Pure functions: source text in, facts out.  SGLang code is never imported or executed.

Flags (:class:`Flag`) come from the two ways SGLang releases declare them:

* annotated ``ServerArgs`` fields, ``name: A[T, "help" | Arg(...), NS(...)] = default``
  (0.5.14 and later register these with ``add_cli_args_from_dataclass``).  The rules of
  ``sglang/srt/arg_groups/arg_utils.py`` are mirrored: CLI name ``Arg.cli_name`` or
  ``--`` + field name with ``_`` -> ``-``; ``Arg.aliases`` are extra names; ``dest`` is the
  field name; ``bool`` -> ``store_true``; ``Literal[...]`` -> choices (``Arg.choices`` wins);
  ``List[X]`` -> ``nargs="+"``; ``Arg(no_cli=True)`` fields have no flag.  Fields annotated
  without ``A[...]`` are not flags.
* explicit ``parser.add_argument(...)`` calls (any function of the file).  ``default=
  ServerArgs.x`` resolves to the field's default.

A value that is not a literal (after resolving module-level list/tuple constants, ``+``
of lists, and ``ServerArgs.x``) is recorded as the string ``"<expr>"``; choices that cannot
be resolved are ``None`` (nothing is validated).  Choice values are kept as ``str``.

Deprecated aliases: real releases (0.5.14-0.5.18) declare them with custom actions
(``DeprecatedStoreTrueAction``, ``DeprecatedStoreConstAction``, ``DeprecatedAliasStoreAction``,
``DeprecatedAction``) and a ``new_flag="--x"`` keyword; ``new_flag`` is brace-expanded
(``--cuda-graph-backend-{decode,prefill}=disabled`` -> two entries).  Without ``new_flag``
the help text is read: a help starting with ``[Deprecated]``/``Deprecated`` that names
``Use --x`` / ``alias for --x [value]`` gives ``deprecated_for`` (e.g. the
``elastic_ep_rejoin`` field: ``"[Deprecated] Alias for --elastic-ep-join-mode recover."``).

Rules (:class:`Rule`) are the ``assert`` and ``raise`` statements in the methods of
``class ServerArgs``:

* ``assert c, m``: fails when ``not c`` (``condition`` is ``ast.unparse`` of that, with a
  leading ``not`` folded away when ``c`` is itself ``not x``).
* ``raise E(m)``: fails when the innermost enclosing ``if`` condition holds (``condition``);
  the outer ones form the ``guard``.  A raise outside any ``if`` has condition ``"True"``.
  Bare ``raise`` (re-raise) is skipped.
* Guards are the enclosing ``if`` conditions, joined with ``" and "``; an ``else`` branch
  contributes ``not (c)``; ``elif`` chains nest naturally.  ``for``/``while``/``with``/
  ``try`` bodies are entered without adding a guard (``except`` handlers are not: a raise
  there fires when the ``try`` failed).  An ``if c: return`` adds ``not (c)`` to the guards
  of the statements after it (``if self.dwdp_size <= 1: return`` guards DWDP's asserts).
* Simple local variables are inlined: ``x = expr`` (one ``Name`` target) earlier in the same
  method replaces later reads of ``x`` in conditions, guards and message placeholders (the
  latest assignment in statement order wins, regardless of branch - an approximation).
* ``writes``: the ``self.X = value`` assignments earlier in the same method (with their own
  guards) that change an attribute the rule reads.  The evaluator applies them in order, so
  ``if self.eplb_algorithm == "auto": self.eplb_algorithm = "elasticity_aware"`` before an
  assert is honoured.  Writes in other methods are not modelled.
* ``reads``: attribute names ``X`` of ``self.X`` (not method calls) in the condition and
  guard, plus ``X`` of ``self._resolved().X`` / ``resolved_view(self).X`` (the resolved
  view of the same argument).
* ``message``: literal text; f-strings keep ``{expr}`` placeholders (locals inlined);
  ``"..." % x`` and other expressions are ``ast.unparse``-d.

The arg_groups layout (0.5.19 and later; :func:`launch_members`, :func:`launch_record_from`):
validation moved out of ``ServerArgs`` into ``sglang/srt/arg_groups/*_hook.py`` functions of
a ``server_args`` parameter (``handle_elastic_ep`` is in ``parallel_hook.py``).  0.5.19 still
declares the fields on ``ServerArgs``; from 0.5.20 they sit in ``msgspec.Struct`` namespaces
in ``arg_groups/fields/*.py`` and ``server_args.py`` keeps only the deprecated spellings and
dynamic choices.  ``arg_utils.py`` derives options the same way (unchanged up to 0.5.23
except dataclass -> ``msgspec.Struct``).  :func:`hook_rules` writes the hooks' rules as if
they were ``ServerArgs`` methods (``server_args``/``resolving_view(server_args)`` ->
``self``), so the evaluator reads both layouts alike; each rule keeps its real file and line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from kb.launch import Flag, Rule, Write

__all__ = [
    "ARG_GROUPS",
    "CHOICES",
    "CUDA_GRAPH_CONFIG",
    "ELASTIC_KEYWORDS",
    "FIELDS",
    "HOOKS",
    "RECEIVER",
    "RESOLVING_HOOKS",
    "SERVER_ARGS",
    "class_constants",
    "default_resolutions",
    "elastic_rules",
    "extract",
    "extract_arg_groups",
    "from_record",
    "hook_rules",
    "launch_members",
    "launch_record",
    "launch_record_from",
    "option_names",
    "reads_of",
]

EXPR = "<expr>"


# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

_NOT_LITERAL = object()


def _const(node: ast.expr | None, env: dict[str, object]) -> object:
    """Literal value of ``node`` with module constants resolved, else ``_NOT_LITERAL``."""
    if node is None:
        return _NOT_LITERAL
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, _NOT_LITERAL)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return env.get(f"{node.value.id}.{node.attr}", _NOT_LITERAL)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_const(e, env) for e in node.elts]
        if any(i is _NOT_LITERAL for i in items):
            return _NOT_LITERAL
        return list(items) if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const(node.operand, env)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else _NOT_LITERAL
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const(node.left, env), _const(node.right, env)
        if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            return [*left, *right]
        return _NOT_LITERAL
    if isinstance(node, ast.Dict):
        return _NOT_LITERAL
    return _NOT_LITERAL


def _module_constants(tree: ast.Module, seed: dict[str, object]) -> dict[str, object]:
    env: dict[str, object] = dict(seed)
    for stmt in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name):
            v = _const(value, env)
            if v is not _NOT_LITERAL:
                env[target.id] = v
    return env


def _public(v: object) -> object:
    """Literal -> recorded default (lists become tuples so Flag stays hashable)."""
    if v is _NOT_LITERAL:
        return EXPR
    if isinstance(v, list):
        return tuple(v)
    return v


def _choices(v: object) -> tuple[str, ...] | None:
    if isinstance(v, (list, tuple)):
        return tuple("none" if c is None else str(c) for c in v)
    return None


# ---------------------------------------------------------------------------
# flags
# ---------------------------------------------------------------------------

_DEPRECATED_HELP = re.compile(
    r"(?:\buse|\balias for)\s+'?(--[A-Za-z0-9{},_-]+(?:[ =](?!instead)[A-Za-z0-9_.{},-]+)?)",
    re.IGNORECASE,
)


def _brace_expand(text: str) -> tuple[str, ...]:
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return (text,)
    out: list[str] = []
    for part in m.group(1).split(","):
        out.extend(_brace_expand(text[: m.start()] + part.strip() + text[m.end() :]))
    return tuple(out)


def _deprecated_from_help(help_text: str) -> tuple[str, ...]:
    if not re.match(r"\s*\[?deprecated", help_text, re.IGNORECASE):
        return ()
    m = _DEPRECATED_HELP.search(help_text)
    if not m:
        return ()
    target = m.group(1).rstrip(".").replace(" ", "=", 1)
    return _brace_expand(target)


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name_of(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _kw(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


def _help_text(node: ast.expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return _fstring(node, {})
    return ""


def _unsubscript(node: ast.expr) -> tuple[str | None, list[ast.expr]]:
    """``X[a, b]`` -> ("X", [a, b]); a plain name -> (name, [])."""
    if isinstance(node, ast.Subscript):
        sl = node.slice
        args = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        return _name_of(node.value), args
    if isinstance(node, ast.Constant) and node.value is None:
        return "None", []
    return _name_of(node), []


def _type_info(
    tp: ast.expr, env: dict[str, object]
) -> tuple[str | None, tuple[str, ...] | None, str | None, bool]:
    """(argparse type, literal choices, nargs, is_bool) of a field annotation."""
    name, args = _unsubscript(tp)
    base = (name or "").rsplit(".", 1)[-1]
    if base == "Optional" and args:
        return _type_info(args[0], env)
    if base == "Union" or isinstance(tp, ast.BinOp):
        members = (
            args if base == "Union" else [tp.left, tp.right] if isinstance(tp, ast.BinOp) else []
        )
        rest = [m for m in members if _unsubscript(m)[0] != "None"]
        if len(rest) == 1:
            return _type_info(rest[0], env)
        return "str", None, None, False
    if base == "Literal":
        vals = [_const(a, env) for a in args]
        if any(v is _NOT_LITERAL for v in vals):
            return "str", None, None, False
        first = vals[0] if vals else ""
        t = "int" if type(first) is int else "float" if type(first) is float else "str"
        return t, _choices(vals), None, False
    if base in ("List", "list") and args:
        elem, _, _, _ = _type_info(args[0], env)
        return elem, None, "+", False
    if base == "bool":
        return None, None, None, True
    if base in ("int", "float", "str"):
        return base, None, None, False
    return "str", None, None, False


def _field_flags(
    cls: ast.ClassDef, env: dict[str, object], field_defaults: dict[str, object]
) -> list[Flag]:
    flags: list[Flag] = []
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        field = stmt.target.id
        head, args = _unsubscript(stmt.annotation)
        if head not in ("A", "Annotated", "typing.Annotated") or not args:
            continue
        meta: dict[str, ast.expr] | None = None
        for a in args[1:]:
            if isinstance(a, ast.Call) and _name_of(a.func) in ("Arg", "arg_utils.Arg"):
                meta = _kw(a)
                break
            if isinstance(a, (ast.Constant, ast.JoinedStr)) and (
                not isinstance(a, ast.Constant) or isinstance(a.value, str)
            ):
                meta = {"help": a}
                break
        if meta is None:
            continue
        if _const(meta.get("no_cli"), env) is True:
            continue
        cli = _const(meta.get("cli_name"), env)
        name = cli if isinstance(cli, str) else "--" + field.replace("_", "-")
        al = _const(meta.get("aliases"), env)
        aliases = tuple(str(x) for x in al) if isinstance(al, (list, tuple)) else ()
        default = field_defaults.get(field, None)
        tp, lit_choices, nargs, is_bool = _type_info(args[0], env)
        action: str | None = None
        if "action" in meta:
            action = _name_of(meta["action"]) or EXPR
            tp = None
        elif is_bool:
            action, tp = "store_true", None
        if "type_parser" in meta:
            tp = _name_of(meta["type_parser"]) or EXPR
            nargs = None if lit_choices is None else nargs
        choices = lit_choices
        if "choices" in meta:
            choices = _choices(_const(meta["choices"], env))
        n = _const(meta.get("nargs"), env)
        if isinstance(n, str):
            nargs = n
        const = _public(_const(meta.get("const"), env)) if "const" in meta else None
        flags.append(
            Flag(
                name=name,
                dest=field,
                default=default,
                choices=choices,
                type=tp,
                action=action,
                line=stmt.lineno,
                deprecated_for=_deprecated_from_help(_help_text(meta.get("help"))),
                nargs=nargs,
                const=const,
                aliases=aliases,
            )
        )
    return flags


def _add_argument_flag(
    call: ast.Call, env: dict[str, object], field_defaults: dict[str, object]
) -> Flag | None:
    names = [
        a.value
        for a in call.args
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
    ]
    if not names:
        return None
    kw = _kw(call)
    long_names = [n for n in names if n.startswith("--")] or names
    dest_v = _const(kw.get("dest"), env)
    dest = dest_v if isinstance(dest_v, str) else long_names[0].lstrip("-").replace("-", "_")
    action = _name_of(kw["action"]) if "action" in kw else None
    default: object
    if "default" in kw:
        d = kw["default"]
        if (
            isinstance(d, ast.Attribute)
            and isinstance(d.value, ast.Name)
            and d.value.id == "ServerArgs"
        ):
            default = field_defaults.get(d.attr, EXPR)
        elif (
            isinstance(d, ast.Call)
            and _name_of(d.func) == "_declared_default"
            and len(d.args) == 1
            and isinstance(d.args[0], ast.Constant)
            and isinstance(d.args[0].value, str)
        ):
            # 0.5.20+: ``default=_declared_default("x")`` reads the field's declared default.
            default = field_defaults.get(d.args[0].value, EXPR)
        elif _name_of(d) == "argparse.SUPPRESS":
            default = None
        else:
            default = _public(_const(d, env))
    elif action == "store_true":
        default = False
    elif action == "store_false":
        default = True
    else:
        default = field_defaults.get(dest, None)
    tp = _name_of(kw["type"]) if "type" in kw else None
    nargs_v = _const(kw.get("nargs"), env)
    nargs = (
        nargs_v if isinstance(nargs_v, str) else str(nargs_v) if isinstance(nargs_v, int) else None
    )
    const_node = kw.get("const_value", kw.get("const"))
    const: object = None
    if const_node is not None:
        const = _public(_const(const_node, env))
    deprecated: tuple[str, ...] = ()
    nf = _const(kw.get("new_flag"), env)
    if isinstance(nf, str):
        deprecated = _brace_expand(nf)
    if not deprecated:
        deprecated = _deprecated_from_help(_help_text(kw.get("help")))
    return Flag(
        name=long_names[0],
        dest=dest,
        default=default,
        choices=_choices(_const(kw.get("choices"), env)) if "choices" in kw else None,
        type=tp,
        action=action,
        line=call.lineno,
        deprecated_for=deprecated,
        nargs=nargs,
        const=const,
        aliases=tuple(n for n in names if n != long_names[0]),
    )


def _server_args_class(tree: ast.Module) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            return node
    return None


def _field_defaults(cls: ast.ClassDef | None, env: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    if cls is None:
        return out
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            value = stmt.value
            if isinstance(value, ast.Call) and _name_of(value.func) in (
                "field",
                "dataclasses.field",
                "msgspec.field",
            ):
                kw = _kw(value)
                value = kw.get("default")
                if value is None and "default_factory" in kw:
                    fac = _name_of(kw["default_factory"])
                    out[stmt.target.id] = () if fac == "list" else EXPR
                    continue
            out[stmt.target.id] = None if value is None else _public(_const(value, env))
    return out


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


def _is_self(node: ast.expr) -> bool:
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
        if _is_self(n.value):
            out.append(n.attr)
        elif isinstance(n.value, ast.Call) and (
            (isinstance(n.value.func, ast.Attribute) and _is_self(n.value.func.value))
            or any(_is_self(a) for a in n.value.args)
        ):
            out.append(n.attr)
    return list(dict.fromkeys(out))


def _fstring(node: ast.JoinedStr, env: dict[str, ast.expr]) -> str:
    parts: list[str] = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
        elif isinstance(v, ast.FormattedValue):
            # keep !r / !s / !a: SGLang's messages quote values with !r
            conv = "!" + chr(v.conversion) if v.conversion > 0 else ""
            parts.append("{" + ast.unparse(_inline(v.value, env)) + conv + "}")
    return "".join(parts)


def _message(node: ast.expr | None, env: dict[str, ast.expr]) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return _fstring(node, env)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _message(node.left, env) + _message(node.right, env)
    return ast.unparse(node)


def _and(parts: Sequence[ast.expr]) -> str | None:
    if not parts:
        return None
    return " and ".join(
        f"({ast.unparse(p)})"
        if isinstance(p, ast.BoolOp) and isinstance(p.op, ast.Or)
        else ast.unparse(p)
        for p in parts
    )


def _returns(body: Sequence[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)


class _RuleWalker:
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
                condition=ast.unparse(cond),
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
                elif isinstance(t, ast.Attribute) and _is_self(t.value):
                    self.writes.append(Write(t.attr, ast.unparse(value), _and(guards), stmt.lineno))
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            t = stmt.target
            if isinstance(t, ast.Attribute) and _is_self(t.value):
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
            name = _name_of(call.func) or ""
            if name.rsplit(".", 1)[-1] == "declare_resolution" and call.args and _is_self(
                call.args[0]
            ):
                for k in call.keywords:
                    if k.arg is not None:
                        text = ast.unparse(_inline(k.value, self.env))
                        self.writes.append(Write(k.arg, text, _and(guards), stmt.lineno))


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------


def class_constants(source: bytes | str, path: str = "<source>") -> dict[str, object]:
    """``{"Cls.NAME": literal}`` for literal class attributes of a module (e.g. ``Backend``
    in ``sglang/srt/model_executor/cuda_graph_config.py``); ``{}`` if it does not parse."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            local: dict[str, object] = {}
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                ):
                    v = _const(stmt.value, local)
                    if v is not _NOT_LITERAL:
                        local[stmt.targets[0].id] = v
                        out[f"{node.name}.{stmt.targets[0].id}"] = _public(v)
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    # decode: PhaseConfig = field(default_factory=lambda: PhaseConfig(
                    #     backend=Backend.FULL))  ->  "CudaGraphConfig.decode.backend": "full"
                    for kw, value in _factory_keywords(stmt.value):
                        got = _dotted_constant(value, out)
                        if got is not _NOT_LITERAL:
                            out[f"{node.name}.{stmt.target.id}.{kw}"] = _public(got)
    return out


def _factory_keywords(node: ast.expr | None) -> list[tuple[str, ast.expr]]:
    """The keywords of ``X(...)`` in ``field(default_factory=lambda: X(...))``."""
    if not isinstance(node, ast.Call):
        return []
    for kw in node.keywords:
        if (kw.arg == "default_factory" and isinstance(kw.value, ast.Lambda)
                and isinstance(kw.value.body, ast.Call)):
            return [(k.arg, k.value) for k in kw.value.body.keywords if k.arg]
    return []


def _dotted_constant(node: ast.expr, known: Mapping[str, object]) -> object:
    """A literal, or a ``Cls.NAME`` already in ``known``; else ``_NOT_LITERAL``."""
    if isinstance(node, ast.Constant):
        return node.value
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and f"{node.value.id}.{node.attr}" in known):
        return known[f"{node.value.id}.{node.attr}"]
    return _NOT_LITERAL


def extract(
    source: bytes | str,
    path: str = "sglang/srt/server_args.py",
    constants: Mapping[str, object] | None = None,
) -> tuple[tuple[Flag, ...], tuple[Rule, ...], str | None]:
    """Flags and rules of one ``server_args.py``; the third item is the parse error, if any.

    ``constants`` (e.g. from :func:`class_constants` of a sibling module) resolves dotted
    names such as ``Backend.DISABLED`` in defaults, consts and choices.
    """
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return (), (), f"{path}: {type(exc).__name__}: {exc}"
    env: dict[str, object] = dict(constants or {})
    env.update(_module_constants(tree, env))
    cls = _server_args_class(tree)
    defaults = _field_defaults(cls, env)
    flags: list[Flag] = _field_flags(cls, env, defaults) if cls is not None else []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            f = _add_argument_flag(node, env, defaults)
            if f is not None:
                flags.append(f)
    flags.sort(key=lambda f: f.line)
    rules: list[Rule] = []
    if cls is not None:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                rules.extend(_RuleWalker(stmt, path).run())
    rules.sort(key=lambda r: r.line)
    return tuple(flags), tuple(rules), None


ELASTIC_KEYWORDS: tuple[str, ...] = (
    "elastic_ep",
    "ep_join",
    "max_ep_size",
    "moe_a2a",
    "eplb",
    "cuda_graph",
    "node_rank",
    "pp_size",
    "load_balance",
    "dp_attention",
)


def elastic_rules(rules: Iterable[Rule], flags: Iterable[Flag]) -> tuple[Rule, ...]:
    """Rules touching elastic EP and the related dispatch / EPLB / CUDA-graph settings.

    A rule is selected when one of :data:`ELASTIC_KEYWORDS` occurs in

    * an attribute it reads (condition or guard), or the CLI name (``-`` -> ``_``) of a flag
      whose ``dest`` is such an attribute - so ``ep_join_mode`` counts through its flag
      ``--elastic-ep-join-mode``;
    * its guard text (which covers inlined locals such as ``scaling_active``).

    ``ep_join`` and ``max_ep_size`` extend the brief's keyword list: the join-mode and
    scale-size settings are stored under those names.
    """
    names: dict[str, set[str]] = {}
    for f in flags:
        names.setdefault(f.dest, {f.dest}).add(f.name.lstrip("-").replace("-", "_"))
    out: list[Rule] = []
    for r in rules:
        hay: set[str] = set()
        for attr in r.reads:
            hay |= names.get(attr, {attr})
        if r.guard:
            hay.add(r.guard)
        if any(k in h for h in hay for k in ELASTIC_KEYWORDS):
            out.append(r)
    return tuple(out)


# ---------------------------------------------------------------------------
# the arg_groups layout (0.5.19 and later)
# ---------------------------------------------------------------------------

SERVER_ARGS = "sglang/srt/server_args.py"
CUDA_GRAPH_CONFIG = "sglang/srt/model_executor/cuda_graph_config.py"
ARG_GROUPS = "sglang/srt/arg_groups/"
FIELDS = ARG_GROUPS + "fields/"
CHOICES = ARG_GROUPS + "choices.py"
#: The hooks holding what ``ServerArgs._handle_elastic_ep``, ``_handle_eplb_and_dispatch``,
#: ``_handle_a2a_moe``, ``_validate_cuda_graph_config`` and ``check_server_args`` held up to
#: 0.5.18.  The first one marks the layout.
HOOKS: tuple[str, ...] = tuple(
    ARG_GROUPS + n
    for n in ("parallel_hook.py", "moe_hook.py", "cuda_graph_hook.py", "validation_hook.py")
)
#: Hooks read only for the placeholder defaults they settle (``handle_load_balance_method``:
#: ``auto`` -> ``round_robin``), which the rules above read.
RESOLVING_HOOKS: tuple[str, ...] = (ARG_GROUPS + "serving_hook.py",)
RECEIVER = "server_args"
_BOOLEAN_OPTIONAL = {"argparse.BooleanOptionalAction", "BooleanOptionalAction"}


class _Receiver(ast.NodeTransformer):
    """``server_args`` -> ``self`` and ``resolving_view(self)`` -> ``self``."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            return ast.copy_location(ast.Name(id="self", ctx=ast.Load()), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        name = (_name_of(node.func) or "").rsplit(".", 1)[-1]
        if name == "resolving_view" and len(node.args) == 1 and _is_self(node.args[0]):
            return ast.copy_location(ast.Name(id="self", ctx=ast.Load()), node)
        return node


def _hook_rules(func: ast.FunctionDef | ast.AsyncFunctionDef, path: str,
                receivers: frozenset[str]) -> list[Rule]:
    import copy

    rewritten = _Receiver(receivers).visit(copy.deepcopy(func))
    return _RuleWalker(rewritten, path, hooks=True).run()


def _is_resolution(w: Write) -> bool:
    """``if self.x == "auto": self.x = ...`` / ``if self.x is None: self.x = ...``: a
    method settling an option's placeholder default, which rules in later methods read."""
    return w.guard is not None and bool(re.search(
        rf"\bself\.{re.escape(w.attr)} (==|is None\b)", w.guard))


def default_resolutions(source: bytes | str, path: str, *, hooks: bool = False) -> list[Write]:
    """The writes of every method of ``ServerArgs`` (or, with ``hooks``, every hook
    function of an arg_groups module) that settle an option's placeholder default
    (see :func:`_is_resolution`); [] when the source does not parse."""
    import copy

    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    funcs: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    if hooks:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                if RECEIVER in {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
                    funcs.append(_Receiver(frozenset({RECEIVER})).visit(copy.deepcopy(node)))
    else:
        cls = _server_args_class(tree)
        funcs = [st for st in (cls.body if cls is not None else ())
                 if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))]
    out: list[Write] = []
    for func in funcs:
        walker = _RuleWalker(func, path, hooks=hooks)
        walker.run()
        out += [w for w in walker.writes if _is_resolution(w)]
    return out


def hook_rules(source: bytes | str, path: str) -> tuple[tuple[Rule, ...], str | None]:
    """Rules of one ``sglang/srt/arg_groups/*_hook.py`` (0.5.19 and later); the second item
    is the parse error, if any.

    The hooks are module-level functions of a ``server_args`` parameter that read the
    options through ``cfg = resolving_view(server_args)`` (the live view: what the
    arguments are with the resolutions declared so far).  Rules are those of
    :func:`extract`, written as if the function were a ``ServerArgs`` method, so the same
    evaluator reads them:

    * ``server_args`` and ``resolving_view(server_args)`` (and locals bound to them) read
      as ``self``; ``resolved_view(server_args)`` reads as ``resolved_view(self)``, the
      resolved view the evaluator leaves "not checked" as before;
    * ``declare_resolution(server_args, "src", x=v)`` is a write ``self.x = v``;
    * an ``if`` whose body ends in ``return`` guards the statements after it with
      ``not (c)`` (and a ``return`` ends its block);
    * ``except`` handlers are not walked: they run only when the ``try`` body raised, which
      is no launch-argument condition (the raise in the body is a rule already).

    Functions without a ``server_args`` parameter (helpers of a view or of plain values)
    are skipped: nothing in them reads as a launch argument.
    """
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return (), f"{path}: {type(exc).__name__}: {exc}"
    rules: list[Rule] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
            if RECEIVER in params:
                rules.extend(_hook_rules(node, path, frozenset({RECEIVER})))
    rules.sort(key=lambda r: r.line)
    return tuple(rules), None


def _boolean_optional(f: Flag) -> list[Flag]:
    """argparse's ``BooleanOptionalAction`` as the ``--x`` / ``--no-x`` pair it registers."""
    if f.action not in _BOOLEAN_OPTIONAL:
        return [f]
    off = tuple("--no-" + n[2:] for n in (f.name, *f.aliases) if n.startswith("--"))
    yes = Flag(f.name, f.dest, f.default, None, None, "store_true", f.line,
               f.deprecated_for, None, None, f.aliases, f.path)
    no = Flag(off[0], f.dest, f.default, None, None, "store_false", f.line,
              f.deprecated_for, None, None, off[1:], f.path)
    return [yes, no]


def extract_arg_groups(
    members: Mapping[str, bytes | str],
    constants: Mapping[str, object] | None = None,
) -> tuple[tuple[Flag, ...], tuple[Rule, ...], tuple[str, str] | None]:
    """Flags and rules of a release that validates its arguments in ``arg_groups`` hooks
    (0.5.19 and later); the third item is ``(member, parse error)`` of a member that does
    not parse.

    ``members`` maps member paths to their bytes (:func:`launch_members`).  Flags come from

    * annotated fields (the rules of :func:`extract`, ``arg_utils.py`` is unchanged up to
      0.5.23) of ``class ServerArgs`` in ``server_args.py`` (0.5.19) and of every class of
      ``sglang/srt/arg_groups/fields/*.py`` (0.5.20 and later: ``msgspec.Struct``
      namespaces such as ``Parallel`` or ``ExecMoe``, all collected into ``ServerArgs``);
      defaults may be ``msgspec.field(default=..., default_factory=...)``;
    * ``parser.add_argument(...)`` in those members (``server_args.py`` keeps the
      deprecated spellings and the dynamic choices); ``default=_declared_default("x")`` is
      the field's default.

    Names of ``choices.py`` and the ``Backend`` class constants of ``cuda_graph_config.py``
    (``constants``) resolve choices and defaults.  ``action=argparse.BooleanOptionalAction``
    becomes its two options (``--x`` store_true, ``--no-x`` store_false).  Not mirrored:
    ``Arg.action_kwargs`` (only ``--lora-paths`` uses it).  Each flag keeps its ``path``.

    Rules are those of :func:`hook_rules` for the members in :data:`HOOKS` plus the
    ``ServerArgs`` methods of ``server_args.py`` (walked the same way, ``self`` being the
    receiver).
    """
    trees: dict[str, ast.Module] = {}
    for path in sorted(members):
        try:
            trees[path] = ast.parse(members[path], filename=path)
        except (SyntaxError, ValueError) as exc:
            return (), (), (path, f"{path}: {type(exc).__name__}: {exc}")
    seed: dict[str, object] = dict(constants or {})
    if CHOICES in trees:
        seed.update(_module_constants(trees[CHOICES], {}))
    envs = {path: _module_constants(tree, seed) for path, tree in trees.items()}
    classes: list[tuple[str, ast.ClassDef]] = []
    for path, tree in trees.items():
        if path == SERVER_ARGS:
            cls = _server_args_class(tree)
            classes += [(path, cls)] if cls is not None else []
        elif path.startswith(FIELDS):
            classes += [(path, n) for n in tree.body if isinstance(n, ast.ClassDef)]
    defaults: dict[str, object] = {}
    for path, cls in classes:
        defaults.update(_field_defaults(cls, envs[path]))
    flags: list[Flag] = []
    for path, cls in classes:
        flags += [f._replace(path=path) for f in _field_flags(cls, envs[path], defaults)]
    for path, tree in trees.items():
        if path != SERVER_ARGS and not path.startswith(FIELDS):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                f = _add_argument_flag(node, envs[path], defaults)
                if f is not None:
                    flags.append(f._replace(path=path))
    flags = [g for f in flags for g in _boolean_optional(f)]
    flags.sort(key=lambda f: (f.path or "", f.line))
    rules: list[Rule] = []
    for path, tree in trees.items():
        if path in HOOKS:
            rules += hook_rules(members[path], path)[0]
        elif path == SERVER_ARGS:
            cls = _server_args_class(tree)
            for stmt in cls.body if cls is not None else []:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    rules += _hook_rules(stmt, path, frozenset())
    rules.sort(key=lambda r: (r.path, r.line))
    return tuple(flags), tuple(rules), None


def launch_members(names: Iterable[str]) -> list[str]:
    """The wheel members :func:`launch_record_from` reads, of those in ``names``.

    Up to 0.5.18: ``server_args.py`` and ``cuda_graph_config.py``.  With
    ``sglang/srt/arg_groups/parallel_hook.py`` (0.5.19 and later) also the hooks in
    :data:`HOOKS`, ``arg_groups/choices.py`` and ``arg_groups/fields/*.py`` (not its
    ``__init__.py``, which only collects them).
    """
    present = set(names)
    want = [SERVER_ARGS, CUDA_GRAPH_CONFIG]
    if HOOKS[0] in present:
        want += [*HOOKS, *(h for h in RESOLVING_HOOKS if h in present), CHOICES]
        want += sorted(
            n for n in present
            if n.startswith(FIELDS) and n.endswith(".py") and "/" not in n[len(FIELDS):]
            and n != FIELDS + "__init__.py"
        )
    return [n for n in want if n in present]


# ---------------------------------------------------------------------------
# the KB record
# ---------------------------------------------------------------------------


def _json_text(value: object) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return json.dumps("<expr>")


def _record(member: str, flags: Sequence[Flag], rules: Sequence[Rule],
            constants: Mapping[str, object], resolutions: Sequence[Write] = ()) -> Any:
    from kb.models import LaunchFlag, LaunchRule, LaunchRules, LaunchWrite

    chosen = elastic_rules(rules, flags)
    if not chosen:
        return None
    # A rule reading an option another method settles first ("auto" -> "round_robin")
    # gets that write too: the evaluator applies a rule's writes before its condition.
    chosen = tuple(r._replace(writes=(*r.writes, *(
        w for w in resolutions if w.attr in r.reads and w not in r.writes)))
        for r in chosen)
    # Keep the options those rules read (and their aliases and CUDA-graph spellings): the KB
    # ships with the package, and the other ~400 options only need skipping when parsed.
    read = {r.split(".")[0] for rule in chosen for r in rule.reads} | {
        w.attr.split(".")[0] for rule in chosen for w in rule.writes} | {
        m for rule in chosen for text in (rule.condition, rule.guard or "", rule.message)
        for m in re.findall(r"self\.(\w+)", text)}
    names = {f.name for f in flags if f.dest in read}
    kept = [f for f in flags if f.dest in read or "cuda_graph" in f.dest
            or {re.split(r"[= ]", t, maxsplit=1)[0] for t in f.deprecated_for} & names]
    return LaunchRules(
        member=member,
        flags=tuple(LaunchFlag(name=f.name, dest=f.dest, default=_json_text(f.default),
                               choices=f.choices, type=f.type, action=f.action, line=f.line,
                               deprecated_for=f.deprecated_for, nargs=f.nargs,
                               const=_json_text(f.const), aliases=f.aliases, path=f.path)
                    for f in kept),
        rules=tuple(LaunchRule(kind=r.kind, condition=r.condition, message=r.message,
                               reads=r.reads, guard=r.guard, function=r.function, line=r.line,
                               path=r.path,
                               writes=tuple(LaunchWrite(attr=w.attr, value=w.value,
                                                        guard=w.guard, line=w.line)
                                            for w in r.writes)) for r in chosen),
        constants={k: _json_text(v) for k, v in constants.items()},
        option_names=option_names(flags),
    )


def option_names(flags: Iterable[Flag]) -> tuple[str, ...]:
    """Every option string a parser built from ``flags`` accepts: names, aliases, the
    ``--no-x`` of a ``BooleanOptionalAction``, and argparse's own ``-h``/``--help``."""
    out = {"-h", "--help"}
    for f in flags:
        out.add(f.name)
        out.update(f.aliases)
        if (f.action or "").endswith("BooleanOptionalAction") and f.name.startswith("--"):
            out.add("--no-" + f.name[2:])
    return tuple(sorted(out))


def launch_record(server_args: bytes | None, cuda_graph_config: bytes | None,
                  member: str = SERVER_ARGS) -> Any:
    """The KB's :class:`kb.models.LaunchRules` for one release of the ``server_args.py``
    layout (up to 0.5.18; None when it has no elastic-EP rules, e.g. releases before
    elastic EP).  :func:`launch_record_from` reads either layout."""
    from kb.models import LaunchRules

    if server_args is None:
        return None
    constants = class_constants(cuda_graph_config) if cuda_graph_config else {}
    flags, rules, error = extract(server_args, member, constants=constants)
    if error is not None:
        return LaunchRules(member=member, error=error)
    return _record(member, flags, rules, constants, default_resolutions(server_args, member))


def launch_record_from(members: Mapping[str, bytes]) -> Any:
    """The KB's :class:`kb.models.LaunchRules` for one release from the members
    :func:`launch_members` named (path -> bytes); None when it has no elastic-EP rules.

    Without the arg_groups hooks this is :func:`launch_record` of ``server_args.py`` and
    ``cuda_graph_config.py``.  With them (0.5.19 and later) flags and rules come from
    :func:`extract_arg_groups`; the record's ``member`` is then the hook holding
    ``handle_elastic_ep`` (``parallel_hook.py``), or the member that does not parse.
    """
    from kb.models import LaunchRules

    if HOOKS[0] not in members:
        return launch_record(members.get(SERVER_ARGS), members.get(CUDA_GRAPH_CONFIG))
    cuda_graph_config = members.get(CUDA_GRAPH_CONFIG)
    constants = class_constants(cuda_graph_config) if cuda_graph_config else {}
    sources = {k: v for k, v in members.items() if k != CUDA_GRAPH_CONFIG}
    flags, rules, error = extract_arg_groups(sources, constants)
    if error is not None:
        return LaunchRules(member=error[0], error=error[1])
    resolutions = [w for name in (*HOOKS, *RESOLVING_HOOKS) if name in sources
                   for w in default_resolutions(sources[name], name, hooks=True)]
    return _record(HOOKS[0], flags, rules, constants, resolutions)


def from_record(rec: Any) -> tuple[tuple[Flag, ...], tuple[Rule, ...], dict[str, object]]:
    """Flags, rules and constants back from a :class:`kb.models.LaunchRules` (or the same
    shape read from JSON; a flag without ``path`` reads as None)."""
    import json

    flags = tuple(Flag(name=f.name, dest=f.dest, default=json.loads(f.default),
                       choices=f.choices, type=f.type, action=f.action, line=f.line,
                       deprecated_for=f.deprecated_for, nargs=f.nargs,
                       const=json.loads(f.const), aliases=f.aliases,
                       path=getattr(f, "path", None)) for f in rec.flags)
    rules = tuple(Rule(kind=r.kind, condition=r.condition, message=r.message, reads=r.reads,
                       guard=r.guard, function=r.function, line=r.line, path=r.path,
                       writes=tuple(Write(attr=w.attr, value=w.value, guard=w.guard,
                                          line=w.line) for w in r.writes)) for r in rec.rules)
    return flags, rules, {k: json.loads(v) for k, v in rec.constants.items()}
