"""The real worker venv packed by umoci (opt-in: ``pytest -m image``): unpacked with the
default policy, every file the check reads is there, as it is in the venv.

``MOONPIN_TEST_VENV`` names the venv (default ``/tmp/realimg/venv``);
``MOONPIN_TEST_IMAGE_LAYOUT`` an OCI layout already packed by
:func:`tests.lib.umoci.pack_venv` with the arguments below (packing takes minutes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonpin.readers.image.layers import _elf_needs, check_wants, unpack
from moonpin.readers.image.manifest import open_image
from tests.lib.umoci import HOST_LIBS, need_tools, pack_venv

pytestmark = pytest.mark.image

VENV = Path(os.environ.get("MOONPIN_TEST_VENV", "/tmp/realimg/venv"))
REPLACED = "lib/python3.11/site-packages/sglang/version.py"
DELETED = "lib/python3.11/site-packages/sglang-0.5.21.dist-info/INSTALLER"


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (VENV / "pyvenv.cfg").exists():
        pytest.skip(f"no real venv at {VENV} (set MOONPIN_TEST_VENV)")
    given = os.environ.get("MOONPIN_TEST_IMAGE_LAYOUT")
    if given:
        return Path(given)
    need_tools()
    return pack_venv(tmp_path_factory.mktemp("real") / "oci", VENV, replaced=REPLACED,
                     deleted=DELETED)


def test_every_file_the_check_reads_is_there(layout: Path, tmp_path: Path) -> None:
    dest = tmp_path / "root"
    dest.mkdir()
    img = open_image(str(layout))
    unpack(img, str(dest))
    opt = dest / "opt/venv"
    wanted = 0
    for dirpath, dirs, files in os.walk(VENV):
        for n in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            src = Path(dirpath) / n
            rel = str(src.relative_to(VENV))
            if not check_wants("/opt/venv/" + rel):
                continue
            got = opt / rel
            if rel == DELETED:
                assert not os.path.lexists(got)
                continue
            wanted += 1
            if src.is_symlink():
                assert got.is_symlink(), rel
            elif rel == REPLACED:
                assert got.read_bytes().endswith(b"# replaced by a later layer\n")
            else:
                assert got.stat().st_size == src.stat().st_size, rel
    assert wanted > 3000
    assert (opt / "bin/python").resolve().is_relative_to(dest.resolve())
    assert (opt / "bin/python").resolve().is_file()
    # the host libraries the kept objects need are kept, with their soname links
    needed: set[str] = set()
    for dirpath, _dirs, files in os.walk(dest):
        for n in files:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                needed |= set(_elf_needs(p)[0])
    libdir = dest / "usr/lib/x86_64-linux-gnu"
    for name in HOST_LIBS:
        if name in needed and os.path.exists(f"/usr/lib/x86_64-linux-gnu/{name}"):
            assert (libdir / name).exists(), name
    assert not (libdir / "libssl.so.3").exists() or "libssl.so.3" in needed
    assert os.readlink(dest / "lib") == "usr/lib"


def test_the_image_check_is_the_check_of_its_venv(layout: Path) -> None:
    """``check --image`` on the packed venv reaches the verdict ``--python`` reaches on the
    venv itself: the same binding of every symbol (the packed root carries the host
    libraries the venv's objects load, as a real image carries its own). The import inside
    that root, run in a chroot with the stub driver, succeeded by hand (2026-12-02)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    stubs = VENV.parent / "stubs"
    env = {**os.environ, "LD_LIBRARY_PATH": str(stubs)}

    def check(*how: str) -> tuple[int, list[str]]:
        r = subprocess.run([sys.executable, "-m", "moonpin.preflight", *how,
                            "--elastic-ep-backend", "mooncake", "--no-deep"], cwd=root,
                           capture_output=True, text=True, timeout=1800, env=env)
        keep = [ln.split(":")[0] + ":" + ln.split(":")[1].split("(")[0]
                for ln in r.stdout.splitlines() if ln.startswith(("pass  symbols", "fail"))]
        return r.returncode, keep

    image = check("--image", str(layout))
    venv = check("--python", str(VENV / "bin/python"))
    assert image == venv and image[0] == 0, (image, venv)


def _relabel(sp: Path) -> None:
    p = sp / "torch" / "version.py"
    text = p.read_text()
    p.unlink()  # a file of its own, not a hard link into the venv
    p.write_text(text.replace("__version__ = '2.13.0", "__version__ = '2.12.0", 1))


def _no_torch_version(sp: Path) -> None:
    (sp / "torch" / "torch_version.py").unlink()


@pytest.mark.parametrize("mutate", [_relabel, _no_torch_version])
def test_a_packed_broken_image_fails_as_its_import_fails(tmp_path: Path, mutate: object
                                                         ) -> None:
    """A hard-link copy of the venv broken one way (a torch label that is another release's:
    the loader picks pg_2_12_0 and ld.so refuses it; torch/torch_version.py gone: `import
    torch` fails), packed by umoci: ``--image`` fails where the real import in the venv
    fails, on the same first line as ``--python`` on the venv."""
    import subprocess
    import sys

    if not (VENV / "pyvenv.cfg").exists():
        pytest.skip(f"no real venv at {VENV} (set MOONPIN_TEST_VENV)")
    need_tools()
    venv = tmp_path / "venv"
    subprocess.run(["cp", "-al", str(VENV), str(venv)], check=True)
    mutate(venv / "lib/python3.11/site-packages")  # type: ignore[operator]
    layout = pack_venv(tmp_path / "oci", venv, replaced=REPLACED, deleted=DELETED)
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "LD_LIBRARY_PATH": str(VENV.parent / "stubs")}
    real = subprocess.run([str(venv / "bin/python"), "-c", "import mooncake.pg"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert real.returncode != 0

    def first_failure(*how: str) -> tuple[int, str]:
        r = subprocess.run([sys.executable, "-m", "moonpin.preflight", *how,
                            "--elastic-ep-backend", "mooncake", "--no-deep", "-q"], cwd=root,
                           capture_output=True, text=True, timeout=1800, env=env)
        fails = [ln for ln in r.stdout.splitlines() if ln.startswith("fail")]
        return r.returncode, fails[0].split(":")[0] if fails else ""

    image = first_failure("--image", str(layout))
    own = first_failure("--python", str(venv / "bin/python"))
    assert image == own and image[0] == 1, (image, own)


def test_a_umoci_bundle_is_judged_as_its_image_file(layout: Path, tmp_path: Path) -> None:
    """``check --rootfs BUNDLE`` (and ``BUNDLE/rootfs``) on what ``umoci unpack`` leaves of
    the packed venv reaches the verdict ``--image`` reaches, line for line: the bundle's
    config.json gives the Env (PATH=/opt/venv/bin:...) and args the image's config has
    (issue 40; before, the bundle was not read and no interpreter was found)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    bundle = tmp_path / "bundle"
    r = subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{layout}:t",
                        str(bundle)], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr

    def check(*how: str) -> tuple[int, list[str]]:
        r = subprocess.run([sys.executable, "-m", "moonpin.preflight", *how,
                            "--elastic-ep-backend", "mooncake"], cwd=root,
                           capture_output=True, text=True, timeout=1800)
        keep = [ln.split(":")[0] for ln in r.stdout.splitlines() if ln[:4] in (
            "pass", "fail", "warn", "skip")]
        return r.returncode, keep + r.stdout.splitlines()[-1:]

    image = check("--image", str(layout))
    assert check("--rootfs", str(bundle)) == image
    assert check("--rootfs", str(bundle / "rootfs")) == image
    assert image[0] == 0, image
