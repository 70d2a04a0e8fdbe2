"""The worker's other native extensions a project pins (nixl, sglang-kernel, DeepEP,
FlashInfer), judged in the pinned set by the one rule's native checks
(:func:`moonpin.resolver.native.explain_stack`: installable, a wheel, the torch
requirement, a build for that torch, its CUDA major, the version locks between them) with the
torch and SGLang the set ends with, and moved with them: a pin that fails goes to the newest
release that loads with that torch (:func:`moonpin.resolver.native.which_native`); a pin a
version lock refuses goes to the version of the release that locks it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from moonpin.resolver.pins.judging.requires import exact_pins_of
from moonpin.resolver.pins.reading.base import NATIVE, UNUSED_DEFAULT, Pin

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph

__all__ = ["Extensions", "judge_extensions", "native_pins"]

#: Distribution -> its project, from :data:`NATIVE`.
_PROJECT = {d: p for p, ds in NATIVE.items() for d in ds}


class Extensions(NamedTuple):
    """What the extensions add to a judgement: ``verdict`` (``compatible``, ``incompatible``
    or ``unknown``; None when nothing was judged), reasons, notes and updates."""

    verdict: str | None
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    updates: tuple[dict[str, Any], ...]


#: How many of a project's releases that load with the torch are tried beside the SGLang.
_TRIED = 12


def _explain(g: CompatGraph, sglang: str | None, stack: list[tuple[str, str]], *,
             torch: str | None, python: str | None, arch: str | None,
             tables: bool) -> dict[str, Any]:
    """:func:`moonpin.resolver.native.explain_stack`, from the resolved tables where they
    hold the question (``tables``; :func:`moonpin.resolver.tables.native.explain_fast`:
    the KB's facts are not loaded), else from the full resolver (which raises what it
    raises)."""
    if tables and g.kb_path is not None:
        from moonpin.resolver.tables.native import explain_fast

        got = explain_fast(g.kb_path, sglang, stack, torch=torch, python=python, arch=arch)
        if got is not None:
            return got
    from moonpin.resolver import native

    return native.explain_stack(g, sglang, stack, torch=torch, python=python, arch=arch)


def _fitting(g: CompatGraph, dist: str, *, sglang: str | None, torch: str,
             python: str | None, arch: str | None, tables: bool) -> tuple[str, str] | None:
    """The release to move a failing pin of ``dist`` to: the newest of its project's that
    loads with ``torch`` (``which``) and that the rule accepts beside ``sglang`` (what it
    imports, what it requires), of ``dist`` itself first, else of another of the project's
    distributions (the meta ``nixl``, which installs the ``nixl_ep`` SGLang imports, for a
    ``nixl-cu13`` alone); ``(distribution, version)``, None when none is."""
    from moonpin.kb.errors import MoonpinError

    found = None
    if tables and g.kb_path is not None:
        from moonpin.resolver.tables.native import which_fast

        found = which_fast(g.kb_path, _PROJECT[dist], torch=torch, sglang=None,
                           python=python, arch=arch, dist=None)
    if found is None:
        from moonpin.resolver import native

        found = native.which_native(g, _PROJECT[dist], torch=torch, python=python, arch=arch)
    ranked = ([c for c in found.compatible if c.dist == dist]
              + [c for c in found.compatible if c.dist != dist])
    for c in ranked[:_TRIED]:
        d = c.dist or dist
        if sglang is None:
            return d, c.version
        try:
            res = _explain(g, sglang, [(d, c.version)], torch=torch, python=python, arch=arch,
                           tables=tables)
        except MoonpinError:
            continue
        if all(x.ok is not False for x in res["checks"] if x.name == f"{d}=={c.version}"):
            return d, c.version
    return None


def native_pins(pins: Sequence[Pin]) -> list[Pin]:
    """The exact pins of native extensions' distributions, the first of each (a default
    the file overrides is not what is installed)."""
    out: dict[str, Pin] = {}
    for p in pins:
        if p.name in _PROJECT and p.version is not None and not (
                p.note and UNUSED_DEFAULT in p.note):
            out.setdefault(p.name, p)
    return list(out.values())


def judge_extensions(g: CompatGraph, exact: Sequence[Pin], *, sglang: str | None,
                     torch: str | None, python: str | None, arch: str | None,
                     places: Callable[[Pin], list[Pin]],
                     update: Callable[[Pin, str, str, str], dict[str, Any]],
                     tables: bool = True) -> Extensions:
    """The extensions pinned in ``exact``, judged with ``torch`` (the set's, as it ends;
    None: the newest ``sglang`` admits) on ``python``/``arch`` (None: the pair most of them
    load on). ``places`` gives every occurrence of a pin, ``update`` makes an update.
    ``tables``: answered from the resolved tables where they hold each question (the same
    answers, held by ``bench/pins_agree.py``), else by the full resolver; False: the full
    resolver alone."""
    pins = native_pins(exact)
    if not pins:  # nothing to judge: the rule's native side is not even loaded
        return Extensions(None, (), (), ())
    from moonpin.kb.errors import MoonpinError
    from moonpin.resolver.tables.native import COLLISION

    if torch is None and sglang is None:
        return Extensions("unknown", (), ("the native extensions pinned ("
                                          + ", ".join(f"{p.name}=={p.version}" for p in pins)
                                          + ") are not judged: no torch or sglang is pinned",),
                          ())
    known, notes = list(pins), []
    res = None
    if tables and g.kb_path is not None:  # every release tabled: every one is known
        from moonpin.resolver.tables.native import explain_fast

        res = explain_fast(g.kb_path, sglang, [(p.name, p.version or "") for p in pins],
                           torch=torch, python=python, arch=arch)
    if res is None:
        from moonpin.resolver import native

        known = []
        for p in pins:
            try:
                native.known_version(g, p.name, p.version or "")
                known.append(p)
            except MoonpinError as e:  # a release the KB does not hold: said, not judged
                notes.append(f"{p.name}=={p.version} at {p.path}:{p.line} is not judged: {e}")
        if not known:
            return Extensions("unknown", (), tuple(notes), ())
        try:
            res = native.explain_stack(g, sglang, [(p.name, p.version or "") for p in known],
                                       torch=torch, python=python, arch=arch)
        except MoonpinError as e:
            return Extensions("unknown", (), (*notes, "the native extensions are not "
                                              f"judged: {e}"), ())
    torch = res["evaluated"]["torch"]
    by_name = {p.name: p for p in known}
    failing = [c for c in res["checks"] if c.ok is False and c.name != "torch requirement"]
    reasons = [f"{c.name}: {c.detail}" for c in failing]
    notes += [f"{c.name}: {c.detail}" for c in res["checks"] if c.ok is None]
    targets: dict[str, str] = {}
    renamed: dict[str, str] = {}
    why: dict[str, str] = {}
    for c in failing:
        dist = c.name.partition("==")[0]
        if c.name.endswith(" lock") or c.name == COLLISION:
            continue  # a lock: below; one package from two distributions: said, not moved
        found = _fitting(g, dist, sglang=sglang, torch=torch, python=python, arch=arch,
                         tables=tables)
        if found is not None and found[0] != dist and found[0] in by_name:
            # the file pins that distribution already: no second line of it; this pin goes
            # to the version the release found requires of it exactly (the meta nixl's
            # nixl-cuNN), and that distribution's own pin to the release found
            other, version = found
            if other not in targets:
                targets[other] = version
            want = exact_pins_of(g, other, version, tables).get(dist)
            if want is not None:
                targets[dist] = want
                why[dist] = f"{other}=={version} requires {dist}=={want}"
            else:
                reasons.append(f"{dist}: {other}=={version}, which the files pin too, "
                               f"loads with torch {torch} and requires no {dist}: drop the "
                               f"pin of {dist}")
        elif found is not None:
            renamed[dist], targets[dist] = found
        else:
            reasons.append(f"no release of {_PROJECT[dist]} in the knowledge base loads with "
                           f"torch {torch}" + (f" beside sglang {sglang}" if sglang else "")
                           + f"; `moonpin which {dist} --torch {torch} --why` says why")
    for c in failing:  # a lock refused: the locked distribution goes to the locker's version
        if not c.name.endswith(" lock"):
            continue
        locker = c.name.removesuffix(" lock")
        version = targets.get(locker) or by_name[locker].version or ""
        for other in NATIVE[_PROJECT[locker]]:
            if other != locker and other in by_name and other not in targets and any(
                    r.dist == other and r.version == version for r in g.kb.native):
                targets[other] = version
                why[other] = f"{locker}=={version} locks {other} to its own version"
    ups = [update(place, renamed.get(dist, dist), version, why.get(dist) or (
                      f"{renamed.get(dist, dist)}=={version} loads with torch {torch}"
                      + (f" (sglang {sglang})" if sglang else "")))
           for dist, version in targets.items()
           if (renamed.get(dist, dist), version) != (dist, by_name[dist].version)
           for place in places(by_name[dist])]
    verdict = "incompatible" if failing else ("unknown" if notes else "compatible")
    # a release installed but not loaded: said, neither failed, unknown nor moved
    notes += [n for n in res["unloaded"] if n not in notes]
    return Extensions(verdict, tuple(reasons), tuple(notes), tuple(ups))
