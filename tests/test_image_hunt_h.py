"""Opt-in (``-m image``): a CUDA 12 worker, built by ``tests/realimg/stack.sh --hunt-h`` under
``MOONPIN_TEST_REALIMG`` (``hunt-H-*``: hard-link copies of ``../shared/tools/realimg/build.sh``'s
``venv-rpath`` — torch 2.10.0, the index's newest CUDA 12 build, mooncake-transfer-engine
0.3.10, SGLang 0.5.10 — with what SGLang 0.5.10 pins beside it and the variants a user ends up
with; see that script's block). Every ``stack*`` image is CUDA 13; these are the class the
others leave out: the meta nixl's CUDA-major dispatch, nixl's builds and plain builds, the
kernels and deep_ep built for CUDA 13 or another torch, all under a CUDA 12 torch.

* The recorded truth (``hunt-H-reports/*.json``, ``probe_stack.py`` on the images' own stub
  driver ``hunt-H-stubs``) still holds: the imports are run again and end the same way.
* ``moonpin check --python`` and ``--rootfs`` (the venv hard-linked at ``/opt/venv`` under a
  minimal root) give each extension, and mooncake (``import mooncake.ep``: SGLang 0.5.10's
  elastic-EP import), the verdict its real import has.
* No fix line names a torch whose index build links another CUDA major, nor a nixl backend
  release without a build for the installed torch (both were printed before, and neither
  makes ``import nixl_ep`` work).

GPU assumptions as ``tests/test_image_hunt_c.py``'s: ``--gpu-capability none`` against the
imports as they are here (no GPU visible) and ``deep_ep@nogpu``; ``9.0`` against the sm90
build loaded as sgl_kernel's loader does for that GPU and ``deep_ep`` past its GPU gate.
Nothing here changes an image.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lib.umoci import minimal_root
from tests.lib.verdicts import agree, recorded_report, same_outcomes, stack_root

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
SITE = "lib/python3.11/site-packages"
#: report -> (its image folder, what its class is, as its own files say: distribution ->
#: version, None: not installed)
REPORTS: dict[str, dict[str, str | None]] = {
    "H-worker": {"sglang-kernel": "0.4.1", "flashinfer-python": "0.6.7.post2",
                 "flashinfer-cubin": "0.6.7.post2", "nixl": None, "sgl-deep-ep": None},
    "H-nixl151": {"nixl": "1.5.1", "nixl-cu12": "1.5.1", "nixl-cu13": None},
    "H-nixl130": {"nixl": "1.3.0", "nixl-cu12": "1.3.0"},
    "H-nixl120": {"nixl": None, "nixl-cu12": "1.2.0"},
    "H-metacu13": {"nixl": "1.5.1", "nixl-cu13": "1.5.1", "nixl-cu12": None},
    "H-torch291": {"torch": "2.9.1", "nixl-cu12": "1.3.0"},
    "H-kernel048": {"sglang-kernel": "0.4.8"},
    "H-kernel0321": {"sgl-kernel": "0.3.21", "sglang-kernel": None},
    "H-deepep": {"sgl-deep-ep": "0.1.0"},
}
#: --gpu-capability -> what the check says -> the probe whose outcome is its truth
TRUTH = {"none": {"sgl_kernel": "sgl_kernel", "nixl_ep": "nixl_ep",
                  "deep_ep": "deep_ep@nogpu", "flashinfer": "flashinfer",
                  "mooncake.pg": "mooncake.ep"},
         "9.0": {"sgl_kernel": "sgl_kernel@sm90", "nixl_ep": "nixl_ep", "deep_ep": "deep_ep",
                 "flashinfer": "flashinfer", "mooncake.pg": "mooncake.ep"}}
#: each launch line's MoE backend and the extension it makes the check judge
LAUNCHES = {"nixl": "nixl_ep", "deepep": "deep_ep"}


_root = stack_root


def report(name: str) -> dict[str, Any]:
    return recorded_report("hunt-H-reports", name, "--hunt-h")


@pytest.fixture(scope="module", params=sorted(REPORTS))
def name(request: pytest.FixtureRequest) -> str:
    if not (_root() / f"hunt-{request.param}" / "bin" / "python").exists():
        pytest.skip(f"{_root() / ('hunt-' + request.param)} not built (stack.sh --hunt-h)")
    return str(request.param)


def _image(name: str) -> Path:
    return _root() / f"hunt-{name}"


def _stubs() -> Path:
    return _root() / "hunt-H-stubs"


def test_the_recorded_truth_still_holds(name: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH", "FLASHINFER_"))}
    env.update(LD_LIBRARY_PATH=str(_stubs()), CUDA_VISIBLE_DEVICES="",
               PROBE_NVML_STUB=str(_stubs() / "nvml"),
               FLASHINFER_WORKSPACE_BASE=str(tmp_path / "fi"))
    proc = subprocess.run([str(_image(name) / "bin" / "python"), str(PROBE)],
                          capture_output=True, text=True, timeout=3600, cwd="/", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    now = json.loads(proc.stdout)["probes"]
    then = report(name)["probes"]
    same_outcomes(now, then, {p for t in TRUTH.values() for p in t.values()})


def test_each_image_is_of_its_class(name: str) -> None:
    dists = report(name)["dists"]
    want = {"torch": "2.10.0", "sglang": "0.5.10", "mooncake-transfer-engine": "0.3.10",
            **REPORTS[name]}
    for dist, version in want.items():
        assert dists.get(dist) == version, (dist, dists)
    sp = _image(name) / SITE
    label = re.search(r"cuda(?:: Optional\[str\])? = '([\d.]+)'",
                      (sp / "torch" / "version.py").read_text())
    assert label and label.group(1).startswith("12."), "a CUDA 12 torch"


def _check(*target: str, gpu: str, backend: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "FLASHINFER_", "PYTHONPATH"))}
    env.update(LD_LIBRARY_PATH=str(_stubs()), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", *target, "--no-deep",
                           "--gpu-capability", gpu, "--", "--moe-a2a-backend", backend,
                           "--elastic-ep-backend", "mooncake"],
                          capture_output=True, text=True, timeout=2400, cwd=ROOT, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def _agree(name: str, proc: subprocess.CompletedProcess[str], gpu: str, backend: str) -> None:
    agree(proc.stdout, (LAUNCHES[backend], "mooncake.pg"), TRUTH[gpu], report(name)["probes"],
          (name, gpu))


def _no_fix_that_cannot_work(proc: subprocess.CompletedProcess[str]) -> None:
    """The two fix lines the real images proved wrong are gone: a torch of 2.11-2.13 (CUDA 13
    builds on the index) for nixl_ep_cu12, and nixl-cu12 1.5.1 (no build for torch 2.10)."""
    for line in proc.stdout.splitlines():
        if line.lstrip().startswith("fix:") and "nixl" in line:
            assert not re.search(r"torch==2\.1[1-3]", line), line
            assert "nixl-cu12==1.5.1" not in line, line


@pytest.mark.parametrize("backend", sorted(LAUNCHES))
@pytest.mark.parametrize("gpu", sorted(TRUTH))
def test_the_check_of_its_python_agrees_with_the_real_imports(name: str, gpu: str,
                                                               backend: str) -> None:
    proc = _check("--python", str(_image(name) / "bin" / "python"), gpu=gpu, backend=backend)
    _agree(name, proc, gpu, backend)
    _no_fix_that_cannot_work(proc)


@pytest.fixture(scope="module")
def roots() -> dict[str, Path]:
    """image name -> a minimal root with it hard-linked at ``/opt/venv`` (made once)."""
    return {}


def test_the_check_of_its_rootfs_agrees_with_the_real_imports(
        name: str, roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    if name not in roots:
        where = tmp_path_factory.getbasetemp() / "hunt-h-roots" / name
        root = minimal_root(where, _image(name))
        (root / "opt").mkdir()
        subprocess.run(["cp", "-al", str(_image(name)), str(root / "opt" / "venv")],
                       check=True)
        roots[name] = root
    proc = _check("--rootfs", str(roots[name]), "--interpreter", "/opt/venv/bin/python",
                  "--image-env", "PATH=/opt/venv/bin:/usr/bin:/bin",
                  gpu="none", backend="nixl")
    _agree(name, proc, "none", "nixl")
    _no_fix_that_cannot_work(proc)


def test_a_copy_on_pythonpath_before_the_installed_kernel(tmp_path: Path) -> None:
    """``hunt-H-torch291`` (its sglang-kernel 0.4.1 imports) with ``PYTHONPATH`` on a folder
    holding ``hunt-H-kernel048``'s ``sgl_kernel/`` (0.4.8, CUDA 13): the real import finds
    that copy and fails on ``libnvrtc.so.13``; the check says the same, of that copy (no
    installed distribution wrote it), for ``--python`` (the environment passed through) and
    ``--rootfs`` (the config's ``Env``), and its fix takes the folder off the path, after
    which the real import loads the installed build."""
    image = _root() / "hunt-H-torch291"
    other = _root() / "hunt-H-kernel048" / SITE / "sgl_kernel"
    if not (image / "bin" / "python").exists() or not other.is_dir():
        pytest.skip("hunt-H-torch291 or hunt-H-kernel048 not built (stack.sh --hunt-h)")
    alt = tmp_path / "alt"
    alt.mkdir()
    subprocess.run(["cp", "-al", str(other), str(alt / "sgl_kernel")], check=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(LD_LIBRARY_PATH=str(_stubs()), CUDA_VISIBLE_DEVICES="")

    def real(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(image / "bin" / "python"), "-c", "import sgl_kernel"],
                              capture_output=True, text=True, timeout=600, cwd="/",
                              env={**env, **extra})

    shadowed = real(PYTHONPATH=str(alt))
    assert shadowed.returncode != 0 and "libnvrtc.so.13" in shadowed.stderr
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", "--python",
                           str(image / "bin" / "python"), "--no-deep", "--gpu-capability",
                           "none"], capture_output=True, text=True, timeout=2400, cwd=ROOT,
                          env={**env, "PYTHONPATH": str(alt)})
    lines = proc.stdout.splitlines()
    line = next(x for x in lines if x.startswith("fail  sgl_kernel:"))
    assert f"at {alt / 'sgl_kernel'} (no installed distribution wrote it" in line, line
    assert "libnvrtc.so.13" in line, line
    fix = lines[lines.index(line) + 1]
    assert f"take {alt} off the worker's import path" in fix and "pip" not in fix, fix
    assert real().returncode == 0  # the fix carried out: PYTHONPATH without that folder
    root = minimal_root(tmp_path / "root", image)
    (root / "opt").mkdir()
    subprocess.run(["cp", "-al", str(image), str(root / "opt" / "venv")], check=True)
    subprocess.run(["cp", "-al", str(alt), str(root / "opt" / "alt")], check=True)
    proc = _check("--rootfs", str(root), "--interpreter", "/opt/venv/bin/python",
                  "--image-env", "PATH=/opt/venv/bin:/usr/bin:/bin",
                  "--image-env", "PYTHONPATH=/opt/alt", gpu="none", backend="nixl")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("fail  sgl_kernel:"))
    assert "(no installed distribution wrote it" in line and "libnvrtc.so.13" in line, line
