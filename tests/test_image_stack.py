"""Opt-in (``-m image``): the real images of issue 39, built by ``tests/realimg/stack.sh`` under
``MOONPIN_TEST_REALIMG`` (e.g. ``/tmp/realimg``): ``stack`` (sglang 0.5.23, torch 2.14.1,
sglang-kernel, sgl-deep-ep, nixl, flashinfer, mooncake) and its variants ``stack-<name>``.

* The recorded import truth (``$MOONPIN_TEST_REALIMG/reports/stack*.json``, written by
  ``tests/realimg/probe_stack.py``) still holds: each import is run again, with the image's own
  interpreter, and must end the same way (ok, or the same exception type).
* Each image is of the class it is named for (read from its files, not from the reports).
* ``moonpin check`` on each image, for the launch line of Dynamo's elastic-EP deployment, gives
  each extension the verdict its real import has, for a host without a GPU and for one of
  capability 9.0 (``--gpu-capability``; see ``GPUS`` and :func:`tests.lib.verdicts.verdicts`);
  with ``NIXL_UCX_DEEPBIND`` set, nixl's build is bound as the real ``RTLD_DEEPBIND`` dlopen
  binds it; and ``check --image`` of each image packed by umoci (``stack`` packed once into
  ``$MOONPIN_TEST_REALIMG/stack-oci``, a variant as that plus a layer of its changes) says
  what ``--site-packages`` says.

GPU assumptions, the same as the probe's: no GPU is visible (``CUDA_VISIBLE_DEVICES=`` and the
stub driver), so sgl_kernel loads ``sm100/common_ops`` (its choice for every GPU but capability
9.0, and for none); ``deep_ep`` is judged as on a host with a GPU (torch told so through the stub
NVML), since sgl-deep-ep refuses to load at all without one. Nothing is fetched; the images are
never changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.umoci import add_changes, layout_copy, need_tools, pack_venv
from tests.lib.verdicts import recorded_report, stack_root, verdicts

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
SITE = "lib/python3.11/site-packages"
IMAGES = ("stack", "stack-torch215", "stack-nixl140", "stack-kernel048", "stack-cubin",
          "stack-nonixl", "stack-nixlcu12", "stack-nixlboth")
EXTENSIONS = ("sgl_kernel", "nixl_ep", "deep_ep", "flashinfer", "mooncake.pg")


def report(image: str) -> dict:
    """The recorded probe report of one image (``reports/<image>.json``)."""
    return recorded_report("reports", image, "--probe-only")


def truth(image: str) -> dict[str, str]:
    """What importing each extension really does in ``image``: module -> ``"ok"`` or
    ``"error"`` (the reasons are in ``reasons``). Keys: ``sgl_kernel`` (the sm100 build, as on a
    host without a GPU), ``sgl_kernel@sm90``, ``nixl_ep`` (``import nixl_ep`` then ``from
    nixl_ep import Buffer``), ``deep_ep`` (past its GPU gate), ``deep_ep@nogpu``,
    ``flashinfer``, ``mooncake.pg`` (the JIT cache the build left: cold unless ``stack.sh
    --mooncake-jit``), ``torch``."""
    return {m: "ok" if p.get("ok") else "error" for m, p in report(image)["probes"].items()}


def reasons(image: str) -> dict[str, str]:
    """module -> ``"<ExceptionType>: <first line>"`` for each import of ``image`` that fails."""
    out = {}
    for m, p in report(image)["probes"].items():
        if not p.get("ok"):
            lines = (p.get("error") or "").strip().splitlines()
            out[m] = f"{p.get('error_type')}: {lines[0] if lines else ''}"
    return out


def _probe_env(root: Path, image: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(LD_LIBRARY_PATH=str(root / "stack-stubs"), CUDA_VISIBLE_DEVICES="",
               PROBE_NVML_STUB=str(root / "stack-stubs" / "nvml"),
               MOONCAKE_PG_JIT_DIR=str(root / "stack-pgjit" / image),
               FLASHINFER_WORKSPACE_BASE=str(root / "stack-fi"))
    return env


@pytest.fixture(scope="module", params=IMAGES)
def image(request: pytest.FixtureRequest) -> str:
    root = stack_root()
    if not (root / request.param / "bin" / "python").exists():
        pytest.skip(f"{root / request.param} not built (tests/realimg/stack.sh)")
    return str(request.param)


def test_the_recorded_truth_still_holds(image: str) -> None:
    root = stack_root()
    proc = subprocess.run([str(root / image / "bin" / "python"), str(PROBE)],
                          capture_output=True, text=True, timeout=3600, cwd="/",
                          env=_probe_env(root, image))
    assert proc.returncode == 0, proc.stderr[-2000:]
    now = json.loads(proc.stdout)["probes"]
    then = report(image)["probes"]
    assert set(now) == set(then)
    for m in then:
        assert (now[m]["ok"], now[m].get("error_type")) == \
            (then[m]["ok"], then[m].get("error_type")), (m, now[m], then[m])


def _has(image: str, dist: str) -> str | None:
    return report(image)["dists"].get(dist)


def test_each_image_is_of_its_class(image: str) -> None:
    """The class each variant stands for, read from the image's own files."""
    sp = stack_root() / image / SITE
    dists = dict(d.name.removesuffix(".dist-info").lower().rsplit("-", 1)
                 for d in sp.glob("*.dist-info"))
    torch_mm = "".join(dists["torch"].split(".")[:2])
    nixl_builds = sorted(p.name for p in (sp / "nixl_ep_cu13").glob("nixl_ep_cpp_torch*"))
    if image == "stack-nonixl":
        assert "nixl" not in dists and "nixl_cu13" not in dists and not nixl_builds
    elif image == "stack-nixlcu12":  # a CUDA 12 nixl under the CUDA 13 torch
        assert "nixl_cu13" not in dists and not nixl_builds and "nixl" in dists
        assert dists["nixl_cu12"] == dists["nixl"]
        assert list((sp / "nixl_ep_cu12").glob("nixl_ep_cpp_torch*"))
        assert report(image)["probes"]["torch"]["cuda"].startswith("13.")
    else:
        has_build = any(n.startswith(f"nixl_ep_cpp_torch{torch_mm}.") for n in nixl_builds)
        assert has_build == (image not in ("stack-torch215", "stack-nixl140")), nixl_builds
    if image == "stack-torch215":
        assert dists["torch"] != report("stack")["dists"]["torch"]
    if image == "stack-nixlboth":
        assert dists["nixl_cu12"] == dists["nixl_cu13"] == dists["nixl"]
    if image == "stack-kernel048":
        meta = next(sp.glob("sglang_kernel-*.dist-info")) / "METADATA"
        pins = [ln for ln in meta.read_text().splitlines() if ln.startswith("Requires-Dist: torch")]
        assert pins and all(dists["torch"] not in ln for ln in pins), pins
    if image == "stack-cubin":
        assert dists["flashinfer_cubin"] != dists["flashinfer_python"]
    elif "flashinfer_cubin" in dists:
        assert dists["flashinfer_cubin"] == dists["flashinfer_python"]


#: (the check's --gpu-capability, the worker's MoE backend, which truth key each judged
#: extension answers to): no GPU (sgl_kernel's sm100 build, deep_ep refused), and an H100
#: (capability 9.0: sgl_kernel's sm90 build, deep_ep past its GPU gate, as the probe forced)
GPUS = {
    "nogpu": ("none", "nixl", {"sgl_kernel": "sgl_kernel"}),
    "nogpu-deepep": ("none", "deepep", {"sgl_kernel": "sgl_kernel", "deep_ep": "deep_ep@nogpu"}),
    "sm90-deepep": ("9.0", "deepep", {"sgl_kernel": "sgl_kernel@sm90", "deep_ep": "deep_ep"}),
}


def _check(image: str, *args: str, target: tuple[str, ...] = (),
           env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``moonpin check`` of ``image`` (``target``; default ``--site-packages`` of it) with
    ``args``, as on the probe's host: the stub driver, the image's JIT cache."""
    root = stack_root()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONPIN_", "VIRTUAL_ENV",
                                                                    "NIXL_"))}
    env.update(LD_LIBRARY_PATH=str(root / "stack-stubs"),
               MOONCAKE_PG_JIT_DIR=str(root / "stack-pgjit" / image), **(env_extra or {}))
    target = target or ("--site-packages", str(root / image / SITE))
    proc = subprocess.run([sys.executable, "-m", "moonpin", "check", *target, "--no-deep",
                           *args], capture_output=True, text=True, timeout=2400, cwd=ROOT,
                          env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_check_agrees_with_the_real_imports(image: str, gpu: str) -> None:
    capability, a2a, keys = GPUS[gpu]
    proc = _check(image, "--gpu-capability", capability, "--", "--moe-a2a-backend", a2a,
                  "--elastic-ep-backend", "mooncake")
    got = verdicts(proc.stdout)
    real = {m: truth(image).get(keys.get(m, m), "error") for m in EXTENSIONS}
    why = reasons(image)
    # mooncake 0.3.14 compiles its adapter at first import: on this host without a GPU that
    # fails unless stack.sh --mooncake-jit compiled it; the check warns (not the image's fault)
    if "without a visible CUDA device" in why.get("mooncake.pg", ""):
        real["mooncake.pg"] = "ok"
    backend = "nixl_ep" if a2a == "nixl" else "deep_ep"
    expected = {"sgl_kernel", "flashinfer", "mooncake.pg", backend}
    assert expected <= set(got), proc.stdout
    for m in got:
        assert got[m] == real[m], (m, why.get(keys.get(m, m)), proc.stdout)
    assert proc.returncode == (0 if all(real[m] == "ok" for m in got) else 1), proc.stdout


def test_torchs_global_deps_gone_fails_every_extension_as_the_import_does(
        tmp_path: Path) -> None:
    """A hard-link copy of ``stack`` whose ``torch/lib/libtorch_global_deps.so`` is gone:
    torch 2.14's ``_load_global_deps`` looks for it where ``importlib.metadata`` locates
    torch's files too, finds nothing and raises OSError, so every extension's import fails.
    The check (it said usable before it followed that call) fails torch and each extension
    with the real import's error, and torch's line carries the one reinstall."""
    root = stack_root()
    if not (root / "stack" / "bin" / "python").exists():
        pytest.skip("no stack image (tests/realimg/stack.sh)")
    copy = tmp_path / "img"
    subprocess.run(["cp", "-al", str(root / "stack"), str(copy)], check=True)
    (copy / SITE / "torch" / "lib" / "libtorch_global_deps.so").unlink()
    env = _probe_env(root, "stack")
    real = {}
    for m in ("torch", "sgl_kernel", "nixl_ep", "flashinfer"):
        proc = subprocess.run([str(copy / "bin" / "python"), "-c", f"import {m}"],
                              capture_output=True, text=True, timeout=600, env=env,
                              cwd=tmp_path)
        real[m] = proc.returncode == 0
        assert not real[m] and "libtorch_global_deps.so" in proc.stderr, (m, proc.stderr)
    proc = _check("stack", "--gpu-capability", "none", "--", "--moe-a2a-backend", "nixl",
                  target=("--python", str(copy / "bin" / "python")))
    assert proc.returncode == 1, proc.stdout
    got = verdicts(proc.stdout)
    for m in ("sgl_kernel", "nixl_ep", "flashinfer"):
        assert got[m] == "error", (m, proc.stdout)
    lines = proc.stdout.splitlines()
    torch = next(ln for ln in lines if ln.startswith("fail  torch:"))
    assert "OSError" in torch and "libtorch_global_deps.so" in torch, proc.stdout
    assert "--force-reinstall --no-deps 'torch==2.14.1" in lines[lines.index(torch) + 1]


#: RTLD_DEEPBIND of <dlfcn.h> (bits/dlfcn.h: 0x00008)
RTLD_DEEPBIND = 0x8


@pytest.mark.parametrize("value", ["1", "off"])
def test_nixl_deepbind_the_check_agrees_with_the_real_dlopen(image: str, value: str) -> None:
    """``NIXL_UCX_DEEPBIND`` set in the worker's environment: nixl's backend dlopens its
    build with ``RTLD_DEEPBIND`` (the probe saw the flag handed to ``sys.setdlopenflags``),
    and the check, told the same environment, binds it in that scope (its line says so)
    and reaches the real import's verdict; ``off`` (one of nixl's off words) is a plain
    load in both."""
    probe = report(image)["probes"]["nixl_ep@deepbind" if value == "1" else "nixl_ep"]
    deep = any(f & RTLD_DEEPBIND for f in probe.get("dlopen_flags", []))
    if value == "1":
        # the backend __init__ ran (and asked for DEEPBIND) wherever nixl_ep_cu13 is there
        has_backend = (stack_root() / image / SITE / "nixl_ep_cu13" / "__init__.py").is_file()
        assert deep == has_backend, probe
    proc = _check(image, "--gpu-capability", "none", "--", "--moe-a2a-backend", "nixl",
                  env_extra={"NIXL_UCX_DEEPBIND": value})
    line = next(ln for ln in proc.stdout.splitlines() if ln.partition("  ")[2]
                .startswith("nixl_ep:"))
    assert verdicts(proc.stdout)["nixl_ep"] == ("ok" if probe.get("ok") else "error"), (
        probe, line)
    assert ("loaded with RTLD_DEEPBIND" in line) == deep, (probe, line)


def stack_layout() -> Path:
    """``stack`` packed by umoci under a minimal root, once (``$MOONPIN_TEST_REALIMG/stack-oci``;
    about 10 minutes, 3.9 GiB)."""
    need_tools()
    root = stack_root()
    base = root / "stack-oci"
    if not (base / "index.json").exists():
        tmp = root / "stack-oci.part"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root / "stack-oci.part-work", ignore_errors=True)
        sglang = next((root / "stack" / SITE).glob("sglang-*.dist-info"))
        pack_venv(tmp, root / "stack", replaced=f"{SITE}/sglang/version.py",
                  deleted=f"{SITE}/{sglang.name}/INSTALLER")
        tmp.rename(base)
    return base


#: The packed image's worker's cache of mooncake's compiled adapter: its config sets neither
#: MOONCAKE_PG_JIT_DIR nor HOME nor User, and its minimal root has no /etc/passwd, so runc
#: gives root's process HOME=/ (its default ExecUser's home).
PACKED_JIT = "/.cache/mooncake/pg_jit"


def packed_adapter() -> Path | None:
    """The adapter compiled for the packed ``stack`` (its venv's path ``/opt/venv``:
    ``$MOONPIN_TEST_REALIMG/stack-oci-pgjit/<key>``, ``stack.sh --mooncake-jit`` as root), or
    None. An adapter of the host copy (``stack-pgjit/stack``) is keyed and linked by the host
    path: the packed image's loader would not take it."""
    found = sorted((stack_root() / "stack-oci-pgjit").glob("*/_mooncake_pg_jit_*.so"))
    return found[0].parent if found else None


def test_the_packed_image_is_judged_as_the_real_imports(image: str, tmp_path: Path) -> None:
    """``check --image`` of the image packed by umoci: each extension's verdict is its real
    import's (no GPU), as ``--site-packages`` of the same image says; but mooncake.pg, whose
    adapter is in the worker's own cache folder: the packed image's (:data:`PACKED_JIT`),
    not the one the ``--site-packages`` run and the host copies' probes read
    (``stack-pgjit/<image>``, compiled for the host path). ``stack`` is packed with the
    adapter compiled for it in that folder when there is one (:func:`packed_adapter`): its
    import then loads it, as the host copy's does; without one, and in every variant (none
    compiled for it), the real import in the packed files raises ImportError (no nvcc in the
    minimal root: tests/realimg/README.md, the packed image's real import)."""
    layout = stack_layout()
    # stack-torch215 gets stack's adapter too: compiled for /opt/venv's mooncake (its RUNPATH
    # matches) but for torch 2.14.1, so its loader computes another key folder and compiles
    # (real, by hand: that adapter in a cache of stack-torch215 bound at /opt/venv in a private
    # mount namespace: ImportError, "requires a CUDA toolkit with nvcc")
    adapter = packed_adapter() if image in ("stack", "stack-torch215") else None
    if image != "stack" or adapter is not None:
        layout = layout_copy(layout, tmp_path / "oci")
    if image != "stack":
        built = stack_root()
        add_changes(layout, built / "stack", built / image, "/opt/venv", tmp_path / "stage")
    if adapter is not None:  # a layer: /.cache with the adapter's key folder
        cache = tmp_path / "cache"
        shutil.copytree(adapter, cache / PACKED_JIT.removeprefix("/.cache/") / adapter.name)
        subprocess.run(["umoci", "insert", "--image", f"{layout}:t", str(cache), "/.cache"],
                       check=True, capture_output=True, timeout=600)
    launch = ("--gpu-capability", "none", "--", "--moe-a2a-backend", "nixl",
              "--elastic-ep-backend", "mooncake")
    packed = _check(image, *launch, target=("--image", str(layout)))
    site = _check(image, *launch)
    got = verdicts(packed.stdout)
    assert {"sgl_kernel", "flashinfer", "mooncake.pg", "nixl_ep"} <= set(got), packed.stdout
    others = {m: v for m, v in verdicts(site.stdout).items() if m != "mooncake.pg"}
    assert {m: v for m, v in got.items() if m != "mooncake.pg"} == others, (packed.stdout,
                                                                            site.stdout)
    real = {m: truth(image).get(m, "error") for m in got}
    if adapter is not None and image != "stack":  # another torch's adapter: not taken
        real["mooncake.pg"] = "error"
        line = next(ln for ln in packed.stdout.splitlines()
                    if ln.partition("  ")[2].startswith(("toolchain:", "adapter:")))
        assert line.startswith("fail") and "compiled for other inputs" in line, line
    elif adapter is None:  # the packed image's own cold cache, said with its own folder
        real["mooncake.pg"] = "error"
        line = next(ln for ln in packed.stdout.splitlines()
                    if ln.partition("  ")[2].startswith(("toolchain:", "adapter:")))
        assert line.startswith("fail") and f"(looked in {PACKED_JIT})" in line, line
    else:
        assert "adapter compiled for this image is in" in packed.stdout, packed.stdout
    assert got == real, packed.stdout
    assert packed.returncode == (0 if all(v == "ok" for v in real.values()) else 1), (
        packed.stdout)
