"""Judging a project's pins: the pinned set (one exact version of each of sglang, torch and
mooncake, and the pins that disagree), the platform to judge on, and the verdict with the
Renovate-like updates that make the set compatible (:func:`judge`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.version import InvalidVersion, Version

from moonpin.kb.distributions import torch_cpu_exclusions
from moonpin.kb.errors import UsageError
from moonpin.resolver.pins.judging import labels
from moonpin.resolver.pins.reading import platforms
from moonpin.resolver.pins.reading.base import (
    GROUP_NAME,
    MOONCAKE_FAMILY,
    UNUSED_DEFAULT,
    VALUE_KINDS,
    VARIABLE_NOTE,
    Pin,
    cut,
)

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph

__all__ = [
    "VALUE_KINDS",
    "Judgement",
    "PinnedSet",
    "check_versions",
    "judge",
    "pinned_set",
    "platform_of",
]

class PinnedSet(NamedTuple):
    """The versions a project pins, and the pins that disagree."""

    sglang: Pin | None
    torch: Pin | None
    mooncake: Pin | None
    conflicts: tuple[tuple[Pin, Pin], ...]
    loose: tuple[Pin, ...]  # tracked dependencies without an exact version
    exact: tuple[Pin, ...] = ()  # every exact pin (an update rewrites each place)

    def places(self, pin: Pin) -> list[Pin]:
        """Every exact pin of the same dependency as ``pin`` (the mooncake family counts as
        one), whatever version it has: an update rewrites each occurrence."""
        key = _key(pin)
        return [p for p in self.exact if _key(p) == key]

    def loose_mooncake(self) -> Pin | None:
        """A mooncake requirement without an exact version (unpinned or a range)."""
        return next((p for p in self.loose if p.name in MOONCAKE_FAMILY), None)


class Judgement(NamedTuple):
    """The verdict on a pinned set: ``verdict`` (``compatible``, ``incompatible`` or
    ``unknown``), why, the updates that make it compatible (Renovate-like update objects,
    what :func:`moonpin.resolver.pins.writing.rewrite.apply_updates` writes), notes, and the
    platform it was judged for. ``explain`` is what ``moonpin explain`` says of the pinned set
    (None when nothing could be explained); ``pins`` and ``pinned`` are what was judged (the
    pins read, and the set made of them) when the judgement was made from files
    (:func:`moonpin.judge_pins`). None of these three is part of :meth:`to_json`."""

    verdict: str
    reasons: tuple[str, ...]
    updates: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    platform: str
    explain: dict[str, Any] | None = None
    pins: tuple[Pin, ...] = ()
    pinned: PinnedSet | None = None

    def to_json(self) -> dict[str, Any]:
        """The verdict's part of ``moonpin pins --json``."""
        return {"verdict": self.verdict, "reasons": list(self.reasons),
                "updates": [dict(u) for u in self.updates], "notes": list(self.notes),
                "platform": self.platform}


class _Draft:
    """A judgement while it is made."""

    __slots__ = ("explain", "notes", "reasons", "updates", "verdict")

    def __init__(self, verdict: str = "unknown") -> None:
        self.verdict = verdict
        self.reasons: list[str] = []
        self.updates: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.explain: dict[str, Any] | None = None

    def done(self, platform: str) -> Judgement:
        return Judgement(self.verdict, tuple(self.reasons), tuple(self.updates),
                         tuple(self.notes), platform, self.explain)


def _answer(res: Any) -> dict[str, Any]:
    """A query answer as its ``--json`` dict (the answers are dicts, or typed values with
    ``to_json()`` giving the same shape)."""
    return res if isinstance(res, dict) else dict(res.to_json())


def _vkey(version: str | None) -> object:
    """Compare as PEP 440 versions where they are (``===`` pins may be any text)."""
    try:
        return Version(version or "")
    except ValueError:  # InvalidVersion, or a number past int()'s digit limit
        return version


def _key(pin: Pin) -> str:
    """The dependency a pin is of: its name, or ``mooncake`` for the whole family (one
    ``mooncake/`` folder: two of them are one dependency pinned twice)."""
    return _key_of(pin.name)


def _unused(pin: Pin) -> bool:
    """A version the install never reads (``${VAR:-default}`` where the file sets VAR)."""
    return bool(pin.note and UNUSED_DEFAULT in pin.note)


def _admits(a: Pin, b: Pin) -> bool:
    """``a``'s ``==`` admits ``b``'s version (the same distribution): PEP 440 pads releases
    and, for a version without a local label, ignores the candidate's (``==2.13.0`` matches
    ``2.13.0+cu126``)."""
    va, vb = _vkey(a.version), _vkey(b.version)
    if a.name != b.name:
        return False
    if isinstance(va, Version) and isinstance(vb, Version) and not va.local:
        return va == Version(vb.public)
    return va == vb


def _agree(a: Pin, b: Pin) -> bool:
    """Two exact pins of one distribution that pip meets with one release: the same
    version, or ``==2.13.0`` beside ``==2.13.0+cu126`` (pip installs the local build)."""
    return _admits(a, b) or _admits(b, a)


def _narrower(a: Pin, b: Pin) -> Pin:
    """Of two agreeing pins, the one pip's answer is (the local build's, else ``a``)."""
    return b if _admits(a, b) and not _admits(b, a) else a


def pinned_set(pins: Sequence[Pin]) -> PinnedSet:
    """Pick the exact pin of each of the three (the first found, or a pin of its local
    build that agrees with it); report disagreements. Which of disagreeing pins is judged
    is :func:`judge`'s choice, not the files' order."""
    first: dict[str, Pin] = {}
    conflicts: list[tuple[Pin, Pin]] = []
    loose: list[Pin] = []
    mooncake_key = "mooncake"
    for p in pins:
        if p.version is None:
            loose.append(p)
            continue
        if _unused(p):
            continue  # in ``exact``: rewritten with the others, not judged
        key = _key(p)
        have = first.get(key)
        if have is None:
            first[key] = p
        elif _agree(have, p):
            first[key] = _narrower(have, p)
        elif _together(have, p) and not any(
                _agree(b, p) for a, b in conflicts if _key(a) == key):
            conflicts.append((have, p))
    return PinnedSet(first.get("sglang"), first.get("torch"), first.get(mooncake_key),
                     tuple(conflicts), tuple(loose),
                     tuple(p for p in pins if p.version is not None))


#: The Pythons a marker is evaluated on when no judged Python is at hand: every CPython 3
#: minor a project of this stack may run (3.8, the oldest any torch wheel the KB holds
#: covers, up to :data:`moonpin.resolver.inputs.CPYTHON_MINORS`'s last).
_ANY_PYTHON = tuple(f"3.{m}" for m in range(8, 17))


def _together(a: Pin, b: Pin) -> bool:
    """Two pins whose markers (and Dockerfile stages' platforms) both hold on some Linux
    architecture and Python (pip installs both there); ``; platform_machine == "x86_64"``
    and ``"aarch64"`` never meet, nor ``python_version < "3.12"`` and ``>= "3.12"``."""
    return not (a.marker or b.marker or a.platform or b.platform) or any(
        platforms.marker_applies(a, arch, py) and platforms.marker_applies(b, arch, py)
        for arch in ("x86_64", "aarch64") for py in _ANY_PYTHON)


def check_versions(pinned: PinnedSet) -> None:
    """Raise :class:`UsageError` naming FILE:LINE when an exact pin of the three is not a PEP
    440 version (``sglang===${V}``): nothing can be judged against it."""
    for p in (pinned.sglang, pinned.torch, pinned.mooncake):
        if p is None:
            continue
        try:
            Version(p.version or "")
        except (InvalidVersion, ValueError):
            raise UsageError(f"{cut(p.path, 300)}:{p.line}: {p.name} is pinned to "
                             f"{cut(p.version or '', 60)!r}, not a PEP 440 version; nothing "
                             "was judged", hint=f"pin {p.name}==VERSION there (e.g. a release "
                             "`moonpin show` knows)") from None


def _update(pin: Pin, new_name: str, new_version: str, reason: str,
            group: str = GROUP_NAME) -> dict[str, Any]:
    """A Renovate-like update object for one pin (``updateType`` ``pin`` for a pin that had
    no exact version: its ``currentValue`` is the range or ``""``)."""
    try:
        old = Version(pin.version or "0")
    except ValueError:
        old = Version("0")
    new = Version(new_version)
    if new_name != pin.name:
        kind = "replacement"
    elif pin.version is None:
        kind = "pin"
    elif new.major != old.major:
        kind = "major"
    elif new.minor != old.minor:
        kind = "minor"
    else:
        kind = "patch"
    # As Renovate writes them: a requirement's value is its specifier (``==0.3.12``, the
    # pip_requirements/pep621 managers), a bare value's is the version (Docker ARG, regex).
    bare = pin.kind in VALUE_KINDS
    # a torch requirement written keeps the CPU build out (``exclude``, see rewrite.py)
    excl = torch_cpu_exclusions([new_version]) if new_name == "torch" and not bare and (
        not pin.note or "reference" not in pin.note) else []
    return {"depName": pin.name, "newName": new_name, "packageFile": pin.path,
            "line": pin.version_line, "col": pin.col,
            "currentValue": (pin.version or "") if bare else pin.spec,
            "newValue": new_version if bare else ",".join([f"=={new_version}", *excl]),
            "currentVersion": pin.version, "newVersion": new_version,
            "updateType": kind, "groupName": group, "reason": reason,
            **({"exclude": excl} if excl else {})}



def platform_of(pins: Sequence[Pin], *, python: str | None = None,
                arch: str | None = None, python_from: str | None = None,
                ) -> tuple[str | None, str | None, str]:
    """The python and arch to judge on, and where they come from: ``--python``/``--arch``
    (or ``python_from``: the project's ``requires-python``). A marker is not a platform:
    it says on which platforms its own requirement applies (see :func:`judge`)."""
    said: list[str] = []
    if python is not None:
        said.append(python_from or f"python {python} (from --python)")
    if arch is not None:
        said.append(f"{arch} (from --arch)")
    if python is None:
        said.append("every python the wheels cover")
    if arch is None:
        said.append("x86_64 and aarch64")
    return python, arch, "judged for " + ", ".join(said)


def judge(g: CompatGraph, pinned: PinnedSet, *, python: str | None = None,
          arch: str | None = None, strategy: str = "minimal",
          keep: str | None = None, python_from: str | None = None,
          sources: Sequence[Any] = (), pythons: Sequence[str] = (),
          pythons_from: str = "") -> Judgement:
    """:func:`_judge` per Python where the pins' markers tell Pythons apart
    (:func:`_by_python`), and a torch pin that admits a CPU build one of ``sources`` (the
    project's find-links folders and indexes) can supply is a finding, with its update.

    ``python`` given without ``python_from`` is ``--python``: that Python alone. Otherwise
    the Pythons judged are ``pythons`` (what the project's ``requires-python`` admits, as
    ``3.N``; ``pythons_from`` says where from), else every one the knowledge base's wheels
    cover; ``python`` (the lowest of them, said by ``python_from``) is the one judged when
    the markers do not tell them apart."""
    out = _by_python(g, pinned, python=python, arch=arch, strategy=strategy, keep=keep,
                     python_from=python_from, pythons=pythons, pythons_from=pythons_from)
    if not sources or keep == "torch":
        return out
    from moonpin.resolver.pins.reading.sources import with_sources

    loose = [p for p in pinned.loose if p.name == "torch"]
    reasons, updates = with_sources(out.updates, (*pinned.exact, *loose), sources, _update,
                                    lambda public, build: _wrong_build(g, public, build),
                                    [str(v) for v in g.torch_versions],
                                    _sglang_torch(g, pinned.sglang), pinned.sglang)
    if not reasons:
        return out
    return out._replace(verdict="incompatible" if out.verdict == "compatible" else out.verdict,
                        reasons=(*out.reasons, *reasons), updates=(*out.updates, *updates))


def _sglang_torch(g: CompatGraph, sglang: Pin | None) -> str:
    """The torch requirement of the pinned SGLang release's Requires-Dist (``==2.14.1``),
    when it has exactly one (a release whose lines differ by marker: "") and pip installs
    that SGLang (not a base image's)."""
    from moonpin.resolver.graph import torch_lines

    if sglang is None or sglang.version is None or sglang.kind == "docker-image":
        return ""  # a base image's SGLang comes with its torch: pip does not install it
    try:
        release = g.sglang.get(Version(sglang.version))
    except InvalidVersion:
        return ""
    specs = {str(spec) for _, spec in torch_lines(release)} if release is not None else set()
    return specs.pop() if len(specs) == 1 else ""


def _wrong_build(g: CompatGraph, public: str, build: str) -> str | None:
    """What is wrong with local build ``build`` of torch ``public`` for a stack judged with
    the index's build of ``public`` (its CUDA major from the KB, per architecture): a CPU
    or ROCm build, or one of another CUDA major (``+cu126`` beside the index's CUDA 13);
    None for one of the same major, or when the KB says nothing of the index's CUDA."""
    from moonpin.resolver import query

    label = build.partition("+")[2]
    if label.startswith("cpu"):
        return "a CPU build"
    known = {t.cuda for a in ("x86_64", "aarch64")
             if (t := query.resolve_torch(g, public, a)).cuda_known and t.cuda is not None}
    if not known:
        return None
    got = query.resolve_torch(g, build, "x86_64")
    if got.cuda in known:
        return None
    index = " / ".join(f"CUDA {m}" for m in sorted(known))
    what = f"a CUDA {got.cuda} build" if got.cuda is not None else f"a +{label} build"
    return f"{what} (the index's torch {public}, judged here, is {index})"


#: Where the Pythons judged apart are said, in the platform of each Python's judgement.
_EACH_PYTHON = "\x00"


def _python_said(tag: str) -> str:
    """``cp312`` -> ``3.12`` (``cp313t`` -> ``3.13t``)."""
    return f"3.{tag.removeprefix('cp3')}" if tag.startswith("cp3") else tag


def _pythons(g: CompatGraph, allowed: Sequence[str], sglangs: Sequence[Pin]) -> list[str]:
    """The Pythons to judge apart, oldest first: those the KB's mooncake wheels cover (what
    ``which`` judges on) that ``allowed`` admits (``3.N``: the project's
    ``requires-python``; every one when empty) and an SGLang release pinned exactly installs
    on: the project runs where its SGLang does. The lowest ``allowed`` is judged whatever
    SGLang says of it, as it is when the markers tell no Pythons apart (where SGLang refusing
    the project's Python is the finding)."""
    from moonpin.resolver import rule

    def order(t: str) -> tuple[int, str]:
        return len(t.rstrip("t")), t

    tags = {p for dist, version in g.mooncake for w in g.wheels(dist, str(version))
            for p in w.pythons}
    if allowed:
        tags = {t for t in tags if _python_said(t) in set(allowed)}
    known = [s for p in sglangs if (s := g.find_sglang(p.version or "0")) is not None]
    kept = {t for t in tags if not known or any(rule.python_requires(
        s.requires_python, t, f"sglang {s.version}", s.wheel_pythons).ok is not False
        for s in known)}
    if allowed and tags:
        kept.add(min(tags, key=order))
    return sorted(kept, key=order)


def _by_python(g: CompatGraph, pinned: PinnedSet, *, python: str | None, arch: str | None,
               strategy: str, keep: str | None, python_from: str | None,
               pythons: Sequence[str], pythons_from: str) -> Judgement:
    """:func:`_judge` on the one Python asked, or on each Python judged when the pins'
    markers tell them apart (``python_version < "3.12"``): the set pip installs differs
    between them, so each is judged as pip installs it there, and the judgements are one
    as the architectures' are (:func:`_per_arch`)."""
    pins = [*pinned.exact, *pinned.loose]
    asked = python is not None and python_from is None  # --python
    if asked or not any("python" in (p.marker or "") for p in pins):
        return _judge(g, pinned, python=python, arch=arch, strategy=strategy, keep=keep,
                      python_from=python_from)
    tags = _pythons(g, pythons, [p for p in pinned.exact if p.name == "sglang"
                                 and _vkey(p.version) != p.version])
    arches = [arch] if arch is not None else ["x86_64", "aarch64"]
    applies = {t: [p for p in pins if any(platforms.marker_applies(p, a, t) for a in arches)]
               for t in tags}
    shapes = {t: tuple(platforms.marker_applies(p, a, t) for p in pins for a in arches)
              for t in tags}
    if len(set(shapes.values())) <= 1:  # the markers hold alike on every Python judged
        return _judge(g, pinned, python=python, arch=arch, strategy=strategy, keep=keep,
                      python_from=python_from, marker_python=tags[0] if tags else None)
    marked = next((p for p in pins if len({p in applies[t] for t in tags}) > 1), None) or next(
        p for p in pins if "python" in (p.marker or ""))
    judged = [(t, _judge(g, pinned_set(applies[t]), python=t, arch=arch, strategy=strategy,
                         keep=keep, python_from=_EACH_PYTHON)) for t in tags]
    # Pythons judged alike are said once: ``on python 3.12, 3.13: …``
    groups: dict[tuple[Any, ...], list[str]] = {}
    for t, j in judged:
        key = (j.verdict, j.reasons, tuple(tuple(sorted(u.items())) for u in j.updates),
               j.notes)
        groups.setdefault(key, []).append(t)
    said = ", ".join(_python_said(t) for t in tags)
    apart = (f"python {said} apart (the marker at {marked.path}:{marked.line}"
             + (f"; {pythons_from}" if pythons and pythons_from else "") + ")")
    first = dict(judged)
    if len(groups) == 1:
        j = judged[0][1]
        return j._replace(platform=j.platform.replace(_EACH_PYTHON, apart))
    labels = [(f"python {', '.join(_python_said(t) for t in ts)}", first[ts[0]], applies[ts[0]])
              for ts in groups.values()]
    parts = [(label, _redraft(j)) for label, j, _ in labels]
    per = "; python_version == " + " / ".join(
        f'"{_python_said(ts[0])}"' for ts in groups.values()) + ")"
    joined, _ = _per_arch(parts, [sub for _, _, sub in labels],
                          judged[0][1].platform.replace(_EACH_PYTHON, apart), per=per)
    return joined


def _redraft(j: Judgement) -> _Draft:
    """A judgement as a draft again (to be joined with others)."""
    out = _Draft(j.verdict)
    out.reasons, out.updates, out.notes = list(j.reasons), list(j.updates), list(j.notes)
    out.explain = j.explain
    return out


def _judge(g: CompatGraph, pinned: PinnedSet, *, python: str | None = None,
           arch: str | None = None, strategy: str = "minimal",
           keep: str | None = None, python_from: str | None = None,
           marker_python: str | None = None) -> Judgement:
    """The verdict for a pinned set and the updates that make it compatible.

    ``minimal`` keeps SGLang (and the pinned torch where a mooncake fits it) and moves
    mooncake; ``latest`` moves the whole stack to the newest SGLang that has a prebuilt
    compatible mooncake. ``keep`` names the one package that must not move. The platform is
    ``python``/``arch`` (``python_from`` says where the python comes from), else every one
    the wheels cover. A requirement's marker applies to it alone: pins whose markers hold
    on one architecture and not the other are judged per architecture, as the set pip
    installs there. Markers are evaluated on ``python``, else on ``marker_python`` (one
    Python on which they hold as on every one judged).
    """
    on_python = python or marker_python
    python, arch, where = platform_of([], python=python, arch=arch, python_from=python_from)
    pins = [*pinned.exact, *pinned.loose]
    arch, where, off, none = platforms.judged_on(pins, arch, where)
    if none is not None:  # no stage builds for an architecture moonpin judges
        out = _Draft()
        out.reasons += none
        return out.done(where)
    arches = [arch] if arch is not None else ["x86_64", "aarch64"]
    subsets = [[p for p in pins if platforms.marker_applies(p, a, on_python)] for a in arches]
    sglangs = [p for p in pins if p.name == "sglang"]
    if sglangs and all(p.marker for p in sglangs) and not any(
            p.name == "sglang" for sub in subsets for p in sub):
        out = _Draft("compatible")  # absent wherever judged: pip installs no stack there
        out.notes.append("no sglang requirement applies on any platform judged (its "
                         "marker leaves it out): nothing judged")
        return out.done(where)
    if arch is None and subsets[0] != subsets[1]:
        marked = next(p for p in pins if (p in subsets[0]) != (p in subsets[1]))
        why = (f"the marker at {marked.path}:{marked.line}" if marked.marker else
               f"the platform of {platforms.stage_note(marked)}")
        where = (where.replace("x86_64 and aarch64 (", "x86_64 and aarch64 apart (", 1)
                 if "x86_64 and aarch64 (" in where and not marked.marker else
                 where.replace("x86_64 and aarch64", f"x86_64 and aarch64 apart ({why})"))
        # the stack is there where mooncake is, and SGLang too when the files pin it
        # anywhere: a marker false on an architecture means absent there, as pip reads it
        sgl = any(p.name == "sglang" for p in pins)
        has = [any(p.name in MOONCAKE_FAMILY for p in sub)
               and (not sgl or any(p.name == "sglang" for p in sub)) for sub in subsets]
        if any(has) and not all(has):
            # the stack is left out on one architecture by its markers: nothing to judge there
            (a,) = [a for a, h in zip(arches, has, strict=True) if h]
            (b,) = [b for b, h in zip(arches, has, strict=True) if not h]
            out = _judge_set(g, pinned_set(subsets[arches.index(a)]), python=python, arch=a,
                             strategy=strategy, keep=keep)
            left = "mooncake" if not any(p.name in MOONCAKE_FAMILY
                                         for p in subsets[arches.index(b)]) else "sglang"
            out.notes.append(f"on {b} no {left} requirement applies (its marker or its "
                             "stage's platform leaves it out): nothing judged there")
            return out.done(where.replace("x86_64 and aarch64 apart", f"{a} only"))
        parts = [(a, _judge_set(g, pinned_set(sub), python=python, arch=a, strategy=strategy,
                                keep=keep)) for a, sub in zip(arches, subsets, strict=True)]
        joined, split = _per_arch(parts, subsets, where)
        targets = {at: t for at, t in split.items() if t is not None}
        if split and len(targets) == len(split):
            # A line one architecture asks to move and another holds as written: when the
            # other is as content with the move, it is one update for both.
            moved = {at: (pin, targets[at]) for pin in pins
                     if (at := _pin_at(pin)) in targets}
            again = [[_moved_to(p, moved) for p in sub] for sub in subsets]
            parts = [(a, _judge_set(g, pinned_set(sub), python=python, arch=a,
                                    strategy=strategy, keep=keep))
                     for a, sub in zip(arches, again, strict=True)]
            both, split_again = _per_arch(parts, again, where)
            if not split_again and len(moved) == len(split):
                return _shared_moves(joined, both, moved, arches)
        return joined
    out = _judge_set(g, pinned_set(subsets[0]) if len(subsets[0]) != len(pins) else pinned,
                     python=python, arch=arch, strategy=strategy, keep=keep)
    out.notes += off
    return out.done(where)


def _judge_set(g: CompatGraph, pinned: PinnedSet, *, python: str | None, arch: str | None,
               strategy: str, keep: str | None) -> _Draft:
    if pinned.conflicts:
        out = _judge_conflicting(g, pinned, python=python, arch=arch, strategy=strategy,
                                 keep=keep)
    else:
        out = _judge_as_one(g, pinned, python=python, arch=arch, strategy=strategy, keep=keep)
    _side_by_side(pinned, out)
    _within_ranges(pinned, out)
    _extensions(g, pinned, out, python=python, arch=arch)
    return out


def _extensions(g: CompatGraph, pinned: PinnedSet, out: _Draft, *, python: str | None,
                arch: str | None) -> None:
    """The native extensions the set pins, judged with the torch and SGLang it ends with
    (as pinned, or as the updates move them) and moved with them
    (:mod:`moonpin.resolver.pins.judging.extensions`)."""
    from moonpin.resolver.pins.judging.extensions import judge_extensions

    ends = {u["depName"]: u["newVersion"] for u in out.updates
            if u["depName"] in ("torch", "sglang")}
    ext = judge_extensions(
        g, pinned.exact, sglang=ends.get("sglang") or (
            pinned.sglang.version if pinned.sglang else None),
        torch=ends.get("torch") or (pinned.torch.version if pinned.torch else None),
        python=python, arch=arch, places=pinned.places, update=_update)
    if ext.verdict is None:
        return
    out.reasons += ext.reasons
    out.notes += [n for n in ext.notes if n not in out.notes]
    out.updates += ext.updates
    if ext.verdict == "incompatible":
        out.verdict = "incompatible"
    elif ext.verdict == "unknown" and out.verdict == "compatible":
        out.verdict = "unknown"  # as explain says of the same set: a check not answered


def _within_ranges(pinned: PinnedSet, out: _Draft) -> None:
    """A range of a distribution that is also pinned exactly (``-c constraints.txt`` with
    ``torch<2.13``, ``[tool.uv] constraint-dependencies``) is met by the same install: when
    it excludes the version the set ends with (as pinned, or as updated), pip and uv find
    no release meeting both. It is said, and pinned to that version where it is written."""
    from moonpin.resolver.pins.judging.ranges import in_range, is_range

    ends: dict[str, tuple[str, str, str]] = {_key(p): (p.name, p.version, "pinned") for p in (
        pinned.sglang, pinned.torch, pinned.mooncake) if p is not None and p.version}
    for u in out.updates:
        ends[_key_of(u["newName"])] = (u["newName"], u["newVersion"], "moved")
    moved = {_update_at(u) for u in out.updates}
    for p in pinned.loose:
        end = ends.get(_key(p))
        if (end is None or end[0] != p.name or not p.spec or not is_range(p)
                or _pin_at(p) in moved or in_range(end[1], p.spec)):
            continue
        name, version, how = end
        said = "the exact pins" if how == "pinned" else "the updates"
        out.verdict = "incompatible"
        out.reasons.append(f"{p.path}:{p.line} {name}{p.spec} excludes {name}=={version} "
                           f"that {said} hold it to: pip and uv find no release meeting "
                           "both")
        out.updates.append(_update(p, name, version, f"{said} hold {name} to {version}"))


def _key_of(name: str) -> str:
    """:func:`_key` of a distribution's name."""
    return "mooncake" if name in MOONCAKE_FAMILY else name


def _side_by_side(pinned: PinnedSet, out: _Draft) -> None:
    """Two mooncake distributions required together (``mooncake-transfer-engine`` and its
    ``-cuda13``) install one ``mooncake/`` package over each other's files: whichever pip
    writes last wins, file by file. Each requirement of another distribution than the one
    kept is moved to it: one written beside it, and one the updates would leave behind
    (a switch of distribution moves every requirement of the one it leaves, pinned or
    not)."""
    kept = next((u for u in out.updates if u["depName"] in MOONCAKE_FAMILY), None)
    chosen = pinned.mooncake
    name = kept["newName"] if kept else chosen.name if chosen else None
    version = kept["newVersion"] if kept else chosen.version if chosen else None
    written = {p.name for p in (*pinned.exact, *pinned.loose) if p.name in MOONCAKE_FAMILY}
    if name is None or written == {name}:
        return
    moved = {_update_at(u) for u in out.updates}
    # an install whose version is a build arg's is switched with that ARG's update
    args = {(p.path, p.name) for p in pinned.exact if p.kind == "dockerfile-arg"
            and _pin_at(p) in moved}
    others = [p for p in pinned.loose if p.name in MOONCAKE_FAMILY and p.name != name
              and _pin_at(p) not in moved
              and not (p.note == VARIABLE_NOTE and (p.path, p.name) in args)]
    if not others:
        return
    said = ", ".join(f"{p.name} at {p.path}:{p.line}" for p in others)
    out.verdict = "incompatible"
    if len(written) > 1:
        out.reasons.insert(0, f"{said} beside {name}: two mooncake distributions install "
                           "one mooncake/ package over each other's files; keep one")
    else:
        out.reasons.append(f"{said} moves to {name} too: left as it is, it would install "
                           f"beside {name} (one mooncake/ package over the other's files)")
    if version is not None:
        out.updates += [_update(p, name, version, f"one mooncake distribution: {name}")
                        for p in others]


#: (file, line of the version, its column, distribution) of an update: two requirements of
#: one name on one line (a pyproject array, each with its own marker) are two places
_Place = tuple[str, int, int, str]


def _update_at(u: dict[str, Any]) -> _Place:
    """Where the update ``u`` is written."""
    return (u["packageFile"], u["line"], u["col"], u["depName"])


def _pin_at(p: Pin) -> _Place:
    """Where the pin ``p`` is written, as :func:`_update_at` says an update of it."""
    return (p.path, p.version_line, p.col, p.name)


def _moved_to(pin: Pin, moved: dict[_Place, tuple[Pin, tuple[str, str]]]) -> Pin:
    """``pin`` as an update in ``moved`` leaves it (an exact pin of the new version)."""
    hit = moved.get(_pin_at(pin))
    if hit is None:
        return pin
    name, version = hit[1]
    return pin._replace(name=name, version=version, spec=f"=={version}")


def _shared_moves(out: Judgement, both: Judgement,
                  moved: dict[_Place, tuple[Pin, tuple[str, str]]],
                  arches: Sequence[str]) -> Judgement:
    """The judgement of lines one architecture asked to move, once every architecture is
    content with the move (``both`` judges the set with them moved): those moves, composed
    with what ``both`` still proposes, and the reasons without the dead end."""
    by_new = {(p.path, p.version_line, p.col, new[0]): at for at, (p, new) in moved.items()}
    updates: dict[_Place, dict[str, Any]] = {}
    for at, (pin, (name, version)) in moved.items():
        updates[at] = _update(pin, name, version, f"{name}=={version} fits "
                              f"{' and '.join(arches)}")
    for u in both.updates:
        new_at = by_new.get(_update_at(u))
        if new_at is None:
            updates[_update_at(u)] = u
        else:  # moved further: from the line as written to where it ends
            updates[new_at] = _update(moved[new_at][0], u["newName"], u["newVersion"],
                                      u["reason"])
    reasons = [r for r in out.reasons if not r.endswith(_PER_PLATFORM)]
    return out._replace(reasons=tuple(reasons), updates=tuple(
        u for u in updates.values() if not _no_op(u)))


#: How a reason about a line no one pin fits on every architecture ends.
_PER_PLATFORM = '; platform_machine == "x86_64" / "aarch64")'


def _per_arch(parts: Sequence[tuple[str, _Draft]], subsets: Sequence[Sequence[Pin]],
              where: str, *, per: str = _PER_PLATFORM,
              ) -> tuple[Judgement, dict[_Place, tuple[str, str] | None]]:
    """The judgements of each architecture's set as one: the worst verdict, each reason
    said with its architecture, the updates of every place once. A place that applies on
    several architectures is one line for all of them: an update one proposes and another
    does not (that one is compatible with the line as written, or wants it elsewhere) would
    break the other, and the next run would move it back; it is not proposed, the reason
    says to pin it per platform. Those places are returned too, each with the one target
    the architectures that ask agree on (None when they ask for different ones)."""
    rank = {"incompatible": 2, "unknown": 1, "compatible": 0}
    out = _Draft(max((d.verdict for _, d in parts), key=lambda v: rank.get(v, 1)))
    wanted: dict[_Place, dict[str, tuple[str, str]]] = {}
    for a, d in parts:
        for u in d.updates:
            wanted.setdefault(_update_at(u), {})[a] = (u["newName"], u["newVersion"])
    shared: dict[_Place, list[str]] = {}
    for (a, d), sub in zip(parts, subsets, strict=True):
        for p in sub:  # an architecture that cannot tell (unknown) does not hold a line
            if d.verdict == "compatible" or any(a in w for w in wanted.values()):
                shared.setdefault(_pin_at(p), []).append(a)
    split: dict[_Place, tuple[str, str] | None] = {}
    for at, by_arch in wanted.items():
        on = shared.get(at, list(by_arch))
        # the same release however spelled (``2.13`` on one, ``2.13.0.0`` on the other)
        if len({_new_key(by_arch.get(a)) for a in on}) > 1:
            asks = list(by_arch.values())
            split[at] = asks[0] if len({_new_key(t) for t in asks}) == 1 else None
            asked = "; ".join(f"on {a} {n}=={v}" for a, (n, v) in by_arch.items())
            kept = ", ".join(a for a in on if a not in by_arch)
            out.verdict = "incompatible"
            out.reasons.append(
                f"{at[0]}:{at[1]} {at[3]} is one line for {' and '.join(on)}: "
                f"{asked}" + (f", while {kept} needs it as written" if kept else "")
                + "; no one pin fits both: pin it per platform (one line each with"
                + per)
    seen: set[_Place] = set()
    for a, d in parts:
        out.reasons += [f"on {a}: {r}" for r in d.reasons]
        out.notes += [n for n in d.notes if n not in out.notes]
        for u in d.updates:
            at = _update_at(u)
            if at not in seen and at not in split:
                seen.add(at)
                out.updates.append(u)
    return out.done(where), split


def _new_key(new: tuple[str, str] | None) -> object:
    """An update's target (name, version) as PEP 440 compares it; None as it is."""
    return None if new is None else (new[0], _vkey(new[1]))


def _with_image(g: CompatGraph, pinned: PinnedSet, arch: str | None,
               ) -> tuple[PinnedSet, str | None, bool]:
    """The set to judge and what to say of its base image: ``(set, said, problem)``. With
    no torch pinned, the set holds the image's torch (said as a note); with one pinned, a
    CUDA major other than the image's is a problem (said as a reason;
    :mod:`moonpin.resolver.pins.judging.images`)."""
    from moonpin.resolver.pins.judging import images

    image = images.image_of(pinned.exact, pinned.sglang)
    if image is None or pinned.sglang is None:
        return pinned, None, False
    if pinned.torch is None:
        torch = images.image_torch(g, image, pinned.sglang.version or "")
        if torch is None:
            return pinned, None, False
        return (pinned._replace(torch=torch),
                f"judged with the image's torch {torch.version}: {image.said()}", False)
    said = images.torch_mismatch(g, image, pinned.torch, [arch] if arch else ["x86_64", "aarch64"])
    return pinned, said, said is not None


def _judge_as_one(g: CompatGraph, pinned: PinnedSet, *, python: str | None,
                  arch: str | None, strategy: str, keep: str | None) -> _Draft:
    """:func:`judge` of a set with one version of each dependency (with no torch pinned,
    the torch of an SGLang base image whose tag names its CUDA)."""
    pinned, said, problem = _with_image(g, pinned, arch)
    out = _judge_minimal(g, pinned, python=python, arch=arch, keep=keep)
    if said is not None and not problem:
        out.notes.insert(0, said)
    elif said is not None:
        out.verdict = "incompatible"
        out.reasons.insert(0, said)
    if strategy == "latest" or (keep == "mooncake" and out.verdict != "compatible"):
        stack = _stack_move(g, pinned, python=python, arch=arch, keep=keep)
        if stack:
            out.updates = stack
        elif keep == "mooncake" and pinned.mooncake is not None:
            out.reasons.append(f"no SGLang release in the knowledge base fits "
                               f"{pinned.mooncake.name}=={pinned.mooncake.version} here")
    elif keep == "torch":
        out.updates = [u for u in out.updates if u["depName"] != "torch"]
    out.updates = [u for u in out.updates if not _no_op(u)]
    return out


def _no_op(update: dict[str, Any]) -> bool:
    """An update that would write what is already there (``X -> X``)."""
    return bool(update["newName"] == update["depName"]
                and _vkey(update["currentVersion"]) == _vkey(update["newVersion"]))


def _choices(pinned: PinnedSet) -> list[PinnedSet]:
    """Every way to read a set whose pins disagree as one version of each dependency, in an
    order that does not depend on the files' order (newest version first)."""
    import itertools

    slots = {"sglang": pinned.sglang, "torch": pinned.torch, "mooncake": pinned.mooncake}
    options: list[list[Pin | None]] = []
    for name, pin in slots.items():
        distinct: list[Pin] = []
        for p in pinned.exact if pin is not None else ():
            if _key(p) != name or _unused(p):
                continue
            agreeing = next((i for i, d in enumerate(distinct) if _agree(p, d)), None)
            if agreeing is None:
                distinct.append(p)
            else:
                distinct[agreeing] = _narrower(distinct[agreeing], p)
        distinct.sort(key=_newest_first, reverse=True)
        options.append(list(distinct) or [None])
    return [pinned._replace(sglang=s, torch=t, mooncake=m)
            for s, t, m in itertools.product(*options)]


def _newest_first(pin: Pin) -> tuple[Version, str, str]:
    """Sort key (with ``reverse``): the newest version first, text that is no version
    last, then by name and text, so the files' order never matters."""
    v = _vkey(pin.version)
    return (v if isinstance(v, Version) else Version("0"), pin.name, pin.version or "")


def _judge_conflicting(g: CompatGraph, pinned: PinnedSet, *, python: str | None,
                       arch: str | None, strategy: str, keep: str | None) -> _Draft:
    """A set whose pins of one dependency disagree is a problem as it stands (pip refuses
    two ``==`` of one name; two mooncake distributions share one ``mooncake/`` folder).
    Each reading of it is judged; the first compatible one (else the first) gives the
    updates, and every occurrence is moved to it."""
    drafts = [(c, _judge_as_one(g, c, python=python, arch=arch, strategy=strategy,
                                keep=keep)) for c in _choices(pinned)]
    chosen, out = next(((c, d) for c, d in drafts if d.verdict == "compatible"), drafts[0])
    moved = {_update_at(u): u for u in out.updates}
    for pin in (chosen.sglang, chosen.torch, chosen.mooncake):
        if pin is None:
            continue
        # the other occurrences go where this one ends: as pinned, or as its update moves it
        to = moved.get(_pin_at(pin))
        name, version = (to["newName"], to["newVersion"]) if to else (pin.name, pin.version)
        why = (to["reason"] if to else f"{pin.path}:{pin.line} pins {pin.name}=={pin.version}")
        for place in pinned.places(pin):
            if _pin_at(place) in moved or (
                    to is None and _admits(place, pin)):
                continue
            out.updates.append(_update(place, name, version or "", why))
    said = [f"{a.name}=={a.version} at {a.path}:{a.line} and {b.name}=={b.version} at "
            f"{b.path}:{b.line}" for a, b in pinned.conflicts]
    out.reasons.insert(0, "the pins disagree: " + "; ".join(said) + " (pip installs one "
                       "version of each, and one mooncake distribution)")
    out.verdict = "incompatible"
    out.updates = [u for u in out.updates if not _no_op(u)]
    return out


def _fit_the_mooncake(g: CompatGraph, pinned: PinnedSet, *, python: str | None,
                      arch: str | None) -> list[dict[str, Any]]:
    """Updates to the newest SGLang that the pinned mooncake fits (and its torch)."""
    from moonpin.resolver import query

    mc, sg = pinned.mooncake, pinned.sglang
    if mc is None or sg is None:
        return []
    ans = _answer(query.which_sglang(g, f"{mc.name}=={mc.version}", python=python, arch=arch,
                                     torch=labels.labelled(pinned.torch)))
    if not ans["compatible"]:
        return []
    best = ans["compatible"][0]
    new_torch = best["wheels"][0]["torch"]
    ups = [_update(p, "sglang", best["version"], f"{best['requirement']} fits "
                   f"{mc.name}=={mc.version}") for p in pinned.places(sg)]
    if pinned.torch is not None and pinned.torch.version != new_torch:
        ups += [_update(p, "torch", new_torch, f"sglang {best['version']} requires torch "
                        f"{new_torch}") for p in pinned.places(pinned.torch)]
    return ups


def _stack_move(g: CompatGraph, pinned: PinnedSet, *, python: str | None, arch: str | None,
                keep: str | None) -> list[dict[str, Any]]:
    """Updates to the newest SGLang with a prebuilt compatible mooncake (and its torch).

    With ``keep="mooncake"`` only SGLang releases that the pinned mooncake fits count."""
    from moonpin.resolver import query

    if keep == "mooncake" and pinned.mooncake is not None:
        return _fit_the_mooncake(g, pinned, python=python, arch=arch)
    label = labels.labelled(pinned.torch)  # kept by the releases that admit its torch
    for sv, torch in [(v, t) for t in dict.fromkeys((label, None)) for v in sorted(
            g.sglang, reverse=True) if t is None or labels.admits(g, v, t)]:
        if g.sglang[sv].pg.module is None:
            continue
        which = _answer(query.which_mooncake(g, str(sv), torch=torch, python=python,
                                             arch=arch))
        plain = [c for c in which["compatible"] if not c.get("notes")]
        if not plain:
            continue
        best = plain[0]
        new_torch = best["wheels"][0]["torch"]
        moves: list[dict[str, Any]] = []
        if pinned.sglang is not None and Version(pinned.sglang.version or "0") != sv:
            moves += [_update(p, "sglang", str(sv), f"the newest sglang with a prebuilt "
                              f"compatible mooncake is {sv}")
                      for p in pinned.places(pinned.sglang)]
        if pinned.torch is not None and pinned.torch.version != new_torch and keep != "torch":
            moves += [_update(p, "torch", new_torch, f"sglang {sv} requires torch {new_torch}"
                              + labels.left_behind(g, p, new_torch))
                      for p in pinned.places(pinned.torch)]
        mc = pinned.mooncake
        if mc is not None and (mc.name, mc.version) != (best["dist"], best["version"]):
            moves += [_update(p, best["dist"], best["version"],
                              f"{best['requirement']} has a build sglang {sv} loads")
                      for p in pinned.places(mc)]
        return moves
    return []


def _judge_minimal(g: CompatGraph, pinned: PinnedSet, *, python: str | None,
                   arch: str | None, keep: str | None) -> _Draft:
    """Keep SGLang (and the pinned torch), move mooncake to the newest compatible release
    (of the distribution in the file when one of its releases fits), prebuilt first; move
    torch only when no mooncake fits the pinned one."""
    from moonpin.resolver import query

    out = _Draft()
    if pinned.sglang is None:
        from moonpin.resolver.pins.judging.ranges import is_range, judge_sglang_range

        unjudged = [p for p in pinned.loose if p.name == "sglang"]
        ranged = next((p for p in unjudged if is_range(p)), None)
        if ranged is None:
            out.reasons.append("sglang is not pinned to a version moonpin can judge" + (
                f": {unjudged[0].path}:{unjudged[0].line} {cut(unjudged[0].raw, 120)}"
                + (f" ({unjudged[0].note})" if unjudged[0].note else "") if unjudged else
                ": nothing to check against"))
            return out

        out.verdict, out.reasons, out.updates = judge_sglang_range(
            g, ranged, pinned.mooncake or pinned.loose_mooncake(),
            torch=pinned.torch.version if pinned.torch else None, python=python, arch=arch,
            update=_update, places=pinned.places)
        return out
    sv = pinned.sglang.version or ""
    torch = pinned.torch.version if pinned.torch else None
    loose = pinned.loose_mooncake() if pinned.mooncake is None else None
    which = _answer(query.which_mooncake(g, sv, torch=torch, python=python, arch=arch))
    admits = which["query"]["torch"] if isinstance(which["query"]["torch"], list) else [
        which["query"]["torch"]]
    if (which["query"]["module"] is None and pinned.mooncake is None and loose is None
            and (torch is None or torch.partition("+")[0] in admits)):
        # no elastic EP on mooncake in this release: no mooncake to add, none to hold
        out.verdict = "compatible"
        out.reasons.append(f"sglang {sv} imports no mooncake process-group module "
                           "(mooncake.pg or mooncake.ep): nothing for moonpin to hold")
        return out
    if pinned.mooncake is None and loose is None:
        return _without_mooncake(g, pinned, out, python=python, arch=arch)
    if _explained(g, pinned, out, torch=torch, python=python, arch=arch):
        return out
    plain = [] if keep == "mooncake" else _preferred(which["compatible"], loose)
    target = pinned.mooncake or loose
    if loose is not None and loose.spec and not any(
            c["dist"] == loose.name and _in_spec(c["version"], loose.spec) for c in plain):
        from moonpin.resolver.pins.judging.ranges import mooncake_range_reason

        out.reasons.append(mooncake_range_reason([(Version(sv), which)], loose))
        out.verdict = "incompatible"
    if plain and target is not None:
        best = plain[0]
        out.updates += [_update(
            place, best["dist"], best["version"],
            f"sglang {sv} with torch {torch or 'as it requires'} needs "
            f"{which['query']['module']}; {best['requirement']} has a matching build"
            + ("; note: " + "; ".join(best["notes"]) if best.get("notes") else ""))
            for place in _places(pinned, target)]
    elif plain:
        out.reasons.append(f"add {plain[0]['requirement']}: it is the mooncake that fits")
    elif torch is not None and keep not in ("torch", "mooncake"):
        out.updates += _torch_move(g, pinned, target, python=python, arch=arch)
    if not out.updates and out.verdict != "compatible" and keep != "mooncake" and not plain:
        out.reasons.append(f"no mooncake release in the knowledge base fits sglang {sv}"
                           f"{' with torch ' + torch if torch else ''}; `moonpin which "
                           f"mooncake --sglang {sv} --why` says why each is excluded")
    return out


def _without_mooncake(g: CompatGraph, pinned: PinnedSet, out: _Draft, *,
                      python: str | None, arch: str | None) -> _Draft:
    """A set that pins no mooncake distribution at all: a worker that runs no mooncake
    backend needs none, so it is judged on what it pins, SGLang's torch requirement here
    (the torch releases its ``which`` admits) and the native extensions after
    (:func:`_extensions`); mooncake is not added, and a note says how to pick one."""
    from moonpin.resolver import query

    assert pinned.sglang is not None
    sv = pinned.sglang.version or ""
    torch = pinned.torch.version if pinned.torch else None
    asked = _answer(query.which_mooncake(g, sv, python=python, arch=arch))["query"]["torch"]
    admits: list[str] = asked if isinstance(asked, list) else [asked]
    out.notes.append(f"no mooncake distribution is pinned: judged on what the files pin "
                     f"(sglang, torch and the native extensions); a worker that runs a "
                     f"mooncake backend needs one (`moonpin which mooncake --sglang {sv}`)")
    if torch is None or torch.partition("+")[0] in admits:
        out.verdict = "compatible"
        return out
    out.verdict = "incompatible"
    out.reasons.append(f"torch requirement: torch {torch} is not one sglang {sv} admits "
                       f"({', '.join(admits)})")
    assert pinned.torch is not None
    new = max(admits, key=Version)
    out.updates += [_update(place, "torch", new, f"sglang {sv} requires torch {new}"
                            + labels.left_behind(g, place, new))
                    for place in pinned.places(pinned.torch)]
    return out


def _explained(g: CompatGraph, pinned: PinnedSet, out: _Draft, *, torch: str | None,
               python: str | None, arch: str | None) -> bool:
    """Fill ``out`` with what ``explain`` says of the pinned set; True when it is compatible
    (nothing to move)."""
    from moonpin.resolver import query

    assert pinned.sglang is not None
    if pinned.mooncake is None:
        loose = pinned.loose_mooncake()
        what = f"{loose.name}{loose.spec}" if loose and loose.spec else (
            f"{loose.name} (no version)" if loose else "none")
        out.reasons.append(f"no mooncake distribution is pinned to one version ({what})")
        return False
    mc = f"{pinned.mooncake.name}=={pinned.mooncake.version}"
    res = _answer(query.explain(g, pinned.sglang.version or "", mc, torch=torch,
                                python=python, arch=arch))
    out.verdict = res["verdict"]
    out.reasons = list(res["reasons"])
    out.notes = list(res.get("notes") or [])
    out.explain = res
    return bool(res["verdict"] == "compatible")


def _preferred(fits: list[dict[str, Any]], loose: Pin | None) -> list[dict[str, Any]]:
    """The candidates to move to, best first: of the loose pin's distribution (and inside
    its range) when any is, prebuilt before those with a note."""
    if loose is not None:
        fits = [c for c in fits if c["dist"] == loose.name and loose.spec and
                _in_spec(c["version"], loose.spec)] or [
                    c for c in fits if c["dist"] == loose.name] or fits
    return [c for c in fits if not c.get("notes")] or fits


def _places(pinned: PinnedSet, target: Pin) -> list[Pin]:
    return pinned.places(target) if target.version is not None else [target]


def _torch_move(g: CompatGraph, pinned: PinnedSet, target: Pin | None, *,
                python: str | None, arch: str | None) -> list[dict[str, Any]]:
    """No mooncake fits the pinned torch: move torch to what SGLang requires (and mooncake
    to what fits that torch)."""
    from moonpin.resolver import query

    assert pinned.sglang is not None
    sv = pinned.sglang.version or ""
    relaxed = _answer(query.which_mooncake(g, sv, python=python, arch=arch))
    fits = [c for c in relaxed["compatible"] if not c.get("notes")] or relaxed["compatible"]
    if not fits or pinned.torch is None:
        return []
    new_torch = fits[0]["wheels"][0]["torch"]
    ups = [_update(place, "torch", new_torch, f"sglang {sv} requires torch {new_torch}"
                   + labels.left_behind(g, place, new_torch))
           for place in pinned.places(pinned.torch)]
    if target is not None:
        note = "; ".join(fits[0].get("notes") or [])
        ups += [_update(place, fits[0]["dist"], fits[0]["version"],
                        f"{fits[0]['requirement']} fits torch {new_torch}"
                        + (f"; note: {note}" if note else ""))
                for place in _places(pinned, target)]
    return ups


def _in_spec(version: str, spec: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        return False
