"""sglang-kernel (formerly sgl-kernel): ``sgl_kernel.common_ops``, from 0.3.16 searched with
``glob`` in ``sm90/`` or ``sm100/`` by the GPU's compute capability (``load_utils.py`` from
0.3.21), then ``sgl_kernel/common_ops.*``, then a plain ``import common_ops``; older releases
``from sgl_kernel import common_ops`` after preloading a hard-coded ``libcudart.so.12``."""

from __future__ import annotations

__all__ = ["RECIPE"]

import re

from moonpin.kb.models import RuleStep
from moonpin.readers.native import rules
from moonpin.scrapers.projects import Recipe, RuleInput


def _read(m: RuleInput) -> list[RuleStep]:
    return [*rules.import_steps(m.tree, m.member, m.package, m.modules),
            *rules.glob_steps(m.tree, m.member, m.package),
            *rules.preload_steps(m.tree, m.member)]


RECIPE = Recipe(
    project="sglang-kernel",
    dists=("sglang-kernel", "sgl-kernel"),
    rule_members=re.compile(r"^(?P<package>sgl_kernel)/(?:__init__|load_utils)\.py$"),
    builds=re.compile(r"^sgl_kernel/(?:sm\d+/)?common_ops\.[^/]*so$"),
    read=_read,
)
