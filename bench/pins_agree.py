"""Do ``pins`` and ``constraints``/``renovate`` judge the native extensions from the resolved
tables exactly as from the full resolver? Asks both and counts the answers that differ.

    python bench/pins_agree.py [--kb PATH] [--limit N] [--seed S]

``pins``: :func:`moonpin.resolver.pins.judging.extensions.judge_extensions` (the verdict,
reasons, notes and updates of an extension set pinned beside an SGLang, a torch, a python
and a platform) on the stacks ``bench/query_agree.py`` asks ``explain`` (``--limit``: every
release alone asked plainly, up to a quarter of them, and that many in all, drawn at
random), with the
tables (the KB's path: :func:`~moonpin.resolver.tables.native.explain_fast` and
``which_fast`` first) and without (the facts alone). ``constraints``/``renovate``:
:func:`moonpin.resolver.pins.writing.renovate.plan_natives` for every SGLang release of the
index, on each python and platform and unspecified, both ways; and ``constraints`` itself
(:func:`moonpin.resolver.pins.writing.renovate.plan_stack` with every extension, rendered as
the command writes it) for every SGLang release of the index, plainly and for one python and
platform: from the tables and the KB's summary (the KB's path; the facts unread where they
hold) and from the facts alone. Prints the counts and each difference (exit 1 when one
differs).
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from query_agree import questions  # noqa: E402

from moonpin.kb import store  # noqa: E402
from moonpin.kb.errors import MoonpinError  # noqa: E402
from moonpin.resolver.graph import CompatGraph  # noqa: E402
from moonpin.resolver.inputs import ARCHES  # noqa: E402
from moonpin.resolver.pins.judging.extensions import judge_extensions  # noqa: E402
from moonpin.resolver.pins.judging.judge import pinned_set  # noqa: E402
from moonpin.resolver.pins.reading.base import Pin  # noqa: E402
from moonpin.resolver.pins.writing import constraints, renovate  # noqa: E402


def _update(pin: Pin, name: str, version: str, why: str) -> dict[str, object]:
    return {"depName": pin.name, "newName": name, "newVersion": version, "reason": why,
            "line": pin.line}


def _pins(stack: tuple[tuple[str, str], ...]) -> list[Pin]:
    return [Pin(d, f"=={v}", v, "requirements.txt", i + 1, len(d) + 2, f"{d}=={v}",
                "requirements") for i, (d, v) in enumerate(stack)]


def _judged(g: CompatGraph, q: tuple[object, ...], tables: bool) -> object:
    s, st, t, p, a = q
    pins = _pins(st)  # type: ignore[arg-type]
    places = pinned_set(pins).places
    try:
        return judge_extensions(g, pins, sglang=s, torch=t, python=p, arch=a,  # type: ignore[arg-type]
                                places=places, update=_update, tables=tables)
    except MoonpinError as e:
        return ("raised", type(e).__name__, str(e))


def _planned(g: CompatGraph, base: renovate.StackPlan, python: str | None,
             arch: str | None, tables: bool) -> object:
    plan = copy.deepcopy(base)
    renovate.plan_natives(g, plan, None, python=python, arch=arch, tables=tables)
    return plan.natives, plan.reasons


def _constraints(g: CompatGraph, sglang: str, python: str | None, arch: str | None) -> object:
    """``moonpin constraints --sglang S [--python P --arch A]``'s text (or its refusal)."""
    try:
        plan = renovate.plan_stack(g, sglang, python=python, arch=arch, natives=None)
    except MoonpinError as e:
        return ("raised", type(e).__name__, str(e))
    return constraints.render(g, plan, "txt", where=constraints.judged_for(python, arch))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", type=Path, default=ROOT / "data" / "kb.json")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--newest", type=int, default=3)
    args = ap.parse_args()
    full = CompatGraph(store.load(args.kb))  # no KB path: the facts alone
    fast = CompatGraph.from_path(args.kb)  # the tables first, the facts where they do not hold
    asked = questions(full, args.newest)
    if args.limit and args.limit < len(asked):
        plain = [q for q in asked if len(q[1]) == 1 and q[2:] == (None, None, None)]  # type: ignore[arg-type]
        rest = [q for q in asked if not (len(q[1]) == 1 and q[2:] == (None, None, None))]  # type: ignore[arg-type]
        rng = random.Random(args.seed)  # a quarter of them releases alone, asked plainly
        plain = rng.sample(plain, min(len(plain), args.limit // 4))
        asked = plain + rng.sample(rest, args.limit - len(plain))
    differ = 0
    t0 = time.perf_counter()
    verdicts: dict[object, int] = {}
    for q in asked:
        a, b = _judged(fast, q, True), _judged(full, q, False)
        key = a[0] if isinstance(a, tuple) else a
        verdicts[key] = verdicts.get(key, 0) + 1
        if a != b:
            differ += 1
            print(f"DIFFER pins {q}:\n  tables   {a}\n  resolver {b}")
    print(f"pins: {len(asked):,} questions in {time.perf_counter() - t0:.0f} s, "
          f"{differ} differ; verdicts {verdicts}")
    t0 = time.perf_counter()
    plans = planned = 0
    sglangs = [s.version for s in full.kb.sglang if s.source == "index"]
    pythons = [None, "cp310", "cp312"]
    for s in sglangs:
        try:
            base = renovate.plan_stack(full, s, natives=())
        except MoonpinError:
            continue
        for p in pythons:
            for a in [None, *ARCHES]:
                x = _planned(fast, base, p, a, True)
                y = _planned(full, base, p, a, False)
                plans += 1
                planned += bool(x[0])  # type: ignore[index]
                if x != y:
                    differ += 1
                    print(f"DIFFER plan {s} {p} {a}:\n  tables   {x}\n  resolver {y}")
    print(f"constraints/renovate: {plans} plans ({planned} holding extensions) in "
          f"{time.perf_counter() - t0:.0f} s; {differ} differ in all")
    t0 = time.perf_counter()
    texts = unread = 0
    for s in sglangs:
        for p, a in ((None, None), ("3.12", "x86_64")):
            fresh = CompatGraph.from_path(args.kb)  # as the command: facts read only if needed
            x = _constraints(fresh, s, p, a)
            y = _constraints(full, s, p, a)
            texts += 1
            unread += not fresh.loaded
            if x != y:
                differ += 1
                print(f"DIFFER constraints {s} {p} {a}:\n  tables   {x}\n  resolver {y}")
    print(f"constraints: {texts} files in {time.perf_counter() - t0:.0f} s ({unread} without "
          f"the facts); {differ} differ in all")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
