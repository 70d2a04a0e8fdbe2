"""``moonpin args``: the launch lines of manifests, scripts and the command line checked against
the elastic-EP rules of the SGLang release each runs, optionally cross-checked by running that
release's own parser (``--authoritative``), and the report (text and ``--json``).

:func:`gather` finds the launches, :func:`check_launches` judges them into an
:class:`ArgsReport`; both raise :class:`~moonpin.kb.errors.UsageError` (with its ``hint``) for input
that cannot be judged, so the command only parses, calls, prints and maps errors.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from moonpin.kb.errors import UsageError
from moonpin.resolver.args import manifests
from moonpin.resolver.args import rules as launch_args

if TYPE_CHECKING:
    from moonpin.resolver.args.authoritative import Comparison, Outcome
    from moonpin.resolver.graph import CompatGraph

__all__ = ["ArgsReport", "LaunchResult", "check_launches", "gather"]


class LaunchResult(NamedTuple):
    """One launch judged against the rules of ``sglang``: the verdicts, the options that
    release's parser refuses, and (with ``--authoritative``) what the release itself said."""

    launch: manifests.Launch
    sglang: str
    verdicts: tuple[launch_args.Verdict, ...]
    refused: tuple[str, ...] = ()
    outcome: Outcome | None = None
    comparison: Comparison | None = None
    #: `` (did you mean --x?)`` for the refused options (:func:`launch_args.meant`)
    meant: str = ""

    @property
    def violated(self) -> list[launch_args.Verdict]:
        return [v for v in self.verdicts if v.status == "violated"]

    @property
    def rejected(self) -> bool:
        """The release's own parser (or a step after it) refused the line."""
        return self.outcome is not None and bool(
            self.outcome.parser or (self.comparison and self.comparison.sglang_rejects))


def gather(files: Sequence[str], fmt: str, argv: Sequence[str]
           ) -> tuple[list[manifests.Launch], list[manifests.Finding]]:
    """The launches (and the problems of the files themselves) of ``files`` read as ``fmt``
    (auto, yaml, shell), and of ``argv`` (a launch on the command line, after an optional
    ``--``; also when no file is given)."""
    launches: list[manifests.Launch] = []
    findings: list[manifests.Finding] = []
    for path in files:
        from pathlib import Path

        try:
            found = manifests.read_file(Path(path), fmt)
        # moonpin.kb.errors.ReadRefused (a FIFO, a device, too large) has a hint
        except OSError as e:
            missing = isinstance(e, FileNotFoundError) or e.errno == 2  # ENOENT
            raise UsageError(f"cannot read {path}: {e.strerror}",
                             hint="check the path" if missing
                             else getattr(e, "hint", None) or "check the path") from None
        except ValueError as e:
            raise UsageError(str(e), hint="fix the file, or pass --format shell if it is a "
                             "script") from None
        if not found.launches and not found.findings:
            raise UsageError(f"no SGLang launch line in {path}",
                             hint="moonpin looks for `python -m sglang.launch_server`, "
                             "`sglang serve`, `python -m dynamo.sglang` and containers whose "
                             "args carry SGLang flags")
        launches += found.launches
        findings += found.findings
    line = list(argv)
    if line[:1] == ["--"]:
        line = line[1:]
    if line or not files:
        launches.append(manifests.Launch(tuple(line), "command line", "-"))
    return launches, findings


def _release_rules(graph: Callable[[], CompatGraph], kb_path: str | None, version: str,
                   ) -> tuple[str, Any, Any, Any, Any]:
    """(release, flags, rules, constants, accepted option names) of an SGLang release's
    launch rules: from its launch table when ``version`` is the KB's spelling of a release
    that has one (no facts read), else from the graph (which says what is wrong)."""
    from moonpin.resolver.tables import per_release

    record = per_release.load_launch(kb_path, version) if kb_path is not None else None
    if record is None:
        from moonpin.resolver import query

        g = graph()
        version = query.get_sglang(g, version).version
        record = g.launch(version)  # its launch table, or the KB's record
    if record is None:
        raise UsageError(f"the knowledge base holds no elastic-EP launch rules for sglang "
                         f"{version}", hint="releases before elastic EP have none")
    if record.get("error"):
        raise UsageError(f"sglang {version}: {record.get('member')} could not be "
                         f"read: {record['error']}",
                         hint="run `moonpin scrape --only sglang --full`")
    flags, rules, constants = launch_args.rules_from_json(record)
    return version, flags, rules, constants, record.get("option_names") or None


def _authoritative(python: str, la: manifests.Launch, timeout: float) -> Outcome:
    from moonpin.resolver.args import authoritative

    outcome = authoritative.run(python, la.argv, timeout=timeout)
    if outcome.error and outcome.version is None:
        raise UsageError(f"--authoritative: {outcome.error}",
                         hint="pass --python PATH of an interpreter with SGLang installed")
    return outcome


def _version_of(la: manifests.Launch, sglang: str | None, outcome: Outcome | None,
                python: str) -> str:
    version = sglang or manifests.sglang_version_of_image(la.image) or (
        outcome.version if outcome is not None else None)
    if outcome is not None and outcome.version and version and outcome.version != version:
        raise UsageError(f"--authoritative: the SGLang at {python} is {outcome.version}, not "
                         f"{version}", hint="check it against its own release (drop --sglang) "
                         "or point --python at an installation of that release")
    if version is None:
        raise UsageError(f"{la.where}: which SGLang release runs this launch? "
                         f"(image {la.image or 'not named'})", hint="pass --sglang VERSION")
    return version


def _check_one(graph: Callable[[], CompatGraph], kb_path: str | None, la: manifests.Launch,
               *, sglang: str | None, python: str, authoritative: bool, timeout: float,
               read: dict[str, tuple[str, Any, Any, Any, Any]]) -> LaunchResult:
    outcome = _authoritative(python, la, timeout) if authoritative else None
    version = _version_of(la, sglang, outcome, python)
    if version not in read:  # a file of many launches reads each release's rules once
        read[version] = _release_rules(graph, kb_path, version)
    release, flags, rules, constants, accepted = read[version]
    try:
        parsed = launch_args.parse_launch(flags, la.argv, accepted)
        verdicts = launch_args.check(rules, flags, la.argv, constants=constants, parsed=parsed)
    except ValueError as e:
        raise UsageError(f"{la.where}: {e}", hint="fix the launch arguments") from None
    notes = list(la.notes)
    refused: tuple[str, ...] = ()
    strange = parsed[launch_args.UNRECOGNIZED]
    if isinstance(strange, list) and strange:
        if "dynamo" in la.launcher:  # Dynamo's worker adds options of its own
            notes.append(f"not sglang {release} options (Dynamo's own, or mistakes): "
                         + ", ".join(strange))
        else:
            refused = tuple(strange)
    used = parsed[launch_args.DEPRECATED]
    notes += [f"deprecated in sglang {release}: {d}"
              for d in (used if isinstance(used, list) else [])]
    if len(notes) != len(la.notes):
        la = manifests.Launch(la.argv, la.where, la.launcher, la.image, tuple(notes))
    comparison = None
    if outcome is not None:
        from moonpin.resolver.args import authoritative as auth

        comparison = auth.compare(verdicts, outcome)
    return LaunchResult(la, release, tuple(verdicts), refused, outcome, comparison,
                        launch_args.meant(refused, accepted))


def check_launches(kb: CompatGraph | str | os.PathLike[str],
                   launches: Sequence[manifests.Launch],
                   findings: Sequence[manifests.Finding] = (), *, sglang: str | None = None,
                   authoritative: bool = False, python: str | None = None,
                   timeout: float = 300.0, many: bool = False) -> ArgsReport:
    """Judge every launch against the rules of the release it runs (``sglang``, else the
    one its image names, else, with ``authoritative``, the one installed at ``python``).
    ``kb``: the KB's graph, or the KB file (its graph is read only when a release's launch
    table does not answer). ``many`` labels each launch in the text report (set it when
    files were read)."""
    graph: Callable[[], CompatGraph]
    kb_path: str | None
    if isinstance(kb, (str, os.PathLike)):
        kb_file = kb_path = os.fspath(kb)

        def load() -> CompatGraph:  # the graph module (~4 ms) only when a table lacks
            from moonpin.resolver.graph import CompatGraph

            return CompatGraph.from_path(kb_file)

        graph = functools.cache(load)
    else:
        kb_path, graph = kb.kb_path, functools.partial(lambda g: g, kb)

    py = python or sys.executable
    read: dict[str, tuple[str, Any, Any, Any, Any]] = {}
    results = tuple(_check_one(graph, kb_path, la, sglang=sglang, python=py,
                               authoritative=authoritative, timeout=timeout, read=read)
                    for la in launches)
    return ArgsReport(results, tuple(findings), py, many or len(results) > 1)


class ArgsReport(NamedTuple):
    """Every launch judged, and the problems of the files they came from."""

    results: tuple[LaunchResult, ...]
    findings: tuple[manifests.Finding, ...]
    python: str  # the interpreter --authoritative ran
    many: bool  # label each launch in the text report

    def exit_code(self) -> int:
        """1 when a rule is violated, a file has a problem, or a parser refuses a line."""
        bad = any(r.violated or r.refused or r.rejected for r in self.results)
        return 1 if bad or self.findings else 0

    def to_json(self) -> dict[str, Any]:
        """``moonpin args --json``."""
        rs = self.results
        return {
            "sglang": rs[0].sglang if len({r.sglang for r in rs}) == 1 else None,
            "violations": [{"message": v.message, "flags": list(v.flags),
                            "evidence": v.evidence, "condition": v.rule.condition,
                            "where": r.launch.where} for r in rs for v in r.violated],
            "not_checked": [{"evidence": v.evidence, "why": v.why, "where": r.launch.where}
                            for r in rs for v in r.verdicts if v.status == "not checked"],
            "rules": sum(len(r.verdicts) for r in rs),
            "findings": [{"where": f.where, "message": f.message, "fix": f.fix}
                         for f in self.findings],
            "unrecognized": [{"where": r.launch.where, "sglang": r.sglang,
                              "options": list(r.refused)} for r in rs if r.refused],
            "launches": [self._launch_json(r) for r in rs],
        }

    def _launch_json(self, r: LaunchResult) -> dict[str, Any]:
        la, oc, cmp = r.launch, r.outcome, r.comparison
        out: dict[str, Any] = {"where": la.where, "launcher": la.launcher, "image": la.image,
                               "sglang": r.sglang, "argv": list(la.argv),
                               "notes": list(la.notes), "violated": len(r.violated)}
        if oc is not None and cmp is not None:
            out["authoritative"] = {
                "python": self.python, "error": oc.error, "parser": oc.parser,
                "steps": oc.steps, "assumed": oc.assumed, "agree": cmp.agree,
                "disagree": cmp.disagree, "unconfirmed": cmp.unconfirmed,
                "not_run": cmp.not_run}
        return out

    def lines(self, *, verbose: bool = False) -> list[str]:
        """The text report: file problems, then each launch, then the cross-checks."""
        out: list[str] = []
        for f in self.findings:
            out += [f"problem: {f.where}: {f.message}", f"  fix: {f.fix}"]
        for r in self.results:
            out += self._launch_lines(r, verbose)
        for r in self.results:
            out += self._authoritative_lines(r)
        return out

    def _launch_lines(self, r: LaunchResult, verbose: bool) -> list[str]:
        la, vs = r.launch, r.verdicts
        out = [f"{la.where}  ({la.launcher}; sglang {r.sglang})"] if self.many else []
        out += [f"note: {note}" for note in la.notes]
        out += [f"refused: sglang {o.sglang} has no option {', '.join(o.refused)}{o.meant}; "
                "its parser stops with 'unrecognized arguments'"
                for o in self.results if o.refused and o.launch.where == la.where]
        for v in r.violated:
            out += [f"violated: {v.message}",
                    f"  flags: {', '.join(v.flags) or '-'}   ({v.evidence})"]
        # Rules left unchecked by this launch's own unknown values are this launch's
        # business; the others (values SGLang computes at start-up) are the same for
        # every launch: counted, and listed with --verbose.
        unchecked = [v for v in vs if v.status == "not checked"]
        own = [v for v in unchecked if "not known offline" in v.why]
        out += [f"not checked: {v.evidence}: {v.why}" for v in (unchecked if verbose else own)]
        hidden = "" if verbose or len(unchecked) == len(own) else (
            f" ({len(unchecked) - len(own)} read what SGLang computes at start-up; "
            "--verbose lists them)")
        out.append(f"sglang {r.sglang}: {len(vs)} elastic-EP rules, {len(r.violated)} "
                   f"violated, {len(unchecked)} not checked{hidden}")
        return out

    def _authoritative_lines(self, r: LaunchResult) -> list[str]:
        oc, cmp = r.outcome, r.comparison
        if oc is None or cmp is None:
            return []
        out = [f"authoritative ({'' if not self.many else r.launch.where + ', '}SGLang "
               f"{oc.version} at {self.python}):"]
        if oc.error:
            out.append(f"  could not run: {oc.error}")
        if oc.parser:
            out.append(f"  SGLang's parser refuses the line: {oc.parser}")
        out += [f"  assumed, as on a GPU worker: {item}" for item in oc.assumed]
        for label, items in (("agree", cmp.agree), ("DISAGREE", cmp.disagree),
                             ("unconfirmed", cmp.unconfirmed),
                             ("step did not run here", cmp.not_run)):
            out += [f"  {label}: {item}" for item in items]
        ran = sum(st["status"] in ("ok", "rejected") for st in oc.steps)
        out.append(f"  {ran} of {len(oc.steps)} resolution steps ran; {len(cmp.agree)} agree, "
                   f"{len(cmp.disagree)} disagree, {len(cmp.unconfirmed)} unconfirmed")
        return out
