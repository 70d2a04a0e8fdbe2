"""``moonpin pins``, ``renovate`` and ``constraints``: the commands about a project's pins."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # argparse loads only when a parser is built: `moonpin check` skips it
    import argparse

from moonpin.cli.common import emit_json, fatal, graph, kb_path, shown

__all__ = ["cmd_constraints", "cmd_pins", "cmd_renovate"]


def cmd_pins(args: argparse.Namespace) -> int:
    from moonpin.resolver.pins.writing import output as pins_output

    if len(args.match or []) != len(args.dep or []):
        fatal("each --match needs a --dep (the package its currentValue is a version of)",
               "e.g. --match 'sglang_ref: v(?<currentValue>\\S+)' --dep sglang")
    patterns = list(zip(args.match or [], args.dep or [], strict=True))
    files = list(args.files)
    if args.changed:
        from moonpin.resolver.pins import read as pins

        if not _read_pin_files(files, patterns):
            said = (f"no pin of sglang, torch or a mooncake distribution in "
                    f"{shown(', '.join(args.files))}: nothing to judge")
            if args.json:
                emit_json({"pins": [], "conflicts": [], "verdict": "nothing to judge",
                           "reasons": [said], "updates": [], "notes": [], "platform": None})
            else:
                print(said)
            return 0
        # A commit's files are judged with the rest of the project: one set, as pip sees it.
        # A file found by its name that is no pins file (requirements/README.txt) is not
        # the commit's to fix: it is skipped, saying so; the files given still must read.
        from pathlib import Path

        for f in pins.project_files("."):
            bad = pins.read_pins([Path(f)], patterns=patterns)[1]
            if bad:
                why = bad[0].message.splitlines()[0] if bad[0].message else "not read"
                print(f"moonpin: skipped {shown(f)} (not in the commit): "
                      + (f"line {bad[0].line}: " if bad[0].line else "") + shown(why),
                      file=sys.stderr)
            else:
                files.append(f)
    verdict = _judge_files(args, files, patterns)
    found, pinned = list(verdict.pins), verdict.pinned
    assert pinned is not None
    # With --json, stdout is one JSON document whatever else is asked: the diff, what was
    # written and the verdict after writing are fields of it. Without, --diff makes stdout
    # the patch alone (for `patch`/`git apply`) and the report goes to stderr.
    # With --write, stdout answers for the files as they are left: the verdict before
    # writing goes to stderr, the one judged again on what was written to stdout.
    report = (sys.stderr if (args.diff or (args.write and verdict.updates)) and not args.json
              else sys.stdout)
    if not args.json:
        if report is sys.stderr and args.write:
            print("before writing:", file=report)
        print("\n".join(pins_output.report_lines(found, pinned, verdict)), file=report)
    doc = pins_output.report_json(found, pinned, verdict) if args.json else {}
    code = pins_output.exit_code(pinned, verdict, exit_zero=args.exit_zero)
    if args.diff or args.write:
        done = _rewrite_pins(found, list(verdict.updates), write=args.write,
                             diff_out=None if args.json else sys.stdout)
        doc.update(diff=done.diff, not_written=list(done.problems))
        if args.write:
            doc.update(written=done.written, after=None)
        if done.written and not done.problems:
            # What the command leaves is what it answers for: judged again as written.
            again = _judge_files(args, files, patterns)
            after = again.pinned
            assert after is not None
            print(f"after writing: verdict {again.verdict}"
                  + (f", {len(again.updates)} update(s) left" if again.updates else ""),
                  file=sys.stderr)
            if not args.json:
                print("\n".join(pins_output.report_lines(list(again.pins), after, again)))
            doc["after"] = again.to_json()
            code = pins_output.exit_code(after, again, exit_zero=args.exit_zero)
        elif args.write and report is sys.stderr:  # nothing written: the files are as judged
            print("\n".join(pins_output.report_lines(found, pinned, verdict)))
    if args.json:
        emit_json(doc)
    return code


def _judge_files(args: argparse.Namespace, files: list[str],
                 patterns: list[tuple[str, str]]) -> Any:
    """:func:`moonpin.judge_pins` of the files, as the command was asked; what could not be
    read is printed, one line each, before the usage error (exit 2)."""
    from moonpin.api import judge_pins
    from moonpin.resolver.pins import read as pins

    try:
        return judge_pins(files, python=args.python, arch=args.arch, strategy=args.strategy,
                          keep=args.keep, patterns=patterns, kb=kb_path(args))
    except pins.PinsUnreadable as e:
        for line in e.details:
            print(line, file=sys.stderr)
        fatal(str(e), e.hint)


class _Rewritten(NamedTuple):
    """What ``--diff``/``--write`` did: the unified diff, the updates that cannot be
    written (with why) and the files written."""

    diff: str
    problems: tuple[str, ...]
    written: list[str]


def _rewrite_pins(found: Any, updates: list[dict[str, Any]], *, write: bool,
                  diff_out: Any) -> _Rewritten:
    """The unified diff of the updates (printed on ``diff_out`` without ``write``, on stderr
    with it; not printed when None); with ``write``, apply it (all files or none, line
    endings, mode and symlinks kept)."""
    import os

    from moonpin.resolver.pins.writing import rewrite as pins_rewrite

    if not updates:
        return _Rewritten("", (), [])
    plan = pins_rewrite.plan_rewrite(found, updates)
    for problem in plan.problems:
        print(f"not written: {shown(problem)}", file=sys.stderr)
    diff = "".join(plan.diff())
    if write and plan.problems:
        # The updates are one change (Renovate's group): half of it can leave a worse set
        # than before (a switch of distribution beside the one it leaves).
        print(f"moonpin: nothing was written: {len(plan.problems)} of the {len(updates)} "
              "update(s) cannot be written, and they are one change; make those by hand "
              "(the diff: --diff), or fix what keeps them, and run again", file=sys.stderr)
        return _Rewritten(diff, plan.problems, [])
    out = sys.stderr if write else diff_out
    if out is not None:
        out.write(diff)
    if not write:
        return _Rewritten(diff, plan.problems, [])
    written = []
    for p, target in pins_rewrite.write_rewrite(plan):
        written.append(p)
        print(f"wrote {p}" + (f" (through the symlink, to {target})"
                              if target != os.path.abspath(p) else ""), file=sys.stderr)
    return _Rewritten(diff, plan.problems, written)


def cmd_renovate(args: argparse.Namespace) -> int:
    from moonpin.resolver.pins import read as pins

    if not args.files and args.sglang is None:
        fatal("`renovate` needs --sglang VERSION or the files that pin it",
               "e.g. moonpin renovate --sglang 0.5.18, or moonpin renovate requirements.txt")
    pinned = pins.pinned_set(_read_pin_files(args.files)) if args.files else None
    stack = pins.stack_of(pinned, args.sglang, shown=shown(" ".join(args.files or [])))
    _version_arg(stack.sglang, "--sglang" if args.sglang else "the sglang pin")
    g = graph(args)
    torch, arch = stack.torch, args.arch
    if pinned is not None:
        # what the files state as `pins` reads them: a stage's FROM --platform is the arch,
        # and with no torch pinned an SGLang base image's CUDA tag names the torch build
        from moonpin.resolver.pins.judging import images
        from moonpin.resolver.pins.reading import platforms

        every = [*pinned.exact, *pinned.loose]
        arch = arch or platforms.judged_on(every, None, "")[0]
        for said in dict.fromkeys(d for p in every if (d := platforms.disagreement(p))):
            print(f"moonpin: note: {said}", file=sys.stderr)
        image = images.image_of(pinned.exact, pinned.sglang) if torch is None else None
        got = images.image_torch(g, image, stack.sglang) if image is not None else None
        torch = got.version if got is not None else torch
    # the native extensions the files pin move with the stack (all of them without files)
    natives = None if pinned is None else sorted(
        {p.name for p in (*pinned.exact, *pinned.loose) if p.name in pins.NATIVE_DISTS})
    plan = pins.plan_stack(g, stack.sglang, torch=torch, dist=stack.dist,
                           current_mooncake=stack.mooncake, python=args.python,
                           arch=arch, allow_jit=args.allow_jit, natives=natives)
    for r in plan.reasons:
        print(f"moonpin: {r}", file=sys.stderr)
    emit_json(pins.renovate_fragment(plan))
    return 0 if plan.mooncake or plan.module is None else 1


def _version_arg(text: str, what: str) -> str:
    """A ``--sglang``-style version, checked before anything parses it (a 5,000-digit
    number passes Python's ``int()`` limit)."""
    from packaging.version import InvalidVersion, Version

    try:
        if len(text) > 100:
            raise InvalidVersion(text)
        Version(text)
    except (InvalidVersion, ValueError):
        fatal(f"{what} {shown(text, 60)!r} is not a PEP 440 version"
               + (f" ({len(text)} characters)" if len(text) > 100 else ""),
               f"e.g. {what} 0.5.18")
    return text


def _read_pin_files(files: list[str], patterns: list[tuple[str, str]] | None = None,
                    ) -> list[Any]:
    """``pins.read_pins`` for the CLI: every unreadable file or line printed, then exit 2."""
    from moonpin.resolver.pins import read as pins

    try:
        return pins.read_pins_or_fail(files, patterns or [])
    except pins.PinsUnreadable as e:
        for line in e.details:
            print(line, file=sys.stderr)
        fatal(str(e), e.hint)


def cmd_constraints(args: argparse.Namespace) -> int:
    from moonpin.resolver.pins.writing import (  # not all of moonpin.resolver.pins.read
        constraints as pins_constraints,
    )
    from moonpin.resolver.pins.writing import renovate as pins_renovate

    _version_arg(args.sglang, "--sglang")
    g = graph(args)
    plan = pins_renovate.plan_stack(g, args.sglang, python=args.python, arch=args.arch,
                                    allow_jit=args.allow_jit, natives=None)
    if not plan.mooncake and plan.module is not None:
        fatal(f"no mooncake release in the knowledge base fits sglang {shown(args.sglang)}",
               f"`moonpin which mooncake --sglang {shown(args.sglang)} --why` says why",
               code=1)
    where = pins_constraints.judged_for(args.python, args.arch)
    if args.json:
        emit_json({"sglang": plan.sglang, "torch": list(plan.torches),
                    "module": plan.module, "constraints": pins_constraints.constraint_lines(
                        g, plan), "notes": [*plan.jit_notes, *plan.reasons], "platform": where})
        return 0
    sys.stdout.write(pins_constraints.render(g, plan, args.format, where=where))
    return 0


