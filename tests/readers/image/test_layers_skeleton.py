"""A big shared library is kept as what the loader model reads of it (its skeleton): real
objects built here with gcc (and moved about by patchelf, as auditwheel does), streamed
through :class:`moonpin.readers.image.layers._Skeleton` or a whole unpack, read back by the
loader model's own readers and compared with the original object."""

from __future__ import annotations

import gzip
import io
import mmap
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from moonpin.readers.elf import analysis as elf
from moonpin.readers.elf import symbols as elfsym
from moonpin.readers.image import layers
from moonpin.readers.image.layers import SKELETON_MIN, unpack
from moonpin.readers.image.manifest import open_image
from tests.hostile.test_image_files import layout

_SRC = r"""
#include <math.h>
#include <string.h>
/* about 3 MiB of read-only data between the tables and the code: what is never written */
#define N (3 << 20)
const unsigned char blob[N] = {1, 2, 3};
__attribute__((noinline)) double area(double r) { return 3.14159 * r * r + cos(r); }
int copy(char *d, const char *s, unsigned long n) { memcpy(d, s, n); return blob[n % N]; }
int old_api(void) { return 1; }
int new_api(void) { return 2; }
"""
_VERSIONS = ("LIBT_1 { global: area; copy; old_api; local: *; };\n"
             "LIBT_2 { global: new_api; } LIBT_1;\n")


def _facts(path: Path) -> tuple[object, ...]:
    """Everything the loader model reads from the object at ``path``."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        a = elf.analyze(m, len(m), ())  # type: ignore[arg-type]
        t = elfsym.SymbolTable(m)  # type: ignore[arg-type]
        undefined = sorted((u.name, u.weak, u.need.name if u.need else None)
                           for u in t.undefined())
        defined = {n: t.defines(n, elfsym.gnu_hash(n), elfsym.elf_hash(n), None)
                   for n in (b"area", b"copy", b"old_api", b"new_api", b"blob", b"nothing")}
        return (tuple(a.needed), tuple(a.search_path), a.runpath_tag, a.soname, t.soname,
                sorted(t.definitions().items()), t.version_names(),
                sorted((k, v.file, v.name) for k, v in t.needs().items()), undefined, defined,
                os.path.getsize(path))


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("skel")
    (d / "t.c").write_text(_SRC)
    (d / "t.map").write_text(_VERSIONS)
    plain = d / "libt.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libt.so.1",
                    f"-Wl,--version-script={d / 't.map'}", "-o", str(plain), str(d / "t.c"),
                    "-lm"], check=True, capture_output=True)
    out = {"plain": plain}
    if shutil.which("patchelf") is not None:
        moved = d / "libt-moved.so.1"  # auditwheel's repair: .dynstr rewritten at the end
        shutil.copy(plain, moved)
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../" + "long/" * 200 + "lib",
                        "--add-needed", "libz.so.1", str(moved)], check=True,
                       capture_output=True)
        out["moved"] = moved
    return out


def _skeleton(src: Path, dest: Path) -> int | None:
    size = src.stat().st_size
    with open(src, "rb") as f, open(dest, "wb") as out:
        head = f.read(1 << 20)
        sk = layers._Skeleton.plan(head, size)
        assert sk is not None
        return sk.write(out.fileno(), head, f, str(src))


@pytest.mark.parametrize("kind", ["plain", "moved"])
def test_the_skeleton_reads_as_the_object(objects: dict[str, Path], kind: str,
                                          tmp_path: Path) -> None:
    if kind not in objects:
        pytest.skip("patchelf is not installed")
    src = objects[kind]
    assert src.stat().st_size > SKELETON_MIN
    dest = tmp_path / "skel.so"
    written = _skeleton(src, dest)
    assert written is not None and written < 256 << 10, written  # the blob is not written
    assert dest.stat().st_blocks * 512 < 512 << 10  # a sparse file: holes where it was
    assert _facts(dest) == _facts(src)
    if kind == "moved":  # the tables patchelf moved lie after PT_DYNAMIC: kept as they came
        assert "libz.so.1" in _facts(dest)[0]  # type: ignore[operator]


def test_a_table_past_what_is_held_wants_the_object_whole(
        objects: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "_RETAIN", 64)  # nothing past the ELF header held
    assert _skeleton(objects["plain"], tmp_path / "skel.so") is None


def _image(tmp_path: Path, objects: dict[str, Path]) -> Path:
    members = []
    for rel, src in (("opt/venv/lib/python3.11/site-packages/torch/lib/libt.so.1",
                      objects["plain"]),
                     ("opt/venv/lib/python3.11/site-packages/mooncake/libt.so.1",
                      objects["plain"])):
        ti = tarfile.TarInfo(rel)
        data = src.read_bytes()
        ti.size, ti.mode = len(data), 0o755
        members.append((ti, data))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data))
    return layout(tmp_path / "oci", [gzip.compress(buf.getvalue(), 1)])


def test_unpack_keeps_skeletons_but_where_bytes_are_searched(
        objects: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's library is written as its skeleton; mooncake's (whose strings the check
    searches: its rule's ``IMAGE_READS``) whole; and with nothing held, the object is taken
    whole on a second read of its layer."""
    from moonpin.preflight.extensions.rules.mooncake_rule import IMAGE_READS

    where = _image(tmp_path, objects)
    want = _facts(objects["plain"])
    for retain, note in ((layers._RETAIN, False), (64, True)):
        monkeypatch.setattr(layers, "_RETAIN", retain)
        dest = tmp_path / f"root{retain}"
        dest.mkdir()
        img = open_image(str(where))
        unpack(img, str(dest), reads=[IMAGE_READS])
        site = dest / "opt/venv/lib/python3.11/site-packages"
        torch_lib, mooncake_lib = site / "torch/lib/libt.so.1", site / "mooncake/libt.so.1"
        assert _facts(torch_lib) == want == _facts(mooncake_lib)
        assert mooncake_lib.read_bytes() == objects["plain"].read_bytes()
        assert (torch_lib.read_bytes() == objects["plain"].read_bytes()) is note
        assert any("re-read layer 1" in n for n in img.notes) is note


def _analyzed(data: bytes) -> tuple[object, ...]:
    a = elf.analyze(data, len(data), ())
    return tuple(a.needed), tuple(a.search_path), a.runpath_tag, a.soname, tuple(a.warnings)


@pytest.mark.parametrize("bits", [64, 32])
@pytest.mark.parametrize("dynstr_in_rw", [False, True])
@pytest.mark.parametrize("overrides", [None, {10: 0xFFFFFFF0}, {5: 0xDEAD0000}],
                         ids=["sound", "huge DT_STRSZ", "unmapped DT_STRTAB"])
def test_skeletons_of_built_objects(tmp_path: Path, bits: int, dynstr_in_rw: bool,
                                    overrides: dict[int, int] | None) -> None:
    """Both word sizes, the string table before or after PT_DYNAMIC, hostile dynamic
    entries: the skeleton (no gcc needed) is read as the object is, and a bad table is
    never a crash or a write out of the file. Where ``DT_STRTAB`` maps nowhere the reader
    guesses names from the read-only data, which the skeleton has not: what the loader
    model takes from it, the warning that makes the object unloadable, is the same."""
    from tests.lib.elfbuild import build_so

    data = build_so(("libcudart.so.13", "libtorch.so"), soname="libx.so", bits=bits,
                    padding_before_dynamic=3 << 20, dynstr_in_rw=dynstr_in_rw,
                    dyn_overrides=overrides)
    src, dest = tmp_path / "x.so", tmp_path / "skel.so"
    src.write_bytes(data)
    written = _skeleton(src, dest)
    assert written is not None and written < 64 << 10
    got = dest.read_bytes()
    assert len(got) == len(data)
    if overrides is None or 10 in overrides:
        assert _analyzed(got) == _analyzed(data)
    else:  # what moonpin.preflight.loader.ldso.read_dynamic makes a problem of
        def fatal(b: bytes) -> list[str]:
            return [w for w in elf.analyze(b, len(b), ()).warnings
                    if "DT_STRTAB" in w or "PT_DYNAMIC" in w]
        assert fatal(got) == fatal(data) != []
