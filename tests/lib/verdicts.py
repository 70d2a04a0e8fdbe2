"""Reading ``moonpin check``'s text output per extension, for the real-image tests whose
truth is one import (``import mooncake.pg``, ``import nixl_ep``…) while the check judges the
whole worker: sgl_kernel and flashinfer on every CUDA worker, the backends its launch line
names, and mooncake's process group in several lines of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["EXTENSION_LINES", "GENERAL", "agree", "check_in_env", "mooncake_fails", "mooncake_rc",
           "recorded_report", "same_outcomes", "stack_root", "verdicts"]

#: the extensions the check judges in one line each (``fail  nixl_ep: …``)
EXTENSION_LINES = ("sgl_kernel", "nixl_ep", "deep_ep", "flashinfer")
#: checks about the environment as a whole: they decide every import, mooncake's too
GENERAL = ("target", "launch", "kb", "torch", "sglang", "launch args", "deep probe",
           "interpreter", "site-packages")


def _lines(output: str | list[str]) -> list[tuple[str, str]]:
    out = []
    for line in output.splitlines() if isinstance(output, str) else output:
        status, _, rest = line.partition("  ")
        if status in ("pass", "fail", "warn", "skip") and ":" in rest:
            out.append((status, rest.split(":", 1)[0]))
    return out


def mooncake_fails(output: str) -> list[str]:
    """The failing lines but the other extensions' own ones: what a check of
    ``import mooncake.pg`` alone says."""
    return [line for line in output.splitlines() if line.startswith("fail")
            and line.partition("  ")[2].split(":", 1)[0] not in EXTENSION_LINES]


def mooncake_rc(output: str | list[str]) -> int:
    """The exit code the check gives when only ``import mooncake.pg`` (and what it needs:
    torch, the environment) is judged: 1 when any check but another extension's own line
    fails."""
    return int(any(s == "fail" and n not in EXTENSION_LINES for s, n in _lines(output)))


def verdicts(output: str | list[str]) -> dict[str, str]:
    """module -> ``"ok"`` / ``"error"``: each extension's own line, and ``mooncake.pg`` from
    every line that is neither another extension's nor about the environment as a whole (a
    failing ``build`` or ``symbols`` check is mooncake's), when mooncake was judged."""
    got: dict[str, str] = {}
    mooncake = "ok"
    judged = False
    for status, name in _lines(output):
        if name in EXTENSION_LINES:
            got[name] = "error" if status == "fail" else "ok"
        elif name not in GENERAL:
            judged |= name == "mooncake installed"
            if status == "fail":
                mooncake = "error"
    if judged:
        got["mooncake.pg"] = mooncake
    return got


def agree(output: str, wanted: Iterable[str], truth: dict[str, str], probes: Any,
          what: object = None) -> None:
    """Assert the check's ``output`` has a line for each module of ``wanted`` and says of each
    module ``truth`` maps to a probe of the real import (module -> probe name in ``probes``,
    a report's) what that import did: ``ok`` where it worked, ``error`` where it raised."""
    got = verdicts(output)
    assert set(wanted) <= set(got), output
    for module, probe in truth.items():
        if module in got:
            want = "ok" if probes[probe]["ok"] else "error"
            assert got[module] == want, (what, module, probe, probes[probe], output)


def stack_root() -> Path:
    """The folder ``tests/realimg/stack.sh`` built the real images into
    (``MOONPIN_TEST_REALIMG``); the test is skipped when it is not set or not built."""
    where = os.environ.get("MOONPIN_TEST_REALIMG", "")
    if not where or not (Path(where) / "stack" / "bin" / "python").exists():
        pytest.skip("set MOONPIN_TEST_REALIMG to the folder tests/realimg/stack.sh built into")
    return Path(where)


def recorded_report(folder: str, name: str, option: str) -> dict[str, Any]:
    """What importing each extension really did in image ``name``, as its probe recorded it
    (``<stack_root>/<folder>/<name>.json``); the test is skipped when it was not recorded
    (``option``: the ``stack.sh`` option that records it)."""
    path = stack_root() / folder / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"no {path}: run tests/realimg/stack.sh {option}")
    with path.open() as f:
        got: dict[str, Any] = json.load(f)
    return got


def same_outcomes(now: dict[str, Any], then: dict[str, Any], probes: Any) -> None:
    """Each of ``probes`` ended in ``now`` (a probe run's ``probes``) as in ``then`` (the
    recorded report's): ok, or the same exception class."""
    for m in sorted(set(probes)):
        assert (now[m]["ok"], now[m].get("error_type")) == \
            (then[m]["ok"], then[m].get("error_type")), (m, now[m], then[m])


def check_in_env(image: Path, how: str, given: dict[str, str], gpu: str, *launch: str
                 ) -> subprocess.CompletedProcess[str]:
    """``moonpin check --no-deep --gpu-capability gpu -- launch`` of a real image built by
    ``stack.sh`` with the worker's environment ``given``: ``how`` ``"python"`` runs
    ``--python <image>/bin/python`` with it, ``"rootfs"`` judges ``image`` as an image root
    (``/opt/venv/bin/python``, no CUDA toolkit but ``CUDA_HOME`` set) with it as
    ``--image-env``; the stub driver on ``LD_LIBRARY_PATH``, no GPU visible."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "FLASHINFER_", "PYTHONPATH",
                                "PYTHONUSERBASE", "PYTHONNOUSERSITE"))}
    env.update(LD_LIBRARY_PATH=str(stack_root() / "stack-stubs"), CUDA_VISIBLE_DEVICES="")
    if how == "python":
        env.update(given)
        target = ["--python", str(image / "bin" / "python")]
    else:
        image_env = ["PATH=/opt/venv/bin:/usr/bin:/bin", "CUDA_HOME=/usr/local/cuda",
                     *(f"{k}={v}" for k, v in given.items())]
        target = ["--rootfs", str(image), "--interpreter", "/opt/venv/bin/python",
                  *(a for kv in image_env for a in ("--image-env", kv))]
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", *target, "--no-deep",
                           "--gpu-capability", gpu, "--", *launch],
                          capture_output=True, text=True, timeout=2400, cwd="/", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc
