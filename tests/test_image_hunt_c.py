"""Opt-in (``-m image``): real images of issue 39's classes the earlier hunts left unbuilt,
built by ``tests/realimg/stack.sh --hunt-c`` under ``MOONPIN_TEST_REALIMG`` (``hunt-C-*``:
hard-link copies of ``stack`` changed by their own pip; see that script's block): an older
SGLang over the same extensions, another NCCL beside the stack's (``LD_PRELOAD``,
``LD_LIBRARY_PATH``, ``NCCL_DIR``, ``EP_SUPPRESS_NCCL_CHECK`` in the worker's environment)
or over it (nvidia-nccl-cu12), sgl-kernel 0.3.21 in sglang-kernel's place, a CPU torch, a
flashinfer-jit-cache at another version than flashinfer-python (a stand-in: the index has
none, ``tests/realimg/jit_cache_wheel.py``).

* The recorded truth (``hunt-C-reports/*.json``, ``probe_stack.py`` with ``PROBE_NAMES``)
  still holds: the imports are run again and end the same way.
* ``moonpin check`` gives each extension the verdict its real import has: ``--python`` (the
  environment as the probe had it), ``--rootfs`` of the venv hard-linked at ``/opt/venv``
  under a minimal root with that environment as the image's (``--image-env``), and
  ``--image`` of two packed with umoci (``stack-oci``, a layer of the variant's changes and
  the environment in the image config's ``Env``).
* Every name SGLang's dispatchers import from the extensions (``names@<backend>``) is there
  wherever the extension imports.

GPU assumptions: no GPU is visible (the stub driver). ``--gpu-capability none`` is compared
with ``import sgl_kernel`` as it is here and ``deep_ep@nogpu``; ``9.0`` with the sm90 build
loaded as sgl_kernel's loader does for that GPU, and ``deep_ep`` past its GPU gate (the stub
NVML says one GPU). Nothing here changes an image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lib.umoci import add_changes, layout_copy, minimal_root, need_tools
from tests.lib.verdicts import agree, recorded_report, same_outcomes, stack_root, verdicts

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
SITE = "lib/python3.11/site-packages"
ALT = "{venv}/nccl-alt/nvidia/nccl/lib"
#: report -> (image folder, the worker's environment: ``{venv}`` is the venv's path)
REPORTS: dict[str, tuple[str, dict[str, str]]] = {
    "C-sglang0521": ("hunt-C-sglang0521", {}),
    "C-sglang0522": ("hunt-C-sglang0522", {}),
    "C-ncclalt": ("hunt-C-ncclalt", {}),
    "C-ncclalt-preload": ("hunt-C-ncclalt", {"LD_PRELOAD": f"{ALT}/libnccl.so.2"}),
    "C-ncclalt-preload-suppress": ("hunt-C-ncclalt", {"LD_PRELOAD": f"{ALT}/libnccl.so.2",
                                                      "EP_SUPPRESS_NCCL_CHECK": "1"}),
    "C-ncclalt-ldpath": ("hunt-C-ncclalt", {"LD_LIBRARY_PATH": f"{{stubs}}:{ALT}"}),
    "C-ncclalt-nccldir": ("hunt-C-ncclalt", {"NCCL_DIR": "/nonexistent"}),
    "C-ncclcu12": ("hunt-C-ncclcu12", {}),
    "C-kernel0321": ("hunt-C-kernel0321", {}),
    "C-cputorch": ("hunt-C-cputorch", {}),
    "C-fi0612-jc": ("hunt-C-fi0612-jc", {}),
    "C-fi072-jc": ("hunt-C-fi072-jc", {}),
}
#: --gpu-capability -> extension -> the probe whose outcome is its truth
TRUTH = {"none": {"sgl_kernel": "sgl_kernel", "nixl_ep": "nixl_ep",
                  "deep_ep": "deep_ep@nogpu", "flashinfer": "flashinfer"},
         "9.0": {"sgl_kernel": "sgl_kernel@sm90", "nixl_ep": "nixl_ep", "deep_ep": "deep_ep",
                 "flashinfer": "flashinfer"}}
#: each launch line and the extensions it makes the check judge whatever torch is there
LAUNCHES = {"nixl": ("nixl_ep",), "deepep": ("deep_ep",)}


_root = stack_root


def report(name: str) -> dict[str, Any]:
    return recorded_report("hunt-C-reports", name, "--hunt-c")


def _env(name: str, venv: str) -> dict[str, str]:
    stubs = str(_root() / "stack-stubs")
    return {k: v.replace("{venv}", venv).replace("{stubs}", stubs)
            for k, v in REPORTS[name][1].items()}


@pytest.fixture(scope="module", params=sorted(REPORTS))
def name(request: pytest.FixtureRequest) -> str:
    image = REPORTS[request.param][0]
    if not (_root() / image / "bin" / "python").exists():
        pytest.skip(f"{_root() / image} not built (stack.sh --hunt-c)")
    return str(request.param)


def _probe_env(workspace: Path, extra: dict[str, str]) -> dict[str, str]:
    root = _root()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH", "FLASHINFER_"))}
    env.update(LD_LIBRARY_PATH=str(root / "stack-stubs"), CUDA_VISIBLE_DEVICES="",
               PROBE_NVML_STUB=str(root / "stack-stubs" / "nvml"), PROBE_NAMES="1",
               MOONCAKE_PG_JIT_DIR=str(workspace / "pgjit"),
               FLASHINFER_WORKSPACE_BASE=str(workspace / "fi"))
    env.update(extra)
    return env


def test_the_recorded_truth_still_holds(name: str, tmp_path: Path) -> None:
    image = _root() / REPORTS[name][0]
    proc = subprocess.run([str(image / "bin" / "python"), str(PROBE)], capture_output=True,
                          text=True, timeout=3600, cwd="/",
                          env=_probe_env(tmp_path, _env(name, str(image))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    now = json.loads(proc.stdout)["probes"]
    then = report(name)["probes"]
    same_outcomes(now, then, {p for t in TRUTH.values() for p in t.values()})


def test_sglangs_names_are_there_where_the_extension_imports(name: str) -> None:
    """Every ``from <extension> import …`` of the installed SGLang's dispatchers works
    where ``import <extension>`` does (0.5.21-0.5.23 import the same names)."""
    probes = report(name)["probes"]
    for backend, module in (("nixl", "nixl_ep"), ("deepep", "deep_ep")):
        if probes[module]["ok"]:
            assert probes[f"names@{backend}"]["ok"], probes[f"names@{backend}"]


def _check(*target: str, gpu: str, backend: str, env_extra: dict[str, str]
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "FLASHINFER_"))}
    env.update(LD_LIBRARY_PATH=str(_root() / "stack-stubs"))
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", *target, "--no-deep",
                           "--gpu-capability", gpu, "--", "--moe-a2a-backend", backend],
                          capture_output=True, text=True, timeout=2400, cwd=ROOT, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def _agree(name: str, proc: subprocess.CompletedProcess[str], gpu: str, backend: str) -> None:
    agree(proc.stdout, LAUNCHES[backend], TRUTH[gpu], report(name)["probes"], (name, gpu))


@pytest.mark.parametrize("backend", sorted(LAUNCHES))
@pytest.mark.parametrize("gpu", sorted(TRUTH))
def test_the_check_of_its_python_agrees_with_the_real_imports(name: str, gpu: str,
                                                               backend: str) -> None:
    image = _root() / REPORTS[name][0]
    proc = _check("--python", str(image / "bin" / "python"), gpu=gpu, backend=backend,
                  env_extra=_env(name, str(image)))
    _agree(name, proc, gpu, backend)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """image folder -> a minimal root with it hard-linked at ``/opt/venv`` (made once)."""
    return {}


def _rootfs(roots: dict[str, Path], image: Path, where: Path) -> Path:
    if image.name not in roots:
        root = minimal_root(where / image.name, image)
        (root / "opt").mkdir()
        subprocess.run(["cp", "-al", str(image), str(root / "opt" / "venv")], check=True)
        roots[image.name] = root
    return roots[image.name]


@pytest.mark.parametrize("gpu", sorted(TRUTH))
def test_the_check_of_its_rootfs_agrees_with_the_real_imports(
        name: str, gpu: str, roots: dict[str, Path],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The image's environment as ``--image-env`` (its config's ``Env``)."""
    if "LD_LIBRARY_PATH" in REPORTS[name][1]:
        pytest.skip("the stub driver is this host's: an image's LD_LIBRARY_PATH cannot name it")
    image = _root() / REPORTS[name][0]
    root = _rootfs(roots, image, tmp_path_factory.getbasetemp() / "hunt-c-roots")
    env = ["--image-env", "PATH=/opt/venv/bin:/usr/bin:/bin", "--image-env",
           "CUDA_HOME=/usr/local/cuda"]  # deep_ep asserts a CUDA home (huntA): said here
    for k, v in _env(name, "/opt/venv").items():
        env += ["--image-env", f"{k}={v}"]
    for backend in sorted(LAUNCHES):
        proc = _check("--rootfs", str(root), "--interpreter", "/opt/venv/bin/python", *env,
                      gpu=gpu, backend=backend, env_extra={})
        _agree(name, proc, gpu, backend)


@pytest.mark.parametrize("name_", ["C-ncclalt-preload", "C-ncclalt-nccldir"])
def test_the_packed_image_is_judged_as_the_real_imports(name_: str, tmp_path: Path) -> None:
    """``check --image`` of the variant packed by umoci (``stack-oci`` plus one layer of its
    changes), its worker's environment in the image config's ``Env``."""
    from tests.test_image_stack import stack_layout

    need_tools()
    image = _root() / REPORTS[name_][0]
    if not (image / "bin" / "python").exists():
        pytest.skip(f"{image} not built (stack.sh --hunt-c)")
    layout = layout_copy(stack_layout(), tmp_path / "oci")
    add_changes(layout, _root() / "stack", image, "/opt/venv", tmp_path / "stage")
    env = {"CUDA_HOME": "/usr/local/cuda", **_env(name_, "/opt/venv")}
    args = ["umoci", "config", "--image", f"{layout}:t"]
    for k, v in env.items():
        args += ["--config.env", f"{k}={v}"]
    subprocess.run(args, check=True, capture_output=True, timeout=600)
    for gpu in sorted(TRUTH):
        proc = _check("--image", str(layout), gpu=gpu, backend="deepep", env_extra={})
        _agree(name_, proc, gpu, "deepep")


def test_an_image_root_without_libbz2() -> None:
    """``hunt-C-root-nobz2``: deep_ep's real import in that root (a chroot, ``CUDA_HOME``
    set) fails on ``libbz2.so.1.0``, through code it runs at import by a call: its
    ``utils/math.py:30`` ``@torch.compile`` -> ``torch._dynamo.optimize`` -> ``get_compiler_fn``'s
    ``from .repro.after_dynamo import …`` -> … -> ``networkx/utils/decorators.py``'s ``import
    bz2`` (the real traceback's way); the check says so, and the way."""
    root = _root() / "hunt-C-root-nobz2"
    if not (root / "opt" / "venv" / "bin" / "python").exists():
        pytest.skip(f"{root} not built (stack.sh --hunt-c)")
    probes = report("C-root-nobz2")["probes"]
    assert not probes["deep_ep"]["ok"] and "libbz2" in probes["deep_ep"]["error"]
    proc = _check("--rootfs", str(root), "--interpreter", "/opt/venv/bin/python",
                  "--image-env", "PATH=/opt/venv/bin:/usr/bin:/bin",
                  "--image-env", "CUDA_HOME=/usr/local/cuda", gpu="9.0", backend="deepep",
                  env_extra={})
    got = verdicts(proc.stdout)
    assert got["deep_ep"] == "error", proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("fail  deep_ep"))
    assert "libbz2.so.1.0" in line and "calls torch.compile" in line, line
    assert "imports bz2" in line, line
    # no reinstall of deep_ep mends a system library: the line names the library, as torch's
    fixes = [x for x in proc.stdout.splitlines() if "fix:" in x]
    assert fixes and all("libbz2.so.1.0" in x and "pip" not in x for x in fixes), proc.stdout
    for other in ("sgl_kernel", "flashinfer"):  # their real imports pass in that root
        assert probes[other]["ok"] and got[other] == "ok", (other, proc.stdout)
