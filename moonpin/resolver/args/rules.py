"""Offline validation of SGLang launch arguments against one release's scraped rules.

Nothing of SGLang is imported or executed: the flags and rules come from
:mod:`moonpin.readers.launch.server_args` (``ast`` only) and conditions are evaluated by the small
evaluator below, which never calls ``eval``.

Parsing (:func:`parse_launch`) follows argparse as the release configures it:

* every flag's ``dest`` starts at its declared default (a deprecated alias never overrides
  the default of the flag it shares a ``dest`` with);
* ``--x=y`` and ``--x y``; a unique prefix of a long option is accepted (argparse's
  ``allow_abbrev``); ``store_true`` / ``store_false`` / ``store_const`` / ``count`` /
  ``append``; ``nargs`` ``+``, ``*``, ``?`` and integers; ``int`` / ``float`` conversion;
  choices are validated after conversion (``ValueError`` naming the flag and the allowed
  values);
* unknown options (and the value that follows them, if it is not an option) are returned
  under ``"__unknown__"``; ``"__explicit__"`` lists the dests set on the command line and
  ``"__deprecated__"`` the deprecated flags used, as ``"--old -> --new=value"``.

Precedence of deprecated aliases (documented contract):

* an alias that shares the ``dest`` of the new flag (``--disable-piecewise-cuda-graph`` ->
  ``cuda_graph_backend_prefill``, ``--cuda-graph-bs`` -> ``cuda_graph_bs_decode``) is plain
  argparse: the last one on the command line wins, exactly as in the release;
* an alias with its own ``dest`` whose ``deprecated_for`` names ``--new=value``
  (``--disable-cuda-graph`` -> both ``--cuda-graph-backend-{decode,prefill}=disabled``,
  ``--elastic-ep-rejoin`` -> ``--elastic-ep-join-mode=recover``) fills the new flag's dest
  with that value only when the new flag was not given explicitly: explicit new flags win
  over deprecated ones, wherever they appear (the release resolves these in
  ``__post_init__`` with that ranking, so ``--disable-cuda-graph
  --cuda-graph-backend-prefill breakable`` leaves prefill graphs on).  The alias's own
  dest keeps its value too.

Checking (:func:`check`) evaluates each rule on the parsed values:

* writes (``self.X = v`` earlier in the rule's method) are applied in order when their
  guard is true, so ``auto`` -> ``elasticity_aware`` rewrites are honoured;
* ``cuda_graph_config.{decode,prefill}.backend`` is derived the way
  ``ServerArgs._parse_cuda_graph_config`` (0.5.14-0.5.18) ranks its inputs:
  ``--cuda-graph-backend-<phase>`` > ``--disable-<phase>-cuda-graph`` >
  ``--disable-cuda-graph`` > the release default: the constant ``CudaGraphConfig`` declares
  for the phase (decode: ``Backend.FULL``), else the string ``"<default>"``, which is not
  ``"disabled"`` (prefill's ``default_prefill_backend()``; this assumes a CUDA device - XPU
  defaults decode graphs to disabled).  It
  is left unknown (rules reading it are "not checked") when ``--cuda-graph-config`` is given
  or the release has no ``--cuda-graph-backend-decode``;
* an unset ``--device`` is ``cuda`` (:data:`CUDA_WORKER`: SGLang resolves it from the
  machine, and elastic EP with mooncake runs on CUDA workers);
* dotted constants in conditions (``Backend.DISABLED``) come from ``constants`` (defaults:
  :data:`DEFAULT_CONSTANTS`, the ``Backend`` class of
  ``sglang/srt/model_executor/cuda_graph_config.py`` 0.5.14-0.5.18);
* anything else the evaluator cannot read (the resolved view ``self._resolved().X``, method
  calls, arithmetic, subscripts, attributes that are not launch arguments) makes the rule
  "not checked", with the reason - never a guess.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from moonpin.kb.launch import Flag, Rule
from moonpin.readers.pyast.astname import dotted, shown, unparse

__all__ = [
    "DEFAULT_CONSTANTS",
    "UNRECOGNIZED",
    "Unevaluable",
    "Unresolved",
    "Verdict",
    "check",
    "evaluate",
    "meant",
    "parse_launch",
    "rules_from_json",
]

UNKNOWN = "__unknown__"
UNRECOGNIZED = "__unrecognized__"
EXPLICIT = "__explicit__"
DEPRECATED = "__deprecated__"
RELEASE_DEFAULT = "<default>"

#: Options SGLang leaves unset (None) and resolves from the machine at start-up, as they
#: resolve on the workers elastic EP with mooncake runs on: a CUDA device
#: (``device = get_device()``). The same assumption as the CUDA-graph defaults below.
CUDA_WORKER: dict[str, object] = {"device": "cuda"}

DEFAULT_CONSTANTS: dict[str, object] = {
    "Backend.FULL": "full",
    "Backend.BREAKABLE": "breakable",
    "Backend.TC_PIECEWISE": "tc_piecewise",
    "Backend.DISABLED": "disabled",
}

_STORE_TRUE = {"store_true", "DeprecatedStoreTrueAction"}
_STORE_CONST = {"store_const", "DeprecatedStoreConstAction"}
_NO_VALUE = {"DeprecatedAction"}


class Unevaluable(Exception):
    """The condition uses something the safe evaluator does not read."""


class Unresolved(str):
    """A launch token whose value is not known offline (its text as written, e.g. an unset
    ``$TP`` in a script): parsed as a value but never converted or validated, and a rule
    that reads it is "not checked"."""

    __slots__ = ()


def _opaque(value: object) -> bool:
    if isinstance(value, list):
        return any(_opaque(v) for v in value)
    return isinstance(value, Unresolved)


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------


def _convert(flag: Flag, raw: str) -> object:
    if _opaque(raw):
        return raw  # not known offline: kept as written, never converted or validated
    try:
        if flag.type == "int":
            return int(raw)
        if flag.type == "float":
            return float(raw)
    except ValueError:
        raise ValueError(f"{flag.name}: invalid {flag.type} value: {raw!r}") from None
    return raw


def _validate(flag: Flag, value: object) -> None:
    if flag.choices is None or _opaque(value):
        return
    if str(value) not in flag.choices:
        allowed = ", ".join(flag.choices)
        raise ValueError(f"{flag.name}: invalid choice {value!r} (choose from {allowed})")


def _is_option(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _lookup(index: Mapping[str, Flag], opt: str) -> Flag | None:
    if opt in index:
        return index[opt]
    if opt.startswith("--"):
        hits = {id(f): f for name, f in index.items() if name.startswith(opt)}
        if len(hits) == 1:
            return next(iter(hits.values()))
    return None


def _split_target(target: str) -> tuple[str, str | None]:
    """``--new=value`` or ``--new value`` -> (``--new``, value or None)."""
    name, sep, value = target.partition("=")
    if not sep:
        name, sep, value = target.partition(" ")
    return name.strip(), (value.strip() if sep else None)


_PLACEHOLDER_FLAG = re.compile(r"^<([a-z0-9][a-z0-9-]*)>$")


def _resolve_option(opt: str, accepted: Collection[str]) -> str | None:
    """argparse's reading of a long option against every option the release accepts: the
    option itself, or the one option it is a prefix of (``allow_abbrev``); None when it
    names none. ValueError when it is a prefix of several, as argparse says."""
    if opt in accepted:
        return opt
    if not opt.startswith("--"):
        return None
    hits = sorted(n for n in accepted if n.startswith(opt))
    if len(hits) > 1:
        raise ValueError(f"ambiguous option: {opt} could match {', '.join(hits)}")
    return hits[0] if hits else None


_SWITCHES = _STORE_TRUE | {"store_false"} | _STORE_CONST | _NO_VALUE | {"count"}


def _switch(flag: Flag, values: dict[str, object]) -> None:
    """A flag that takes no value (``store_true``, ``count``...) given once."""
    action = flag.action
    if action in _STORE_TRUE:
        values[flag.dest] = True
    elif action == "store_false":
        values[flag.dest] = False
    elif action == "count":
        prev = values.get(flag.dest)
        values[flag.dest] = (prev if isinstance(prev, int) else 0) + 1
    else:
        values[flag.dest] = flag.const


def _take(flag: Flag, argv: Sequence[str], i: int) -> tuple[list[str], int]:
    """The values that follow ``flag`` at ``argv[i:]`` as its ``nargs`` takes them, and the
    index after them."""
    raw: list[str] = []
    nargs = flag.nargs
    if nargs in ("+", "*"):
        while i < len(argv) and not _is_option(argv[i]):
            raw.append(argv[i])
            i += 1
        if nargs == "+" and not raw:
            raise ValueError(f"{flag.name}: expected at least one argument")
    elif nargs == "?":
        if i < len(argv) and not _is_option(argv[i]):
            raw.append(argv[i])
            i += 1
    else:
        count = int(nargs) if nargs and nargs.isdigit() else 1
        for _ in range(count):
            if i >= len(argv) or _is_option(argv[i]):
                raise ValueError(f"{flag.name}: expected {count} argument(s)")
            raw.append(argv[i])
            i += 1
    return raw, i


def _store(flag: Flag, raw: list[str], values: dict[str, object]) -> None:
    """Convert, validate and store the values given to ``flag``."""
    converted = [_convert(flag, r) for r in raw]
    for c in converted:
        _validate(flag, c)
    value: object
    if flag.nargs in ("+", "*") or (flag.nargs or "").isdigit():
        value = converted
    elif flag.nargs == "?" and not converted:
        value = flag.const
    else:
        value = converted[0]
    if flag.action == "append":
        prev = values.get(flag.dest)
        value = [*(prev if isinstance(prev, list) else []), value]
    values[flag.dest] = value


def _apply_deprecated(flags: Sequence[Flag], used: Sequence[Flag],
                      explicit: Mapping[str, Flag], values: dict[str, object]) -> list[str]:
    """Fill the new flags the deprecated ones used stand for (explicit new flags win; see the
    module docs); returns ``"--old -> --new=value"`` for each."""
    by_name = {f.name: f for f in flags if not f.deprecated_for}
    notes: list[str] = []
    for old in used:
        for target in old.deprecated_for:
            name, raw_value = _split_target(target)
            notes.append(f"{old.name} -> {target}")
            new = by_name.get(name)
            if new is None or raw_value is None or new.dest == old.dest:
                continue
            prior = explicit.get(new.dest)
            if prior is not None and not prior.deprecated_for:
                continue  # the explicit new flag wins
            ref = _PLACEHOLDER_FLAG.match(raw_value)
            if ref:
                # "--attn-dp-size <dp-size>": the value the launch gives another option
                source = by_name.get(f"--{ref.group(1)}")
                if source is None:
                    continue
                values[new.dest] = values.get(source.dest)
                continue
            values[new.dest] = _convert(new, raw_value)
    return notes


def parse_launch(flags: Sequence[Flag], argv: Sequence[str],
                 accepted: Collection[str] | None = None) -> dict[str, object]:
    """Parse ``argv`` the way the release declaring ``flags`` would (see module docs).

    With ``accepted`` (every option string the release's parser knows, which the KB
    records), an option it does not know is listed under ``"__unrecognized__"`` (SGLang's
    parser stops on it) and abbreviations resolve exactly as argparse's would."""
    index: dict[str, Flag] = {}
    for f in flags:
        for n in (f.name, *f.aliases):
            index.setdefault(n, f)
    values: dict[str, object] = {}
    for f in sorted(flags, key=lambda f: bool(f.deprecated_for)):
        if f.dest not in values:
            values[f.dest] = f.default
    unrecognized: list[str] = []
    unknown: list[str] = []
    explicit: dict[str, Flag] = {}
    used_deprecated: list[Flag] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not _is_option(token):
            unknown.append(token)
            continue
        opt, eq, inline = token.partition("=")
        if accepted:
            full = _resolve_option(opt, accepted)
            if full is None:
                unrecognized.append(opt)
            flag = index.get(full) if full is not None else None
        else:
            flag = _lookup(index, opt)
        if flag is None:
            unknown.append(token)
            if not eq and i < len(argv) and not _is_option(argv[i]):
                unknown.append(argv[i])
                i += 1
            continue
        if flag.deprecated_for or (flag.action in _STORE_TRUE | _STORE_CONST | _NO_VALUE
                                   and (flag.action or "").startswith("Deprecated")):
            used_deprecated.append(flag)
        if flag.action in _SWITCHES:
            if eq:
                raise ValueError(f"{flag.name}: ignored explicit argument {inline!r}")
            if flag.action not in _NO_VALUE:
                _switch(flag, values)
                explicit[flag.dest] = flag
            continue
        raw, i = ([inline], i) if eq else _take(flag, argv, i)
        _store(flag, raw, values)
        explicit[flag.dest] = flag
    values[UNKNOWN] = unknown
    values[UNRECOGNIZED] = unrecognized
    values[EXPLICIT] = sorted(explicit)
    values[DEPRECATED] = _apply_deprecated(flags, used_deprecated, explicit, values)
    return values


# ---------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------


def _dotted(node: ast.expr) -> list[str] | None:
    name = dotted(node)
    return name.split(".") if name is not None else None


def _cmp(op: ast.cmpop, a: object, b: object) -> bool:
    try:
        if isinstance(op, ast.Eq):
            return bool(a == b)
        if isinstance(op, ast.NotEq):
            return bool(a != b)
        if isinstance(op, ast.Is):
            return a is b
        if isinstance(op, ast.IsNot):
            return a is not b
        if isinstance(op, ast.In):
            return a in b  # type: ignore[operator]
        if isinstance(op, ast.NotIn):
            return a not in b  # type: ignore[operator]
        if isinstance(op, ast.Lt):
            return bool(a < b)  # type: ignore[operator]
        if isinstance(op, ast.LtE):
            return bool(a <= b)  # type: ignore[operator]
        if isinstance(op, ast.Gt):
            return bool(a > b)  # type: ignore[operator]
        if isinstance(op, ast.GtE):
            return bool(a >= b)  # type: ignore[operator]
    except TypeError as exc:
        raise Unevaluable(f"cannot compare {shown(a)} and {shown(b)}: {exc}") from None
    raise Unevaluable(f"unsupported comparison {type(op).__name__}")


def _value(node: ast.expr, values: Mapping[str, object]) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_value(e, values) for e in node.elts]
        if isinstance(node, ast.Set):
            try:
                return frozenset(items)
            except TypeError:
                raise Unevaluable("unhashable set element") from None
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Attribute):
        parts = _dotted(node)
        if parts is None:
            raise Unevaluable(
                f"{unparse(node)} reads a computed value (e.g. the resolved view)"
            )
        if parts[0] == "self":
            key = ".".join(parts[1:])
            if key in values:
                if _opaque(values[key]):
                    raise Unevaluable(f"self.{key} is {values[key]!s}, not known offline")
                return values[key]
            raise Unevaluable(f"self.{key} is not a launch argument of this release")
        key = ".".join(parts)
        if key in values:
            return values[key]
        raise Unevaluable(f"{key} is not a known constant")
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        result: object = is_and
        for v in node.values:
            result = _value(v, values)
            if bool(result) != is_and:
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            return not _value(node.operand, values)
        if isinstance(node.op, ast.USub):
            operand = _value(node.operand, values)
            if isinstance(operand, (int, float)) and not isinstance(operand, bool):
                return -operand
        raise Unevaluable(f"unsupported operator in {unparse(node)}")
    if isinstance(node, ast.Compare):
        left = _value(node.left, values)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _value(comp, values)
            if not _cmp(op, left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):  # "a" if cond else "b": how defaults get settled
        return _value(node.body if _value(node.test, values) else node.orelse, values)
    if isinstance(node, ast.Name):
        raise Unevaluable(f"name {node.id!r} is not an argument")
    if isinstance(node, ast.Call):
        raise Unevaluable(f"call {unparse(node.func)}(...) is not evaluated")
    raise Unevaluable(f"{type(node).__name__} is not evaluated: {unparse(node)}")


@functools.lru_cache(maxsize=4096)
def _parse_expr(text: str) -> ast.expr:
    """``text`` parsed (once: a file of many launches evaluates the same conditions for
    each; the tree is only read)."""
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte (older 3.11)
        raise Unevaluable(f"does not parse: {exc}") from None
    except (RecursionError, MemoryError) as exc:  # nested past what the parser holds
        raise Unevaluable(f"nested too deeply to parse ({type(exc).__name__})") from None


def _eval(text: str, values: Mapping[str, object]) -> object:
    """``text`` parsed and evaluated; a tree deeper than the recursive walk goes (a KB
    edited by hand, or another's) is :class:`Unevaluable`, as any other it cannot read."""
    try:
        return _value(_parse_expr(text), values)
    except RecursionError:
        raise Unevaluable("nested too deeply to evaluate") from None


def evaluate(condition: str, values: Mapping[str, object]) -> bool:
    """Truth of ``condition`` over ``values`` (``self.X`` -> ``values["X"]``; dotted
    constants such as ``Backend.DISABLED`` -> ``values["Backend.DISABLED"]``).

    Supported: constants, tuples/lists/sets, comparisons (``== != < <= > >= in not in is
    is not``, chained), ``and``/``or``/``not`` (short-circuit), unary minus, ``a if c else
    b``.  Anything else raises :class:`Unevaluable`.
    """
    return bool(_eval(condition, values))


# ---------------------------------------------------------------------------
# checking
# ---------------------------------------------------------------------------


def rules_from_json(record: Mapping[str, Any]) -> tuple[tuple[Flag, ...], tuple[Rule, ...],
                                                       dict[str, object]]:
    """Flags, rules and constants from a launch-rules record as JSON (the KB's
    ``LaunchRules`` dumped), without pydantic: the runtime check reads them this way.
    Raises TypeError on a malformed record (a derived table is input like any other: its
    shape is checked before use, and its JSON texts while decoding)."""
    from types import SimpleNamespace

    from moonpin.readers.launch.server_args import from_record
    from moonpin.resolver.tables.per_release import valid_launch

    if not valid_launch(record):
        raise TypeError("malformed launch-rules record (fields missing or of the wrong type)")

    def ns(d: Mapping[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(**{k: tuple(v) if isinstance(v, list) else v
                                  for k, v in d.items()})

    rec = SimpleNamespace(
        flags=[ns(f) for f in record["flags"]],
        rules=[SimpleNamespace(**{**vars(ns(r)), "writes": [ns(w) for w in r["writes"]]})
               for r in record["rules"]],
        constants=dict(record["constants"]))
    try:
        return from_record(rec)
    except (ValueError, RecursionError) as e:  # a default/const/constant that is not JSON
        raise TypeError(f"malformed launch-rules record: {type(e).__name__}: "
                        f"{str(e)[:200]}") from None


class Verdict(NamedTuple):
    status: Literal["violated", "ok", "not checked"]
    rule: Rule
    message: str
    flags: tuple[str, ...]
    evidence: str
    why: str = ""


def _derive_cuda_graph(values: dict[str, object], dests: set[str]) -> None:
    if "cuda_graph_backend_decode" not in dests or values.get("cuda_graph_config") is not None:
        return
    for phase in ("decode", "prefill"):
        explicit = values.get(f"cuda_graph_backend_{phase}")
        if explicit is not None:
            backend = explicit
        elif values.get(f"disable_{phase}_cuda_graph") or values.get("disable_cuda_graph"):
            backend = "disabled"
        else:
            # The release's own default when it is a constant (decode: Backend.FULL);
            # computed at run time otherwise (prefill: default_prefill_backend()).
            backend = values.get(f"CudaGraphConfig.{phase}.backend", RELEASE_DEFAULT)
        values[f"cuda_graph_config.{phase}.backend"] = backend


_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def _fill(message: str, values: Mapping[str, object]) -> str:
    """Fill a message template's ``{expr}`` / ``{expr!r}`` placeholders that evaluate."""
    def sub(m: re.Match[str]) -> str:
        expr, _, conv = m.group(1).rpartition("!") if m.group(1).endswith(
            ("!r", "!s", "!a")) else (m.group(1), "", "")
        try:
            value = _eval(expr, values)
        except Unevaluable:
            return m.group(0)
        return shown(value, conv or "s")

    return _PLACEHOLDER.sub(sub, message)


def _user_flags(read: str, rule: Rule, flag_of: Mapping[str, str]) -> list[str]:
    """The flags a user sets for what a rule reads: the per-phase CUDA-graph flags for the
    derived ``cuda_graph_config`` (the phases the condition names), else the option's own."""
    if read == "cuda_graph_config":
        text = f"{rule.condition} {rule.guard or ''}"
        phases = [p for p in ("decode", "prefill") if p in text] or ["decode", "prefill"]
        per_phase = [flag_of[f"cuda_graph_backend_{p}"] for p in phases
                     if f"cuda_graph_backend_{p}" in flag_of]
        if per_phase:
            return per_phase
    return [flag_of.get(read, read)]


def check(
    rules: Sequence[Rule],
    flags: Sequence[Flag],
    argv: Sequence[str],
    *,
    constants: Mapping[str, object] | None = None,
    accepted: Collection[str] | None = None,
    parsed: Mapping[str, object] | None = None,
) -> list[Verdict]:
    """One :class:`Verdict` per rule for the launch ``argv`` (``ValueError`` on bad input;
    ``accepted`` as in :func:`parse_launch`; ``parsed``: its result, when the caller has
    it already)."""
    if parsed is None:
        parsed = parse_launch(flags, argv, accepted)
    base: dict[str, object] = {**DEFAULT_CONSTANTS, **(constants or {}), **parsed}
    given = parsed.get(EXPLICIT)
    explicit = set(given) if isinstance(given, list) else set()
    for dest, value in CUDA_WORKER.items():
        if dest in base and base[dest] is None and dest not in explicit:
            base[dest] = value
    _derive_cuda_graph(base, {f.dest for f in flags})
    flag_of: dict[str, str] = {}
    for f in flags:
        if not f.deprecated_for:
            flag_of.setdefault(f.dest, f.name)
    out: list[Verdict] = []
    for rule in rules:
        names = tuple(dict.fromkeys(n for r in rule.reads for n in _user_flags(r, rule, flag_of)))
        evidence = f"{rule.path}:{rule.line}"
        values = dict(base)
        try:
            for w in sorted(rule.writes, key=lambda w: w.line):
                if w.guard is None or evaluate(w.guard, values):
                    values[w.attr] = _eval(w.value, values)
            applies = rule.guard is None or evaluate(rule.guard, values)
            failing = applies and evaluate(rule.condition, values)
        except Unevaluable as exc:
            out.append(Verdict("not checked", rule, rule.message, names, evidence, str(exc)))
            continue
        if failing:
            out.append(Verdict("violated", rule, _fill(rule.message, values), names, evidence))
        else:
            why = "condition holds" if applies else "guard is false"
            out.append(Verdict("ok", rule, rule.message, names, evidence, why))
    return out


def meant(options: Sequence[str], accepted: Collection[str] | None) -> str:
    """`` (did you mean --x?)`` for the options a release refused, each beside the nearest
    one it knows (difflib at 0.75: a near miss, not any option sharing a suffix), or ``""``
    when none is near."""
    import difflib

    if not accepted:
        return ""
    pool = sorted(o for o in accepted if o.startswith("--"))
    near = [f"{o} -> {m[0]}" for o in options
            if (m := difflib.get_close_matches(o, pool, n=1, cutoff=0.75))]
    if not near:
        return ""
    if len(near) == 1 and len(options) == 1:
        return f" (did you mean {near[0].split(' -> ')[1]}?)"
    return f" (did you mean: {', '.join(near)}?)"

