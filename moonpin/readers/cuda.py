"""The CUDA major a torch wheel pulls in, read from its ``Requires-Dist``.

Light on purpose (``packaging`` only): the runtime check reads the installed torch's
metadata with it when torch's own files name no CUDA. The markers are evaluated in the
environment the caller hands in (:mod:`moonpin.readers.markers`: the target's, or a scraped
wheel's own tags').
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["cuda_major"]

_RUNTIME = re.compile(r"^nvidia-cuda-runtime-cu(\d+)$")


def cuda_major(requires_dist: tuple[str, ...], markers: Mapping[str, str],
               ) -> tuple[int | None, str]:
    """The CUDA major a torch wheel's requirements pull in where their markers are evaluated
    in ``markers`` (a whole PEP 508 environment, :mod:`moonpin.readers.markers`), and the
    line that decided it ("" when none: a CPU build)."""
    env = {**markers, "extra": ""}
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        m = _RUNTIME.match(name)
        if m:
            return int(m.group(1)), line
        if name in ("cuda-toolkit", "nvidia-cuda-runtime") and (
                name == "nvidia-cuda-runtime" or "cudart" in req.extras):
            for spec in req.specifier:
                major = re.match(r"(\d+)", spec.version)
                if major and spec.operator in ("==", "~=", ">="):
                    return int(major.group(1)), line
    return None, ""
