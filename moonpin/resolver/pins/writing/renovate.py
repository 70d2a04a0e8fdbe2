"""The Renovate ``packageRules`` fragment that keeps every proposal a compatible set (issue 13).

Static rules cannot move three packages in lockstep, so the fragment holds each package to a
set of versions chosen so that **any** combination Renovate can propose is compatible:

* torch is held to the torch(es) the pinned SGLang requires (the pinned torch when it is one
  of them);
* each mooncake distribution is held to its releases with a build for every held torch and
  every allowed SGLang release, prebuilt builds preferred (a release whose process-group
  extension compiles at first import — the KB's loader kind ``jit-compile`` — only where no
  prebuilt one fits, or with ``allow_jit``; its rule's description carries the compile note);
* SGLang is allowed only to the releases from the pinned one on that require the same torch
  and that every allowed mooncake release fits;
* the mooncake distribution the project actually pins gets its rule; where none of its
  releases fits (a CUDA 12 build beside a CUDA 13 torch) it is held where it is and a
  ``replacementName``/``replacementVersion`` moves it to the one that fits.

Renovate's ``allowedVersions`` takes a range of the package's versioning (PEP 440 here) or a
``/regex/``: one value is written ``==V``, several as ``/^(a|b)$/`` — Renovate 39 rejects
``==a || ==b`` ("does not parse as a valid version or range") and then skips the whole
repository, although ``renovate-config-validator`` accepts it. torch's one value is
``==V,!=V+cpu`` (a range Renovate's pep440 versioning parses): ``==V`` alone matches the
``V+cpu`` a CPU index lists. ``packageRules`` apply in
order and a later rule's ``allowedVersions`` replaces an earlier one's, so SGLang's own hold
rides on the group rule and torch's and each mooncake distribution's rules follow it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.version import InvalidVersion, Version

from moonpin.kb.errors import UsageError

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph
    from moonpin.resolver.pins.judging.judge import PinnedSet

__all__ = ["Stack", "StackPlan", "allowed_torch", "allowed_versions", "kb_releases",
           "nothing_to_hold", "plan_natives", "plan_stack", "renovate_fragment", "stack_of"]

_JIT_MARK = "compiles its process-group extension"


def allowed_versions(versions: list[str]) -> str:
    """``allowedVersions`` in a form Renovate parses: ``==V`` for one, a regex for several."""
    if len(versions) == 1:
        return f"=={versions[0]}"
    return "/^(" + "|".join(re.escape(v) for v in versions) + ")$/"


def allowed_torch(versions: list[str]) -> str:
    """torch's ``allowedVersions``: one release as ``==V,!=V+cpu`` (PEP 440's ``==V`` admits
    the local ``V+cpu`` a CPU index lists, and Renovate's pep440 versioning matches it too),
    several as the regex (which admits no local label)."""
    from moonpin.kb.distributions import torch_cpu_exclusions

    if len(versions) == 1:
        return ",".join([f"=={versions[0]}", *torch_cpu_exclusions(versions)])
    return allowed_versions(versions)


class StackPlan:
    """What the fragment (and ``moonpin constraints``) hold each package to: ``mooncake``,
    distribution -> allowed releases, newest first; ``replacement``, (pinned distribution,
    its pinned version, replacement distribution, version); ``jit_notes``, the compile
    notes of the allowed JIT releases; ``natives``, each native extension's distribution
    -> the releases that load with every allowed torch, newest first (see
    :func:`plan_natives`)."""

    __slots__ = ("jit_notes", "module", "mooncake", "natives", "reasons", "replacement",
                 "sglang", "sglang_allowed", "torches")

    def __init__(self, sglang: str, torches: list[str], mooncake: dict[str, list[str]],
                 sglang_allowed: list[str],
                 replacement: tuple[str, str | None, str, str] | None = None,
                 jit_notes: list[str] | None = None, module: str | None = None,
                 reasons: list[str] | None = None) -> None:
        self.sglang = sglang
        self.torches = torches
        self.mooncake = mooncake
        self.sglang_allowed = sglang_allowed
        self.replacement = replacement
        self.jit_notes: list[str] = [] if jit_notes is None else jit_notes
        self.module = module
        self.reasons: list[str] = [] if reasons is None else reasons
        self.natives: dict[str, list[str]] = {}


def _vkey(v: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        return Version("0")


def _answer(res: Any) -> dict[str, Any]:
    """A query answer as its ``--json`` dict (the answers are dicts, or typed values with
    ``to_json()`` giving the same shape)."""
    return res if isinstance(res, dict) else dict(res.to_json())


def _is_jit(c: dict[str, Any]) -> bool:
    return any(_JIT_MARK in n for n in c.get("notes") or [])


def _fits(which: dict[str, Any], torches: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Candidates of a ``which_mooncake`` answer with a compatible build at every torch."""
    out = {}
    for c in which["compatible"]:
        have = {w["torch"] for w in c.get("wheels", [])}
        if all(t in have for t in torches):
            out[(c["dist"], c["version"])] = c
    return out


def _prefer(cands: list[dict[str, Any]], allow_jit: bool) -> list[dict[str, Any]]:
    """Prebuilt releases first: a JIT one only where nothing prebuilt fits (or allowed)."""
    if allow_jit:
        return cands
    return [c for c in cands if not _is_jit(c)] or cands


def _candidates(plan: StackPlan, compatible: list[dict[str, Any]], dist: str | None,
                current_mooncake: str | None, allow_jit: bool) -> list[dict[str, Any]]:
    """Which distribution(s): the pinned one when any of its releases fits, else a
    replacement (recorded in ``plan``); every fitting one when none is pinned."""
    if dist is not None:
        mine = [c for c in compatible if c["dist"] == dist]
        if not mine:
            best = _prefer(compatible, allow_jit)[0]
            plan.replacement = (dist, current_mooncake, best["dist"], best["version"])
            mine = [c for c in compatible if c["dist"] == best["dist"]]
        return _prefer(mine, allow_jit)
    by_dist: dict[str, list[dict[str, Any]]] = {}
    for c in compatible:
        by_dist.setdefault(c["dist"], []).append(c)
    return [c for cs in by_dist.values() for c in _prefer(cs, allow_jit)]


def _torches(cands: list[dict[str, Any]], required: list[str], torch: str | None) -> list[str]:
    """Which torch(es): the pinned one if SGLang accepts it and a candidate has a build for
    it; else every torch the release requires when some candidates cover them all (0.5.4
    pins 2.8.0 and, for an extra, 2.9.0), else the best-covered one."""
    def covers(t: str) -> list[dict[str, Any]]:
        return [c for c in cands if t in {w["torch"] for w in c.get("wheels", [])}]

    if torch is not None and torch in required and covers(torch):
        return [torch]
    if any(all(c in covers(t) for t in required) for c in cands):
        return list(required)
    return [max(required, key=lambda t: (len(covers(t)), _vkey(t)))]


def _labelled(torch: str | None, required: list[str]) -> str | None:
    """``torch`` when it is a local build of a torch release in ``required``."""
    try:
        v = Version(torch or "")
    except InvalidVersion:
        return None
    return torch if v.local and any(_vkey(r) == Version(v.public) for r in required) else None


def _widen_sglang(g: CompatGraph, plan: StackPlan, allowed: dict[tuple[str, str], Any], *,
                  dist: str | None, python: str | None, arch: str | None,
                  allow_jit: bool, label: str | None = None) -> dict[tuple[str, str], Any]:
    """SGLang: from the pinned release on, those that need the same torch(es) and that every
    allowed mooncake release still fits (the set shrinks to what fits them all). Appends to
    ``plan.sglang_allowed``; returns the mooncake releases still allowed."""
    from moonpin.kb.errors import MoonpinError
    from moonpin.resolver import query

    current = _vkey(plan.sglang)
    for sv in sorted(v for v in g.sglang_versions() if v > current and not v.is_prerelease):
        try:
            other = _answer(query.which_mooncake(g, str(sv), python=python, arch=arch))
            oq = other["query"]["torch"]
            need = oq if isinstance(oq, list) else [oq]
            if label is not None and _labelled(label, need):
                other = _answer(query.which_mooncake(g, str(sv), torch=label, python=python,
                                                     arch=arch))
                need = [label]
        except MoonpinError:  # a release the KB cannot answer ends the run
            break
        if not all(t in need for t in plan.torches):
            break
        fits = _fits(other, plan.torches)
        keep = {k: c for k, c in allowed.items() if k in fits}
        if not keep or (plan.replacement is None and dist is not None
                        and not any(k[0] == dist for k in keep)):
            break
        # keep the prebuilt preference: a JIT release only where nothing prebuilt remains
        if not allow_jit and any(not _is_jit(c) for c in allowed.values()) and all(
                _is_jit(c) for c in keep.values()):
            break
        allowed = keep
        plan.sglang_allowed.append(str(sv))
    return allowed


def kb_releases(g: CompatGraph, kind: str) -> list[tuple[str, str]]:
    """(distribution, version) of every mooncake (``kind``) or extension release the KB
    read: from its names document, else its summary, while the facts are not read (a
    query answered from the resolved tables), else from the facts."""
    if not g.loaded and g.kb_path is not None:
        from moonpin.resolver.tables import documents

        named = documents.names(g.kb_path)
        pool = None if named is None else named.get(
            "mooncake_read" if kind == "mooncake" else "native")
        if pool is not None:
            return [(d, v) for d, vs in pool.items() for v in vs]
        s = documents.load_summary(g.kb_path)
        if s is not None:
            return [(h.dist, h.version) for h in (s.mooncake if kind == "mooncake"
                                                  else s.native)]
    if kind == "mooncake":
        return [(d, str(v)) for d, v in g.mooncake]
    return [(r.dist, r.version) for r in g.kb.native]


def plan_natives(g: CompatGraph, plan: StackPlan, dists: Sequence[str] | None, *,
                 python: str | None, arch: str | None, tables: bool = True) -> None:
    """The native extensions' releases the plan allows (``plan.natives``): of each
    distribution in ``dists`` (None: every one the knowledge base holds), those the one
    rule's native checks call compatible with every torch the plan allows and every SGLang
    release it allows (:func:`moonpin.resolver.native.which_native`), final releases only
    when there are any. A release the rule calls unknown there (nothing says which torch
    its build was made for: ``nixl`` 1.3.0) is not allowed: ``pins`` of a set holding it
    says unknown, so a constraint admitting it would be advice moonpin itself does not
    vouch for; each left out is said (``plan.reasons``). A distribution none of whose
    releases is compatible is left out (held to nothing, the meta ``nixl``'s exact pin of
    ``nixl-cu12`` would make the resolver fail or fall back to an old ``nixl``), and so
    is one another's version lock may refuse (``flashinfer-cubin`` beside
    ``flashinfer-python``: a constraint cannot say "the same version"); each is said.
    ``tables``: each ``which`` answered from the resolved tables where they hold it (the
    SGLang release's held table, :func:`moonpin.resolver.tables.native.held_releases`, else
    :func:`moonpin.resolver.tables.native.which_fast`), else by the full resolver."""
    from moonpin.resolver.tables.native import held_releases

    if not plan.torches:
        return
    held = sorted({d for d, _ in kb_releases(g, "native")} if dists is None else set(dists))
    beside = (f"torch {' or '.join(plan.torches)} beside sglang "
              f"{', '.join(plan.sglang_allowed)}")
    #: each distribution none of whose releases fits alone: (its releases the rule leaves
    #: unknown, the first reason of one it excludes, the `which` question asked)
    alone: dict[str, tuple[list[str], str | None, tuple[str, str]]] = {}
    for d in held:
        allowed: list[str] | None = None
        unknown: dict[str, tuple[str, str]] = {}  # version -> the torch and SGLang asked
        excluded: str | None = None
        # beside every SGLang release allowed (the rule holds each to SGLang's own pins)
        pairs = [(t, s) for t in plan.torches for s in plan.sglang_allowed]
        unsaid = False  # some answer came from a held table that says no reasons
        for t, s in pairs:
            # the held table answers as which_fast would, without judging every combination
            tabled = held_releases(g.kb_path, d, torch=t, sglang=s, python=python,
                                   arch=arch) if tables and g.kb_path is not None else None
            if tabled is not None:
                said = (tabled.compatible, tabled.unknown)
                unsaid = unsaid or not tabled.says_excluded
                excluded = excluded or tabled.excluded
            else:
                w = _which(g, d, t, s, python, arch, tables)
                said = ([c.version for c in w.compatible], [c.version for c in w.unknown])
                if excluded is None and w.excluded:
                    excluded = f"{w.excluded[0].requirement}: {w.excluded[0].reason}"
            got = said[0]
            for v in said[1]:
                unknown.setdefault(v, (t, s))
            allowed = got if allowed is None else [v for v in allowed if v in got]
        final = [v for v in allowed or [] if not _vkey(v).is_prerelease]
        chosen = sorted(final or allowed or [], key=_vkey, reverse=True)
        if chosen:
            plan.natives[d] = chosen
            left = sorted(set(unknown) - set(chosen), key=_vkey, reverse=True)
            if left:
                t, s = unknown[left[0]]
                one = len(left) == 1
                plan.reasons.append(
                    f"{d} {', '.join(left)} {'is' if one else 'are'} not allowed: the knowledge "
                    f"base cannot say whether {'it loads' if one else 'they load'} with "
                    f"{beside} (unknown: `moonpin which {d} --torch {t} --sglang {s}` says why)")
        else:
            if unsaid:  # the first reason of a release it excludes, as `which` says it
                excluded = next((f"{w.excluded[0].requirement}: {w.excluded[0].reason}"
                                 for t, s in pairs
                                 if (w := _which(g, d, t, s, python, arch, tables)).excluded),
                                None)
            alone[d] = (sorted(unknown, key=_vkey, reverse=True), excluded,
                        (plan.torches[-1], plan.sglang_allowed[-1]))
    for d, (unsure, excluded, (t, s)) in alone.items():
        _hold_alone(g, plan, d, unsure, excluded, beside, f"--torch {t} --sglang {s}",
                    tables)
    for locked, by in _locked(g, plan, tables):
        plan.natives.pop(locked, None)
        plan.reasons.append(f"{locked} is not held: {by}'s version lock refuses some of its "
                            f"allowed releases beside some of {by}'s (keep {locked} at "
                            f"{by}'s version; `moonpin pins` judges the pair)")


def _which(g: CompatGraph, d: str, torch: str, sglang: str, python: str | None,
           arch: str | None, tables: bool) -> Any:
    """``which D --torch T --sglang S`` of distribution ``d`` alone: from the resolved tables
    where they hold it (``tables``), else by the full resolver."""
    from moonpin.resolver.tables.native import which_fast

    w = which_fast(g.kb_path, d, torch=torch, sglang=sglang, python=python, arch=arch,
                   dist=d) if tables and g.kb_path is not None else None
    if w is None:
        from moonpin.resolver import native

        w = native.which_native(g, d, torch=torch, sglang=sglang, python=python, arch=arch,
                                dist=d)
    return w


def _hold_alone(g: CompatGraph, plan: StackPlan, d: str, unsure: list[str],
                excluded: str | None, beside: str, asked: str, tables: bool) -> None:
    """What the plan does with ``d``, none of whose releases fits alone: held to the
    releases the allowed releases of another distribution require exactly (the meta
    ``nixl``'s ``nixl-cuNN``: pip installs them with it, whether its loader loads them or
    not), else left free with why, each said in ``plan.reasons``: the releases the rule
    cannot decide (``unsure``), a version lock of an allowed release on it (flashinfer's on
    ``flashinfer-cubin``: what the import does with another version), or the first
    ``excluded`` reason."""
    from moonpin.resolver import rule
    from moonpin.resolver.pins.judging.requires import exact_pins_of

    required: dict[str, set[str]] = {}  # version -> the releases requiring it
    for other in sorted(plan.natives):
        for v in plan.natives[other]:
            want = exact_pins_of(g, other, v, tables).get(d)
            if want is not None:
                required.setdefault(want, set()).add(f"{other}=={v}")
    if required:
        plan.natives[d] = sorted(required, key=_vkey, reverse=True)
        by = sorted({x.partition("==")[0] for xs in required.values() for x in xs})
        plan.reasons.append(
            f"{d} is held to the releases the allowed {' and '.join(by)} releases require "
            f"exactly (pip installs them with {by[0]}); alone none fits "
            f"({excluded or 'unknown'})")
        return
    for other in sorted(plan.natives):
        for v in plan.natives[other]:
            for target, condition, effect, key in _version_locks(g, other, v, tables):
                if target != d:
                    continue
                # the releases the lock accepts (a mismatch judged as one the import refuses)
                have = sorted((ver for x, ver in kb_releases(g, "native") if x == d
                               and rule.lock(other, v, d, ver, condition, "raise", key).ok
                               is True), key=_vkey)
                off = f" ({key} turns the check off)" if key else ""
                if effect != "ignore":  # another fails the import: held to these, or
                    plan.natives[d] = have  # excluded (<0) when the KB holds none
                    plan.reasons.append(
                        f"{d} is " + (f"held to {other} {v}'s version" if have else
                                      "excluded (<0): the knowledge base holds no release "
                                      f"of it at {other} {v}'s version")
                        + f"; {other} {v}'s import refuses another{off}")
                    return
                plan.reasons.append(
                    f"{d} is not held: {other} {v} wants it at its own version, "
                    + (f"which the knowledge base holds as {', '.join(have)}" if have else
                       "and the knowledge base holds no such release of it")
                    + f"; it ignores another with a warning{off}")
                return
    if unsure:
        one = len(unsure) == 1
        plan.reasons.append(
            f"{d} is not held: the knowledge base cannot say whether "
            f"{'its release' if one else 'any of its releases'} ({', '.join(unsure[:3])}"
            f"{', …' if len(unsure) > 3 else ''}) loads with {beside} (unknown: "
            f"`moonpin which {d} {asked}` says why)"
            + ("; the others do not fit" if excluded else ""))
        return
    plan.reasons.append(f"no release of {d} in the knowledge base fits {beside} "
                        f"({excluded or 'none is tabled'}): {d} is not held")


def _version_locks(g: CompatGraph, dist: str, version: str, tables: bool,
                   ) -> list[tuple[str, str | None, str | None, str | None]]:
    """The version locks (target, condition, effect, key) of one release, from its resolved
    explain table (:func:`moonpin.resolver.tables.native.version_locks`) while ``tables``
    and it holds them, else from the facts."""
    if tables and g.kb_path is not None:
        from moonpin.resolver.tables.native import version_locks

        got = version_locks(g.kb_path, dist, version)
        if got is not None:
            return got
    return list(dict.fromkeys((s.target, s.condition, s.effect, s.key)
                              for r in g.kb.native if (r.dist, r.version) == (dist, version)
                              for w in r.wheels for rl in w.rules for s in rl.steps
                              if s.kind == "lock"))


def _locked(g: CompatGraph, plan: StackPlan, tables: bool = True) -> list[tuple[str, str]]:
    """``(locked, locker)`` distributions of ``plan.natives`` where a version lock of an
    allowed ``locker`` release refuses an allowed ``locked`` release (``rule.lock``): each
    release's locks by :func:`_version_locks`."""
    from moonpin.resolver import rule

    out: list[tuple[str, str]] = []
    for dist in sorted(plan.natives):
        for version in plan.natives[dist]:
            for target, condition, effect, key in _version_locks(g, dist, version, tables):
                if target not in plan.natives or (target, dist) in out:
                    continue
                if any(rule.lock(dist, version, target, v, condition, effect, key).ok
                       is False for v in plan.natives[target]):
                    out.append((target, dist))
    return out


def plan_stack(g: CompatGraph, sglang: str, *, torch: str | None = None,
               dist: str | None = None, current_mooncake: str | None = None,
               python: str | None = None, arch: str | None = None,
               allow_jit: bool = False, natives: Sequence[str] | None = ()) -> StackPlan:
    """Hold torch, mooncake, SGLang and the native extensions so that every combination of
    allowed versions is compatible. ``torch``/``dist``/``current_mooncake`` are what the
    project pins; ``natives`` the native extensions' distributions it pins (None: every
    one the knowledge base holds; see :func:`plan_natives`)."""
    plan = _plan_stack(g, sglang, torch=torch, dist=dist, current_mooncake=current_mooncake,
                       python=python, arch=arch, allow_jit=allow_jit)
    if natives is None or natives:
        plan_natives(g, plan, natives, python=python, arch=arch)
    return plan


def _plan_stack(g: CompatGraph, sglang: str, *, torch: str | None, dist: str | None,
                current_mooncake: str | None, python: str | None, arch: str | None,
                allow_jit: bool) -> StackPlan:
    from moonpin.resolver import query

    which = _answer(query.which_mooncake(g, sglang, python=python, arch=arch))
    q = which["query"]
    required = q["torch"] if isinstance(q["torch"], list) else [q["torch"]]
    label = _labelled(torch, required)
    if label is not None:
        # a torch pinned as a local build (``2.13.0+cu126``) of a release SGLang requires:
        # held to that build, the mooncake releases fitting it (its CUDA major is the label's)
        which = _answer(query.which_mooncake(g, sglang, torch=label, python=python,
                                             arch=arch))
        required = [label]
    plan = StackPlan(sglang=q["sglang"], torches=[], mooncake={}, sglang_allowed=[q["sglang"]],
                     module=q["module"])
    if plan.module is None:  # no elastic EP on mooncake in this release: nothing to hold
        plan.reasons.append(nothing_to_hold(plan.sglang))  # (every torch and mooncake
        return plan  # "fits" it vacuously; the newest torch would be invented)
    compatible = which["compatible"]
    if not compatible:
        plan.reasons.append(f"no mooncake release in the knowledge base fits sglang {sglang}")
        plan.torches = [torch] if torch is not None and torch in required else required[-1:]
        return plan
    cands = _candidates(plan, compatible, dist, current_mooncake, allow_jit)
    plan.torches = _torches(cands, required, torch)
    allowed = {(c["dist"], c["version"]): c for c in cands
               if all(t in {w["torch"] for w in c.get("wheels", [])} for t in plan.torches)}
    allowed = _widen_sglang(g, plan, allowed, dist=dist, python=python, arch=arch,
                            allow_jit=allow_jit, label=label)
    for (d, v), c in sorted(allowed.items(), key=lambda kv: (kv[0][0], _vkey(kv[0][1])),
                            reverse=True):
        plan.mooncake.setdefault(d, []).append(v)
        if _is_jit(c):
            plan.jit_notes.extend(n for n in c["notes"] if _JIT_MARK in n)
    plan.sglang_allowed.sort(key=_vkey, reverse=True)
    if plan.replacement is not None:
        old, was, rd, _ = plan.replacement
        plan.replacement = (old, was, rd, plan.mooncake[rd][0])
    return plan


def nothing_to_hold(sglang: str) -> str:
    """Why a plan for an SGLang release that imports no mooncake process-group module
    holds nothing."""
    return (f"sglang {sglang} imports no mooncake process-group module (mooncake.pg or "
            "mooncake.ep): its elastic EP does not run on mooncake, so moonpin holds neither "
            "torch nor mooncake (SGLang's own requirements still apply)")


def renovate_fragment(plan: StackPlan) -> dict[str, Any]:
    """The ``packageRules`` fragment for a :func:`plan_stack` plan (see the module doc);
    no rules when the plan holds nothing (:func:`nothing_to_hold`)."""
    from moonpin.resolver.pins.reading.base import GROUP_NAME

    if plan.module is None:
        return {"packageRules": []}
    dists = sorted(plan.mooncake)
    replaced = plan.replacement[0] if plan.replacement else None
    natives = sorted(plan.natives)
    names = ["sglang", "torch", *dists, *([replaced] if replaced and replaced not in dists
                                          else []), *natives]
    moving = "sglang, torch and mooncake" + (
        f" ({', '.join(natives)} with them)" if natives else "")
    rules: list[dict[str, Any]] = [{
        "description": f"moonpin: {moving} move together; sglang "
                       f"{plan.sglang} may move only to releases that need torch "
                       f"{' or '.join(plan.torches)} and fit the allowed mooncake "
                       f"({plan.module or 'no mooncake process-group module'}); the rules "
                       "below replace allowedVersions for torch and mooncake",
        "matchPackageNames": names,
        "groupName": GROUP_NAME,
        "allowedVersions": allowed_versions(plan.sglang_allowed),
    }]
    rules.append({
        "description": f"moonpin: sglang {', '.join(plan.sglang_allowed)} require torch "
                       + " or ".join(plan.torches),
        "matchPackageNames": ["torch"],
        "allowedVersions": allowed_torch(plan.torches),
    })
    for d in dists:
        note = "; ".join(n for n in plan.jit_notes if n.startswith(f"{d}=="))
        rules.append({
            "description": f"moonpin: releases of {d} with a build every allowed sglang can "
                           f"load with torch {' or '.join(plan.torches)}, prebuilt preferred"
                           + (f"; note: {note}" if note else ""),
            "matchPackageNames": [d],
            "allowedVersions": "/^(" + "|".join(re.escape(v) for v in plan.mooncake[d])
                               + ")$/",
        })
    for d in natives:
        rules.append({
            "description": f"moonpin: releases of {d} allowed with torch "
                           f"{' or '.join(plan.torches)} (a build for it, its CUDA major, "
                           "its torch requirement; or what an allowed release requires of "
                           "it)" if plan.natives[d] else f"moonpin: no release of {d} is "
                           "allowed (`moonpin constraints` says why)",
            "matchPackageNames": [d],
            "allowedVersions": "/^(" + "|".join(re.escape(v) for v in plan.natives[d])
                               + ")$/" if plan.natives[d] else "<0",
        })
    if plan.replacement is not None:
        d, v, rd, rv = plan.replacement
        rule: dict[str, Any] = {
            "description": f"moonpin: no release of {d} fits sglang {plan.sglang} with torch "
                           f"{' or '.join(plan.torches)}; replace it with {rd}=={rv}",
            "matchPackageNames": [d],
            "replacementName": rd,
            "replacementVersion": rv,
        }
        if v is not None:
            rule["allowedVersions"] = allowed_versions([v])
        rules.append(rule)
    return {"packageRules": rules}


class Stack(NamedTuple):
    """The stack a Renovate fragment holds: the SGLang release, and what the project pins of
    torch and mooncake (the distribution, and its version when exact)."""

    sglang: str
    torch: str | None = None
    dist: str | None = None
    mooncake: str | None = None


def stack_of(pinned: PinnedSet | None, sglang: str | None, *, shown: str = "") -> Stack:
    """The stack of a pinned set (``sglang`` given wins over the pinned one). Raises
    :class:`UsageError` when an exact pin is not a version, or no SGLang is known."""
    from moonpin.resolver.pins.judging.judge import check_versions
    from moonpin.resolver.pins.reading.base import cut

    if pinned is None:
        if sglang is None:
            raise UsageError("no SGLang release given", hint="pass --sglang VERSION")
        return Stack(sglang)
    check_versions(pinned)
    clash = [(a, b) for a, b in pinned.conflicts if sglang is None or a.name != "sglang"]
    if clash:
        said = "; ".join(f"{a.name}=={a.version} at {a.path}:{a.line} and {b.name}=={b.version} "
                         f"at {b.path}:{b.line}" for a, b in clash)
        raise UsageError(f"the pins disagree: {cut(said, 600)}; no one stack to hold",
                         hint=f"make them one first: moonpin pins {cut(shown, 300)} --write"
                         + (" (or pass --sglang VERSION)" if any(
                             a.name == "sglang" for a, _ in clash) else ""))
    if sglang is None:
        if pinned.sglang is None or pinned.sglang.version is None:
            raise UsageError(f"no exact sglang pin in {cut(shown, 300)}",
                             hint="pin sglang==VERSION there, or pass --sglang VERSION")
        sglang = pinned.sglang.version
    moon = pinned.mooncake or pinned.loose_mooncake()
    return Stack(sglang, pinned.torch.version if pinned.torch else None,
                 moon.name if moon else None, moon.version if moon else None)
