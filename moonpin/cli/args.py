"""``moonpin args``: launch lines checked against SGLang's rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # argparse loads only when a parser is built: `moonpin check` skips it
    import argparse

from moonpin.cli.common import emit_json, kb_path

__all__ = ["cmd_args"]


def cmd_args(args: argparse.Namespace) -> int:
    from moonpin.resolver.args import lines as launch_check

    launches, findings = launch_check.gather(args.file or (), args.format, args.launch or ())
    report = launch_check.check_launches(
        kb_path(args), launches, findings, sglang=args.sglang,
        authoritative=args.authoritative, python=args.python, timeout=args.timeout,
        many=bool(args.file))
    if args.json:
        emit_json(report.to_json())
    else:
        for line in report.lines(verbose=args.verbose):
            print(line)
    return report.exit_code()


