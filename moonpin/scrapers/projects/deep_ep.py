"""sgl-deep-ep: ``deep_ep`` imports its build plainly (``deep_ep_cpp`` at the top level up to
0.1.0, ``deep_ep._C`` from 0.1.1), after ``prerequisites.check_prerequisites`` compared
``torch.version.cuda`` with ``_build_info.EXPECTED_CUDA_MAJOR`` and asked for a GPU."""

from __future__ import annotations

__all__ = ["RECIPE"]

import re

from moonpin.kb.models import RuleStep
from moonpin.readers.native import rules
from moonpin.scrapers.projects import Recipe, RuleInput


def _read(m: RuleInput) -> list[RuleStep]:
    if m.member.endswith("/_build_info.py"):
        return [RuleStep(kind="require", target=name, effect=value, member=m.member,
                         line=0, order=i)
                for i, (name, value) in enumerate(sorted(rules.constants(m.tree).items()))]
    return [*rules.import_steps(m.tree, m.member, m.package, m.modules),
            *rules.raise_steps(m.tree, m.member, frozenset({"check_prerequisites"}))]


RECIPE = Recipe(
    project="deep-ep",
    dists=("sgl-deep-ep",),
    rule_members=re.compile(r"^(?P<package>deep_ep)/(?:__init__|prerequisites|_build_info)\.py$"),
    builds=re.compile(r"^(?:deep_ep_cpp|deep_ep/_C)\.[^/]*so$"),
    read=_read,
)
