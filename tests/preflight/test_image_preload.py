"""An image's own ``LD_PRELOAD`` (its config's ``Env``, ``--image-env``) and its
``/etc/ld.so.preload``, fed to the loader model as ld.so in that image takes them at the
interpreter's start (elf/rtld.c: the variable's objects, then the file's, mapped after the
interpreter and before what it needs, in the global scope; one that cannot be loaded is
ignored). Checked against the real loader: the interpreter run in a ``chroot`` of a minimal
root holding gcc-built objects (as root only; otherwise skipped)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.env.context import Context
from moonpin.preflight.env.rootfs import ImageConfig, target_for
from moonpin.preflight.loader import ldso
from moonpin.preflight.loader.loadchain import native_load

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
TAG = f"{sys.version_info[0]}{sys.version_info[1]}"
EXT = f"ext.cpython-{TAG}-{os.uname().machine}-linux-gnu.so"


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)


def _gcc(out: Path, code: str, *args: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name + ".c")
    src.write_text(code)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args],
                   check=True, capture_output=True)
    src.unlink()
    return out


def _root(tmp_path: Path) -> Path:
    """A minimal image root: the host's loader and C libraries (copies), this interpreter's
    base prefix hard-linked at its own path (same file system), a venv at ``/opt/venv``
    whose site folder holds ``ext``, an extension module whose ``PyInit_ext`` calls
    ``mp_foo``, defined by no object it needs; ``/opt/pre/libfull.so`` and
    ``/usr/lib/libfull.so`` define it."""
    from tests.lib.umoci import venv_root

    root, venv = venv_root(tmp_path)
    site = venv / f"lib/python{PY}/site-packages"
    _gcc(site / EXT, "extern int mp_foo(void);\n"
         "void *PyInit_ext(void) { mp_foo(); return 0; }\n")
    full = "int mp_foo(void) { return 2; }\n"
    _gcc(root / "opt/pre/libfull.so", full)
    _gcc(root / "usr/lib/libfull.so", full)
    (root / "proc").mkdir()
    return root


def _real(root: Path, env: dict[str, str], user: str = "0:0") -> str:
    """``import ext`` in the root, by its own interpreter through the real loader, as
    ``user`` (``uid:gid``): "bound" (the load passed, ``PyInit_ext`` ran: SystemError), else
    what the import raised."""
    chroot = shutil.which("chroot")
    if os.geteuid() != 0 or chroot is None:
        pytest.skip("the real loader is asked in a chroot: needs root")
    code = ("try:\n    import ext\nexcept SystemError:\n    print('bound')\n"
            "except ImportError as e:\n    print(e)\n")
    proc = subprocess.run([chroot, f"--userspec={user}", str(root), "/opt/venv/bin/python",
                           "-c", code],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/opt/venv/bin:/usr/bin:/bin", **env})
    return proc.stdout.strip() or proc.stderr.strip()


def _model(root: Path, env: dict[str, str]) -> str:
    """The same import as the check models it: the image's target from its config's
    ``Env``, the extension loaded into the process its interpreter starts."""
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin",
                           *(f"{k}={v}" for k, v in env.items())],
                      entrypoint=["/opt/venv/bin/python"])
    ctx = Context.of(target_for(str(root), cfg))
    site = root / f"opt/venv/lib/python{PY}/site-packages"
    res = native_load([str(site / EXT)], ctx.paths, None, python=ctx.python,
                      suffixes=ctx.ext_suffixes, machine=ctx.machine, root=ctx.root,
                      ld_path=ctx.ld_path, sites=ctx.sites, version=ctx.version,
                      importer=ctx.importer, preload=ctx.preload)
    if res.unbound:
        return f"undefined symbol: {res.unbound[0][1]}"
    if res.missing or res.bad or res.chain_error:
        return f"not loaded: {res.missing or res.bad or res.chain_error}"
    return "bound"


pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.mark.parametrize(("preload", "file", "bound"), [
    ("", None, False),
    ("/opt/pre/libfull.so", None, True),
    ("libfull.so", None, True),  # a name: searched as the interpreter's needs are
    ("/opt/pre/none.so", None, False),  # cannot be preloaded: ignored
    ("/opt/pre/none.so:/opt/pre/libfull.so", None, True),
    ("$ORIGIN/../../opt/pre/libfull.so", None, False),  # $ORIGIN: the interpreter's folder
    ("", "# a comment /opt/pre/libfull.so\n", False),
    ("", "# ld.so.preload\n\t/opt/pre/libfull.so # ours\n", True),
    ("", "/opt/pre/none.so:libfull.so", True),
])
def test_an_images_preloads_interpose_as_its_loader_maps_them(
        tmp_path: Path, preload: str, file: str | None, bound: bool) -> None:
    root = _root(tmp_path)
    if file is not None:
        (root / "etc/ld.so.preload").write_text(file)
    env = {"LD_PRELOAD": preload} if preload else {}
    want = "bound" if bound else "undefined symbol: mp_foo"
    real = _real(root, env)
    assert real == want or (not bound and "undefined symbol: mp_foo" in real), real
    assert _model(root, env) == want


def test_the_images_env_gives_its_preload_entries(tmp_path: Path) -> None:
    """``LD_PRELOAD`` of the image's ``Env`` as host paths under its root; names kept; a path
    that resolves to nothing there, and a relative one, left out."""
    root = _root(tmp_path)
    cfg = ImageConfig(env=["LD_PRELOAD=/opt/pre/libfull.so libc.so.6:/none.so rel/x.so"],
                      entrypoint=["/opt/venv/bin/python"])
    t = target_for(str(root), cfg)
    assert t.preload == (str(root / "opt/pre/libfull.so"), "libc.so.6")
    assert Context.of(t).preload == t.preload
    # none in the image's Env: none (not this process's)
    os.environ["LD_PRELOAD"] = str(root / "opt/pre/libfull.so")
    try:
        assert target_for(str(root), ImageConfig(entrypoint=["/opt/venv/bin/python"])
                          ).preload == ()
    finally:
        del os.environ["LD_PRELOAD"]


@pytest.mark.parametrize("kind", ["fifo", "zero", "outside", "huge", "folder"])
def test_a_hostile_preload_file_is_no_preload(tmp_path: Path, kind: str) -> None:
    """``/etc/ld.so.preload`` a FIFO, a link to ``/dev/zero`` or out of the root, past the
    cap, a folder: nothing preloaded, nothing blocks."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    f = root / "etc/ld.so.preload"
    outside = tmp_path / "host-preload"
    outside.write_text("/opt/pre/libfull.so\n")
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "zero":
        f.symlink_to("/dev/zero")
    elif kind == "outside":
        f.symlink_to(str(outside))
    elif kind == "huge":
        with f.open("wb") as out:
            out.truncate(64 << 20)
    else:
        f.mkdir()
    assert ldso.preload_file(str(root), "/usr/bin/python3") == []


def test_the_preload_file_is_traced(tmp_path: Path) -> None:
    """A kept load is stamped with the file, present or not (one added later is seen)."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    trace = ldso.Trace()
    assert ldso.preload_file(str(root), "/usr/bin/python3", trace) == []
    assert str(root / "etc/ld.so.preload") in trace.paths


def _needy_root(tmp_path: Path) -> Path:
    """:func:`_root` with ``/opt/pre/libneedy.so``, which defines ``mp_foo`` and needs
    ``libabsent.so``, gone."""
    root = _root(tmp_path)
    _gcc(root / "opt/pre/libabsent.so", "int absent(void) { return 0; }\n",
         "-Wl,-soname,libabsent.so")
    _gcc(root / "opt/pre/libneedy.so", "extern int absent(void);\n"
         "int mp_foo(void) { return absent(); }\n",
         f"-L{root / 'opt/pre'}", "-l:libabsent.so")
    (root / "opt/pre/libabsent.so").unlink()
    return root


def test_a_preload_whose_need_is_missing_stops_the_interpreter(tmp_path: Path) -> None:
    """ld.so maps a preloaded object's needs with the interpreter's: one not found ends the
    process before the interpreter runs (the preloaded object itself missing is ignored)."""
    root = _needy_root(tmp_path)
    env = {"LD_PRELOAD": "/opt/pre/libneedy.so"}
    real = _real(root, env)
    assert "error while loading shared libraries: libabsent.so" in real, real
    model = _model(root, env)
    assert model.startswith("not loaded") and "libabsent.so" in model, model


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "not-listed"])
def test_deep_eps_nccl_check_sees_the_images_preload_file(tmp_path: Path, listed: bool) -> None:
    """deep_ep's ``check_nccl_so`` reads the process's mapped libnccl (``/proc/self/maps``):
    a ``libnccl.so.2`` the image's ``/etc/ld.so.preload`` lists is mapped before torch's own,
    so its import raises "Duplicate NCCL runtime" (real: hunt-D's ``nccl12-file`` root),
    as it does for one in ``LD_PRELOAD``; the fix names the file to remove it from."""
    from tests.lib.checkrun import Run
    from tests.lib.deepep_sources import deep_ep_image
    from tests.lib.extimages import gcc_so
    from tests.lib.images import add_dist

    root = _root(tmp_path)
    site = deep_ep_image(root / f"opt/venv/lib/python{PY}/site-packages")
    gcc_so(site / "nvidia/nccl/lib/libnccl.so.2", defines=["ncclGetVersion"],
           soname="libnccl.so.2")
    add_dist(site, "nvidia-nccl-cu13", "2.30.7",
             files=["nvidia/nccl/lib/libnccl.so.2", "nvidia/nccl/__init__.py"])
    gcc_so(root / "opt/nccl12/libnccl.so.2", defines=["ncclGetVersion", "ncclNew"],
           soname="libnccl.so.2")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/ld.so.preload").write_text("# the image's\n/opt/nccl12/libnccl.so.2\n"
                                            if listed else "# nothing\n")
    proc = subprocess.run(
        [sys.executable, "-m", "moonpin.preflight", "--rootfs", str(root), "--interpreter",
         "/opt/venv/bin/python", "--image-env", "CUDA_HOME=/opt/cuda", "--no-deep",
         "--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "MOONPIN_CHECK_SYSTEM_LIBS": str(root / "_no_system_libs")})
    r = Run(proc)
    line = r.line("deep_ep")
    if listed:
        assert r.rc == 1 and "AssertionError: Duplicate NCCL runtime" in line, r.out
        assert "/etc/ld.so.preload maps /opt/nccl12/libnccl.so.2" in line, r.out
        assert r.fixes()[0].startswith("fix: remove /opt/nccl12/libnccl.so.2 from "
                                       "/etc/ld.so.preload in the image"), r.out
    else:
        assert "Duplicate NCCL" not in line, r.out


@pytest.mark.parametrize(("mode", "user", "stops"), [
    (0o600, "65534", False),  # only root may read it: the worker's ld.so skips it
    (0o600, None, True),  # the worker runs as root: read, and its need stops the interpreter
    (0o644, "65534", True),  # readable by all: read
])
def test_the_preload_file_is_read_as_the_workers_user(tmp_path: Path, mode: int,
                                                      user: str | None, stops: bool) -> None:
    """A root-only ``/etc/ld.so.preload`` listing an object whose need is missing: ld.so
    started as the image's ``User`` 65534 cannot read it and ignores it silently, so the
    interpreter starts; as root it stops (exit 127). The check reads the file as the
    worker's user would (it applied it to every worker). Held against the real loader."""
    root = _needy_root(tmp_path)
    (root / "etc").mkdir(exist_ok=True)
    listed = root / "etc/ld.so.preload"
    listed.write_text("/opt/pre/libneedy.so\n")
    listed.chmod(mode)
    for p in [root, *root.rglob("*")]:  # every folder on the way searchable by the worker
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin"],
                      entrypoint=["/opt/venv/bin/python"], user=user)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n"
                                     "nobody:x:65534:65534::/nonexistent:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    ctx = Context.of(target_for(str(root), cfg))
    site = root / f"opt/venv/lib/python{PY}/site-packages"
    res = native_load([str(site / EXT)], ctx.paths, None, python=ctx.python,
                      suffixes=ctx.ext_suffixes, machine=ctx.machine, root=ctx.root,
                      ld_path=ctx.ld_path, sites=ctx.sites, version=ctx.version,
                      importer=ctx.importer, preload=ctx.preload, user=ctx.user)
    assert bool(ldso.preload_file(str(root), "/opt/venv/bin/python", reader=ctx.user)) == stops
    # ld.so asks access(R_OK) of the file as the process's real user (elf/rtld.c dl_main)
    real = _real(root, {}, f"{user}:{user}" if user else "0:0")
    if stops:
        assert res.chain_error and "libabsent.so" in res.chain_error[2], res.chain_error
        assert "error while loading shared libraries: libabsent.so" in real, real
    else:  # the interpreter ran, and `import ext` reached its own need (mp_foo: no preload)
        assert res.chain_error is None and [u[1] for u in res.unbound] == ["mp_foo"]
        assert "undefined symbol: mp_foo" in real, real
