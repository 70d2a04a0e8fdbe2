"""FlashInfer: ``flashinfer-python`` (pure Python, kernels JIT-compiled or taken from the two
others), ``flashinfer-cubin`` and ``flashinfer-jit-cache``, tied by the version checks of
``flashinfer/jit/env.py`` (``FLASHINFER_DISABLE_VERSION_CHECK`` turns them off)."""

from __future__ import annotations

__all__ = ["RECIPE"]

import re

from moonpin.kb.models import RuleStep
from moonpin.readers.native import rules
from moonpin.scrapers.projects import Recipe, RuleInput

_DISTS = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")


def _read(m: RuleInput) -> list[RuleStep]:
    return rules.lock_steps(m.tree, m.member, _DISTS)


RECIPE = Recipe(
    project="flashinfer",
    dists=_DISTS,
    rule_members=re.compile(r"^(?P<package>flashinfer)/jit/env\.py$"),
    builds=re.compile(r"^flashinfer[^/]*/.*\.so$"),
    read=_read,
)
