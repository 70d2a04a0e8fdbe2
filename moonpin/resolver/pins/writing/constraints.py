"""Constraints for pip and uv from a :func:`~moonpin.resolver.pins.writing.renovate.plan_stack`
plan (issue 13).

``moonpin constraints --sglang V`` prints what a resolver needs so that whatever it picks
is a set moonpin judges compatible: SGLang held, torch held to what the release requires
with its CPU build excluded (``!=2.13.0+cpu``: ``==2.13.0`` alone lets pip and uv take a
``+cpu`` wheel a find-links folder or an extra index offers), each allowed mooncake
distribution to the range of its fitting releases (the releases of that distribution inside
the range that do not fit are excluded with ``!=``), and every other mooncake distribution
excluded (``name<0``: no release satisfies it, so a requirement of it fails to resolve
instead of installing a build that cannot load).

Two forms: a pip/uv constraints file (``pip install -c``, ``uv pip compile -c``) and the
``[tool.uv] constraint-dependencies`` table of ``pyproject.toml``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from moonpin.kb.distributions import torch_cpu_exclusions
from moonpin.resolver.pins.writing.renovate import StackPlan, kb_releases

if TYPE_CHECKING:
    from collections.abc import Callable

    from moonpin.resolver.graph import CompatGraph

__all__ = ["constraint_lines", "judged_for", "render"]


def _v(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def _spec(allowed: list[str], known: Callable[[], list[str]]) -> str:
    """A PEP 440 specifier admitting exactly ``allowed`` among ``known()`` (asked only for a
    range: the releases it holds may need the KB's facts); ``<0`` for none."""
    if not allowed:
        return "<0"
    if len(allowed) == 1:
        return f"=={allowed[0]}"
    lo, hi = min(allowed, key=_v), max(allowed, key=_v)
    inside = sorted((k for k in known() if _v(lo) < _v(k) < _v(hi) and k not in allowed),
                    key=_v)
    return ",".join([f">={lo}", f"<={hi}", *(f"!={k}" for k in inside)])


def constraint_lines(g: CompatGraph, plan: StackPlan) -> list[str]:
    """The requirement strings, one per distribution (sglang, torch, then mooncake); sglang
    alone when the plan holds nothing else."""
    out = [f"sglang=={plan.sglang}"]
    if plan.module is None:
        return out
    # a local CPU build of an allowed torch is excluded: pip and uv would take it
    out.append(",".join(["torch" + _spec(plan.torches, lambda: [str(v) for v in
                                                               g.torch_versions]),
                         *torch_cpu_exclusions(sorted(plan.torches, key=_v))]))
    for dist in sorted(plan.mooncake):
        out.append(dist + _spec(plan.mooncake[dist], lambda: [
            v for d, v in kb_releases(g, "mooncake") if d == dist]))  # noqa: B023 (called now)
    for dist in g.dists():
        if dist not in plan.mooncake:
            out.append(f"{dist}<0")
    for dist in sorted(plan.natives):
        out.append(dist + _spec(plan.natives[dist], lambda: [
            v for d, v in kb_releases(g, "native") if d == dist]))  # noqa: B023 (called now)
    return out


def judged_for(python: str | None, arch: str | None) -> str:
    """The scope line of the header: the python and platform the plan was made for."""
    return "judged for " + ", ".join((f"python {python}" if python else "every python",
                                      arch or "x86_64 and aarch64"))


def render(g: CompatGraph, plan: StackPlan, fmt: str, *, where: str) -> str:
    """``fmt`` ``txt`` (a constraints file) or ``uv`` (``[tool.uv] constraint-dependencies``)."""
    if plan.module is None:
        from moonpin.resolver.pins.writing.renovate import nothing_to_hold

        head = [f"# moonpin constraints: sglang {plan.sglang}; {where}",
                f"# {nothing_to_hold(plan.sglang)}"]
        lines = [f"sglang=={plan.sglang}"]
        if fmt == "uv":
            return "\n".join([*head, "[tool.uv]", "constraint-dependencies = [",
                              *(f"    {json.dumps(x)}," for x in lines), "]"]) + "\n"
        return "\n".join(head + lines) + "\n"
    lines = constraint_lines(g, plan)
    head = [f"# moonpin constraints: sglang {plan.sglang}, torch {' or '.join(plan.torches)}, "
            f"{plan.module or 'no mooncake process-group module'}; {where}",
            "# other mooncake distributions are excluded (<0): none of their builds fits"]
    head += [f"# note: {n}" for n in plan.jit_notes]
    # what is not held (the native extensions no constraint can keep right) closes the file
    tail = [f"# note: {n}" for n in plan.reasons]
    if fmt == "uv":
        body = ["[tool.uv]", "constraint-dependencies = ["]
        body += [f"    {json.dumps(x)}," for x in lines]
        body.append("]")
        return "\n".join(head + body + tail) + "\n"
    return "\n".join(head + lines + tail) + "\n"
