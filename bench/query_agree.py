"""Does ``explain`` of an extension stack answer from the resolved tables exactly as the full
resolver? Asks both a wide set of stacks and counts the answers that differ.

    python bench/query_agree.py [--kb PATH] [--limit N] [--seed S]

The stacks, for each SGLang release of the index (and none, with each torch): every
extension release alone; the newest releases of each distribution in pairs and triples
across projects (the meta ``nixl`` beside its ``nixl-cuNN``, flashinfer's python beside
its cubin, the two kernel distributions that install one package, a release named
twice); each with no torch, python or platform given, and with each torch, python and
platform given. ``--limit``: that many, every release alone asked plainly and the rest
drawn at random (``--seed``). Prints the number of
questions, how many the tables answered (the rest go to the full resolver by design), and
each difference (exit 1 when one differs).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moonpin.kb import store  # noqa: E402
from moonpin.resolver import native  # noqa: E402
from moonpin.resolver.graph import CompatGraph  # noqa: E402
from moonpin.resolver.inputs import ARCHES  # noqa: E402
from moonpin.resolver.tables import native as rn  # noqa: E402


def _said(got: dict[str, object]) -> dict[str, object]:
    return {**got, "checks": [c.as_dict() for c in got["checks"]]}  # type: ignore[attr-defined]


def questions(g: CompatGraph, newest: int) -> list[tuple[object, ...]]:
    """(sglang, stack, torch, python, arch) of every question asked."""
    releases = g.kb.native
    by_dist: dict[str, list[tuple[str, str]]] = {}
    for r in sorted(releases, key=native.newest, reverse=True):
        by_dist.setdefault(r.dist, []).append((r.dist, r.version))
    project = {r.dist: r.project for r in releases}
    few = {d: rs[:newest] for d, rs in by_dist.items()}
    stacks: list[tuple[tuple[str, str], ...]] = [((r.dist, r.version),) for r in releases]
    dists = sorted(few)
    for a, b in itertools.combinations(dists, 2):
        stacks += [(x, y) for x in few[a] for y in few[b]]
    for a, b, c in itertools.combinations(dists, 3):
        if len({project[a], project[b], project[c]}) == 3:
            stacks += [(x, y, z) for x in few[a][:2] for y in few[b][:2] for z in few[c][:2]]
    stacks += [(few[d][0], few[d][0]) for d in dists]  # one release named twice
    sglangs = [s.version for s in g.kb.sglang if s.source == "index"]
    torches = [t.version for t in g.kb.torch]
    pythons = native.all_pythons(releases)
    out: list[tuple[object, ...]] = []
    for st in stacks:
        for s in [*sglangs, None]:
            out.append((s, st, None, None, None))
            if s is None:
                out += [(None, st, t, None, None) for t in torches]
                continue
            out += [(s, st, t, p, a) for t in torches[-3:] for p in pythons[-3:]
                    for a in ARCHES]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", type=Path, default=ROOT / "data" / "kb.json")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--newest", type=int, default=3,
                    help="releases of each distribution combined in pairs")
    args = ap.parse_args()
    g = CompatGraph(store.load(args.kb))  # no KB path: every question resolved from facts
    asked = questions(g, args.newest)
    if args.limit and args.limit < len(asked):  # every release alone as asked plainly,
        plain = [q for q in asked if len(q[1]) == 1 and q[2:] == (None, None, None)]  # type: ignore[arg-type]
        rest = [q for q in asked if not (len(q[1]) == 1 and q[2:] == (None, None, None))]  # type: ignore[arg-type]
        asked = plain + random.Random(args.seed).sample(rest, max(0, args.limit - len(plain)))
    t0 = time.perf_counter()
    answered = differ = refused = 0
    for s, st, t, p, a in asked:
        fast = rn.explain_fast(args.kb, s, list(st), torch=t, python=p,  # type: ignore[arg-type]
                               arch=a)
        try:
            full = native.explain_stack(g, s, list(st), torch=t, python=p,  # type: ignore[arg-type]
                                        arch=a)
        except Exception as e:  # the full resolver refusing is an answer too
            refused += 1
            if fast is not None:
                differ += 1
                print(f"DIFFER {s} {st} {t} {p} {a}: tables answered, resolver refused {e!r}")
            continue
        if fast is None:
            continue
        answered += 1
        if _said(fast) != _said(full):
            differ += 1
            print(f"DIFFER {s} {st} {t} {p} {a}:\n  tables   {_said(fast)}\n  resolver "
                  f"{_said(full)}")
    print(f"{len(asked):,} questions in {time.perf_counter() - t0:.0f} s: {answered:,} "
          f"answered from the tables, {refused:,} refused by the resolver (usage errors), "
          f"{differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
