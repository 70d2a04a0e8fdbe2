"""Opt-in (``-m image``): packages no loader rule of moonpin reads, judged by following their
plain import (:func:`moonpin.preflight.extensions.pyread.plain.plain_import`), against what
``import <package>`` really does in real images built by ``tests/realimg/stack.sh --hunt-g``
under ``MOONPIN_TEST_REALIMG`` (``hunt-G-*``: hard-link copies of ``stack`` with real wheels
of the index installed by their own pip; the truth is ``probe_stack.py``'s ``import@<name>``
on the stub driver, no GPU).

* The recorded truth (``hunt-G-reports/*.json``) still holds: the imports are run again and
  end the same way.
* The check's line for each package agrees with its import: ``pass`` (or ``warn``: a build
  whose failure an ``except`` catches) where it imports, ``fail`` where it raises; ``skip``
  only with "not judged" named (a load by a computed path or name), never a claim.
* The cross-check: each ruled project's package judged with its rule removed agrees with its
  rule's verdict wherever that loader is plain (deep_ep), and says "not judged" where it is
  not (nixl_ep, sgl_kernel: a build chosen by a computed name). Where the import's outcome
  is decided by a GPU (deep_ep's ``check_prerequisites``), the line states the assumption
  it made, and the test compares it with the real import made under the same one.

SGLang's launch line reaches a rule-less package through the backend flags the check reads
(``--moe-a2a-backend mori`` imports ``mori``); the packages here (``deep_gemm`` for
``--moe-runner-backend deep_gemm``, ``torch_memory_saver`` for ``--enable-memory-saver``,
``humming`` for ``--moe-runner-backend humming``, xformers) are reached by flags it does not
read yet, so each is handed to the walk as a requested backend's package would be. Nothing
here changes an image.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.lib.verdicts import recorded_report, stack_root

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
#: report -> (image folder, the packages judged without a rule, the worker's environment
#: beside the probe's own: ``{venv}`` is the image's folder)
CU12 = "{venv}/cu12/nvidia"
REPORTS: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "G-ktkernel": ("hunt-G-ktkernel", ("deep_gemm", "kt_kernel", "sgl_kernel"), {}),
    "G-ktkernel-cu12": ("hunt-G-ktkernel-cu12", ("deep_gemm",), {}),
    "G-ktkernel-cu12-ldpath": ("hunt-G-ktkernel-cu12", ("deep_gemm",), {
        "LD_LIBRARY_PATH": f"{{stubs}}:{CU12}/cuda_nvrtc/lib:{CU12}/cuda_runtime/lib"}),
    "G-plain": ("hunt-G-plain", ("torch_memory_saver", "xformers", "humming"), {}),
}
#: the ruled packages read plainly on `stack` (report G-stack), each against the probe that
#: is its rule's truth: deep_ep past its GPU gate, as test_image_stack.py compares its rule
RULED_TRUTH = {"deep_ep": "deep_ep", "flashinfer": "flashinfer", "nixl_ep": "nixl_ep",
               "sgl_kernel": "sgl_kernel"}
CASES = [(r, p) for r, (_, pkgs, _) in REPORTS.items() for p in pkgs]


_root = stack_root


def report(name: str) -> dict[str, Any]:
    return recorded_report("hunt-G-reports", name, "--hunt-g")


def _image(name: str) -> Path:
    v = _root() / (REPORTS[name][0] if name in REPORTS else "stack")
    if not (v / "bin" / "python").exists():
        pytest.skip(f"no {v}: run tests/realimg/stack.sh --hunt-g")
    return v


def _truth(name: str, probe: str) -> dict[str, Any]:
    got = report(name)["probes"].get(probe)
    if got is None:
        pytest.skip(f"{name}: {probe} not probed (stack.sh --hunt-g --probe-only)")
    return got  # type: ignore[no-any-return]


def _env(name: str) -> dict[str, str]:
    """The environment the probe imported in (hunt-G's stub driver, no GPU) and the
    report's."""
    root = _root()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(LD_LIBRARY_PATH=str(root / "hunt-G-stubs"), CUDA_VISIBLE_DEVICES="",
               FLASHINFER_WORKSPACE_BASE=str(root / "stack-fi"))
    extra = REPORTS[name][2] if name in REPORTS else {}
    env.update({k: v.format(venv=_image(name), stubs=root / "hunt-G-stubs")
                for k, v in extra.items()})
    return env


@pytest.mark.parametrize(("name", "package"), CASES, ids=[f"{r}-{p}" for r, p in CASES])
def test_the_recorded_truth_still_holds(name: str, package: str) -> None:
    truth = _truth(name, f"import@{package}")
    v = _image(name)
    proc = subprocess.run([str(v / "bin" / "python"), str(PROBE), "--child",
                           f"import@{package}"], capture_output=True, text=True, cwd="/",
                          env=_env(name), timeout=600)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["ok"] == truth["ok"], (got, truth)
    assert got.get("error_type") == truth.get("error_type"), (got, truth)


def _plain_line(name: str, package: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The check's line for ``package`` in the image of report ``name``, judged without a
    rule (:func:`_plain_line_of`), in the probe's environment."""
    for k, val in _env(name).items():
        monkeypatch.setenv(k, val)
    return _plain_line_of(_image(name), package, monkeypatch)


def _plain_line_of(v: Path, package: str, monkeypatch: pytest.MonkeyPatch,
                   gpu: str = "none") -> str:
    """The check's line for ``package`` in the venv ``v``, judged without a rule: handed to
    the walk as a requested backend's own package (``ruled=False``), its rule (if any)
    removed; the check runs in this process."""
    from moonpin.preflight.extensions import seam, wanted
    from moonpin.preflight.run import check_image

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    if package in seam.RULES:
        monkeypatch.delitem(seam.RULES, package)
    real = wanted.extensions

    def extensions(*a: Any, **k: Any) -> Any:
        want, unjudged = real(*a, **k)
        want = [w for w in want if w.name != package]
        want.append(wanted.Wanted(package, "handed to the check", True, ruled=False,
                                  flag="--moe-a2a-backend"))
        return want, unjudged

    monkeypatch.setattr(wanted, "extensions", extensions)
    rep = check_image(elastic_ep_backend=None, python=str(v / "bin" / "python"),
                      deep=False, gpu=gpu)
    lines = [c for c in rep.checks if c.name == package]
    assert len(lines) == 1, rep.checks
    c = lines[0]
    return f"{c.status}  {c.name}: {c.message}"


@pytest.mark.parametrize(("name", "package"), CASES, ids=[f"{r}-{p}" for r, p in CASES])
def test_the_plain_reading_agrees_with_the_import(name: str, package: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    truth = _truth(name, f"import@{package}")
    line = _plain_line(name, package, monkeypatch)
    status = line.split("  ", 1)[0]
    assert "read as a plain import; its __init__ code beyond imports not run" in line, line
    if status == "skip":  # no claim: what was not judged is named
        assert "not judged: " in line, line
        return
    assert (status in ("pass", "warn")) == bool(truth["ok"]), (line, truth)


@pytest.mark.parametrize("package", sorted(RULED_TRUTH))
def test_a_ruled_package_read_plainly_agrees_with_its_rule(
        package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ruled package of ``stack`` read without its rule, against the probe that is its
    rule's truth (every one imports there): agreeing where its loader is plain (deep_ep:
    ``_C`` loaded into torch's process), "not judged" where it is not (nixl_ep, sgl_kernel:
    a build chosen by a computed name or path; flashinfer: a ctypes load and more files than
    the walk reads)."""
    truth = _truth("G-stack", RULED_TRUTH[package])
    line = _plain_line("G-stack", package, monkeypatch)
    status = line.split("  ", 1)[0]
    if status == "skip":
        assert "not judged: " in line, line
        return
    assert (status in ("pass", "warn")) == bool(truth["ok"]), (line, truth)


#: images of test_image_stack.py and the earlier hunts whose deep_ep differs (releases,
#: NVSHMEM, torch): deep_ep's rule and the plain reading, both for a GPU of capability 9.0
DEEP_EP_IMAGES = ("stack", "hunt-deepep010", "hunt-deepep011", "hunt-deepep013rc3",
                  "hunt-nonvshmem", "hunt-nvshmem12", "stack-torch215", "hunt-t213-deepep011",
                  "hunt-C-cputorch")


@pytest.mark.parametrize("image", DEEP_EP_IMAGES)
def test_deep_ep_read_plainly_agrees_with_its_rule(image: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """deep_ep's loader is plain (``from . import _C``; 0.1.0: a top-level ``deep_ep_cpp``):
    its rule's verdict and the plain reading's are the same on each image (the rule reads
    more: the CUDA major, the GPU gate, NCCL, the CUDA home; none of them decides here)."""
    from moonpin.preflight.run import check_image

    v = _root() / image
    if not (v / "bin" / "python").exists():
        pytest.skip(f"no {v}")
    for k, val in _env("G-stack").items():
        monkeypatch.setenv(k, val)
    rule = check_image(elastic_ep_backend=None, python=str(v / "bin" / "python"), deep=False,
                       gpu="9.0", launch_args=["--moe-a2a-backend", "deepep"])
    ruled = next(c for c in rule.checks if c.name == "deep_ep")
    # a memo of its own: the walk's remembered lines do not know the rule was removed
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    plain = _plain_line_of(v, "deep_ep", monkeypatch, gpu="9.0")
    assert plain.split("  ", 1)[0] == ruled.status, (plain, ruled.message)


@pytest.mark.parametrize(("gpu", "probe"), [("9.0", "deep_ep"), ("none", "import@deep_ep")])
def test_deep_ep_read_plainly_states_its_gpu_assumption(gpu: str, probe: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl-deep-ep's ``__init__`` calls ``check_prerequisites``, which raises where
    ``torch.cuda.is_available()`` is False: the plain reading says so, and judges under the
    GPU it assumes, against the real import made under the same assumption. With a GPU
    (``--gpu-capability 9.0``): the probe's ``deep_ep``, past that gate (the stub NVML says one
    GPU), imports, and the line is a pass that says the assumption. Without one: the import
    raises (``import@deep_ep``, this host as it is); the call is under an ``if`` and after
    other raises, so the line says "not judged", never pass (before: a pass)."""
    truth = _truth("G-stack", probe)
    for k, val in _env("G-stack").items():
        monkeypatch.setenv(k, val)
    line = _plain_line_of(_image("G-stack"), "deep_ep", monkeypatch, gpu=gpu)
    status = line.split("  ", 1)[0]
    assert ("its import raises without a visible GPU (deep_ep/prerequisites.py:"
            in line and ": torch.cuda.is_available())" in line), line
    if gpu == "none":
        assert not truth["ok"] and status == "skip" and "not judged: " in line, (line, truth)
        return
    assert "judged as on a host with one (GPU capability 9.0" in line, line
    assert (status in ("pass", "warn")) == bool(truth["ok"]), (line, truth)
