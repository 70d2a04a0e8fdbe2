"""Real SGLang argument sources for tests, from wheels at hand (never downloaded here).

The tests that use them carry the ``wheels`` marker, excluded by default: run them with
``MOONPIN_TEST_WHEELS=<folder> python -m pytest -m wheels``, the folder holding
``sglang-<version>-*.whl`` for 0.5.14, 0.5.18, 0.5.19 and 0.5.23 (fetch each with
``pip download --no-deps sglang==<version> -d <folder>``). Selected without them, they fail.
"""

from __future__ import annotations

import os
import zipfile
from functools import cache
from pathlib import Path

import pytest

from moonpin.kb.launch import Flag, Rule
from moonpin.readers.launch.server_args import class_constants, extract

__all__ = ["WHEELS_ENV", "real_args", "real_wheel"]

#: The folder of real SGLang wheels the ``wheels`` tests read.
WHEELS_ENV = "MOONPIN_TEST_WHEELS"


def real_wheel(version: str) -> Path:
    """The wheel of SGLang ``version`` in :data:`WHEELS_ENV`; the test fails without it."""
    folder = os.environ.get(WHEELS_ENV)
    tip = f"pip download --no-deps sglang=={version} -d <folder>"
    if not folder:
        pytest.fail(f"{WHEELS_ENV} is not set: a `wheels` test needs real SGLang wheels "
                    f"(tip: {tip}, then {WHEELS_ENV}=<folder>)")
    wheel = next(iter(sorted(Path(folder).glob(f"sglang-{version}-*.whl"))), None)
    if wheel is None:
        pytest.fail(f"no sglang-{version}-*.whl in {WHEELS_ENV}={folder} (tip: {tip})")
    return wheel


@cache
def real_args(version: str) -> tuple[tuple[Flag, ...], tuple[Rule, ...]]:
    """Flags and every rule of that release's server_args.py."""
    with zipfile.ZipFile(real_wheel(version)) as z:
        src = z.read("sglang/srt/server_args.py")
        consts = class_constants(z.read("sglang/srt/model_executor/cuda_graph_config.py"))
    flags, rules, err = extract(src, constants=consts)
    assert err is None
    return flags, rules
