"""Opt-in (``-m image``): what hunt I left, on real images built by ``tests/realimg/stack.sh
--hunt-j`` under ``MOONPIN_TEST_REALIMG`` (hard-link copies of ``stack`` and of
``hunt-A-root-stack``; see that script's block), and the side effects of two fix lines.

* ``hunt-J-pthundef``: a ``.pth`` line whose module loads another ``libc10.so`` (gcc-built,
  none of torch's symbols) with ``ctypes.CDLL(..., RTLD_GLOBAL)``: ``import torch`` fails with
  ``undefined symbol`` (ld.so takes the loaded object for torch's own ``libc10.so``). The fix
  must name the ``.pth`` line, as it does for a missing symbol version (hunt I).
* ``hunt-J-usersite`` (``include-system-site-packages = true``) with ``PYTHONUSERBASE`` on a
  user base whose ``usercustomize.py`` loads the same library, and with ``PYTHONNOUSERSITE=1``.
* ``hunt-J-root-user`` (``--rootfs``, the probe in a chroot): the image root's venv with the
  system's site folders, and ``/root/.local/lib/python3.11/site-packages/usercustomize.py``
  loading it; ``HOME=/root``, the same with ``PYTHONNOUSERSITE=1``, and ``HOME=/`` (what runc
  sets with no ``HOME`` in the config and no ``/etc/passwd``).
* mooncake 0.3.14's ``mooncake.pg`` compiles its adapter against torch at first import: where
  ``import torch`` fails (these images, and ``hunt-nonvshmem`` of ``--hunt-nixl``), its verdict
  must be a failure too.
* nixl's fix lines in copies of ``stack`` (``tests/realimg/disagg.sh``'s ``nometa`` and
  ``nocu13``), carried out with each copy's own pip: the import works and ``pip check`` says
  no more about nixl than it said of ``stack`` before the break (``stack`` has the meta
  ``nixl`` without ``nixl-cu12``, which its ``Requires-Dist`` names unconditionally).

Before hunt J, the check passed ``I-usercdll`` and every ``J-root-user`` report (the
``usercustomize`` code, and an image root's user site folder, were not modelled), and the fix of
``J-pthundef`` reinstalled torch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lib.verdicts import agree, check_in_env, recorded_report, stack_root, verdicts

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
SITE = "lib/python3.11/site-packages"
#: report -> (the image folder, "python" or "rootfs", the environment the probe ran with:
#: ``{alt}`` is ``$REALIMG/hunt-J-alt``)
REPORTS: dict[str, tuple[str, str, dict[str, str]]] = {
    "J-pthundef": ("hunt-J-pthundef", "python", {}),
    "J-usercdll": ("hunt-J-usersite", "python", {"PYTHONUSERBASE": "{alt}/user"}),
    "J-usercdll-off": ("hunt-J-usersite", "python", {"PYTHONUSERBASE": "{alt}/user",
                                                     "PYTHONNOUSERSITE": "1"}),
    "J-root-user": ("hunt-J-root-user", "rootfs", {"HOME": "/root"}),
    "J-root-user-off": ("hunt-J-root-user", "rootfs", {"HOME": "/root",
                                                       "PYTHONNOUSERSITE": "1"}),
    "J-root-user-slash": ("hunt-J-root-user", "rootfs", {"HOME": "/"}),
}
#: the reports whose ``import torch`` fails (the others: every extension imports)
BROKEN = ("J-pthundef", "J-usercdll", "J-root-user")
#: --gpu-capability -> extension -> the probe whose outcome is its truth
TRUTH = {"none": {"sgl_kernel": "sgl_kernel", "nixl_ep": "nixl_ep",
                  "deep_ep": "deep_ep@nogpu", "flashinfer": "flashinfer"},
         "9.0": {"sgl_kernel": "sgl_kernel@sm90", "nixl_ep": "nixl_ep", "deep_ep": "deep_ep",
                 "flashinfer": "flashinfer"}}
LAUNCHES = {"nixl": ("nixl_ep",), "deepep": ("deep_ep",)}


def report(name: str) -> dict[str, Any]:
    return recorded_report("hunt-J-reports", name, "--hunt-j")


@pytest.fixture(params=sorted(REPORTS))
def name(request: pytest.FixtureRequest) -> str:
    folder = stack_root() / REPORTS[request.param][0]
    if not (folder / ".hunt-variant").is_file():
        pytest.skip(f"{folder} not built (stack.sh --hunt-j)")
    return str(request.param)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "FLASHINFER_", "PYTHONPATH",
                                "PYTHONUSERBASE", "PYTHONNOUSERSITE"))}
    env.update(LD_LIBRARY_PATH=str(stack_root() / "stack-stubs"), CUDA_VISIBLE_DEVICES="",
               **(extra or {}))
    return env


def _given(name: str) -> dict[str, str]:
    return {k: v.format(alt=stack_root() / "hunt-J-alt") for k, v in REPORTS[name][2].items()}


def _check(name: str, gpu: str, *launch: str) -> subprocess.CompletedProcess[str]:
    folder, how, _ = REPORTS[name]
    return check_in_env(stack_root() / folder, how, _given(name), gpu, *launch)


def _fixes(out: str) -> list[str]:
    return [ln.strip()[len("fix: "):] for ln in out.splitlines() if ln.strip().startswith("fix: ")]


def test_each_image_is_of_its_class(name: str) -> None:
    probes = report(name)["probes"]
    if name in BROKEN:
        assert not probes["torch"]["ok"], probes["torch"]
        assert "undefined symbol" in probes["torch"]["error"], probes["torch"]
    else:  # the controls: every extension imports (deep_ep past its GPU gate)
        for probe in ("torch", "sgl_kernel", "sgl_kernel@sm90", "nixl_ep", "deep_ep",
                      "flashinfer"):
            assert probes[probe]["ok"], (probe, probes[probe])


@pytest.mark.parametrize("gpu", sorted(TRUTH))
def test_the_check_agrees_with_the_real_imports(name: str, gpu: str) -> None:
    probes = report(name)["probes"]
    for backend in sorted(LAUNCHES):
        proc = _check(name, gpu, "--moe-a2a-backend", backend)
        agree(proc.stdout, LAUNCHES[backend], TRUTH[gpu], probes, (name, gpu))


def test_the_fix_names_the_site_code(name: str) -> None:
    """Where torch fails, the fix line names what the site code runs (the ``.pth`` line, the
    ``usercustomize.py``), never a reinstall (the file loaded is not the image's own)."""
    if name not in BROKEN:
        pytest.skip("a control: nothing to fix")
    proc = _check(name, "none", "--moe-a2a-backend", "nixl")
    fixes = _fixes(proc.stdout)
    assert fixes and not any("pip" in f for f in fixes), proc.stdout
    want = ("take `import huntj_preload` out of " if name == "J-pthundef" else "make ")
    assert fixes[0].startswith(want), fixes[0]
    if name != "J-pthundef":
        assert "usercustomize.py not load " in fixes[0], fixes[0]


@pytest.mark.parametrize("image", ["hunt-J-pthundef", "hunt-J-usersite", "hunt-nonvshmem"])
def test_a_compiling_mooncake_follows_torchs_import(image: str) -> None:
    """``import mooncake.pg`` (0.3.14: compiled at first import against the installed
    torch) fails where ``import torch`` does; the check said its lines passed."""
    folder = stack_root() / image
    if not (folder / "bin" / "python").exists():
        pytest.skip(f"{folder} not built (stack.sh --hunt-j, --hunt-nixl)")
    given = {"PYTHONUSERBASE": str(stack_root() / "hunt-J-alt" / "user")} \
        if image == "hunt-J-usersite" else {}
    real = subprocess.run([str(folder / "bin" / "python"), "-c", "import mooncake.pg"],
                          capture_output=True, text=True, timeout=900, cwd="/",
                          env=_env(given))
    assert real.returncode != 0, real.stderr
    assert "torch/__init__.py" in real.stderr, real.stderr[-2000:]  # failing in torch's import
    proc = check_in_env(folder, "python", given, "none", "--elastic-ep-backend", "mooncake")
    assert verdicts(proc.stdout).get("mooncake.pg") == "error", proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("fail  import chain:"))
    assert "before its adapter is compiled against torch" in line, line


def test_the_fixes_of_site_code_are_carried_out(tmp_path: Path) -> None:
    """The ``.pth`` line taken out in a hard-link copy of ``hunt-J-pthundef``, and the
    library load taken out of a copy of the user base's ``usercustomize.py``: the real
    imports work and the check says usable."""
    image = stack_root() / "hunt-J-pthundef"
    if not (image / ".hunt-variant").is_file():
        pytest.skip(f"{image} not built (stack.sh --hunt-j)")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(image), str(copy)], check=True, timeout=600)
    pth = copy / SITE / "huntj_preload.pth"
    lines = [ln for ln in pth.read_text().splitlines() if ln != "import huntj_preload"]
    pth.unlink()  # a hard link: the image's own file is left as it is
    pth.write_text("".join(f"{ln}\n" for ln in lines))
    user = tmp_path / "user"
    shutil.copytree(stack_root() / "hunt-J-alt" / "user", user)
    custom = user / SITE / "usercustomize.py"
    custom.write_text("".join(ln + "\n" for ln in custom.read_text().splitlines()
                              if "CDLL" not in ln))
    for python, given in ((copy / "bin" / "python", {}),
                          (stack_root() / "hunt-J-usersite" / "bin" / "python",
                           {"PYTHONUSERBASE": str(user)})):
        for module in ("torch", "sgl_kernel", "nixl_ep", "flashinfer"):
            real = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True,
                                  text=True, timeout=900, cwd="/", env=_env(given))
            assert real.returncode == 0, (python, module, real.stderr[-2000:])
        again = subprocess.run([sys.executable, "-m", "moonpin", "check", "--python",
                                str(python), "--no-deep", "--gpu-capability", "none", "--",
                                "--moe-a2a-backend", "nixl"], capture_output=True, text=True,
                               timeout=2400, cwd="/", env=_env(given))
        assert again.returncode == 0, again.stdout


def _nixl_complaints(python: Path) -> set[str]:
    """What ``pip check`` says about nixl's distributions (the versions left out: pip says
    ``nixl 1.5.1 requires nixl-cu12, which is not installed``)."""
    proc = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True,
                          timeout=600, env=_env())
    return {ln for ln in proc.stdout.splitlines() if ln.lower().startswith("nixl")}


@pytest.mark.parametrize("cls", ["nometa", "nocu13"])
def test_the_nixl_fix_lines_leave_pip_check_as_before(tmp_path: Path, cls: str) -> None:
    """``nometa``'s fix, ``pip install 'nixl==1.5.1'``, installs nixl-cu12 too (the meta's
    ``Requires-Dist`` names both backends, no marker); ``nocu13``'s, ``pip install
    'nixl-cu13==1.5.1'``, makes pip warn "nixl 1.5.1 requires nixl-cu12==1.5.1, which is not
    installed", which ``pip check`` said of ``stack`` itself before the break. Carried out with
    the copy's own pip on the index's wheels ``stack.sh`` fetched (sha256-checked, in
    ``$REALIMG/stack-dl``; ``--no-index``: the same files, without the network)."""
    wheels = stack_root() / "stack-dl"
    if not list(wheels.glob("nixl_cu12-1.5.1-*.whl")):
        pytest.skip(f"no nixl-cu12 1.5.1 wheel in {wheels} (stack.sh --only nixlboth)")
    subprocess.run(["bash", str(ROOT / "tests" / "realimg" / "disagg.sh"),
                    str(stack_root() / "stack"), str(tmp_path / "c"), cls], check=True,
                   capture_output=True, text=True, timeout=1200)
    image = tmp_path / f"c-{cls}"
    before = _nixl_complaints(stack_root() / "stack" / "bin" / "python")
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", "--python",
                           str(image / "bin" / "python"), "--no-deep", "--",
                           "--moe-a2a-backend", "nixl"], capture_output=True, text=True,
                          timeout=1200, cwd="/", env=_env())
    fixes = [f.split("  # ", 1)[0] for f in _fixes(proc.stdout)]
    assert len(set(fixes)) == 1, proc.stdout
    want = {"nometa": "'nixl==1.5.1'", "nocu13": "'nixl-cu13==1.5.1'"}[cls]
    assert fixes[0].endswith(f"-m pip install {want}"), fixes[0]
    pip = _env({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})
    done = subprocess.run(["bash", "-c", fixes[0]], capture_output=True, text=True,
                          timeout=1200, env=pip)
    assert done.returncode == 0, done.stdout + done.stderr
    probe = subprocess.run([str(image / "bin" / "python"), "-c", "import nixl_ep, nixl._api"],
                           capture_output=True, text=True, timeout=900, cwd="/", env=_env())
    assert probe.returncode == 0, probe.stderr[-2000:]
    after = _nixl_complaints(image / "bin" / "python")
    assert after <= before, (before, after)
    if cls == "nometa":  # pip resolved the meta's requirements: nixl-cu12 is there now
        assert not after, after
