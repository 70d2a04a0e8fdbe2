"""Opt-in (``-m image``): an image's own preloads, on real image roots built by
``tests/realimg/stack.sh --hunt-d`` under ``MOONPIN_TEST_REALIMG`` (hard-link copies of
``hunt-A-root-stack``; see that script's block): ``LD_PRELOAD`` in the image's ``Env`` and
``/etc/ld.so.preload``, which ld.so maps at the interpreter's start, before anything it
needs, in the global scope.

* ``hunt-D-root``: nvidia-nccl-cu12's ``libnccl.so.2`` at ``/opt/nccl12``, preloaded by the
  variable or by the file (deep_ep's own check sees a second NCCL; the rest load), or a
  preload that does not exist (ignored).
* ``hunt-D-root-noffi``: no system libffi: the standard library's ``_ctypes`` cannot be
  loaded, so ``import ctypes`` fails, and torch's ``__init__`` imports it at its top level
  (the standard library's extension modules, loaded by the loader model).
* ``hunt-D-root-nonvshmem``: nvidia-nvshmem-cu13 uninstalled, its ``libnvshmem_host.so.3``
  kept at ``/opt/nvshmem``, which nothing searches: every import fails on it, unless that
  path is preloaded (the variable or the file): the preloaded object answers the soname
  torch and deep_ep need. A bare name preloaded is searched, not found, and ignored.

The truth is the real import in a chroot of the root (``hunt-D-reports/*.json``); the check
is ``--rootfs`` with the probe's environment as ``--image-env`` (for a probe that named the
file, a hard-link copy of the root of this test's own gets it, as the script wrote it).
GPU assumptions as ``tests/test_image_hunt_c.py``'s.

Fixed since the roots were built (each pair agrees now): flashinfer, which loads no build at
import, was said to import where torch's own import fails (a choice with no files now goes
through torch's); deep_ep's NCCL check read ``LD_PRELOAD`` only, not ``/etc/ld.so.preload``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lib.verdicts import recorded_report, verdicts

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
REALIMG = os.environ.get("MOONPIN_TEST_REALIMG", "")
#: report -> (root folder, LD_PRELOAD in the image's Env, what /etc/ld.so.preload names)
REPORTS: dict[str, tuple[str, str, str]] = {
    "D-root-nccl12-preload": ("hunt-D-root", "/opt/nccl12/libnccl.so.2", ""),
    "D-root-missing-preload": ("hunt-D-root", "/opt/none.so", ""),
    "D-root-nccl12-file": ("hunt-D-root", "", "/opt/nccl12/libnccl.so.2"),
    "D-nonvshmem": ("hunt-D-root-nonvshmem", "", ""),
    "D-nonvshmem-preload": ("hunt-D-root-nonvshmem", "/opt/nvshmem/libnvshmem_host.so.3", ""),
    "D-nonvshmem-name": ("hunt-D-root-nonvshmem", "libnvshmem_host.so.3", ""),
    "D-nonvshmem-file": ("hunt-D-root-nonvshmem", "", "/opt/nvshmem/libnvshmem_host.so.3"),
    "D-noffi": ("hunt-D-root-noffi", "", ""),
}
#: --gpu-capability -> extension -> the probe whose outcome is its truth
TRUTH = {"none": {"sgl_kernel": "sgl_kernel", "nixl_ep": "nixl_ep",
                  "deep_ep": "deep_ep@nogpu", "flashinfer": "flashinfer"},
         "9.0": {"sgl_kernel": "sgl_kernel@sm90", "nixl_ep": "nixl_ep", "deep_ep": "deep_ep",
                 "flashinfer": "flashinfer"}}
LAUNCHES = {"nixl": ("nixl_ep",), "deepep": ("deep_ep",)}


def _root() -> Path:
    if not REALIMG or not (Path(REALIMG) / "hunt-D-root" / "opt/venv/bin/python").exists():
        pytest.skip("set MOONPIN_TEST_REALIMG to the folder tests/realimg/stack.sh --hunt-d "
                    "built into")
    return Path(REALIMG)


def report(name: str) -> dict[str, Any]:
    return recorded_report("hunt-D-reports", name, "--hunt-d")


@pytest.fixture(params=sorted(REPORTS))
def name(request: pytest.FixtureRequest) -> str:
    folder = _root() / REPORTS[request.param][0]
    if not (folder / ".hunt-variant").is_file():
        pytest.skip(f"{folder} not built (stack.sh --hunt-d)")
    return str(request.param)


def _check(root: Path, preload: str, gpu: str, backend: str
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "FLASHINFER_", "LD_PRELOAD"))}
    env["LD_LIBRARY_PATH"] = str(_root() / "stack-stubs")
    image_env = ["PATH=/opt/venv/bin:/usr/bin:/bin", "CUDA_HOME=/usr/local/cuda",
                 *([f"LD_PRELOAD={preload}"] if preload else [])]
    args = [a for kv in image_env for a in ("--image-env", kv)]
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", "--rootfs", str(root),
                           "--interpreter", "/opt/venv/bin/python", *args, "--no-deep",
                           "--gpu-capability", gpu, "--", "--moe-a2a-backend", backend],
                          capture_output=True, text=True, timeout=2400, cwd=ROOT, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def _verdicts(name: str, gpu: str, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """extension -> (the check's verdict, the real import's) for one report and GPU."""
    folder, preload, file = REPORTS[name]
    root = _root() / folder
    probes = report(name)["probes"]
    if file:  # a copy of its own: the shared root is never written (tests run in parallel)
        mine = tmp_path / folder
        subprocess.run(["cp", "-al", str(root), str(mine)], check=True, timeout=600)
        listed = mine / "etc" / "ld.so.preload"
        listed.unlink(missing_ok=True)
        listed.write_text(f"# hunt-D\n{file}\n")
        root = mine
    out: dict[str, tuple[str, str]] = {}
    for backend in sorted(LAUNCHES):
        proc = _check(root, preload, gpu, backend)
        got = verdicts(proc.stdout)
        assert set(LAUNCHES[backend]) <= set(got), proc.stdout
        for ext, probe in TRUTH[gpu].items():
            if ext in got:
                out[ext] = (got[ext], "ok" if probes[probe]["ok"] else "error")
    return out


@pytest.mark.parametrize("gpu", sorted(TRUTH))
def test_the_check_of_the_root_agrees_with_the_real_imports(name: str, gpu: str,
                                                            tmp_path: Path) -> None:
    for ext, (got, want) in _verdicts(name, gpu, tmp_path).items():
        assert got == want, (name, gpu, ext, got, want)



def test_without_libffi_torch_does_not_import() -> None:
    """The recorded truth of ``D-noffi``: torch's import fails on libffi.so.8."""
    torch = report("D-noffi")["probes"]["torch"]
    assert not torch["ok"] and "libffi.so.8" in torch["error"], torch


def test_the_preload_decides_the_nvshmem_roots_truth() -> None:
    """The recorded truth is the one the variants stand for: without the preload (or with
    a bare name) torch's import fails on libnvshmem_host.so.3; with the path preloaded, by
    the variable or the file, it does not."""
    for name, ok in (("D-nonvshmem", False), ("D-nonvshmem-name", False),
                     ("D-nonvshmem-preload", True), ("D-nonvshmem-file", True)):
        torch = report(name)["probes"]["torch"]
        assert torch["ok"] is ok, (name, torch)
        if not ok:
            assert "libnvshmem_host.so.3" in torch["error"], (name, torch)
