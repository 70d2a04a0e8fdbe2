"""The CUDA major a torch wheel pulls in, read from its ``Requires-Dist``.

Light on purpose (``packaging`` only): the runtime check reads the installed torch's
metadata with it at every worker start.
"""

from __future__ import annotations

import re

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

__all__ = ["cuda_major"]

_RUNTIME = re.compile(r"^nvidia-cuda-runtime-cu(\d+)$")


def cuda_major(requires_dist: tuple[str, ...], arch: str) -> tuple[int | None, str]:
    """The CUDA major a torch wheel's requirements pull in on Linux ``arch``, and the
    line that decided it ("" when none: a CPU build)."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(platform_system="Linux", sys_platform="linux", platform_machine=arch,
               python_version="3.12", python_full_version="3.12.0",
               implementation_name="cpython", platform_python_implementation="CPython")
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):  # type: ignore[arg-type,unused-ignore]
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
