"""Judging pins that are ranges (issue 27): ``sglang>=0.5.18`` with
``mooncake-transfer-engine>=0.3.10`` is a set pip resolves to some release of each, so it is
judged over every release of the knowledge base inside the ranges. When no SGLang release of
its range has a mooncake of the mooncake's range that it loads, the set is ``incompatible``
and the reason says why, counted per kind for the newest SGLang of the range (``CUDA major
×3: build links CUDA 12, torch 2.13.0 is CUDA 13``); when some do, the set is still
``unknown`` (pip picks the release, not moonpin) and the pins that make it one judged set are
proposed (``updateType`` ``pin``, a ``replacement`` when the mooncake of the range has no
release that fits)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from moonpin.resolver.pins.reading.base import Pin

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph

__all__ = ["in_range", "is_range", "judge_sglang_range", "mooncake_range_reason", "sglang_in_range"]

#: How many of the kinds of exclusion a reason names.
_KINDS_SAID = 3


def is_range(pin: Pin) -> bool:
    """A requirement pip resolves to some release: a range or no version, not a direct
    reference, an editable install or a version held in a variable."""
    return pin.version is None and "$" not in pin.spec and not (pin.note and any(
        w in pin.note for w in ("reference", "editable", "variable", "environment")))


def in_range(version: str, spec: str) -> bool:
    """``version`` inside the PEP 440 specifier ``spec`` (an empty one admits all;
    pre-releases count, as an exact pin of one does)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        return False


def sglang_in_range(g: CompatGraph, spec: str) -> list[Version]:
    """The SGLang releases of the KB inside ``spec`` that import a mooncake process-group
    module (the others load no mooncake: nothing to judge), newest first."""
    return [v for v in sorted(g.sglang, reverse=True)
            if g.sglang[v].pg.module is not None and in_range(str(v), spec)]


def _fits(cand: dict[str, Any], target: Pin | None) -> bool:
    """A candidate the mooncake pin admits: its distribution and version (or range)."""
    if target is None:
        return True
    if cand["dist"] != target.name:
        return False
    if target.version is not None:
        return Version(cand["version"]) == Version(target.version)
    return in_range(cand["version"], target.spec)


def _pick(answers: Sequence[tuple[Version, dict[str, Any]]],
          admit: Callable[[dict[str, Any]], bool]) -> tuple[Version, dict[str, Any]] | None:
    """The newest SGLang with a prebuilt mooncake ``admit`` takes, and that mooncake (the
    first in its answer's order); else the same among those that compile at first import
    (what ``which`` recommends, and the stack moves of
    :mod:`moonpin.resolver.pins.judging.judge`)."""
    for prebuilt in (True, False):
        for sv, which in answers:
            for c in which["compatible"]:
                if (not c.get("notes")) == prebuilt and admit(c):
                    return sv, c
    return None


def mooncake_range_reason(answers: Sequence[tuple[Version, dict[str, Any]]], target: Pin,
                          ) -> str:
    """One line saying why no release of ``target``'s range fits any of the SGLang releases
    answered: the exclusions counted by kind over every (SGLang, mooncake) pair, each kind
    with its first detail."""
    kinds: dict[str, list[str]] = {}
    torches: list[str] = []
    for _, which in answers:
        torch = which["query"].get("torch")
        torches += [t for t in (torch if isinstance(torch, list) else [torch])
                    if isinstance(t, str) and t not in torches]
        for e in which["excluded"]:
            if e["dist"] != target.name or not in_range(e["version"], target.spec):
                continue
            kind, _, detail = e["reason"].partition(": ")
            kinds.setdefault(kind, []).append(detail.split(" (")[0].split("; ")[0])
    what = f"{target.name}{target.spec}" if target.spec else target.name
    svs = [str(sv) for sv, _ in answers]
    among = f"sglang {svs[0]}" if len(svs) == 1 else f"any of sglang {svs[-1]} .. {svs[0]}"
    with_torch = f" (torch {', '.join(torches)})" if torches else ""
    if not kinds:
        return f"no {what} release in the knowledge base fits {among}{with_torch}"
    said = "; ".join(f"{k} ×{len(d)}: {d[0]}" for k, d in sorted(
        kinds.items(), key=lambda kv: -len(kv[1]))[:_KINDS_SAID])
    return f"no {what} release fits {among}{with_torch}: {said}"


class _Answers(Sequence[tuple[Version, dict[str, Any]]]):
    """``which mooncake`` of each release, asked the first time it is read."""

    def __init__(self, releases: list[Version],
                 ask: Callable[[Version], dict[str, Any]]) -> None:
        self.releases = releases
        self.ask = ask
        self.done: list[tuple[Version, dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self.releases)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        while len(self.done) <= i:
            sv = self.releases[len(self.done)]
            self.done.append((sv, self.ask(sv)))
        return self.done[i]


Update = Callable[[Pin, str, str, str], dict[str, Any]]


def judge_sglang_range(g: CompatGraph, sglang: Pin, mooncake: Pin | None, *,
                       torch: str | None, python: str | None, arch: str | None,
                       update: Update, places: Callable[[Pin], list[Pin]],
                       ) -> tuple[str, list[str], list[dict[str, Any]]]:
    """The verdict, reasons and updates for an SGLang range (``sglang.version`` is None)
    with the mooncake pin ``mooncake`` (exact, a range, or None).

    ``update(pin, new_name, new_version, reason)`` makes one update object and
    ``places(pin)`` gives every occurrence of an exact pin (both from
    :mod:`moonpin.resolver.pins.judging.judge`)."""
    from moonpin.resolver import query

    what = f"sglang{sglang.spec}" if sglang.spec else "sglang (no version)"
    releases = sglang_in_range(g, sglang.spec)
    if not releases:
        return "unknown", [f"no sglang release in the knowledge base is in {what} and "
                           "imports a mooncake process-group module: nothing to judge"], []
    shown = (f"{releases[-1]} .. {releases[0]}" if len(releases) > 1 else str(releases[0]))

    def ask(sv: Version) -> dict[str, Any]:
        which = query.which_mooncake(g, str(sv), torch=torch, python=python, arch=arch)
        return which if isinstance(which, dict) else dict(which.to_json())

    # asked newest first, as far as a pick needs (each answer reads a resolved table)
    answers = _Answers(releases, ask)
    fit = _pick(answers, lambda c: _fits(c, mooncake))
    reasons = [f"{what} is a range: pip installs whichever release resolves, so every "
               f"release of it in the knowledge base was judged ({shown})"]
    if fit is not None:
        sv, best = fit
        ups = [update(sglang, "sglang", str(sv), f"the newest sglang of {what} with a "
                      f"mooncake of the project's that fits: {best['requirement']}")]
        if mooncake is not None and mooncake.version is None:
            ups.append(update(mooncake, best["dist"], best["version"],
                              f"{best['requirement']} has a build sglang {sv} loads"))
        reasons.append(f"sglang {sv} with {best['requirement']} is compatible: pin them")
        return "unknown", reasons, ups
    verdict = "incompatible" if mooncake is not None else "unknown"
    if mooncake is not None:
        target = mooncake if mooncake.version is None else mooncake._replace(
            spec=f"=={mooncake.version}")
        reasons.append(mooncake_range_reason(answers, target))
    alt = (_pick(answers, lambda c: mooncake is not None and c["dist"] == mooncake.name)
           or _pick(answers, lambda c: True))
    if alt is None:
        reasons.append(f"no mooncake release in the knowledge base fits any of {what}")
        return verdict, reasons, []
    sv, best = alt
    ups = [update(sglang, "sglang", str(sv), f"the newest sglang of {what} with a mooncake "
                  f"that fits: {best['requirement']}")]
    if mooncake is not None:
        ups += [update(p, best["dist"], best["version"],
                       f"{best['requirement']} has a build sglang {sv} loads")
                for p in (places(mooncake) if mooncake.version is not None else [mooncake])]
    return verdict, reasons, ups
