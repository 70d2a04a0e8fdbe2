"""Write docs/reference/cli.md from the CLI's own argparse parsers (every command, its
options and its exit codes, as `moonpin COMMAND -h` prints them at 100 columns), and
docs/reference/kb-schema.md from the knowledge base's pydantic models.

    python docs/gen_cli.py            # rewrite the pages
    python docs/gen_cli.py --check    # exit 1 when a page is not current (a test runs it)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "reference" / "cli.md"
SCHEMA_PAGE = PAGE.with_name("kb-schema.md")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render() -> str:
    os.environ["COLUMNS"] = "100"
    from moonpin.cli.main import build_parser
    from moonpin.preflight.run import _parser as check_parser
    from moonpin.resolver.matrix import table as matrix

    top = build_parser(with_matrix=matrix.add_parser)
    out = ["# CLI reference", "",
           "Generated from the parsers by `python docs/gen_cli.py` (a test fails when it is "
           "not current): what `moonpin -h` and each `moonpin COMMAND -h` print. Exit codes: "
           "every command's help ends with its own; the contract shared by all is in "
           "[conventions](conventions.md).", "", "## moonpin", "", "```text",
           top.format_help().rstrip(), "```", ""]
    for name, sub in _subparsers(top).items():
        if name == "help":
            continue
        help_text = (check_parser().format_help() if name == "check"
                     else sub.format_help()).rstrip()
        out += [f"## moonpin {name}", "", "```text", help_text, "```", ""]
        for inner, p in _subparsers(sub).items():
            out += [f"### moonpin {name} {inner}", "", "```text", p.format_help().rstrip(),
                    "```", ""]
    return "\n".join(out)


def _type(spec: dict[str, object]) -> str:
    if "$ref" in spec:
        name = str(spec["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])  # type: ignore[attr-defined]
    if "enum" in spec:
        return " / ".join(f"`{v}`" for v in spec["enum"])  # type: ignore[attr-defined]
    if "const" in spec:
        return f"`{spec['const']}`"
    kind = spec.get("type", "any")
    if kind == "array":
        items = spec.get("items") or spec.get("prefixItems")
        inner = (_type(items) if isinstance(items, dict) else
                 ", ".join(_type(i) for i in items) if isinstance(items, list) else "any")
        return f"list of {inner}"
    if kind == "object":
        extra = spec.get("additionalProperties")
        return f"mapping to {_type(extra)}" if isinstance(extra, dict) else "mapping"
    return str(kind)


def render_schema() -> str:
    from moonpin.kb.models import SCHEMA_VERSION, KnowledgeBase

    schema = KnowledgeBase.model_json_schema()
    models = {"KnowledgeBase": schema, **schema.get("$defs", {})}
    out = ["# Knowledge base schema", "",
           f"`data/kb.json` (and the KB `moonpin scrape` writes) is one JSON document, "
           f"`schema_version` {SCHEMA_VERSION}, validated strictly when read. Generated "
           "from the pydantic models of `moonpin.kb.models` by `python docs/gen_cli.py`.", ""]
    for name, spec in models.items():
        out += [f"## {name}", ""]
        if spec.get("description"):
            out += [" ".join(str(spec["description"]).split()), ""]
        required = set(spec.get("required", ()))
        out += ["| field | type | required |", "|---|---|---|"]
        for field, fs in spec.get("properties", {}).items():
            out.append(f"| `{field}` | {_type(fs)} | {'yes' if field in required else 'no'} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    pages = {PAGE: render(), SCHEMA_PAGE: render_schema()}
    if "--check" in argv:
        stale = [p for p, text in pages.items()
                 if (p.read_text(encoding="utf-8") if p.exists() else "") != text]
        for p in stale:
            print(f"{p} is not current: run python docs/gen_cli.py", file=sys.stderr)
        return 1 if stale else 0
    for p, text in pages.items():
        p.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
