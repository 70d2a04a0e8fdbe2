"""Opt-in (``-m image``): what the worker's environment and the code ``site`` runs at start
change, on real images built by ``tests/realimg/stack.sh --hunt-i`` under
``MOONPIN_TEST_REALIMG`` (hard-link copies of ``stack`` and of ``hunt-A-root-stack``; see that
script's block). The stale copy is sglang-kernel 0.4.8's ``sgl_kernel`` (built for torch
2.13.0: ``undefined symbol`` under the images' torch 2.14.1).

* ``hunt-I-pthfront``: a ``.pth`` line putting the stale copy's folder first; as is, and with
  ``PYTHONPATH`` on a folder holding a good copy (``site`` inserts after ``PYTHONPATH`` is on
  ``sys.path``: the stale copy still wins).
* ``hunt-I-usersite``: ``include-system-site-packages = true`` and a user base
  (``PYTHONUSERBASE``) whose site folder holds the stale copy, with a ``usercustomize`` that
  puts the folder first, the same with ``PYTHONNOUSERSITE=1``, and without the
  ``usercustomize`` (the venv's own site folder comes first then).
* ``hunt-I-pthcdll`` / ``hunt-I-pthnccl``: a ``.pth`` line importing a module that loads, with
  ``ctypes.CDLL(..., RTLD_GLOBAL)``, an old ``libstdc++.so.6`` (``import torch`` fails on
  ``GLIBCXX_3.4.20``) / another ``libnccl.so.2`` (deep_ep's own check sees a second NCCL).
* ``stack`` with CUDA 12's library folders on ``LD_LIBRARY_PATH`` (nothing there is used:
  torch's ``DT_RPATH`` and its preloads by path win).
* ``hunt-I-root`` (``--rootfs``, the probe in a chroot): the ``.pth`` line naming
  ``/opt/stale``, as is and with the image's ``PYTHONPATH=/opt/good``; ``hunt-I-root2``:
  ``PYTHONPATH=opt/stale``, a relative entry (the working folder ``/``).

The truth is the real import with the same environment (``hunt-I-reports/*.json``); the check
is ``--python`` with that environment, or ``--rootfs`` with it as ``--image-env``. GPU
assumptions as ``tests/test_image_hunt_c.py``'s. Before hunt I, the check passed
``sgl_kernel`` in ``I-pthfront-pythonpath``, ``I-usersite`` and every ``hunt-I-root*`` report,
every extension in ``I-pthcdll``, and ``deep_ep`` (GPU assumed) in ``I-pthnccl``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lib.verdicts import agree, check_in_env, recorded_report, stack_root

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
#: report -> (the image folder, "python" or "rootfs", the environment the probe ran with:
#: ``{alt}`` is ``$REALIMG/hunt-I-alt``, ``{stubs}`` the stub driver's folder, ``{cu12}``
#: hunt-H-worker's CUDA 12 library folders)
REPORTS: dict[str, tuple[str, str, dict[str, str]]] = {
    "I-pthfront": ("hunt-I-pthfront", "python", {}),
    "I-pthfront-pythonpath": ("hunt-I-pthfront", "python", {"PYTHONPATH": "{alt}/good"}),
    "I-usersite": ("hunt-I-usersite", "python", {"PYTHONUSERBASE": "{alt}/user"}),
    "I-usersite-off": ("hunt-I-usersite", "python", {"PYTHONUSERBASE": "{alt}/user",
                                                     "PYTHONNOUSERSITE": "1"}),
    "I-usersite-plain": ("hunt-I-usersite", "python", {"PYTHONUSERBASE": "{alt}/user-plain"}),
    "I-pthcdll": ("hunt-I-pthcdll", "python", {}),
    "I-pthnccl": ("hunt-I-pthnccl", "python", {}),
    "I-cu12-ldpath": ("stack", "python", {"LD_LIBRARY_PATH": "{stubs}:{cu12}"}),
    "I-root-pthfront": ("hunt-I-root", "rootfs", {}),
    "I-root-pthfront-pythonpath": ("hunt-I-root", "rootfs", {"PYTHONPATH": "/opt/good"}),
    "I-root2-relpath": ("hunt-I-root2", "rootfs", {"PYTHONPATH": "opt/stale"}),
}
#: --gpu-capability -> extension -> the probe whose outcome is its truth
TRUTH = {"none": {"sgl_kernel": "sgl_kernel", "nixl_ep": "nixl_ep",
                  "deep_ep": "deep_ep@nogpu", "flashinfer": "flashinfer"},
         "9.0": {"sgl_kernel": "sgl_kernel@sm90", "nixl_ep": "nixl_ep", "deep_ep": "deep_ep",
                 "flashinfer": "flashinfer"}}
LAUNCHES = {"nixl": ("nixl_ep",), "deepep": ("deep_ep",)}
#: report -> (probe, what its recorded error says): each image is of its class
CLASS = {
    "I-pthfront": ("sgl_kernel@sm90", "hunt-I-alt/stale/sgl_kernel"),
    "I-pthfront-pythonpath": ("sgl_kernel@sm90", "hunt-I-alt/stale/sgl_kernel"),
    "I-usersite": ("sgl_kernel@sm90", "hunt-I-alt/user/lib/python3.11/site-packages/sgl_kernel"),
    "I-pthcdll": ("torch", "version `GLIBCXX_3.4.20' not found"),
    "I-pthnccl": ("deep_ep", "Duplicate NCCL runtime"),
    "I-root-pthfront": ("sgl_kernel@sm90", "/opt/stale/sgl_kernel"),
    "I-root-pthfront-pythonpath": ("sgl_kernel@sm90", "/opt/stale/sgl_kernel"),
    "I-root2-relpath": ("sgl_kernel@sm90", "/opt/stale/sgl_kernel"),
}


def report(name: str) -> dict[str, Any]:
    return recorded_report("hunt-I-reports", name, "--hunt-i")


@pytest.fixture(params=sorted(REPORTS))
def name(request: pytest.FixtureRequest) -> str:
    folder = stack_root() / REPORTS[request.param][0]
    if folder.name != "stack" and not (folder / ".hunt-variant").is_file():
        pytest.skip(f"{folder} not built (stack.sh --hunt-i)")
    return str(request.param)


def _environment(name: str) -> dict[str, str]:
    r = stack_root()
    cu12 = ":".join(sorted(str(p) for p in (
        r / "hunt-H-worker/lib/python3.11/site-packages/nvidia").glob("*/lib")))
    return {k: v.format(alt=r / "hunt-I-alt", stubs=r / "stack-stubs", cu12=cu12)
            for k, v in REPORTS[name][2].items()}


def _check(name: str, gpu: str, backend: str) -> subprocess.CompletedProcess[str]:
    folder, how, _ = REPORTS[name]
    return check_in_env(stack_root() / folder, how, _environment(name), gpu,
                        "--moe-a2a-backend", backend)


def test_each_image_is_of_its_class(name: str) -> None:
    probes = report(name)["probes"]
    if name in CLASS:
        probe, said = CLASS[name]
        assert not probes[probe]["ok"] and said in probes[probe]["error"], probes[probe]
    else:  # the controls: every extension imports (deep_ep past its GPU gate)
        for probe in ("sgl_kernel", "sgl_kernel@sm90", "nixl_ep", "deep_ep", "flashinfer"):
            assert probes[probe]["ok"], (probe, probes[probe])


@pytest.mark.parametrize("gpu", sorted(TRUTH))
def test_the_check_agrees_with_the_real_imports(name: str, gpu: str) -> None:
    probes = report(name)["probes"]
    for backend in sorted(LAUNCHES):
        proc = _check(name, gpu, backend)
        agree(proc.stdout, LAUNCHES[backend], TRUTH[gpu], probes, (name, gpu))


def test_the_fix_for_a_library_the_site_code_loads_is_carried_out(tmp_path: Path) -> None:
    """``I-pthcdll``: the fix line names the ``.pth`` line to take out; done in a hard-link
    copy of the image, ``import torch`` and every extension import, and the check passes."""
    image = stack_root() / "hunt-I-pthcdll"
    if not (image / ".hunt-variant").is_file():
        pytest.skip(f"{image} not built (stack.sh --hunt-i)")
    proc = _check("I-pthcdll", "none", "nixl")
    fixes = [ln.strip()[len("fix: "):] for ln in proc.stdout.splitlines()
             if ln.strip().startswith("fix: take `import hunti_preload` out of ")]
    assert fixes, proc.stdout
    pth = Path(fixes[0].split(" out of ", 1)[1].split(" (", 1)[0])
    assert pth.name == "hunti_preload.pth" and pth.is_relative_to(image), fixes[0]
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(image), str(copy)], check=True, timeout=600)
    mine = copy / pth.relative_to(image)
    lines = [ln for ln in mine.read_text().splitlines() if ln != "import hunti_preload"]
    mine.unlink()  # a hard link: the image's own file is left as it is
    mine.write_text("".join(f"{ln}\n" for ln in lines))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_"))}
    env.update(LD_LIBRARY_PATH=str(stack_root() / "stack-stubs"), CUDA_VISIBLE_DEVICES="")
    for module in ("torch", "sgl_kernel", "nixl_ep", "flashinfer"):
        real = subprocess.run([str(copy / "bin" / "python"), "-c", f"import {module}"],
                              capture_output=True, text=True, timeout=900, cwd="/", env=env)
        assert real.returncode == 0, (module, real.stderr[-2000:])
    again = subprocess.run([sys.executable, "-m", "moonpin", "check", "--python",
                            str(copy / "bin" / "python"), "--no-deep", "--gpu-capability",
                            "none", "--", "--moe-a2a-backend", "nixl"],
                           capture_output=True, text=True, timeout=2400, cwd="/", env=env)
    assert again.returncode == 0, again.stdout
