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

Where the code is: literal values in :mod:`moonpin.readers.launch.values`, the flag reader in
:mod:`moonpin.readers.launch.flags`, the rule reader in
:mod:`moonpin.readers.launch.rules`; this
module puts them together (:func:`extract`, :func:`extract_arg_groups`, the KB record) and
re-exports :func:`reads_of` and :data:`EXPR`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from moonpin.kb.launch import Flag, Rule, Write
from moonpin.readers.launch.backends import (
    BACKEND_FLAGS,
    DISPATCHERS,
    NO_BACKEND,
    backend_dest,
    backend_member,
    backend_modules,
)
from moonpin.readers.launch.flags import (
    add_argument_flag,
    field_flags,
    read_field_defaults,
    server_args_class,
)
from moonpin.readers.launch.rules import RuleWalker, is_self, reads_of
from moonpin.readers.launch.values import (
    EXPR,
    NOT_LITERAL,
    literal_of,
    module_constants,
    name_of,
    recorded_value,
)

__all__ = [
    "ARG_GROUPS",
    "BACKEND_FLAGS",
    "CHOICES",
    "CUDA_GRAPH_CONFIG",
    "DISPATCHERS",
    "ELASTIC_KEYWORDS",
    "EXPR",
    "FIELDS",
    "HOOKS",
    "NO_BACKEND",
    "RECEIVER",
    "RESOLVING_HOOKS",
    "SERVER_ARGS",
    "backend_dest",
    "backend_imports",
    "backend_member",
    "backend_modules",
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
                    v = literal_of(stmt.value, local)
                    if v is not NOT_LITERAL:
                        local[stmt.targets[0].id] = v
                        out[f"{node.name}.{stmt.targets[0].id}"] = recorded_value(v)
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    # decode: PhaseConfig = field(default_factory=lambda: PhaseConfig(
                    #     backend=Backend.FULL))  ->  "CudaGraphConfig.decode.backend": "full"
                    for kw, value in _factory_keywords(stmt.value):
                        got = _dotted_constant(value, out)
                        if got is not NOT_LITERAL:
                            out[f"{node.name}.{stmt.target.id}.{kw}"] = recorded_value(got)
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
    """A literal, or a ``Cls.NAME`` already in ``known``; else ``NOT_LITERAL``."""
    if isinstance(node, ast.Constant):
        return node.value
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and f"{node.value.id}.{node.attr}" in known):
        return known[f"{node.value.id}.{node.attr}"]
    return NOT_LITERAL


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
    env.update(module_constants(tree, env))
    cls = server_args_class(tree)
    defaults = read_field_defaults(cls, env)
    flags: list[Flag] = field_flags(cls, env, defaults) if cls is not None else []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            f = add_argument_flag(node, env, defaults)
            if f is not None:
                flags.append(f)
    flags.sort(key=lambda f: f.line)
    rules: list[Rule] = []
    if cls is not None:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                rules.extend(RuleWalker(stmt, path).run())
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
        name = (name_of(node.func) or "").rsplit(".", 1)[-1]
        if name == "resolving_view" and len(node.args) == 1 and is_self(node.args[0]):
            return ast.copy_location(ast.Name(id="self", ctx=ast.Load()), node)
        return node


def _hook_rules(func: ast.FunctionDef | ast.AsyncFunctionDef, path: str,
                receivers: frozenset[str]) -> list[Rule]:
    import copy

    rewritten = _Receiver(receivers).visit(copy.deepcopy(func))
    return RuleWalker(rewritten, path, hooks=True).run()


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
        cls = server_args_class(tree)
        funcs = [st for st in (cls.body if cls is not None else ())
                 if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))]
    out: list[Write] = []
    for func in funcs:
        walker = RuleWalker(func, path, hooks=hooks)
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
        seed.update(module_constants(trees[CHOICES], {}))
    envs = {path: module_constants(tree, seed) for path, tree in trees.items()}
    classes: list[tuple[str, ast.ClassDef]] = []
    for path, tree in trees.items():
        if path == SERVER_ARGS:
            cls = server_args_class(tree)
            classes += [(path, cls)] if cls is not None else []
        elif path.startswith(FIELDS):
            classes += [(path, n) for n in tree.body if isinstance(n, ast.ClassDef)]
    defaults: dict[str, object] = {}
    for path, cls in classes:
        defaults.update(read_field_defaults(cls, envs[path]))
    flags: list[Flag] = []
    for path, cls in classes:
        flags += [f._replace(path=path) for f in field_flags(cls, envs[path], defaults)]
    for path, tree in trees.items():
        if path != SERVER_ARGS and not path.startswith(FIELDS):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                f = add_argument_flag(node, envs[path], defaults)
                if f is not None:
                    flags.append(f._replace(path=path))
    flags = [g for f in flags for g in _boolean_optional(f)]
    flags.sort(key=lambda f: (f.path or "", f.line))
    rules: list[Rule] = []
    for path, tree in trees.items():
        if path in HOOKS:
            rules += hook_rules(members[path], path)[0]
        elif path == SERVER_ARGS:
            cls = server_args_class(tree)
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
# the module a backend choice imports (where: :mod:`moonpin.readers.launch.backends`)
# ---------------------------------------------------------------------------


def backend_imports(source: bytes, member: str) -> list[tuple[str, tuple[str, ...], int]]:
    """The imports a backend's module may run (any code path:
    :func:`moonpin.readers.pyast.imports.named_imports`), as ``(module, names, line)``; SGLang's
    own modules and the standard library's left out: what is left is what the worker must
    have installed for that choice."""
    import sys

    from moonpin.readers.pyast.imports import named_imports

    stdlib = sys.stdlib_module_names
    return [(m, names, line) for m, names, line in named_imports(source, member)
            if m.split(".")[0] not in stdlib and m.split(".")[0] != "sglang"]


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
    from moonpin.kb.models import LaunchFlag, LaunchRule, LaunchRules, LaunchWrite

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
    """The KB's :class:`moonpin.kb.models.LaunchRules` for one release of the ``server_args.py``
    layout (up to 0.5.18; None when it has no elastic-EP rules, e.g. releases before
    elastic EP).  :func:`launch_record_from` reads either layout."""
    from moonpin.kb.models import LaunchRules

    if server_args is None:
        return None
    constants = class_constants(cuda_graph_config) if cuda_graph_config else {}
    flags, rules, error = extract(server_args, member, constants=constants)
    if error is not None:
        return LaunchRules(member=member, error=error)
    return _record(member, flags, rules, constants, default_resolutions(server_args, member))


def launch_record_from(members: Mapping[str, bytes]) -> Any:
    """The KB's :class:`moonpin.kb.models.LaunchRules` for one release from the members
    :func:`launch_members` named (path -> bytes); None when it has no elastic-EP rules.

    Without the arg_groups hooks this is :func:`launch_record` of ``server_args.py`` and
    ``cuda_graph_config.py``.  With them (0.5.19 and later) flags and rules come from
    :func:`extract_arg_groups`; the record's ``member`` is then the hook holding
    ``handle_elastic_ep`` (``parallel_hook.py``), or the member that does not parse.
    """
    from moonpin.kb.models import LaunchRules

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
    """Flags, rules and constants back from a :class:`moonpin.kb.models.LaunchRules` (or the same
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
