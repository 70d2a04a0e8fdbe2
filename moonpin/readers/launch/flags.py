"""The flags (:class:`moonpin.kb.launch.Flag`) of SGLang's launch arguments, read with ``ast``: the
annotated ``ServerArgs`` / arg_groups fields (:func:`field_flags`), explicit
``parser.add_argument(...)`` calls (:func:`add_argument_flag`), the field defaults
(:func:`read_field_defaults`) and the ``ServerArgs`` class (:func:`server_args_class`).

The rules they follow (CLI names, aliases, choices, deprecated spellings) are in
:mod:`moonpin.readers.launch.server_args`'s docstring, which puts these pieces together. Nothing is
imported or executed.
"""

from __future__ import annotations

import ast
import re

from moonpin.kb.launch import Flag
from moonpin.readers.launch.rules import fstring
from moonpin.readers.launch.values import (
    EXPR,
    NOT_LITERAL,
    literal_of,
    name_of,
    recorded_value,
)

__all__ = ["add_argument_flag", "field_flags", "read_field_defaults", "server_args_class"]


# ---------------------------------------------------------------------------
# flags
# ---------------------------------------------------------------------------

def _choices(v: object) -> tuple[str, ...] | None:
    if isinstance(v, (list, tuple)):
        return tuple("none" if c is None else str(c) for c in v)
    return None


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


def _kw(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


def _help_text(node: ast.expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return fstring(node, {})
    return ""


def _unsubscript(node: ast.expr) -> tuple[str | None, list[ast.expr]]:
    """``X[a, b]`` -> ("X", [a, b]); a plain name -> (name, [])."""
    if isinstance(node, ast.Subscript):
        sl = node.slice
        args = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        return name_of(node.value), args
    if isinstance(node, ast.Constant) and node.value is None:
        return "None", []
    return name_of(node), []


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
        vals = [literal_of(a, env) for a in args]
        if any(v is NOT_LITERAL for v in vals):
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


def field_flags(
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
            if isinstance(a, ast.Call) and name_of(a.func) in ("Arg", "arg_utils.Arg"):
                meta = _kw(a)
                break
            if isinstance(a, (ast.Constant, ast.JoinedStr)) and (
                not isinstance(a, ast.Constant) or isinstance(a.value, str)
            ):
                meta = {"help": a}
                break
        if meta is None:
            continue
        if literal_of(meta.get("no_cli"), env) is True:
            continue
        cli = literal_of(meta.get("cli_name"), env)
        name = cli if isinstance(cli, str) else "--" + field.replace("_", "-")
        al = literal_of(meta.get("aliases"), env)
        aliases = tuple(str(x) for x in al) if isinstance(al, (list, tuple)) else ()
        default = field_defaults.get(field, None)
        tp, lit_choices, nargs, is_bool = _type_info(args[0], env)
        action: str | None = None
        if "action" in meta:
            action = name_of(meta["action"]) or EXPR
            tp = None
        elif is_bool:
            action, tp = "store_true", None
        if "type_parser" in meta:
            tp = name_of(meta["type_parser"]) or EXPR
            nargs = None if lit_choices is None else nargs
        choices = lit_choices
        if "choices" in meta:
            choices = _choices(literal_of(meta["choices"], env))
        n = literal_of(meta.get("nargs"), env)
        if isinstance(n, str):
            nargs = n
        const = recorded_value(literal_of(meta.get("const"), env)) if "const" in meta else None
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


def add_argument_flag(
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
    dest_v = literal_of(kw.get("dest"), env)
    dest = dest_v if isinstance(dest_v, str) else long_names[0].lstrip("-").replace("-", "_")
    action = name_of(kw["action"]) if "action" in kw else None
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
            and name_of(d.func) == "_declared_default"
            and len(d.args) == 1
            and isinstance(d.args[0], ast.Constant)
            and isinstance(d.args[0].value, str)
        ):
            # 0.5.20+: ``default=_declared_default("x")`` reads the field's declared default.
            default = field_defaults.get(d.args[0].value, EXPR)
        elif name_of(d) == "argparse.SUPPRESS":
            default = None
        else:
            default = recorded_value(literal_of(d, env))
    elif action == "store_true":
        default = False
    elif action == "store_false":
        default = True
    else:
        default = field_defaults.get(dest, None)
    tp = name_of(kw["type"]) if "type" in kw else None
    nargs_v = literal_of(kw.get("nargs"), env)
    nargs = (
        nargs_v if isinstance(nargs_v, str) else str(nargs_v) if isinstance(nargs_v, int) else None
    )
    const_node = kw.get("const_value", kw.get("const"))
    const: object = None
    if const_node is not None:
        const = recorded_value(literal_of(const_node, env))
    deprecated: tuple[str, ...] = ()
    nf = literal_of(kw.get("new_flag"), env)
    if isinstance(nf, str):
        deprecated = _brace_expand(nf)
    if not deprecated:
        deprecated = _deprecated_from_help(_help_text(kw.get("help")))
    return Flag(
        name=long_names[0],
        dest=dest,
        default=default,
        choices=_choices(literal_of(kw.get("choices"), env)) if "choices" in kw else None,
        type=tp,
        action=action,
        line=call.lineno,
        deprecated_for=deprecated,
        nargs=nargs,
        const=const,
        aliases=tuple(n for n in names if n != long_names[0]),
    )


def server_args_class(tree: ast.Module) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            return node
    return None


def read_field_defaults(cls: ast.ClassDef | None, env: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    if cls is None:
        return out
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            value = stmt.value
            if isinstance(value, ast.Call) and name_of(value.func) in (
                "field",
                "dataclasses.field",
                "msgspec.field",
            ):
                kw = _kw(value)
                value = kw.get("default")
                if value is None and "default_factory" in kw:
                    fac = name_of(kw["default_factory"])
                    out[stmt.target.id] = () if fac == "list" else EXPR
                    continue
            out[stmt.target.id] = None if value is None else recorded_value(literal_of(value, env))
    return out
