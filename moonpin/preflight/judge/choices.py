"""Which launch-argument rules and choices judge the worker's launch line: the installed
SGLang's own sources when they decide (an editable checkout, or a release the knowledge base
has no launch record of: :mod:`moonpin.preflight.installed.launch_src`), else the release's record
in the KB; and a backend value SGLang's parser refuses (``--elastic-ep-backend mooncak``),
with the choices and a did-you-mean. Only ``os`` at import."""

from __future__ import annotations

import os

from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from moonpin.preflight.env.target import Target
    from moonpin.preflight.installed.image_facts import Dist, KBView
    from moonpin.preflight.pyimport.importer import Sources

    StrPath = str | os.PathLike[str]

__all__ = ["own_launch", "refused_backends"]


def own_launch(src: Sources | None, sglang: Dist | None, kb: KBView
               ) -> dict[str, Any] | None:
    """The launch rules of the installed SGLang's own sources when they, not a release's
    record, decide: an editable install (its checkout may be ahead of the version it
    names) or a release the KB has no launch record of."""
    from moonpin.preflight.installed.launch_src import installed_launch
    from moonpin.preflight.installed.where import editable_dist
    from moonpin.preflight.judge.sglang import kb_launch

    if src is None:
        return None
    if not editable_dist(sglang, src.within) and sglang is not None and isinstance(
            kb_launch(kb, sglang.version), dict):
        return None
    return installed_launch(src.files, src.within)


def refused_backends(features: dict[str, str], flags: dict[str, str], target: Target,
                     kb_path: StrPath | None,
                     installed: tuple[str | None, dict[str, Any] | None] | None = None
                     ) -> list[CheckResult]:
    """A result per backend flag whose value SGLang's parser refuses (``choices``), read
    from the KB's launch table of the installed SGLang release, else the union of the
    choices every release the KB knows declares; [] when all are accepted or no table
    names the flag's choices (nothing to judge them by). ``flags``: flag -> feature.
    ``installed``: the installed SGLang's version and :func:`own_launch` rules when the
    caller has read them (None: read here)."""
    from moonpin.resolver.spelling import close_names

    flag_of = {f: flag for flag, f in flags.items()}
    checks: list[CheckResult] = []
    version, own = installed if installed is not None else _installed_sglang(target,
                                                                             kb_path)
    known = _backend_choices(kb_path, version, {flag_of[f] for f in features}, own)
    for feature, value in features.items():
        flag = flag_of[feature]
        release, choices = known.get(flag, ("", ()))
        if not choices or value in choices:
            continue
        near = close_names(value, choices, n=1) if value else []
        tip = (f"did you mean {flag} {near[0]} (not {value!r})?" if near
               else f"pass one of {', '.join(choices)}")
        checks.append(CheckResult("launch", "fail", f"{flag}: invalid choice {value!r} "
                                  f"(choose from {', '.join(choices)}; {release})", tip))
    return checks


def _installed_sglang(target: Target, kb_path: StrPath | None = None
                      ) -> tuple[str | None, dict[str, Any] | None]:
    """The version of the SGLang the image has (None: not installed, or unreadable), and
    its own launch rules when its sources decide (:func:`own_launch`)."""
    from moonpin.kb.paths import default_kb_file
    from moonpin.preflight.env.context import Context
    from moonpin.preflight.installed.image_facts import KBView, read_dists, sglang_sources

    ctx = Context.of(target)
    dist = next((d for d in read_dists(target.paths, ctx.confined) if d.name == "sglang"), None)
    src = sglang_sources(ctx)
    kb = KBView(os.fspath(kb_path) if kb_path is not None else default_kb_file())
    return (dist.version if dist is not None else None), own_launch(src, dist, kb)


def _backend_choices(kb_path: StrPath | None, version: str | None,
                     flags: set[str], own: dict[str, Any] | None = None
                     ) -> dict[str, tuple[str, tuple[str, ...]]]:
    """flag -> (where the choices come from, the choices): the installed SGLang's own
    sources when they decide (``own``), else the installed release's launch table when it
    declares them, else every release's of the KB, merged in order."""
    from moonpin.kb.paths import default_kb_file
    from moonpin.resolver.args import rules as la
    from moonpin.resolver.tables.documents import load_summary
    from moonpin.resolver.tables.per_release import load_launch

    kb_file = os.fspath(kb_path) if kb_path is not None else default_kb_file()

    def choices_in(release: str, record: Any = None) -> dict[str, tuple[str, ...]]:
        record = record if record is not None else load_launch(kb_file, release)
        if not isinstance(record, dict) or record.get("error"):
            return {}
        try:
            declared = la.rules_from_json(record)[0]
        except (KeyError, TypeError, ValueError):
            return {}
        return {f.name: tuple(map(str, f.choices)) for f in declared
                if f.name in flags and f.choices}

    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    if own is not None:  # what the installed parser itself accepts
        out = {k: (f"sglang {version or ''} (its installed sources)".replace("  ", " "), v)
               for k, v in choices_in("", own).items()}
    elif version is not None:
        out = {k: (f"sglang {version}", v) for k, v in choices_in(version).items()}
    if len(out) == len(flags):
        return out
    summary = load_summary(kb_file)
    union: dict[str, list[str]] = {}
    for head in reversed(summary.sglang if summary is not None else ()):  # newest first
        for k, v in choices_in(head.version).items():
            union.setdefault(k, []).extend(c for c in v if c not in union.get(k, ()))
    where = ("any sglang release the knowledge base knows" if version is None else
             f"the knowledge base has no launch table of sglang {version}: any release's")
    for k, merged in union.items():
        out.setdefault(k, (where, tuple(merged)))
    return out
