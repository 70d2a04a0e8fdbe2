"""The ``moonpin`` command line's parser: one builder per command, each command's help
ending with its exit codes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import argparse


from moonpin.cli.args import cmd_args
from moonpin.cli.kb import cmd_kb_info, cmd_kb_resolve, cmd_scrape, cmd_show
from moonpin.cli.pins import cmd_constraints, cmd_pins, cmd_renovate
from moonpin.cli.query import cmd_explain, cmd_triples, cmd_which

__all__ = ["DESCRIPTION", "EPILOG", "EXIT_CODES", "build_parser", "subparser"]


# ---------------------------------------------------------------------- parser


DESCRIPTION = ("moonpin: which SGLang, torch, mooncake and native extension (nixl, sglang-kernel, "
               "DeepEP, FlashInfer) releases work together, read out of the real release "
               "artifacts (works offline on the knowledge base it ships).")
EPILOG = """examples:
  moonpin which mooncake --sglang 0.5.18          the mooncake releases to install
  moonpin explain sglang==0.5.18 mooncake-transfer-engine-cuda13==0.3.13.post1
  moonpin pins requirements.txt                   judge a project's pins, propose updates
  moonpin which nixl --sglang 0.5.23 --torch 2.14.1  a native extension's releases
  moonpin check --elastic-ep-backend mooncake     check this image before a worker starts
  moonpin check -- --moe-a2a-backend nixl --elastic-ep-backend mooncake
                                                  the same, from the worker's launch line

exit codes: 0 success; 1 the command ran and found a problem; 2 bad input or an unusable
knowledge base (the message says which, with a tip); 130 interrupted.
`moonpin help COMMAND` (or `moonpin COMMAND -h`) documents each command's options."""


def build_parser(with_matrix: Any = None, only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: a command named on it, whose parser alone is
    built (argparse builds each parser and its formatter eagerly: all of them cost a query
    a tenth of its time). ``with_matrix`` adds the matrix command's own options."""
    import argparse

    class Parser(argparse.ArgumentParser):
        """argparse's own errors as moonpin's: the echoed input cut short, and a tip (every
        subcommand's parser is of this class too)."""

        def error(self, message: str) -> NoReturn:
            from moonpin.cli.common import fatal

            if len(message) > 400:
                message = message[:400] + f"... ({len(message):,} characters)"
            from moonpin.resolver.spelling import argparse_hint

            near = argparse_hint(self, message)
            self.print_usage(sys.stderr)
            fatal(message, near or f"`{self.prog} --help` says what it takes", prog=self.prog)

        def _get_formatter(self) -> argparse.HelpFormatter:
            from moonpin.resolver.inputs import help_width

            return self.formatter_class(prog=self.prog, width=help_width())  # type: ignore[call-arg]

    p = Parser(
        prog="moonpin", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", help="knowledge-base file (default: $MOONPIN_KB, else the newer of "
                   "the user KB `moonpin scrape` writes and the shipped one)")
    p.add_argument("--version", action="store_true", dest="show_version",  # not scrape's
                   help="print moonpin's version and when its knowledge base was scraped")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("help", help="this help, or a command's: moonpin help which")
    builders: dict[str, Any] = {
        "scrape": _add_scrape, "kb": _add_kb, "show": _add_show, "which": _add_which,
        "explain": _add_explain, "check": _add_check,
        "matrix": lambda sub: _add_matrix(sub, with_matrix), "pins": _add_pins,
        "renovate": _add_renovate, "constraints": _add_constraints, "args": _add_args,
        "triples": _add_triples}
    kb: argparse.ArgumentParser | None = None
    for name, add in builders.items():
        if only is None or only == name or only not in builders:
            made = add(sub)
            kb = made if name == "kb" else kb
    _document(sub, kb)
    return p


def subparser(parser: argparse.ArgumentParser, args: argparse.Namespace,
              ) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` names (``moonpin kb info``'s for
    ``args.command == "kb"``), else ``parser``: its errors show its own usage."""
    import argparse

    for dest in ("command", "kb_command"):
        name = getattr(args, dest, None)
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                   None)
        if name is None or sub is None or name not in sub.choices:
            break
        parser = sub.choices[name]
    return parser


def _add_scrape(sub: Any) -> None:
    import argparse

    s = sub.add_parser("scrape", help="read releases from the index into the KB")
    s.add_argument("--only", choices=["sglang", "mooncake", "torch", "native"],
                   help="refresh only this kind of release (default: all four)")
    s.add_argument("--full", action="store_true", help="re-read everything")
    s.add_argument("--from-path", metavar="PATH",
                   help="record an SGLang source tree or site-packages instead of the index")
    s.add_argument("--from-url", metavar="URL",
                   help="record an SGLang tagged source archive (.tar.gz/.zip) by URL")
    s.add_argument("--version", help="with --from-path/--from-url: the version to record "
                   "it as (default: read from the sources)")
    s.add_argument("--index-url", help="package index base URL, serving /pypi/<name>/json "
                   "(default $MOONPIN_INDEX_URL, else pip's index: $PIP_INDEX_URL, pip config, "
                   "pip's default)")
    s.add_argument("--jobs", type=int, default=8, help="concurrent requests (default 8)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_scrape)


def _add_kb(sub: Any) -> argparse.ArgumentParser:
    import argparse

    k = sub.add_parser("kb", help="about the knowledge base")
    ksub = k.add_subparsers(dest="kb_command", metavar="{info,resolve}", required=True)
    ki = ksub.add_parser("info", help="which KB is read, when it was scraped, counts and "
                         "coverage")
    ki.add_argument("--json", action="store_true", help="print it as JSON")
    ki.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    ki.set_defaults(func=cmd_kb_info)
    kr = ksub.add_parser("resolve", help="re-derive the resolved/ folder beside the KB (one "
                         "table of answers per SGLang release, read by the fast paths); "
                         "`moonpin scrape` does it after every write")
    kr.add_argument("--json", action="store_true", help="print what was written as JSON")
    kr.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    kr.set_defaults(func=cmd_kb_resolve)
    made: argparse.ArgumentParser = k
    return made


def _add_show(sub: Any) -> None:
    import argparse

    sh = sub.add_parser("show", help="what the KB holds for one release")
    sh.add_argument("release", help="e.g. sglang==0.5.18 or "
                    "mooncake-transfer-engine-cuda13==0.3.13.post1")
    sh.add_argument("--json", action="store_true", help="print the KB's record as JSON")
    sh.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    sh.set_defaults(func=cmd_show)


def _scope(sp: argparse.ArgumentParser,
           python_default: str = "every python the wheels cover") -> None:
    """The options every query command shares."""
    import argparse

    sp.add_argument("--python", help=f"3.12 or cp312 (default: {python_default})")
    sp.add_argument("--arch", help="x86_64 or aarch64 (default: both)")
    sp.add_argument("--json", action="store_true",
                    help="print the answer as JSON (shapes in the docs)")
    sp.add_argument("-q", "--quiet", action="store_true",
                    help="print nothing but errors: the exit code is the answer (for scripts)")
    sp.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)


def _add_which(sub: Any) -> None:

    w = sub.add_parser("which", help="which mooncake / sglang / torch / native extension "
                       "works with the rest")
    w.add_argument("what", metavar="{mooncake,sglang,torch,EXTENSION}",
                   help="what to find: mooncake needs --sglang; sglang needs --mooncake; "
                   "torch needs both; a native extension (nixl, sglang-kernel, "
                   "sgl-deep-ep, flashinfer-python, or an import name: nixl_ep, sgl_kernel, "
                   "deep_ep, flashinfer) needs --torch or --sglang")
    w.add_argument("--sglang", metavar="VERSION", help="the SGLang release, e.g. 0.5.18, "
                   "v0.5.18 or latest")
    w.add_argument("--mooncake", metavar="DIST==VERSION", help="the mooncake release, e.g. "
                   "mooncake-transfer-engine-cuda13==0.3.13.post1 (or DIST==latest)")
    w.add_argument("--torch", metavar="VERSION", help="e.g. 2.13.0 or 2.13.0+cu126 "
                   "(default: what the SGLang release requires)")
    w.add_argument("--dist", metavar="NAME", help="only this mooncake (or extension) "
                   "distribution")
    w.add_argument("--why", action="store_true", help="also list every excluded candidate")
    _scope(w)
    w.set_defaults(func=cmd_which)


def _add_explain(sub: Any) -> None:

    e = sub.add_parser("explain", help="every check for sglang==V DIST==V … [torch==T]")
    e.add_argument("releases", nargs="+", metavar="NAME==VERSION",
                   help="sglang==V and the releases to judge with it: a mooncake DIST==V "
                   "and/or any extension distributions the KB holds (and optionally "
                   "torch==T); V may be latest")
    e.add_argument("--torch", metavar="VERSION", help="the torch, as torch==T or this option")
    _scope(e)
    e.set_defaults(func=cmd_explain)


def _add_check(sub: Any) -> None:
    sub.add_parser("check", add_help=False,
                   help="verify this image at worker start (see `moonpin check --help`)")


def _add_matrix(sub: Any, with_matrix: Any) -> None:
    if with_matrix is not None:
        with_matrix(sub)
        return
    sub.add_parser("matrix", add_help=False,
                   help="the compatibility matrix: HTML, Markdown, CSV or JSON "
                        "(see `moonpin matrix --help`)")


def _add_pins(sub: Any) -> None:

    pn = sub.add_parser("pins", help="read a project's pins of sglang, torch, mooncake and "
                        "the native extensions; judge the set and propose updates")
    pn.add_argument("files", nargs="+", metavar="FILE",
                    help="requirements/constraints files, pyproject.toml, Dockerfiles, scripts")
    pn.add_argument("--match", action="append", metavar="REGEX",
                    help="a Renovate-style regex with a (?<currentValue>...) group, as "
                         "in renovate.json (Python's (?P<...>) works too)")
    pn.add_argument("--dep", action="append", metavar="NAME", help="the package of each --match")
    pn.add_argument("--exit-zero", action="store_true", help="advisory: exit 0 even when "
                    "the set is incompatible or updates exist")
    pn.add_argument("--strategy", choices=["minimal", "latest"], default="minimal",
                    help="minimal: keep sglang, move mooncake (and torch if it must); latest: "
                    "move the stack to the newest compatible set")
    pn.add_argument("--keep", choices=["sglang", "torch", "mooncake"],
                    help="the package that must not move")
    pn.add_argument("--diff", action="store_true", help="print the updates as a unified "
                    "diff on stdout (the report then goes to stderr)")
    pn.add_argument("--write", action="store_true",
                    help="apply the updates in place (atomically; layout and comments kept)")
    pn.add_argument("--changed", action="store_true",
                    help="the files are those a commit changes (the pre-commit hook): exit 0 "
                    "when none pins sglang, torch or mooncake, else judge them with every "
                    "requirements/constraints file, pyproject.toml and Dockerfile under the "
                    "current folder, as one set")
    _scope(pn, "the lowest Python the requires-python of a pyproject.toml among FILE "
           "admits, as uv resolves for it; else every python the wheels cover")
    pn.set_defaults(func=cmd_pins)


def _add_renovate(sub: Any) -> None:

    rv = sub.add_parser("renovate", help="a Renovate config fragment that keeps torch, "
                        "mooncake and extension bumps compatible with the pinned sglang")
    rv.add_argument("files", nargs="*", metavar="FILE", help="files pinning sglang")
    rv.add_argument("--sglang", metavar="VERSION", help="the SGLang release to keep "
                    "(default: the files' sglang pin)")
    rv.add_argument("--allow-jit", action="store_true", help="also allow mooncake releases "
                    "that compile their process-group extension at first import")
    _scope(rv)
    rv.set_defaults(func=cmd_renovate)


def _add_constraints(sub: Any) -> None:
    import argparse

    cn = sub.add_parser("constraints", help="a pip/uv constraints file (or [tool.uv] "
                        "constraint-dependencies) holding torch, mooncake and the native "
                        "extensions to what an SGLang release loads")
    cn.add_argument("--sglang", metavar="VERSION", required=True,
                    help="the SGLang release, e.g. 0.5.18 or latest")
    cn.add_argument("--format", choices=["txt", "uv"], default="txt",
                    help="txt: a constraints file for pip -c / uv pip compile -c; uv: the "
                    "[tool.uv] constraint-dependencies table")
    cn.add_argument("--allow-jit", action="store_true", help="also allow mooncake releases "
                    "that compile their process-group extension at first import")
    cn.add_argument("--python", help="3.12 or cp312 (default: every python the wheels cover)")
    cn.add_argument("--arch", help="x86_64 or aarch64 (default: both)")
    cn.add_argument("--json", action="store_true", help="print the requirement strings and "
                    "what they were judged for as JSON")
    cn.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    cn.set_defaults(func=cmd_constraints)


def _add_args(sub: Any) -> None:
    import argparse

    ar = sub.add_parser("args", help="check a launch line against that SGLang release's own "
                        "elastic-EP argument rules, offline")
    ar.add_argument("--sglang", metavar="VERSION",
                    help="the SGLang release (default: a manifest's lmsysorg/sglang image tag)")
    ar.add_argument("--file", action="append", metavar="PATH",
                    help="a Kubernetes manifest, Dynamo graph deployment (YAML) or shell script "
                         "whose SGLang launch lines to check (repeatable)")
    ar.add_argument("--authoritative", action="store_true",
                    help="also run the installed SGLang's own argument handling (in a child "
                         "interpreter) and report where it disagrees with the scraped rules")
    ar.add_argument("--python", metavar="PATH",
                    help="interpreter with SGLang installed, for --authoritative "
                         "(default: this one)")
    ar.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                    help="how long --authoritative may take per launch (default 300)")
    ar.add_argument("--format", choices=["auto", "yaml", "shell"], default="auto",
                    help="how to read --file (default: by suffix and content)")
    ar.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    ar.add_argument("--verbose", "-v", action="store_true",
                    help="list every rule that could not be checked offline")
    ar.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    ar.add_argument("launch", nargs=argparse.REMAINDER, help="-- then the launch arguments")
    ar.set_defaults(func=cmd_args)


def _add_triples(sub: Any) -> None:

    t = sub.add_parser("triples", help="every compatible (sglang, torch, mooncake) set")
    t.add_argument("--sglang", metavar="SPEC", help="only these SGLang releases, e.g. "
                   "'>=0.5.17' (a bare version means ==)")
    t.add_argument("--torch", metavar="SPEC", help="only these torch releases")
    t.add_argument("--mooncake", metavar="SPEC", help="only these mooncake releases")
    t.add_argument("--dist", metavar="NAME", help="only this mooncake distribution")
    t.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (default), json or csv")
    _scope(t)
    t.set_defaults(func=cmd_triples)


#: Each command's exit codes, printed at the end of its ``-h``.
EXIT_CODES = {
    "help": "0 always",
    "scrape": "0 every release read; 1 some releases could not be read (listed as unread; "
              "the KB keeps what it had read of them before); 2 bad input, an index that "
              "cannot be reached or an unusable KB",
    "kb": "0 done; 2 an unusable KB, or a folder that cannot be written",
    "info": "0 done; 2 an unusable KB",
    "resolve": "0 the folder was written; 2 an unusable KB, or a folder that cannot be "
               "written (never the KB installed with moonpin)",
    "show": "0 the release is in the KB; 1 it could not be read in the last scrape; 2 bad "
            "input or a release the KB does not hold",
    "which": "0 at least one compatible result; 1 none (the reasons are printed); 2 bad input",
    "explain": "0 compatible; 1 incompatible or unknown (the failing checks are printed); "
               "2 bad input",
    "matrix": "0 at least one compatible row; 1 none; 2 bad input or an unusable KB",
    "pins": "0 compatible and nothing to do, or --write left a compatible set; 1 "
            "incompatible or updates proposed (0 with --exit-zero); 2 a file or line that "
            "cannot be read (nothing judged)",
    "renovate": "0 a fragment with a compatible mooncake; 1 none fits (the fragment holds "
                "what can be said); 2 bad input",
    "constraints": "0 written; 1 no mooncake release fits; 2 bad input",
    "args": "0 no rule violated; 1 a violated rule, a problem in a file, or an option the "
            "release refuses; 2 bad input",
    "triples": "0 at least one compatible set; 1 none; 2 bad input",
}


def _document(sub: Any, kb: argparse.ArgumentParser | None) -> None:
    """End every command's ``-h`` with its exit codes (and say what it does on top)."""
    import argparse

    parsers = dict(sub.choices)
    helps = {a.dest: a.help for a in sub._choices_actions}
    if kb is not None:
        kb_sub = next(a for a in kb._actions if isinstance(a, argparse._SubParsersAction))
        parsers.update({f"kb {n}": p for n, p in kb_sub.choices.items()})
        helps.update({f"kb {a.dest}": a.help for a in kb_sub._choices_actions})
    for name, sp in parsers.items():
        codes = EXIT_CODES.get(name.split()[-1])
        if codes is None or not sp.add_help:  # check: its own parser says them
            continue
        if sp.description is None and helps.get(name):
            sp.description = helps[name]
        # one paragraph: argparse's formatter wraps it
        sp.epilog = " ".join(filter(None, [sp.epilog, f"exit codes: {codes}; 130 "
                                                      "interrupted."]))
