"""Real SGLang argument sources for tests, when a wheel is at hand (never downloaded here).

The tests that use them skip on a machine without ``/tmp/sgl/sglang-<version>-*.whl``
(fetch one with `pip download --no-deps sglang==<version> -d /tmp/sgl`).
"""

from __future__ import annotations

import glob
import zipfile
from functools import cache

from kb.launch import Flag, Rule
from readers.server_args import class_constants, extract

__all__ = ["real_args"]


@cache
def real_args(version: str) -> tuple[tuple[Flag, ...], tuple[Rule, ...]] | None:
    """Flags and every rule of that release's server_args.py, or None without the wheel."""
    wheels = glob.glob(f"/tmp/sgl/sglang-{version}-*.whl")
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        src = z.read("sglang/srt/server_args.py")
        consts = class_constants(z.read("sglang/srt/model_executor/cuda_graph_config.py"))
    flags, rules, err = extract(src, constants=consts)
    assert err is None
    return flags, rules
