"""What every ``moonpin`` command shares: the one exit path for errors (``fatal``), JSON
output, the busy line on a terminal, and where the KB (and its facts) is read from."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import argparse


__all__ = ["Busy", "PrintableStream", "count", "emit_json", "fatal", "graph", "kb_path", "load",
           "mb", "printable", "shown", "summary"]


#: Set by :func:`moonpin.cli.main.main` when the command line asks for ``--json``: every
#: error
#: is then also a JSON object on stdout (``{"error": ..., "tip": ..., "exit_code": ...}``),
#: as ``moonpin check --json`` answers on stdout whatever happens.
JSON_ERRORS = [False]


def fatal(msg: str, hint: str | None = None, code: int = 2, prog: str = "moonpin",
           ) -> NoReturn:
    # the last guard on echoed input (a 4,000-character path or argument, quoted with its
    # escapes): whatever a message quotes, it stays a few lines
    print(printable(f"{prog}: error: {shown(msg, 1000)}"), file=sys.stderr)
    if hint:
        print(printable(f"tip: {shown(hint, 600)}"), file=sys.stderr)
    if JSON_ERRORS[0]:
        emit_json({"error": shown(msg, 1000), "tip": shown(hint, 600) if hint else None,
                    "exit_code": code})
        sys.stdout.flush()
    raise SystemExit(code)


def emit_json(obj: Any, file: Any = None) -> None:
    out = sys.stdout if file is None else file
    json.dump(obj, out, indent=2, default=str)
    out.write("\n")


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class Busy:
    """``with Busy("loading the knowledge base"):`` says so on stderr while the block
    runs, only when stderr is a terminal, and leaves nothing behind."""

    def __init__(self, what: str) -> None:
        self.what = what
        try:
            self.live = sys.stderr.isatty()
        except (AttributeError, ValueError):  # a closed or stand-in stream
            self.live = False

    def __enter__(self) -> None:
        if self.live:
            sys.stderr.write(f"{self.what}…")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        if self.live:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def load(args: argparse.Namespace) -> Any:
    from moonpin.kb import store

    with Busy("loading the knowledge base"):
        from pathlib import Path

        return store.load(Path(args.kb) if args.kb else None)


def kb_path(args: argparse.Namespace) -> str:
    from moonpin.kb.paths import default_kb_file

    return os.fspath(args.kb) if args.kb else default_kb_file()


def summary(args: argparse.Namespace) -> Any:
    """The KB's :class:`moonpin.kb.facts.Summary`: its document, else from its facts, else from the
    KB itself (a KB copied without its resolved/ folder)."""
    from moonpin.resolver.tables import documents

    found = documents.summary(kb_path(args))
    if found is None:
        from moonpin.kb.facts import summary_of

        found = summary_of(graph(args).kb)
    return found


def graph(args: argparse.Namespace) -> Any:
    from moonpin.resolver.graph import CompatGraph

    g = CompatGraph.from_path(kb_path(args))

    def stacks() -> Any:  # only for a KB without resolved tables (see CompatGraph.stack_status)
        from moonpin.resolver.stacks import Stacks

        return Stacks(g)

    g.stacks_from = stacks
    return g


def shown(text: str, limit: int = 300) -> str:
    """An echoed input cut to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def printable(text: str) -> str:
    """``text`` with each character a terminal would act on (an escape sequence's ESC, a
    carriage return, a lone surrogate a name that is not UTF-8 decodes to) written as its
    Python escape; line breaks (``\\n``, CSV's ``\\r\\n``) and tabs are kept. What moonpin
    prints quotes names, paths and messages read from elsewhere (a KB, a wheel's member
    names, a project's files)."""
    if text.replace("\r\n", "").replace("\n", "").replace("\t", "").isprintable():
        return text
    return "\r\n".join("".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1]
                               for c in part) for part in text.split("\r\n"))


#: What moonpin itself writes to a terminal's stderr before a progress line: go to the
#: line's start and clear it (:class:`Busy`, :mod:`moonpin.scrapers.report`).
CLEAR_LINE = "\r\x1b[K"


class PrintableStream:
    """A text stream writing through :func:`printable` (``sys.stdout`` and ``sys.stderr``
    while a command runs), but for moonpin's own :data:`CLEAR_LINE` at the start of a
    write; everything else is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if text.startswith(CLEAR_LINE):
            return int(self._stream.write(CLEAR_LINE + printable(text[len(CLEAR_LINE):])))
        return int(self._stream.write(printable(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out
