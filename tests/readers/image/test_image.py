"""moonpin.readers.image.manifest + moonpin.readers.image.layers on images made by umoci and
skopeo."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from moonpin.readers.image.layers import NO_READS, READ_KINDS, Reads, check_wants, unpack
from moonpin.readers.image.manifest import ImageError, open_image
from tests.lib.elfbuild import build_so
from tests.lib.umoci import build_layout, need_tools, skopeo_copy

SITE = "opt/venv/lib/python3.11/site-packages"
LIBDIR = "usr/lib/x86_64-linux-gnu"


def _w(root: Path, rel: str, data: bytes | str, mode: int = 0o644) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    p.chmod(mode)


def base(root: Path) -> None:
    """The OS layer: merged /usr, libraries with soname links, an interpreter."""
    (root / "usr/lib").mkdir(parents=True)
    os.symlink("usr/lib", root / "lib")
    _w(root, f"{LIBDIR}/libfoo.so.1.0", build_so(needed=["libbar.so.3", "libc.so.6"],
                                                 soname="libfoo.so.1", runpath=None))
    os.symlink("libfoo.so.1.0", root / LIBDIR / "libfoo.so.1")
    _w(root, f"{LIBDIR}/libc.so.6", build_so(needed=[], soname="libc.so.6", runpath=None))
    _w(root, f"{LIBDIR}/libunused.so.2", build_so(needed=[], runpath=None))
    _w(root, "usr/bin/python3.11", b"\x7fELF-not-really", 0o755)
    _w(root, "usr/share/doc/big.txt", "x" * 10000)
    _w(root, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    _w(root, "etc/ld.so.conf.d/extra.conf", "/opt/extra/lib\n")
    _w(root, "etc/ld.so.cache", b"ld.so-1.7.0\0")
    _w(root, "etc/passwd", "root:x:0:0::/root:/bin/sh\n")


def app(root: Path) -> None:
    """The application layer: a venv with sglang, mooncake, torch, a library a lower
    library needs (found only when re-reading), and one through ld.so.conf.d."""
    venv = root / "opt/venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3.11", venv / "bin/python")
    _w(root, "opt/venv/pyvenv.cfg", "home = /usr/bin\n")
    _w(root, f"{SITE}/sglang/__init__.py", "v1")
    _w(root, f"{SITE}/sglang/version.py", "__version__ = '0.5.21'\n")
    _w(root, f"{SITE}/sglang/data.bin", "not read")
    _w(root, f"{SITE}/sglang-0.5.21.dist-info/METADATA", "Name: sglang\n")
    _w(root, f"{SITE}/sglang-0.5.21.dist-info/RECORD", "")
    _w(root, f"{SITE}/sglang-0.5.21.dist-info/LICENSE", "not read")
    _w(root, f"{SITE}/old-1.0.dist-info/METADATA", "Name: old\n")
    _w(root, f"{SITE}/mooncake/pg.py", "loader")
    _w(root, f"{SITE}/mooncake/_pg.cpython-311-x86_64-linux-gnu.so",
       build_so(needed=["libfoo.so.1", "libextra.so.1"], runpath=None), 0o755)
    _w(root, f"{SITE}/torch/version.py", "__version__ = '2.13.0'\n")
    _w(root, f"{SITE}/torch/__init__.py", "")
    _w(root, f"{SITE}/torch/nn.py", "what import torch may run")
    _w(root, f"{SITE}/torch/README.txt", "not read")
    _w(root, f"{SITE}/torch/lib/libtorch.so", build_so(needed=[], runpath="$ORIGIN"))
    _w(root, f"{SITE}/distutils-precedence.pth", "import os")
    _w(root, f"{SITE}/tree/a.txt", "folder replaced below")
    _w(root, f"{SITE}/tree2", "file replaced by a folder below")
    _w(root, f"{LIBDIR}/libbar.so.3", build_so(needed=[], soname="libbar.so.3", runpath=None))
    _w(root, "opt/extra/lib/libextra.so.1", build_so(needed=[], runpath=None))
    _w(root, "opt/extra/lib/libother.so.1", build_so(needed=[], runpath=None))


def fix(root: Path) -> None:
    """A later layer: deletes a dist-info, replaces a file, a folder by a file."""
    shutil.rmtree(root / SITE / "old-1.0.dist-info")
    (root / SITE / "sglang/__init__.py").write_text("v2")
    shutil.rmtree(root / SITE / "tree")
    _w(root, f"{SITE}/tree", "now a file")
    (root / "etc/passwd").unlink()
    (root / SITE / "tree2").unlink()
    _w(root, f"{SITE}/tree2/b.txt", "b")


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_tools()
    where = tmp_path_factory.mktemp("img") / "oci"
    return build_layout(where, [base, app, fix], env=["PATH=/opt/venv/bin:/usr/bin",
                                                      "LD_LIBRARY_PATH=/opt/ld"])


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "/"
            else:
                out[rel] = p.read_bytes()[:40].hex()
    return out


def _unpack(path: Path, dest: Path, **kw: object) -> list[str]:
    dest.mkdir()
    notes: list[str] = []
    img = open_image(str(path), **kw)  # type: ignore[arg-type]
    unpack(img, str(dest), progress=notes.append)
    return [*notes, img.describe()]


def test_final_view_with_the_default_policy(layout: Path, tmp_path: Path) -> None:
    notes = _unpack(layout, tmp_path / "d")
    d = tmp_path / "d"
    site = d / SITE
    assert (site / "sglang/__init__.py").read_text() == "v2"   # replaced by layer 3
    assert (site / "sglang/version.py").exists()
    assert not (site / "sglang/data.bin").exists()
    assert (site / "sglang-0.5.21.dist-info/METADATA").exists()
    assert not (site / "sglang-0.5.21.dist-info/LICENSE").exists()
    assert not (site / "old-1.0.dist-info").exists()              # whiteout
    assert not (d / "etc/passwd").exists()
    assert (site / "mooncake/pg.py").exists()
    assert (site / "torch/version.py").exists() and (site / "torch/nn.py").exists()
    assert not (site / "torch/README.txt").exists()
    assert (site / "torch/lib/libtorch.so").exists()
    assert (site / "distutils-precedence.pth").exists()
    assert (d / "opt/venv/pyvenv.cfg").exists()
    assert os.readlink(d / "opt/venv/bin/python") == "../../../usr/bin/python3.11"
    assert (d / "opt/venv/bin/python").resolve() == (d / "usr/bin/python3.11").resolve()
    assert os.readlink(d / "lib") == "usr/lib"
    lib = d / LIBDIR
    # mooncake needs libfoo.so.1 (a link: its target comes too); libfoo needs libbar,
    # which is in the newer layer already passed: re-read
    assert os.readlink(lib / "libfoo.so.1") == "libfoo.so.1.0"
    assert (lib / "libfoo.so.1.0").is_file()
    assert (lib / "libbar.so.3").is_file() and (lib / "libc.so.6").is_file()
    assert not (lib / "libunused.so.2").exists()
    assert (d / "opt/extra/lib/libextra.so.1").is_file()       # folder from ld.so.conf.d
    assert not (d / "opt/extra/lib/libother.so.1").exists()
    assert (d / "etc/ld.so.cache").exists() and (d / "etc/ld.so.conf.d/extra.conf").exists()
    assert not (d / "usr/share/doc/big.txt").exists()
    assert any("re-read layer 2" in n for n in notes)
    assert notes[-1].startswith("oci oci, linux/amd64, 3 layers")
    # nothing points out of dest
    for dirpath, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(dirpath) / n
            assert str(p.resolve()).startswith(str(d.resolve())), p
    st = (site / "mooncake/_pg.cpython-311-x86_64-linux-gnu.so").stat()
    assert st.st_mode & 0o7777 == 0o755


def test_everything_kept_is_the_final_view(layout: Path, tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    unpack(open_image(str(layout)), str(d), want=lambda p: True)
    site = d / SITE
    assert (site / "tree").read_text() == "now a file"
    assert (site / "tree2/b.txt").read_text() == "b"
    assert not (d / "etc/passwd").exists() and not (site / "old-1.0.dist-info").exists()
    assert (d / "usr/share/doc/big.txt").stat().st_size == 10000
    assert (site / "sglang/__init__.py").read_text() == "v2"
    assert not any(n.startswith(".wh.") for _p, _d, f in os.walk(d) for n in f)


def test_writes_through_a_lower_folder_link(tmp_path: Path) -> None:
    """umoci insert writes /lib/x86_64-linux-gnu/... literally; the base layer's
    /lib -> usr/lib makes it the file under /usr/lib (and a whiteout there too)."""
    need_tools()
    import subprocess

    where = build_layout(tmp_path / "oci", [base])
    new = tmp_path / "ins" / "libfoo.so.1.0"  # a folder: umoci 0.4.7 truncates a file insert
    new.parent.mkdir()
    new.write_bytes(build_so(needed=["libc.so.6"], soname="libfoo.so.1", runpath=None,
                             strings=["replaced"]))
    for args in ([str(new.parent), "/lib/x86_64-linux-gnu"],
                 ["--whiteout", "/lib/x86_64-linux-gnu/libunused.so.2"]):
        subprocess.run(["umoci", "insert", "--image", f"{where}:t", *args], check=True)
    d = tmp_path / "d"
    d.mkdir()
    unpack(open_image(str(where)), str(d), want=lambda p: "x86_64" in p)
    assert os.readlink(d / "lib") == "usr/lib"
    assert b"replaced" in (d / LIBDIR / "libfoo.so.1.0").read_bytes()
    assert not (d / LIBDIR / "libunused.so.2").exists()
    assert (d / LIBDIR / "libc.so.6").exists()


def test_config(layout: Path) -> None:
    img = open_image(str(layout))
    assert "PATH=/opt/venv/bin:/usr/bin" in img.config.env
    assert img.config.os == "linux" and img.config.architecture == "amd64"


@pytest.mark.parametrize("kind", ["docker-archive", "oci-archive", "zstd"])
def test_formats_give_the_same_tree(layout: Path, tmp_path: Path, kind: str) -> None:
    if kind == "docker-archive":
        out = tmp_path / "img.tar"
        skopeo_copy(f"oci:{layout}:t", f"docker-archive:{out}:t:latest")
    elif kind == "oci-archive":
        out = tmp_path / "img.tar"
        skopeo_copy(f"oci:{layout}:t", f"oci-archive:{out}:t")
    else:
        out = tmp_path / "zst"
        skopeo_copy(f"oci:{layout}:t", f"oci:{out}:t", "--dest-compress-format", "zstd")
        man = json.loads((out / "index.json").read_text())["manifests"][0]["digest"]
        doc = json.loads((out / "blobs/sha256" / man.split(":")[1]).read_text())
        assert all("zstd" in ld["mediaType"] for ld in doc["layers"])
    notes = _unpack(out, tmp_path / "d")
    _unpack(layout, tmp_path / "ref")
    assert _tree(tmp_path / "d") == _tree(tmp_path / "ref")
    assert notes[-1].split(" ")[0] == ("oci" if kind == "zstd" else kind)


def test_own_want(layout: Path, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    unpack(open_image(str(layout)), str(tmp_path / "d"),
           want=lambda p: p.endswith("/sglang/version.py"))
    files = [k for k, v in _tree(tmp_path / "d").items() if v not in ("/",)
             and not v.startswith("-> ")]
    assert files == [f"{SITE}/sglang/version.py"]


def test_multi_platform_index(tmp_path: Path) -> None:
    need_tools()
    where = tmp_path / "multi"
    build_layout(where, [lambda r: _w(r, "etc/which", "amd")], tag="amd")
    build_layout(where, [lambda r: _w(r, "etc/which", "arm")], tag="arm", arch="arm64")
    idx = json.loads((where / "index.json").read_text())
    descs = idx["manifests"]
    for d in descs:
        d["platform"] = {"os": "linux", "architecture":
                         "arm64" if d["annotations"]["org.opencontainers.image.ref.name"]
                         == "arm" else "amd64"}
    # the nested index Docker's containerd store writes: index.json -> index -> manifests
    inner = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": descs}).encode()
    import hashlib

    h = hashlib.sha256(inner).hexdigest()
    (where / "blobs/sha256" / h).write_bytes(inner)
    (where / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{h}",
         "size": len(inner)}]}))
    for plat, want in (("linux/arm64", "arm"), ("linux/arm64/v8", "arm"),
                       ("linux/amd64", "amd")):
        dest = tmp_path / plat.replace("/", "_")
        dest.mkdir()
        img = open_image(str(where), platform=plat)
        assert img.config.architecture == ("arm64" if want == "arm" else "amd64")
        unpack(img, str(dest), want=lambda p: p == "/etc/which")
        assert (dest / "etc/which").read_text() == want
    with pytest.raises(ImageError, match=r"no image for linux/s390x.*linux/amd64, linux/arm64"):
        open_image(str(where), platform="linux/s390x")


@pytest.mark.parametrize(("path", "keep"), [
    ("/usr/bin/python3.12", True), ("/opt/venv/bin/python", True),
    ("/usr/lib/python3.12/os.py", True), ("/usr/lib/python3.12/json/__init__.py", False),
    ("/x/site-packages/a.pth", True), ("/x/site-packages/__editable___sg_finder.py", True),
    ("/x/site-packages/foo.egg-link", True),
    ("/x/dist-packages/torch-2.9.dist-info/RECORD", True),
    ("/x/dist-packages/torch-2.9.dist-info/LICENSE", False),
    ("/sgl-workspace/sglang/python/sglang/srt/server_args.py", True),
    ("/sgl-workspace/sglang/python/sglang/README.md", False),
    ("/x/site-packages/mooncake_transfer_engine_cuda13.libs/libibverbs-1.so.1", True),
    ("/x/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so", True),
    ("/x/site-packages/torch/lib/libtorch_cuda.so", True),
    ("/x/site-packages/torch/functional.py", True),  # what `import torch` runs
    ("/x/site-packages/nvidia/cublas/lib/libcublas.so.13", True),
    ("/x/site-packages/numpy.libs/libgfortran-1.so.5", True),
    # what an extension's import runs and loads, whichever project (issue 39)
    ("/x/site-packages/nixl_ep/__init__.py", True),
    ("/x/site-packages/sgl_kernel/sm100/common_ops.abi3.so", True),
    ("/x/site-packages/flashinfer/data/csrc/norm.cu", False),
    ("/x/site-packages/typing_extensions.py", True),
    ("/x/site-packages/mooncake/mooncake_master", True),  # hashed against its RECORD
    ("/x/site-packages/mooncake/_fast_copy.c", True),
    ("/x/site-packages/mooncake/__pycache__/pg.cpython-311.pyc", False),
    ("/opt/app/helpers.py", False),
    ("/etc/ld.so.cache", True), ("/etc/ld.so.conf.d/cuda.conf", True),
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", False), ("/etc/shadow", False),
    ("/etc/passwd", True), ("/etc/group", True),  # who the config's User is
    # a compiling loader's tools and the adapter it compiled, in any cache folder
    ("/opt/venv/bin/ninja", True), ("/usr/local/cuda/bin/nvcc", True),
    ("/usr/local/cuda/bin/ptxas", False),
    ("/root/.cache/mooncake/pg_jit/58667bdb1897c6214a6a/_mooncake_pg_jit_cuda.so", True),
    ("/var/jit/58667bdb1897c6214a6a/mooncake_backend.o", False),
])
def test_check_wants(path: str, keep: bool) -> None:
    assert check_wants(path, _rules_reads()) is keep


def _rules_declared() -> dict[str, dict[str, tuple[str, ...]]]:
    """Each loader rule's ``IMAGE_READS`` (seam.RULES), read from its module."""
    import importlib

    from moonpin.preflight.extensions import seam

    return {m: getattr(importlib.import_module(f"{seam.RULES_PACKAGE}.{m}"), "IMAGE_READS", {})
            for m in seam.RULES.values()}


def _rules_reads() -> Reads:
    return Reads(*_rules_declared().values())


def _a_path(kind: str, name: str) -> str:
    """An image path of each declared kind of read, where no other rule keeps it."""
    return {"tools": f"/opt/tools/bin/{name}", "objects": f"/var/cache/k/{name}x.so",
            "packages": f"/x/site-packages/{name}/data/blob.bin",
            "libs": f"/x/site-packages/{name}_x.libs/data/blob.bin"}[kind]


def test_what_is_kept_beyond_every_checks_reading_is_what_the_rules_declare() -> None:
    """The layers' reader names no project: the tools, adapters, packages and ``.libs`` a
    loader rule reads are its ``IMAGE_READS``, each kept with the rules' reads and not
    without them."""
    declared = _rules_declared()
    items = {(k, n) for d in declared.values() for k, names in d.items() for n in names}
    assert {k for k, _ in items} <= set(READ_KINDS)
    # mooncake's compiling loader: its tools and its cached adapter (jitenv, note6)
    assert {("tools", "ninja"), ("tools", "nvcc"), ("objects", "_mooncake_pg_jit")} <= items
    reads = _rules_reads()
    for kind, name in sorted(items):
        path = _a_path(kind, name)
        assert check_wants(path, reads), path
        assert not check_wants(path, NO_READS), path
    # a kind no reader knows is an error, not a silent keep-nothing
    with pytest.raises(ValueError, match="no kind of image read"):
        Reads({"tool": ("ninja",)})


def test_check_image_hands_the_rules_reads_to_the_unpacking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check --image`` unpacks with every rule's declaration (the walk reads them, data)."""
    from moonpin.preflight.env import rootfs
    from moonpin.preflight.run import check_image_file

    seen: list[object] = []

    def unpack_to(path: str, platform: object, dest: str, reads: object = ()) -> None:
        seen.append(reads)
        raise ImageError("stop here")

    monkeypatch.setattr(rootfs, "unpack_to", unpack_to)
    report = check_image_file(str(tmp_path / "none"), elastic_ep_backend="mooncake")
    assert "stop here" in " ".join(report.lines())
    assert seen and list(seen[0]) == list(_rules_declared().values())  # type: ignore[call-overload]
