"""Make test images with real tools, not moonpin's code: ``umoci`` builds an OCI layout
one layer per step (each step edits the unpacked rootfs; umoci writes the whiteouts for
what a step deleted or replaced), ``skopeo`` converts it to a docker-archive, an OCI
archive, or zstd layers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

__all__ = ["add_changes", "build_layout", "layout_copy", "minimal_root", "need_tools",
           "pack_venv", "skopeo_copy"]

Step = Callable[[Path], None]


def need_tools() -> None:
    for tool in ("umoci", "skopeo"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install umoci skopeo)")


def _run(*argv: str, timeout: float = 600) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {r.stderr[-2000:]}")


def build_layout(where: Path, steps: Sequence[Step], *, tag: str = "t",
                 env: Sequence[str] = (), arch: str | None = None,
                 entrypoint: Sequence[str] = ()) -> Path:
    """An OCI layout at ``where`` whose image ``tag`` has one layer per step."""
    layout = where
    if not (layout / "index.json").exists():
        _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:{tag}")
    for n, step in enumerate(steps):
        bundle = where.parent / f"{where.name}-bundle-{tag}-{n}"
        _run("umoci", "unpack", "--rootless", "--image", f"{layout}:{tag}", str(bundle))
        step(bundle / "rootfs")
        _run("umoci", "repack", "--image", f"{layout}:{tag}", str(bundle))
        shutil.rmtree(bundle)
    args = ["umoci", "config", "--image", f"{layout}:{tag}"]
    for e in env:
        args += ["--config.env", e]
    for e in entrypoint:
        args += ["--config.entrypoint", e]
    if arch:
        args += ["--architecture", arch]
    if len(args) > 4:
        _run(*args)
    return layout


def skopeo_copy(src: str, dst: str, *extra: str) -> None:
    _run("skopeo", "copy", "-q", *extra, src, dst)


#: The host libraries the minimal root carries (the venv's builds need them).
HOST_LIBS = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1",
             "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2",
             "libutil.so.1", "libcrypt.so.1", "libffi.so.8", "libssl.so.3", "libcrypto.so.3")


def _host_needs(venv: Path) -> set[str]:
    """The host system libraries the venv's mooncake and torch objects load (``ldd``, the
    host loader's own answer), so the packed root holds what the import needs: the RDMA
    libraries, libnuma, libcurl and theirs."""
    import re
    import subprocess

    site = next((venv / "lib").glob("python3*/site-packages"), None)
    if site is None:
        return set()
    objects = [*site.glob("mooncake/**/*.so*"), *site.glob("mooncake_transfer_engine*.libs/*"),
               *site.glob("torch/_C*.so"), *site.glob("torch/lib/*.so*")]
    names: set[str] = set()
    for obj in objects:
        out = subprocess.run(["ldd", str(obj)], capture_output=True, text=True,
                             timeout=60).stdout
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (/\S+)", line)
            if m and m.group(2).startswith(("/usr/lib/x86_64-linux-gnu/",
                                            "/lib/x86_64-linux-gnu/")):
                names.add(m.group(1))
    return names


def _minimal_root(root: Path, venv: Path) -> None:
    """A merged-/usr root with the venv's interpreter (its ``home``), a few host
    libraries and the host's loader configuration."""
    import os

    home = Path(next(line.split("=", 1)[1].strip() for line in
                     (venv / "pyvenv.cfg").read_text().splitlines()
                     if line.startswith("home")))
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (root / "usr/lib64").mkdir()
    os.symlink("usr/lib", root / "lib")
    os.symlink("usr/lib64", root / "lib64")
    for name in HOST_LIBS:
        src = Path("/usr/lib/x86_64-linux-gnu") / name
        if not src.exists():
            continue
        real = src.resolve()
        shutil.copy2(real, libdir / real.name)
        if real.name != name:
            os.symlink(real.name, libdir / name)
    for name in sorted(_host_needs(venv) - set(HOST_LIBS)):
        real = (Path("/usr/lib/x86_64-linux-gnu") / name).resolve()
        if not real.is_file() or (libdir / real.name).exists():
            continue
        shutil.copy2(real, libdir / real.name)
        if real.name != name:
            os.symlink(real.name, libdir / name)
    os.symlink("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
               root / "usr/lib64/ld-linux-x86-64.so.2")
    prefix = root / str(home.parent).lstrip("/")
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib/python3.11").mkdir(parents=True)
    shutil.copy2(home / "python3.11", prefix / "bin/python3.11")
    for so in (home.parent / "lib").glob("libpython3*.so*"):
        shutil.copy2(so, prefix / "lib" / so.name, follow_symlinks=False)
    shutil.copy2(home.parent / "lib/python3.11/os.py", prefix / "lib/python3.11/os.py")
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf"):
        if os.path.exists(f):
            shutil.copy2(f, root / f.lstrip("/"))


def minimal_root(root: Path, venv: Path) -> Path:
    """``root``: the minimal root :func:`pack_venv` packs ``venv`` under (an unpacked image
    to hard-link a venv into at ``/opt/venv``, for ``--rootfs``)."""
    _minimal_root(root, venv)
    return root


def venv_root(tmp_path: Path) -> tuple[Path, Path]:
    """(a minimal image root (:func:`minimal_root`) with this interpreter's base prefix and
    its standard library hard-linked at their own path, and its venv ``/opt/venv`` (empty
    site folder)); skips when the base prefix is on another file system."""
    import sys

    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    base = Path(sys.base_prefix)
    src = tmp_path / "venv-src"
    src.mkdir()
    (src / "pyvenv.cfg").write_text(f"home = {base}/bin\n")
    root = minimal_root(tmp_path / "root", src)
    stdlib = root / str(base).lstrip("/") / "lib" / f"python{py}"
    shutil.rmtree(stdlib)
    try:
        subprocess.run(["cp", "-al", str(base / "lib" / f"python{py}"), str(stdlib)],
                       check=True, capture_output=True)
    except subprocess.CalledProcessError:
        pytest.skip("the base prefix is on another file system (no hard links)")
    venv = root / "opt/venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").symlink_to(f"{base}/bin/python{py}")
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\nversion = {py}.0\n")
    (venv / f"lib/python{py}/site-packages").mkdir(parents=True)
    return root, venv


def pack_venv(where: Path, venv: Path, *, replaced: str, deleted: str) -> Path:
    """An OCI layout (tag ``t``): a minimal root, ``venv`` as ``/opt/venv`` (one layer,
    ``umoci insert``, no unpacking), then a layer deleting ``/opt/venv/<deleted>`` and
    one replacing ``/opt/venv/<replaced>`` with a copy ending in a comment."""
    work = where.parent / f"{where.name}-work"
    work.mkdir(parents=True)
    _minimal_root(work / "root", venv)
    _run("umoci", "init", "--layout", str(where))
    _run("umoci", "new", "--image", f"{where}:t")
    _run("umoci", "insert", "--image", f"{where}:t", str(work / "root"), "/")
    # a full worker venv is 5-9 GB: umoci gzips it on one core (10 min and more under load)
    _run("umoci", "insert", "--image", f"{where}:t", str(venv), "/opt/venv", timeout=5400)
    _run("umoci", "insert", "--image", f"{where}:t", "--whiteout", f"/opt/venv/{deleted}")
    # umoci 0.4.7 `insert FILE TARGET` writes a truncated layer (GNU tar says so too):
    # insert a folder holding the new file over the file's folder (merged, not opaque)
    parent, name = replaced.rsplit("/", 1)
    (work / "replaced").mkdir()
    (work / "replaced" / name).write_bytes((venv / replaced).read_bytes()
                                           + b"\n# replaced by a later layer\n")
    _run("umoci", "insert", "--image", f"{where}:t", str(work / "replaced"),
         f"/opt/venv/{parent}")
    _run("umoci", "config", "--image", f"{where}:t", "--config.env",
         "PATH=/opt/venv/bin:/usr/bin:/bin", "--config.entrypoint", "/opt/venv/bin/python")
    shutil.rmtree(work)
    return where


def layout_copy(src: Path, dest: Path) -> Path:
    """A copy of the OCI layout ``src`` to build on: its blobs hard-linked (content-addressed,
    never written again), ``index.json`` a file of its own (umoci rewrites it)."""
    import os

    (dest / "blobs" / "sha256").mkdir(parents=True)
    for f in (src / "blobs" / "sha256").iterdir():
        os.link(f, dest / "blobs" / "sha256" / f.name)
    for doc in ("index.json", "oci-layout"):
        shutil.copyfile(src / doc, dest / doc)
    return dest


def add_changes(layout: Path, base: Path, copy: Path, mount: str, stage: Path) -> None:
    """Layers on ``layout`` (whose image ``t`` holds ``base`` at ``mount``) that make it
    hold ``copy`` there, as a Dockerfile's ``RUN pip ...`` would: one layer (``umoci
    insert`` of a folder, merged) of the files of ``copy`` that are not ``base``'s (another
    inode: ``copy`` is a hard-link clone of ``base`` changed by pip, which unlinks before
    it writes), and a whiteout (``umoci insert --whiteout``) of each path ``copy`` lacks
    (the topmost of a removed folder)."""
    import os

    for d, _dirs, files in os.walk(copy):
        rel_d = os.path.relpath(d, copy)
        for n in files:
            rel = os.path.normpath(os.path.join(rel_d, n))
            b = base / rel
            if not os.path.lexists(b) or os.lstat(b).st_ino != os.lstat(copy / rel).st_ino:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                if os.path.islink(copy / rel):
                    os.symlink(os.readlink(copy / rel), stage / rel)
                else:
                    os.link(copy / rel, stage / rel)
    gone: list[str] = []
    for d, dirs, files in os.walk(base):
        rel_d = os.path.relpath(d, base)
        gone += [os.path.normpath(os.path.join(rel_d, n)) for n in [*files, *dirs]
                 if not os.path.lexists(copy / rel_d / n)]
        dirs[:] = [x for x in dirs if os.path.lexists(copy / rel_d / x)]
    image = f"{layout}:t"
    if stage.is_dir():
        # a moved torch is gigabytes: umoci gzips on one core
        _run("umoci", "insert", "--image", image, str(stage), mount, timeout=5400)
        shutil.rmtree(stage)
    for rel in gone:
        _run("umoci", "insert", "--image", image, "--whiteout", f"{mount}/{rel}")
