"""``moonpin which``, ``explain`` and ``triples``: the query commands."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # argparse loads only when a parser is built: `moonpin check` skips it
    import argparse

    from moonpin.resolver.answers import Candidate, Which
from moonpin.cli.common import count, emit_json, graph, kb_path

__all__ = ["cmd_explain", "cmd_triples", "cmd_which", "why_none"]


def why_none(res: Which, what: str) -> str:
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
    share = "every one" if n == len(res.excluded) else f"{n} of {len(res.excluded)}"
    return f"{share} excluded by {kind}"  # the lines below quote the reasons whole


#: No version, specifier, name or path moonpin is given needs more: a longer argument is
#: refused before anything parses it (Python's int() stops at 4,300 digits with a
#: ValueError deep inside packaging, and a 10,000-character value would be echoed whole).
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
        print(f"none compatible: {why_none(res, what)} ({len(res.excluded)} excluded, "
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
    _print_excluded(res.excluded, what, why, grouped=not compatible)
    for c in res.unknown:
        print(f"  unknown  {c.dist or what} {c.version}: {c.reason}")


#: Reasons said one line each when nothing fits; past it, a line per check.
_SHOWN_REASONS = 8


def _check_of(reason: str) -> str:
    """The check a reason is about (``torch requirement: ...`` -> ``torch requirement``)."""
    return reason.split(":", 1)[0] if ":" in reason[:40] else "other"


def _print_excluded(excluded: tuple[Candidate, ...], what: str, each: bool, *,
                    grouped: bool = False) -> None:
    """One line per reason, the releases it excludes named together (``each``); with
    ``grouped`` (nothing fits: why matters), one line per check, its releases named and
    one reason quoted whole; else counted per distribution, by the check that excludes
    them."""
    reasons = {c.reason for c in excluded}
    if grouped and not each and len(reasons) <= _SHOWN_REASONS:
        each = True  # a line per reason is short: say each
    if grouped and not each:
        by_check: dict[tuple[str, str], list[Candidate]] = {}
        for c in excluded:
            by_check.setdefault((c.dist or what, _check_of(c.reason or "")), []).append(c)
        for (name, _check), cands in by_check.items():
            versions = [c.version for c in cands]
            reason = cands[0].reason or ""
            head = (f"  excluded {name} {_listed(versions, 6)}" if len(cands) > 1
                    else f"  excluded {name} {versions[0]}")
            same = all(c.reason == cands[0].reason for c in cands)
            print(f"{head}: {reason if same else 'e.g. ' + reason}")
        if len(by_check) < len(excluded):
            print("  (--why says why each)")
        return
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
        check = _check_of(c.reason or "")
        counts = per.setdefault(c.dist or what, {})
        counts[check] = counts.get(check, 0) + 1
    for name, counts in per.items():
        total = sum(counts.values())
        parts = ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items(), key=lambda x: -x[1]))
        print(f"  excluded {name}: {total} release{'s' * (total != 1)} ({parts}; --why "
              "says why each)")


def cmd_which(args: argparse.Namespace) -> int:
    from moonpin.api import which

    return _finish_which(which(args.what, sglang=args.sglang, mooncake=args.mooncake,
                               torch=args.torch, python=args.python, arch=args.arch,
                               dist=args.dist, kb=kb_path(args)), args)


def _finish_which(res: Which, args: argparse.Namespace) -> int:
    if args.json:
        doc = res.to_json()
        if doc["recommended"] is None:  # null, and the one-line reason the text gives
            doc = {"query": doc.pop("query"), "recommended": None,
                   "reason": f"none compatible: {why_none(res, args.what)}", **doc}
        emit_json(doc)
    else:
        _print_which(res, args.what, args.why)
    return 0 if res.compatible else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from moonpin.api import explain

    res = explain(*args.releases, torch=args.torch, python=args.python, arch=args.arch,
                  kb=kb_path(args))
    ev = res.evaluated
    if args.json:
        emit_json(res.to_json())
    else:
        q = res.query
        if "extensions" in q:  # a stack: every release it names
            named = [f"sglang {q['sglang']}"] if q.get("sglang") else []
            named += [q["mooncake"]] if q.get("mooncake") else []
            print(f"{' + '.join([*named, *q['extensions']])} + torch {ev['torch']} on "
                  f"{ev['python']} {ev['arch']}: {res.verdict.upper()}")
        else:
            print(f"sglang {q['sglang']} + {q['mooncake']} + torch "
                  f"{ev['torch'] or 'as required'} on {ev['python'] or 'any python'} "
                  f"{ev['arch'] or 'any platform'}: {res.verdict.upper()}")
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
            verdicts = count(c["verdict"] for c in others)
            print("  other combinations: " + ", ".join(f"{v} {k}" for k, v in verdicts.items())
                  + " (see --json, or pass --python/--arch/torch==)")
    return {"compatible": 0, "incompatible": 1}.get(res.verdict, 1)


def cmd_triples(args: argparse.Namespace) -> int:
    from moonpin.resolver import native

    rows = native.triples(graph(args), sglang=args.sglang, torch=args.torch,
                         mooncake=args.mooncake, dist=args.dist, python=args.python,
                         arch=args.arch)
    cols = ["sglang", "torch", "dist", "mooncake", "python", "arch"]
    fmt = "json" if args.json else args.format
    if fmt == "json":
        emit_json(rows)
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


