"""What ``moonpin pins`` prints: the ``--json`` document and the human lines, from the pins
read, the pinned set and the :class:`~moonpin.resolver.pins.judging.judge.Judgement`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from moonpin.kb.errors import UsageError
from moonpin.resolver.pins.judging.judge import Judgement, PinnedSet
from moonpin.resolver.pins.reading.base import Pin, cut

__all__ = ["exit_code", "nothing_pinned", "report_json", "report_lines"]


def _conflicts(pinned: PinnedSet) -> list[list[str]]:
    return [[f"{a.path}:{a.line} {a.name}=={a.version}", f"{b.path}:{b.line} {b.name}=={b.version}"]
            for a, b in pinned.conflicts]


def report_json(found: Sequence[Pin], pinned: PinnedSet, verdict: Judgement) -> dict[str, Any]:
    """``moonpin pins --json``: the pins, the conflicts, then the verdict's fields."""
    return {
        "pins": [{"name": p.name, "spec": p.spec, "version": p.version, "file": p.path,
                  "line": p.line, "kind": p.kind, "note": p.note} for p in found],
        "conflicts": _conflicts(pinned),
        **verdict.to_json(),
    }


def report_lines(found: Sequence[Pin], pinned: PinnedSet, verdict: Judgement) -> list[str]:
    """The human report: one line per pin, the conflicts, the verdict, its reasons, notes
    and updates."""
    out: list[str] = []
    for p in found:
        what = f"=={p.version}" if p.version else (p.spec or "(unpinned)")
        note = f"  [{p.note}]" if p.note else ""
        marker = f"; {p.marker}" if p.marker else ""
        out.append(f"{p.path}:{p.line}: {p.name}{what}{marker}  ({p.kind}){note}")
    out += [f"conflict: {a} vs {b}" for a, b in _conflicts(pinned)]
    out.append(f"verdict: {verdict.verdict} ({verdict.platform})")
    out += [f"  {r}" for r in verdict.reasons]
    out += [f"  note: {n}" for n in verdict.notes]
    lines = [(u["packageFile"], u["line"], u["depName"]) for u in verdict.updates]
    for u in verdict.updates:
        # two requirements of one name on one line (each with its marker): said by column
        at = (f":{u['col'] + 1}" if u["col"] >= 0 and lines.count(
            (u["packageFile"], u["line"], u["depName"])) > 1 else "")
        name = u["newName"] if u["newName"] != u["depName"] else u["depName"]
        was = (f"=={u['currentVersion']}" if u.get("currentVersion") is not None
               else u["currentValue"] or " (no version)")
        value = str(u.get("newValue", ""))
        new = value if value[:1] in ("=", "<", ">", "!", "~") else f"=={u['newVersion']}"
        out.append(f"update ({u['groupName']}): {u['packageFile']}:{u['line']}{at} "
                   f"{u['depName']}{was} -> {name}{new}  # {u['reason']}")
    return out


def exit_code(pinned: PinnedSet, verdict: Judgement, *, exit_zero: bool = False) -> int:
    """0 for a compatible set with nothing to update and no conflict (or ``exit_zero``), else
    1 (the command found a problem)."""
    ok = verdict.verdict == "compatible" and not verdict.updates and not pinned.conflicts
    return 0 if ok or exit_zero else 1


def _is_empty(path: str) -> bool:
    """A regular file holding nothing but whitespace."""
    from moonpin.kb.files import read_regular

    try:
        return not read_regular(path, cap=4096, what="pins file").strip()
    except OSError:  # larger than that, or gone since it was read: not "empty"
        return False


def nothing_pinned(files: Sequence[str]) -> UsageError:
    """The error for files that pin none of the three: it says when they are empty."""
    shown = cut(", ".join(files), 300)
    hint = ("give the requirements/constraints files, pyproject.toml or Dockerfile that pin "
            "sglang (or --match/--dep for another kind of file)")
    if files and all(_is_empty(f) for f in files):
        verb = "is" if len(files) == 1 else "are"
        return UsageError(f"{shown} {verb} empty: no pin of sglang, torch or a mooncake "
                          "distribution; nothing was judged", hint=hint)
    return UsageError(f"no pin of sglang, torch or a mooncake distribution in {shown}; "
                      "nothing was judged", hint=hint)
