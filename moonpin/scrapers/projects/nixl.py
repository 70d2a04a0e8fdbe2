"""nixl: the meta ``nixl`` (``nixl_ep/__init__.py`` picks ``nixl_ep_cu<major>`` from the CUDA
torch was built for) and ``nixl-cu12``/``nixl-cu13`` (``nixl_ep_cu<N>/__init__.py`` imports
``nixl_ep_cpp_torch<MM>`` computed from ``torch.__version__``, under ``RTLD_DEEPBIND`` when
``NIXL_UCX_DEEPBIND`` is set; before 1.3.1 one ``nixl_ep_cpp`` build, before 1.3.0 in a
``nixl_ep/`` folder of the backend distribution itself)."""

from __future__ import annotations

__all__ = ["RECIPE"]

import re

from moonpin.kb.models import RuleStep
from moonpin.readers.native import rules
from moonpin.scrapers.projects import Recipe, RuleInput


def _read(m: RuleInput) -> list[RuleStep]:
    return [*rules.import_steps(m.tree, m.member, m.package, m.modules),
            *rules.env_steps(m.tree, m.member)]


RECIPE = Recipe(
    project="nixl",
    dists=("nixl", "nixl-cu12", "nixl-cu13"),
    rule_members=re.compile(r"^(?P<package>nixl_ep(?:_cu\d+)?)/__init__\.py$"),
    builds=re.compile(r"^nixl_ep(?:_cu\d+)?/nixl_ep_cpp[^/]*\.so$"),
    read=_read,
    packages=("nixl_ep_cu12", "nixl_ep_cu13"),
)
