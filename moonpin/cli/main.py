"""The ``moonpin`` command: thin glue over scrapers/, moonpin/kb/ and resolver/.

Exit codes: 0 success; 1 the command ran but found a problem (e.g. a scrape
with unread releases); 2 bad input or an unusable KB; 130 interrupted.
Domain errors are caught here only, and each is printed with a tip.
Heavy imports happen inside the subcommand that needs them.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # argparse loads only when a parser is built: `moonpin check` skips it
    import argparse


from moonpin.kb.errors import MoonpinError

__all__ = ["main"]


from moonpin.cli.common import fatal, shown


def build_parser(with_matrix: Any = None, only: str | None = None) -> argparse.ArgumentParser:
    """See :func:`moonpin.cli.parser.build_parser` (imported when a parser is built)."""
    from moonpin.cli.parser import build_parser as build

    return build(with_matrix, only)


# ---------------------------------------------------------------------- queries


_MAX_ARG = 4096
_MAX_DIGITS = 64


def _refuse_oversized(argv: list[str]) -> None:
    for arg in argv[:argv.index("--")] if "--" in argv else argv:  # not a launch line
        run = longest = 0
        for ch in arg[:_MAX_ARG + 1]:
            run = run + 1 if ch.isdigit() else 0
            longest = max(longest, run)
        if len(arg) > _MAX_ARG or longest > _MAX_DIGITS:
            what = (f"{len(arg):,} characters" if len(arg) > _MAX_ARG
                    else f"a number of {longest:,} digits")
            fatal(f"argument {shown(arg, 80)!r} is too long to be a release, version or "
                   f"path ({what})", "check the command line (a version is e.g. 0.5.18)")


#: Commands whose answer is only as current as the KB: they say when it is old.
_SAYS_AGE = frozenset({"which", "explain", "pins", "renovate", "constraints", "triples",
                       "matrix", "args"})

#: Commands that run long, hold network clients and may make cycles: the collector stays on.
_KEEPS_GC = frozenset({"scrape", "kb"})


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE") and argv is None:
        # Behave like other Unix tools when the reader goes away (`moonpin show … | head`).
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in[:1] and args_in[0].startswith("--kb="):  # --kb=X is --kb X everywhere
        args_in = ["--kb", args_in[0][len("--kb="):], *args_in[1:]]
    # `moonpin check` runs at every worker start: hand it over before building the rest.
    lead = args_in[:2] if args_in[:1] == ["--kb"] else []
    if args_in[len(lead):len(lead) + 1] == ["check"]:
        from moonpin.preflight.verdict import main as check_main

        return check_main([*lead, *args_in[len(lead) + 1:]])
    # What a command prints quotes names, paths and messages read from elsewhere (a KB, a
    # wheel's member names, a project's files, argv echoed by argparse): none of it may
    # reach the terminal as a control sequence
    from moonpin.cli.common import PrintableStream

    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = PrintableStream(stdout)  # type: ignore[assignment]
    sys.stderr = PrintableStream(stderr)  # type: ignore[assignment]
    try:
        return _run(args_in, lead)
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _run(args_in: list[str], lead: list[str]) -> int:
    from moonpin.cli.common import JSON_ERRORS

    options = args_in[:args_in.index("--")] if "--" in args_in else args_in
    # --json, or the JSON --format of triples and matrix: stdout is one JSON document,
    # an error's too
    JSON_ERRORS[0] = "--json" in options or "--format=json" in options or any(
        options[i:i + 2] == ["--format", "json"] for i in range(len(options)))
    _refuse_oversized(args_in)
    rest = args_in[len(lead):]
    if rest == ["--version"]:
        from moonpin.cli.version import version_line

        print(version_line(lead[1] if lead else None))
        return 0
    # Only the named command's parser is built (``moonpin -h``, help and an unknown
    # command get them all).
    only = rest[0] if rest and not rest[0].startswith("-") and rest[0] != "help" else None
    parser = build_parser(only=only)
    if only == "matrix":
        # The matrix command pulls in the whole resolver; register it only when asked.
        from moonpin.resolver.matrix import table as matrix

        parser = build_parser(with_matrix=matrix.add_parser, only=only)
    if not rest:  # no command: the overview on stderr and exit 2, as uv and git do, so a
        parser.print_help(sys.stderr)  # script that forgot the command does not "pass"
        return 2
    if rest[0] == "help":
        if len(rest) > 1:  # moonpin help CMD: that command's own help
            if rest[1] == "matrix":
                from moonpin.resolver.matrix import table as matrix

                parser = build_parser(with_matrix=matrix.add_parser)
            if rest[1] == "check":
                from moonpin.preflight.run import main as check_main

                return check_main(["--help"])
            parser.parse_args([rest[1], "--help"])
        parser.print_help()
        return 0
    args, extra = parser.parse_known_args(args_in)
    if extra:  # said by the command's own parser: its usage, and the nearest option
        from moonpin.cli.parser import subparser

        subparser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.show_version:
        from moonpin.cli.version import version_line

        print(version_line(args.kb))
        return 0
    if getattr(args, "func", None) is None:  # options but no command (`moonpin --kb F`)
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "kb_sub", None):
        args.kb = args.kb_sub
    if args.command not in _KEEPS_GC:
        # A query is a short process whose tens of thousands of objects all live until it
        # exits and form no cycles: the cycle collector's passes over them (40% of the
        # matrix's time) free nothing. Reference counting still frees what is dropped.
        import gc

        gc.disable()
    try:
        from moonpin.cli.spelling import spell_inputs

        spell_inputs(args)
        if getattr(args, "quiet", False) and not JSON_ERRORS[0]:
            # -q prints nothing but errors; with --json stdout is still the one document
            import contextlib
            import os

            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                code: int = args.func(args)
        else:
            code = args.func(args)
    except MoonpinError as e:  # bad input: exit 2, and a tip even where none was given
        fatal(str(e), e.hint or f"`moonpin {args.command} --help` says what it takes")
    except KeyboardInterrupt:
        print("moonpin: interrupted; the KB file was not changed", file=sys.stderr)
        return 130
    if args.command in _SAYS_AGE and not getattr(args, "quiet", False):
        from moonpin.cli.common import kb_path
        from moonpin.resolver.tables.documents import age_note

        note = age_note(kb_path(args))
        if note:
            print(f"moonpin: note: {note}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
