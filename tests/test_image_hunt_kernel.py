"""Opt-in (``-m image``): real images of the sgl_kernel and flashinfer classes a hidden image
may hold, built by ``tests/realimg/stack.sh --kernel-hunt`` under ``MOONPIN_TEST_REALIMG``
(``hunt-k-*``, ``hunt-fi-*``: hard-link copies of ``stack`` / ``stack-cubin`` changed by their
own pip; see that script's header), and ``stack`` itself probed as GPUs of four capabilities.

* The recorded truth (``reports/hunt-*.json``, ``probe_stack.py`` with ``PROBE_ALSO``) still
  holds: the imports are run again and end the same way.
* Each image is of its class, read from its files.
* ``moonpin check`` gives ``sgl_kernel`` and ``flashinfer`` the verdict their real import has:
  ``--python`` under ``--gpu-capability`` none, 8.0, 9.0, 10.0, 12.0 (the probe forces the same
  GPU: ``torch.cuda`` answers that capability, then ``import sgl_kernel`` runs whole);
  ``--rootfs`` of the venv hard-linked at ``/opt/venv`` under a minimal root; ``--image`` of two
  packed with umoci (``stack-oci`` plus a layer of the variant's changes).
* The fix lines work: carried out in a hard-link copy with its own pip (the index is asked
  for what they name), the import then loads and the check passes.

GPU assumptions: no GPU is visible (the stub driver); "none" is sgl_kernel's choice for no
GPU, the capabilities are forced in the probe's child as above. Nothing here changes an image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.umoci import add_changes, layout_copy, minimal_root, need_tools
from tests.lib.verdicts import recorded_report, stack_root, verdicts

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
SITE = "lib/python3.11/site-packages"
#: image folder -> its report (``stack`` is probed as ``hunt-stack``, with the capabilities)
IMAGES = {"stack": "hunt-stack", **{f"hunt-{n}": f"hunt-{n}" for n in (
    "k-old034", "k-botha", "k-bothb", "k-nosm100", "k-unreadable", "fi-074cubin",
    "fi-0612cubin")}}
#: --gpu-capability -> the probe that forced that GPU
GPUS = {"none": "sgl_kernel", "8.0": "sgl_kernel@cc80", "9.0": "sgl_kernel@cc90",
        "10.0": "sgl_kernel@cc100", "12.0": "sgl_kernel@cc120"}
CAPS = ",".join(v for v in GPUS.values() if "@" in v)
JUDGED = ("sgl_kernel", "flashinfer")


def report(image: str) -> dict:
    return recorded_report("reports", IMAGES[image], "--kernel-hunt")


def truth(image: str, gpu: str = "none") -> dict[str, str]:
    """What ``import sgl_kernel`` (as a GPU of capability ``gpu`` sees it) and ``import
    flashinfer`` really do in ``image``: ``"ok"`` or ``"error"``."""
    probes = report(image)["probes"]
    return {"sgl_kernel": "ok" if probes[GPUS[gpu]]["ok"] else "error",
            "flashinfer": "ok" if probes["flashinfer"]["ok"] else "error"}


@pytest.fixture(scope="module", params=sorted(IMAGES))
def image(request: pytest.FixtureRequest) -> str:
    if not (stack_root() / request.param / "bin" / "python").exists():
        pytest.skip(f"{stack_root() / request.param} not built (stack.sh --kernel-hunt)")
    return str(request.param)


def _probe_env(workspace: Path) -> dict[str, str]:
    root = stack_root()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH", "FLASHINFER_"))}
    env.update(LD_LIBRARY_PATH=str(root / "stack-stubs"), CUDA_VISIBLE_DEVICES="",
               PROBE_ALSO=CAPS, MOONCAKE_PG_JIT_DIR=str(workspace / "pgjit"),
               FLASHINFER_WORKSPACE_BASE=str(workspace / "fi"))
    return env


def test_the_recorded_truth_still_holds(image: str, tmp_path: Path) -> None:
    proc = subprocess.run([str(stack_root() / image / "bin" / "python"), str(PROBE)],
                          capture_output=True, text=True, timeout=3600, cwd="/",
                          env=_probe_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    now = json.loads(proc.stdout)["probes"]
    then = report(image)["probes"]
    for m in (*GPUS.values(), "flashinfer"):
        assert (now[m]["ok"], now[m].get("error_type")) == \
            (then[m]["ok"], then[m].get("error_type")), (m, now[m], then[m])


def _dists(sp: Path) -> dict[str, str]:
    return dict(d.name.removesuffix(".dist-info").lower().rsplit("-", 1)
                for d in sp.glob("*.dist-info"))


def test_each_image_is_of_its_class(image: str) -> None:
    sp = stack_root() / image / SITE
    dists = _dists(sp)
    init = (sp / "sgl_kernel" / "__init__.py").read_text()
    plain = "from sgl_kernel import common_ops" in init
    kernels = {d for d in ("sgl_kernel", "sglang_kernel") if d in dists}
    if image == "hunt-k-old034":
        assert kernels == {"sgl_kernel"} and plain
        assert list((sp / "sgl_kernel").glob("common_ops.*"))
    elif image in ("hunt-k-botha", "hunt-k-bothb"):
        assert kernels == {"sgl_kernel", "sglang_kernel"}
        assert plain == (image == "hunt-k-botha")  # the later install's __init__.py
        assert (sp / "sgl_kernel" / "load_utils.py").is_file()
    else:
        assert kernels == {"sglang_kernel"} and not plain
    sm100 = sp / "sgl_kernel" / "sm100"
    if "sglang_kernel" in kernels:  # sgl-kernel 0.3.4 alone has no sm*/ builds
        assert (not list(sm100.glob("common_ops.*"))) == (image == "hunt-k-nosm100")
        assert (sm100.stat().st_mode & 0o777 == 0) == (image == "hunt-k-unreadable")
    fi, cubin = dists["flashinfer_python"], dists.get("flashinfer_cubin")
    if image.startswith("hunt-fi-"):
        assert cubin and cubin != fi, (fi, cubin)
    else:
        assert cubin is None


def _check(*target: str, gpu: str = "none", env_extra: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "FLASHINFER_"))}
    env.update(LD_LIBRARY_PATH=str(stack_root() / "stack-stubs"), **(env_extra or {}))
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", *target, "--no-deep",
                           "--gpu-capability", gpu], capture_output=True, text=True,
                          timeout=2400, cwd=ROOT, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def _judged(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    got = verdicts(proc.stdout)
    assert set(JUDGED) <= set(got), proc.stdout
    return {m: got[m] for m in JUDGED}


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_check_of_its_python_agrees_with_the_real_imports(image: str, gpu: str) -> None:
    proc = _check("--python", str(stack_root() / image / "bin" / "python"), gpu=gpu)
    assert _judged(proc) == truth(image, gpu), proc.stdout


@pytest.mark.parametrize("gpu", ["none", "9.0"])
def test_the_check_of_its_rootfs_agrees_with_the_real_imports(image: str, gpu: str,
                                                               tmp_path: Path) -> None:
    root = minimal_root(tmp_path / "root", stack_root() / image)
    (root / "opt").mkdir()
    subprocess.run(["cp", "-al", str(stack_root() / image), str(root / "opt" / "venv")], check=True)
    proc = _check("--rootfs", str(root), "--interpreter", "/opt/venv/bin/python",
                  "--image-env", "PATH=/opt/venv/bin:/usr/bin:/bin", gpu=gpu)
    assert _judged(proc) == truth(image, gpu), proc.stdout


@pytest.mark.parametrize("variant", ["hunt-k-botha", "hunt-fi-0612cubin"])
def test_the_packed_image_is_judged_as_the_real_imports(variant: str, tmp_path: Path) -> None:
    """``check --image`` of the variant packed by umoci (``stack-oci`` plus one layer of its
    changes, whiteouts for what it removed), as ``test_image_stack`` packs its own."""
    from tests.test_image_stack import stack_layout

    need_tools()
    if not (stack_root() / variant / "bin" / "python").exists():
        pytest.skip(f"{variant} not built (stack.sh --kernel-hunt)")
    layout = layout_copy(stack_layout(), tmp_path / "oci")
    built = stack_root()
    add_changes(layout, built / "stack", built / variant, "/opt/venv", tmp_path / "stage")
    for gpu in ("none", "9.0"):
        proc = _check("--image", str(layout), gpu=gpu)
        assert _judged(proc) == truth(variant, gpu), proc.stdout


def _carry_out(copy: Path, fix: str) -> None:
    """A fix line as printed (``<copy>/bin/python -m pip …``; the comment after ``#`` is
    the shell's) run in a shell with the copy's own pip."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONPIN_", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    proc = subprocess.run(["bash", "-c", fix], capture_output=True, text=True, timeout=3600,
                          cwd=copy, env=env)
    assert proc.returncode == 0, (fix, proc.stdout[-2000:], proc.stderr[-2000:])


@pytest.mark.parametrize(("variant", "module"), [
    ("hunt-k-old034", "sgl_kernel"), ("hunt-k-botha", "sgl_kernel"),
    ("hunt-fi-074cubin", "flashinfer")])
def test_the_fix_line_works_in_a_copy(variant: str, module: str, tmp_path: Path) -> None:
    if not (stack_root() / variant / "bin" / "python").exists():
        pytest.skip(f"{variant} not built (stack.sh --kernel-hunt)")
    copy = stack_root() / f"{variant}.fixtest"  # on the images' file system: hard links
    shutil.rmtree(copy, ignore_errors=True)
    subprocess.run(["cp", "-al", str(stack_root() / variant), str(copy)], check=True)
    try:
        before = _check("--python", str(copy / "bin" / "python"))
        line = next(ln for ln in before.stdout.splitlines()
                    if ln.partition("  ")[2].startswith(f"{module}:"))
        assert line.startswith(("fail", "warn")), before.stdout
        fixes = before.stdout.split(line, 1)[1].splitlines()[1:]
        assert fixes and fixes[0].startswith("  fix: "), before.stdout
        _carry_out(copy, fixes[0].removeprefix("  fix: "))
        real = subprocess.run([str(copy / "bin" / "python"), str(PROBE), "--child", module],
                              capture_output=True, text=True, timeout=600, cwd="/",
                              env=_probe_env(tmp_path))
        outcome = json.loads(real.stdout.strip().splitlines()[-1])
        assert outcome["ok"], outcome
        after = _check("--python", str(copy / "bin" / "python"))
        assert next(ln for ln in after.stdout.splitlines() if ln.partition("  ")[2]
                    .startswith(f"{module}:")).startswith("pass"), after.stdout
    finally:
        shutil.rmtree(copy, ignore_errors=True)
