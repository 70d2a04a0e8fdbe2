"""The ``moonpin`` command: thin glue over scrapers/, kb/ and resolver/.

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

    from resolver.answers import Candidate, Which

from kb.errors import MoonpinError

__all__ = ["main"]


from resolver.cli_common import (  # noqa: F401  (the names tests and callers use)
    _Busy,
    _count,
    _emit_json,
    _fatal,
    _graph,
    _kb_path,
    _load,
    _mb,
    _shown,
)


def build_parser(with_matrix: Any = None, only: str | None = None) -> argparse.ArgumentParser:
    """See :func:`resolver.cli_parser.build_parser` (imported when a parser is built)."""
    from resolver.cli_parser import build_parser as build

    return build(with_matrix, only)


# ---------------------------------------------------------------------- queries


def _listed(values: list[str], keep: int = 4) -> str:
    """``a/b/c`` for a short list, ``a/b/c/d (+N)`` past ``keep`` items."""
    if len(values) <= keep:
        return "/".join(values) or "-"
    return "/".join(values[:keep]) + f" (+{len(values) - keep})"


#: Compatible releases printed before the rest are counted (``--json`` lists every one).
_SHOWN = 15


def _print_which(res: Which, what: str, why: bool) -> None:
    q = res.query
    compatible = list(res.ranked())
    best = res.recommended()
    if best is not None and best["requirement"] is None:
        print(f"recommended: {best['reason']}")
    elif best is not None:
        print(f"recommended: {best['requirement']} ({best['reason']})")
    scope = ", ".join(f"{k} {_listed(v) if isinstance(v, list) else v}"
                      for k, v in q.items() if k not in ("names", "backends") and v is not None)
    print(f"# {what} compatible with {scope}")
    if q.get("module"):
        print(f"# needs {q['module']}: names {', '.join(q.get('names') or []) or '-'}; "
              f"backends {', '.join(q.get('backends') or []) or '-'}")
    said = res.notes or ()
    for note in said:
        print(f"# note: {note}")
    if not compatible:
        print(f"none compatible: {_why_none(res, what)} ({len(res.excluded)} excluded, "
              f"{len(res.unknown)} unknown)")
    for c in compatible[:_SHOWN]:
        wheels = c.wheels or ()
        pys = sorted({w.python for w in wheels})
        arches = sorted({w.arch for w in wheels})
        torches = sorted({w.torch for w in wheels})
        print(f"{c.requirement or c.version:50} python {_listed(pys)}  {','.join(arches)}"
              f"  torch {','.join(torches)}")
        for note in c.notes or ():
            if note not in said:  # said once above
                print(f"    note: {note}")
    if len(compatible) > _SHOWN:
        print(f"… and {len(compatible) - _SHOWN} more compatible (--json lists all)")
    _print_excluded(res.excluded, what, why or not compatible)
    for c in res.unknown:
        print(f"  unknown  {c.dist or what} {c.version}: {c.reason}")


def _why_none(res: Which, what: str) -> str:
    """The one-line reason nothing is compatible: the check that excludes the most releases
    (``no mooncake wheel for cp39`` when it is the wheel's python or platform)."""
    if not res.excluded:
        return "nothing in the knowledge base to judge" if not res.unknown else (
            "every candidate is unknown (not read in the last scrape)")
    counts: dict[str, int] = {}
    for c in res.excluded:
        reason = c.reason or ""
        kind = reason.split(":", 1)[0] if ":" in reason[:40] else reason
        counts[kind] = counts.get(kind, 0) + 1
    kind, n = max(counts.items(), key=lambda kv: kv[1])
    if kind == "wheel for python/platform":
        on = " ".join(str(res.query.get(k)) for k in ("python", "arch")
                      if res.query.get(k) not in (None, "all"))
        rest = (f" (the other {len(res.excluded) - n} fail a check before it)"
                if n < len(res.excluded) else "")
        return f"no {what} wheel for {on or 'this python and platform'}{rest}"
    first = next(c.reason for c in res.excluded if (c.reason or "").startswith(kind))
    share = "every one" if n == len(res.excluded) else f"{n} of {len(res.excluded)}"
    return f"{share} excluded by {kind} (e.g. {_shown(first or '', 160)})"


def _print_excluded(excluded: tuple[Candidate, ...], what: str, each: bool) -> None:
    """One line per reason, the releases it excludes named together (``each``); else
    counted per distribution, by the check that excludes them."""
    if each:
        by_reason: dict[str, dict[str, list[str]]] = {}
        for c in excluded:
            by_reason.setdefault(c.reason or "", {}).setdefault(
                c.dist or what, []).append(c.version)
        for reason, dists in by_reason.items():
            if len(dists) == 1:
                ((name, versions),) = dists.items()
                print(f"  excluded {name} {_listed(versions, 6)}: {reason}")
            else:
                n = sum(map(len, dists.values()))
                print(f"  excluded {n} releases of {_listed(sorted(dists), 3)}: {reason}")
        return
    per: dict[str, dict[str, int]] = {}
    for c in excluded:
        reason = c.reason or ""
        check = reason.split(":", 1)[0] if ":" in reason[:40] else "other"
        counts = per.setdefault(c.dist or what, {})
        counts[check] = counts.get(check, 0) + 1
    for name, counts in per.items():
        total = sum(counts.values())
        parts = ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items(), key=lambda x: -x[1]))
        print(f"  excluded {name}: {total} release{'s' * (total != 1)} ({parts}; --why "
              "says why each)")


def cmd_which(args: argparse.Namespace) -> int:
    if args.what == "mooncake":
        if not args.sglang:
            _fatal("`which mooncake` needs --sglang VERSION", "e.g. moonpin which mooncake "
                   "--sglang 0.5.18")
        fast = _which_mooncake_fast(args)
        if fast is not None:
            return _finish_which(fast, args)
    from resolver import query

    g = _graph(args)
    if args.what == "mooncake":
        res = query.which_mooncake(g, args.sglang, torch=args.torch, python=args.python,
                                   arch=args.arch, dist=args.dist)
    elif args.what == "sglang":
        if not args.mooncake:
            _fatal("`which sglang` needs --mooncake DIST==VERSION",
                   "e.g. moonpin which sglang --mooncake mooncake-transfer-engine==0.3.13")
        res = query.which_sglang(g, args.mooncake, torch=args.torch, python=args.python,
                                 arch=args.arch)
    else:
        if not (args.sglang and args.mooncake):
            _fatal("`which torch` needs --sglang VERSION and --mooncake DIST==VERSION",
                   "e.g. moonpin which torch --sglang 0.5.18 "
                   "--mooncake mooncake-transfer-engine==0.3.13")
        res = query.which_torch(g, args.sglang, args.mooncake, python=args.python,
                                arch=args.arch, torch=args.torch)
    return _finish_which(res, args)


def _finish_which(res: Which, args: argparse.Namespace) -> int:
    if args.json:
        _emit_json(res.to_json())
    else:
        _print_which(res, args.what, args.why)
    return 0 if res.compatible else 1


def _which_mooncake_fast(args: argparse.Namespace) -> Which | None:
    """Answer from the release's resolved table when it holds the question (without
    reading the KB's facts)."""
    from resolver import resolved

    table = resolved.load(_kb_path(args), args.sglang)
    if table is None or not table.holds(args.sglang, args.torch):
        return None
    from resolver.inputs import normalize_arch, normalize_python

    dist = None
    if args.dist:
        from resolver.inputs import canonical_name

        dist = canonical_name(args.dist)
        if dist not in {d for d, _ in table.releases}:
            return None  # let the full path say what is wrong with it
    from resolver.answers import Which

    return Which.from_json(table.which_mooncake(
        args.sglang, python=normalize_python(args.python), arch=normalize_arch(args.arch),
        dist=dist, torch=args.torch))


def cmd_explain(args: argparse.Namespace) -> int:
    from resolver import query

    sglang = mooncake = None
    torch = args.torch
    for item in args.releases:
        name, version = query.parse_release(item)
        if name == "sglang":
            sglang = version
        elif name == "torch":
            torch = version
        else:
            mooncake = f"{name}=={version}"
    if sglang is None or mooncake is None:
        _fatal("explain needs sglang==V and a mooncake DIST==V (and optionally torch==T)",
               "e.g. moonpin explain sglang==0.5.18 mooncake-transfer-engine-cuda13==0.3.13")
    res = query.explain(_graph(args), sglang, mooncake, torch=torch, python=args.python,
                        arch=args.arch)
    if args.json:
        _emit_json(res.to_json())
    else:
        ev = res.evaluated
        print(f"sglang {sglang} + {mooncake} + torch {ev['torch'] or 'as required'} on "
              f"{ev['python'] or 'any python'} {ev['arch'] or 'any platform'}: "
              f"{res.verdict.upper()}")
        if not res.checks:
            for r in res.reasons:
                print(f"  {r}")
        marks = {True: "ok  ", False: "FAIL", None: "??  "}
        for c in res.checks:
            print(f"  [{marks[c['ok']]}] {c['name']}: {c['detail']}")
            for e in c["evidence"]:
                print(f"         evidence: {e}")
        for n in res.notes:
            print(f"  note: {n}")
        others = [c for c in res.combinations if (c["torch"], c["python"], c["arch"])
                  != (ev["torch"], ev["python"], ev["arch"])]
        if others:
            verdicts = _count(c["verdict"] for c in others)
            print("  other combinations: " + ", ".join(f"{v} {k}" for k, v in verdicts.items())
                  + " (see --json, or pass --python/--arch/torch==)")
    return {"compatible": 0, "incompatible": 1}.get(res.verdict, 1)


def cmd_pins(args: argparse.Namespace) -> int:
    from resolver import pins, pins_output

    if len(args.match or []) != len(args.dep or []):
        _fatal("each --match needs a --dep (the package its currentValue is a version of)",
               "e.g. --match 'sglang_ref: v(?P<currentValue>\\S+)' --dep sglang")
    patterns = list(zip(args.match or [], args.dep or [], strict=True))
    files = list(args.files)
    found = _read_pin_files(files, patterns)
    if args.changed:
        if not found:
            print(f"no pin of sglang, torch or a mooncake distribution in "
                  f"{_shown(', '.join(args.files))}: nothing to judge")
            return 0
        # A commit's files are judged with the rest of the project: one set, as pip sees it.
        files += pins.project_files(".")
        found = _read_pin_files(files, patterns)
    if not found:
        raise pins_output.nothing_pinned(args.files)
    pinned = pins.pinned_set(found)
    pins.check_versions(pinned)
    g = _graph(args)
    python, python_from = args.python, None
    if python is None and (project := pins.project_python(files)) is not None:
        python, python_from = project
    verdict = pins.judge(g, pinned, python=python, arch=args.arch, strategy=args.strategy,
                         keep=args.keep, python_from=python_from)
    # With --diff, stdout is the patch alone (for `patch`/`git apply`): the report is on stderr.
    report = sys.stderr if args.diff and not args.write else sys.stdout
    if args.json:
        _emit_json(pins_output.report_json(found, pinned, verdict), report)
    else:
        print("\n".join(pins_output.report_lines(found, pinned, verdict)), file=report)
    if (args.diff or args.write) and verdict.updates:
        written = _rewrite_pins(found, list(verdict.updates), write=args.write)
        if written:
            # What the command leaves is what it answers for: judged again as written.
            after = pins.pinned_set(_read_pin_files(files, patterns))
            again = pins.judge(g, after, python=python, arch=args.arch,
                               strategy=args.strategy, keep=args.keep, python_from=python_from)
            print(f"after writing: verdict {again.verdict}"
                  + (f", {len(again.updates)} update(s) left" if again.updates else ""),
                  file=sys.stderr)
            return pins_output.exit_code(after, again, exit_zero=args.exit_zero)
    return pins_output.exit_code(pinned, verdict, exit_zero=args.exit_zero)


def _rewrite_pins(found: Any, updates: list[dict[str, Any]], *, write: bool) -> bool:
    """Print the unified diff of the updates; with ``write``, apply it (atomically, per file,
    line endings, mode and symlinks kept). True when every update was written."""
    import os

    from resolver import pins_rewrite

    plan = pins_rewrite.plan_rewrite(found, updates)
    (sys.stderr if write else sys.stdout).writelines(plan.diff())
    for problem in plan.problems:
        print(f"not written: {_shown(problem)}", file=sys.stderr)
    if not write:
        return False
    for p, written in pins_rewrite.write_rewrite(plan):
        print(f"wrote {p}" + (f" (through the symlink, to {written})"
                              if written != os.path.abspath(p) else ""), file=sys.stderr)
    return not plan.problems


def cmd_renovate(args: argparse.Namespace) -> int:
    from resolver import pins

    if not args.files and args.sglang is None:
        _fatal("`renovate` needs --sglang VERSION or the files that pin it",
               "e.g. moonpin renovate --sglang 0.5.18, or moonpin renovate requirements.txt")
    pinned = pins.pinned_set(_read_pin_files(args.files)) if args.files else None
    stack = pins.stack_of(pinned, args.sglang, shown=_shown(", ".join(args.files or [])))
    _version_arg(stack.sglang, "--sglang" if args.sglang else "the sglang pin")
    plan = pins.plan_stack(_graph(args), stack.sglang, torch=stack.torch, dist=stack.dist,
                           current_mooncake=stack.mooncake, python=args.python,
                           arch=args.arch, allow_jit=args.allow_jit)
    for r in plan.reasons:
        print(f"moonpin: {r}", file=sys.stderr)
    _emit_json(pins.renovate_fragment(plan))
    return 0 if plan.mooncake else 1


def _version_arg(text: str, what: str) -> str:
    """A ``--sglang``-style version, checked before anything parses it (a 5,000-digit
    number passes Python's ``int()`` limit)."""
    from packaging.version import InvalidVersion, Version

    try:
        if len(text) > 100:
            raise InvalidVersion(text)
        Version(text)
    except (InvalidVersion, ValueError):
        _fatal(f"{what} {_shown(text, 60)!r} is not a PEP 440 version"
               + (f" ({len(text)} characters)" if len(text) > 100 else ""),
               f"e.g. {what} 0.5.18")
    return text


def _read_pin_files(files: list[str], patterns: list[tuple[str, str]] | None = None,
                    ) -> list[Any]:
    """``pins.read_pins`` for the CLI: every unreadable file or line printed, then exit 2."""
    from resolver import pins

    try:
        return pins.read_pins_or_fail(files, patterns or [])
    except pins.PinsUnreadable as e:
        for line in e.details:
            print(line, file=sys.stderr)
        _fatal(str(e), e.hint)


def cmd_constraints(args: argparse.Namespace) -> int:
    from resolver import pins_constraints, pins_renovate  # not all of resolver.pins

    _version_arg(args.sglang, "--sglang")
    g = _graph(args)
    plan = pins_renovate.plan_stack(g, args.sglang, python=args.python, arch=args.arch,
                                    allow_jit=args.allow_jit)
    if not plan.mooncake:
        _fatal(f"no mooncake release in the knowledge base fits sglang {_shown(args.sglang)}",
               f"`moonpin which mooncake --sglang {_shown(args.sglang)} --why` says why",
               code=1)
    where = pins_constraints.judged_for(args.python, args.arch)
    if args.json:
        _emit_json({"sglang": plan.sglang, "torch": list(plan.torches),
                    "module": plan.module, "constraints": pins_constraints.constraint_lines(
                        g, plan), "notes": list(plan.jit_notes), "platform": where})
        return 0
    sys.stdout.write(pins_constraints.render(g, plan, args.format, where=where))
    return 0


def cmd_args(args: argparse.Namespace) -> int:
    from resolver import launch_check

    launches, findings = launch_check.gather(args.file or (), args.format, args.launch or ())
    report = launch_check.check_launches(
        _kb_path(args), launches, findings, sglang=args.sglang,
        authoritative=args.authoritative, python=args.python, timeout=args.timeout,
        many=bool(args.file))
    if args.json:
        _emit_json(report.to_json())
    else:
        for line in report.lines(verbose=args.verbose):
            print(line)
    return report.exit_code()


def cmd_triples(args: argparse.Namespace) -> int:
    from resolver import query

    rows = query.triples(_graph(args), sglang=args.sglang, torch=args.torch,
                         mooncake=args.mooncake, dist=args.dist, python=args.python,
                         arch=args.arch)
    cols = ["sglang", "torch", "dist", "mooncake", "python", "arch"]
    fmt = "json" if args.json else args.format
    if fmt == "json":
        _emit_json(rows)
    elif fmt == "csv":
        import csv

        w = csv.DictWriter(sys.stdout, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    else:
        widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in cols}
        print("  ".join(c.ljust(widths[c]) for c in cols))
        for r in rows:
            print("  ".join(r[c].ljust(widths[c]) for c in cols))
        print(f"# {len(rows)} compatible combinations")
    return 0 if rows else 1


#: No version, specifier, name or path moonpin is given needs more: a longer argument is
#: refused before anything parses it (Python's int() stops at 4,300 digits with a
#: ValueError deep inside packaging, and a 10,000-character value would be echoed whole).
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
            _fatal(f"argument {_shown(arg, 80)!r} is too long to be a release, version or "
                   f"path ({what})", "check the command line (a version is e.g. 0.5.18)")


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
        from resolver.check import main as check_main

        return check_main([*lead, *args_in[len(lead) + 1:]])
    from resolver.cli_common import JSON_ERRORS

    JSON_ERRORS[0] = "--json" in (args_in[:args_in.index("--")] if "--" in args_in
                                  else args_in)
    _refuse_oversized(args_in)
    rest = args_in[len(lead):]
    if rest == ["--version"]:
        from resolver.cli_parser import _version_line

        print(_version_line(lead[1] if lead else None))
        return 0
    # Only the named command's parser is built (``moonpin -h``, help and an unknown
    # command get them all).
    only = rest[0] if rest and not rest[0].startswith("-") and rest[0] != "help" else None
    parser = build_parser(only=only)
    if only == "matrix":
        # The matrix command pulls in the whole resolver; register it only when asked.
        from resolver import matrix

        parser = build_parser(with_matrix=matrix.add_parser, only=only)
    if not rest or rest[0] == "help":
        if len(rest) > 1:  # moonpin help CMD: that command's own help
            if rest[1] == "matrix":
                from resolver import matrix

                parser = build_parser(with_matrix=matrix.add_parser)
            if rest[1] == "check":
                from resolver.check import main as check_main

                return check_main(["--help"])
            parser.parse_args([rest[1], "--help"])
        parser.print_help()
        return 0
    args, extra = parser.parse_known_args(args_in)
    if extra:  # said by the command's own parser: its usage, and the nearest option
        from resolver.cli_parser import subparser

        subparser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.show_version:
        from resolver.cli_parser import _version_line

        print(_version_line(args.kb))
        return 0
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    if getattr(args, "kb_sub", None):
        args.kb = args.kb_sub
    if args.command not in _KEEPS_GC:
        # A query is a short process whose tens of thousands of objects all live until it
        # exits and form no cycles: the cycle collector's passes over them (40% of the
        # matrix's time) free nothing. Reference counting still frees what is dropped.
        import gc

        gc.disable()
    try:
        from resolver.cli_spelling import _spell_inputs

        _spell_inputs(args)
        if getattr(args, "quiet", False):
            import contextlib
            import os

            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                code: int = args.func(args)
        else:
            code = args.func(args)
    except MoonpinError as e:  # bad input: exit 2, and a tip even where none was given
        _fatal(str(e), e.hint or f"`moonpin {args.command} --help` says what it takes")
    except KeyboardInterrupt:
        print("moonpin: interrupted; the KB file was not changed", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
