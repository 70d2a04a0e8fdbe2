"""The answers of ``which`` and ``explain`` as typed, immutable values.

Each has ``to_json()``, the exact ``--json`` shape the README documents (keys in the order
they are printed; a field that does not apply to an answer's kind is left out), and
``Which.from_json`` reads the same shape back (the answers resolved when the KB was
written, ``moonpin.resolver.tables``, are stored that way).

Named tuples, not dataclasses: ``dataclasses`` imports ``inspect``, which costs a cold
query more than its answer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Candidate", "Check", "Covered", "Explanation", "Which"]


class Check(NamedTuple):
    """One check of a combination: its name, ``ok`` True / False / None (the KB cannot
    decide it), what it found, and the evidence it rests on."""

    name: str
    ok: bool | None
    detail: str
    evidence: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail,
                "evidence": list(self.evidence)}


class Covered(NamedTuple):
    """One (torch, python, platform) a compatible release has a fitting wheel for."""

    python: str
    arch: str
    torch: str
    wheel: str | None
    cuda: str | None  # the ``CUDA major`` check's words

    def to_json(self) -> dict[str, Any]:
        return dict(self._asdict())

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Covered:
        return cls(d["python"], d["arch"], d["torch"], d["wheel"], d["cuda"])


class Candidate(NamedTuple):
    """One release a ``which`` answer lists: compatible (``wheels``), excluded or unknown
    (``reason``). ``dist`` for a mooncake release, ``module`` for an SGLang release;
    ``requirement`` is None for a release the last scrape could not read."""

    version: str
    requirement: str | None = None
    dist: str | None = None
    module: str | None = None
    wheels: tuple[Covered, ...] | None = None
    notes: tuple[str, ...] | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.dist is not None:
            out["dist"] = self.dist
        out["version"] = self.version
        if self.requirement is not None:
            out["requirement"] = self.requirement
        if self.module is not None:
            out["module"] = self.module
        if self.wheels is not None:
            out["wheels"] = [w.to_json() for w in self.wheels]
        if self.notes is not None:
            out["notes"] = list(self.notes)
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Candidate:
        wheels = d.get("wheels")
        notes = d.get("notes")
        return cls(d["version"], d.get("requirement"), d.get("dist"), d.get("module"),
                   None if wheels is None else tuple(Covered.from_json(w) for w in wheels),
                   None if notes is None else tuple(notes), d.get("reason"))

    @property
    def compiles(self) -> bool:
        """Its builds are compiled at first import (a JIT loader's note says so)."""
        return any("compiles" in n for n in self.notes or ())


class Which(NamedTuple):
    """``which mooncake|sglang|torch``: the question as understood (``query``, printed
    back) and the releases that fit it, do not, or cannot be decided."""

    query: dict[str, Any]
    compatible: tuple[Candidate, ...]
    excluded: tuple[Candidate, ...]
    unknown: tuple[Candidate, ...]
    notes: tuple[str, ...] | None = None  # ``which mooncake``: said of the whole answer
    without_mooncake_pg: tuple[str, ...] | None = None  # ``which sglang``

    def ranked(self) -> tuple[Candidate, ...]:
        """The compatible releases best first: newest first as judged, a release that
        compiles at first import after every prebuilt one."""
        return tuple(sorted(self.compatible, key=lambda c: c.compiles))

    def recommended(self) -> dict[str, Any] | None:
        """The release to install and why (``requirement`` None: none is needed, the SGLang
        release imports no process-group module), or None when nothing fits."""
        ranked = self.ranked()
        if not ranked:
            return None
        if "module" in self.query and not self.query.get("module"):
            return {"requirement": None,
                    "reason": f"none needed (sglang {self.query.get('sglang')} imports no "
                              "mooncake process-group module)"}
        best = ranked[0]
        how = ("the newest that fits" if "module" not in self.query else
               "prebuilt, the newest that fits" if not best.compiles else
               "the newest that fits; it compiles at first import (nothing prebuilt fits)")
        return {"requirement": best.requirement, "reason": how}

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: ``recommended`` first, then the compatible releases in
        the order the text lists them (:meth:`ranked`)."""
        out: dict[str, Any] = {
            "query": self.query,
            "recommended": self.recommended(),
            "compatible": [c.to_json() for c in self.ranked()],
            "excluded": [c.to_json() for c in self.excluded],
            "unknown": [c.to_json() for c in self.unknown],
        }
        if self.notes is not None:
            out["notes"] = list(self.notes)
        if self.without_mooncake_pg is not None:
            out["without_mooncake_pg"] = list(self.without_mooncake_pg)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Which:
        notes, without = d.get("notes"), d.get("without_mooncake_pg")

        def listed(key: str) -> tuple[Candidate, ...]:
            return tuple(Candidate.from_json(c) for c in d[key])

        return cls(d["query"], listed("compatible"), listed("excluded"), listed("unknown"),
                   None if notes is None else tuple(notes),
                   None if without is None else tuple(without))


class Explanation(NamedTuple):
    """``explain``: the verdict of the best combination of one SGLang and one mooncake
    release (``evaluated``), every check made for it, and the other combinations'."""

    query: dict[str, Any]
    verdict: str
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    evaluated: dict[str, Any]
    checks: tuple[dict[str, Any], ...]  # each ``Check.as_dict()``
    combinations: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "verdict": self.verdict, "reasons": list(self.reasons),
                "notes": list(self.notes), "evaluated": self.evaluated,
                "checks": list(self.checks), "combinations": list(self.combinations)}
