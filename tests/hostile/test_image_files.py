"""Hostile image files: each a clear ImageError naming the file and why, nothing written
outside the unpack folder, and the unpack folder left empty. The bad layers are built
here with ``tarfile``: they are the bad input, not an image maker."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from moonpin.readers.image.layers import unpack
from moonpin.readers.image.manifest import ImageError, open_image

Member = tuple[tarfile.TarInfo, bytes]


def _m(name: str, data: bytes = b"x", **kw: object) -> Member:
    ti = tarfile.TarInfo(name)
    ti.size = len(data) if kw.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti, data


def layer_tar(members: list[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


def _blob(root: Path, data: bytes) -> dict[str, object]:
    h = hashlib.sha256(data).hexdigest()
    (root / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs/sha256" / h).write_bytes(data)
    return {"digest": f"sha256:{h}", "size": len(data)}


def layout(root: Path, layers: list[bytes], *, config: bytes | None = None,
           manifest: bytes | None = None, index: bytes | None = None) -> Path:
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    cfg = config if config is not None else json.dumps(
        {"os": "linux", "architecture": "amd64", "config": {"Env": ["PATH=/usr/bin"]},
         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    descs = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **_blob(root, data)}
             for data in layers]
    man = manifest if manifest is not None else json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **_blob(root, cfg)}, "layers": descs}).encode()
    idx = index if index is not None else json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **_blob(root, man)}]}).encode()
    (root / "index.json").write_bytes(idx)
    return root


def _outside_untouched(tmp: Path, dest: Path, before: set[str]) -> None:
    after = {str(p) for p in tmp.rglob("*") if not str(p).startswith(str(dest) + "/")}
    assert after == before, after ^ before
    assert not os.path.exists("/tmp/pwned-by-moonpin")
    assert list(dest.iterdir()) == []


def _fails(tmp: Path, img: Path, match: str, **kw: object) -> None:
    dest = tmp / "dest"
    dest.mkdir()
    before = {str(p) for p in tmp.rglob("*") if not str(p).startswith(str(dest) + "/")}
    with pytest.raises(ImageError, match=match):
        unpack(open_image(str(img)), str(dest), want=lambda p: True, **kw)  # type: ignore[arg-type]
    _outside_untouched(tmp, dest, before)


GOOD = [_m("etc/ok", b"fine")]


@pytest.mark.parametrize(("members", "match"), [
    ([*GOOD, _m("/etc/abs")], r"'/etc/abs' has an absolute name"),
    ([*GOOD, _m("a/../../x")], r"'\.\.' in its name"),
    ([*GOOD, _m("h", type=tarfile.LNKTYPE, linkname="../../etc/passwd")], r"'\.\.' in its"),
    ([*GOOD, _m("h", type=tarfile.LNKTYPE, linkname="/etc/passwd")], r"absolute name"),
    ([*GOOD, _m("s", type=tarfile.SYMTYPE, linkname="../../../tmp/pwned-by-moonpin")],
     r"symlink /s -> \.\./\.\./\.\./tmp/pwned-by-moonpin points out of the image root"),
    ([*GOOD, _m("dev/zero", type=tarfile.CHRTYPE)], r"/dev/zero is a character device"),
    ([*GOOD, _m("fifo", type=tarfile.FIFOTYPE)], r"/fifo is a FIFO"),
    ([*GOOD, _m("x", type=tarfile.SYMTYPE, linkname="y"),
      _m("y", type=tarfile.SYMTYPE, linkname="x"), _m("x/f")], r"symlinks loop while resolving"),
    ([*GOOD, _m("h", type=tarfile.LNKTYPE, linkname="nothere")],
     r"hard link /h -> /nothere names a file the layer does not hold"),
])
def test_hostile_members(tmp_path: Path, members: list[Member], match: str) -> None:
    img = layout(tmp_path / "img", [gzip.compress(layer_tar(members))])
    _fails(tmp_path, img, match)


def test_symlink_then_write_through_it(tmp_path: Path) -> None:
    """A link to / then a file under it: the file lands inside dest, never outside."""
    members = [_m("up", type=tarfile.SYMTYPE, linkname="/"),
               _m("abs", type=tarfile.SYMTYPE, linkname="/tmp"),
               _m("up/tmp/pwned-by-moonpin", b"no"), _m("abs/pwned-by-moonpin", b"no")]
    img = layout(tmp_path / "img", [gzip.compress(layer_tar(members))])
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack(open_image(str(img)), str(dest), want=lambda p: True)
    assert (dest / "tmp/pwned-by-moonpin").read_bytes() == b"no"
    assert os.readlink(dest / "abs") == "tmp" and os.readlink(dest / "up") == "."
    assert not os.path.exists("/tmp/pwned-by-moonpin")


def _gz(members: list[Member]) -> bytes:
    return gzip.compress(layer_tar(members))


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda b: b[: len(b) // 2], r"is \d+ bytes, not the \d+ its manifest says"),
    (lambda b: b[:10] + bytes(64) + b[74:], r"gzip stream is corrupt|not a readable tar"),
])
def test_damaged_layer_blob(tmp_path: Path, mutate: Callable[[bytes], bytes],
                            match: str) -> None:
    data = _gz([*GOOD, _m("etc/more", os.urandom(5000))])
    img = layout(tmp_path / "img", [data])
    blob = img / "blobs/sha256" / hashlib.sha256(data).hexdigest()
    blob.write_bytes(mutate(data))
    _fails(tmp_path, img, match)


def test_digest_mismatch(tmp_path: Path) -> None:
    data = layer_tar([*GOOD, _m("etc/more", b"a" * 5000)])
    img = layout(tmp_path / "img", [data])
    blob = img / "blobs/sha256" / hashlib.sha256(data).hexdigest()
    blob.write_bytes(data.replace(b"a" * 10, b"b" * 10, 1))
    _fails(tmp_path, img, r"its sha256 is sha256:[0-9a-f]+, not the digest sha256:")


def test_truncated_layer_with_its_size_rewritten(tmp_path: Path) -> None:
    data = _gz([*GOOD, _m("etc/more", os.urandom(50000))])
    cut = data[: len(data) // 2]
    img = layout(tmp_path / "img", [cut])
    _fails(tmp_path, img, r"truncated")


def test_missing_blob(tmp_path: Path) -> None:
    data = _gz(GOOD)
    img = layout(tmp_path / "img", [data])
    (img / "blobs/sha256" / hashlib.sha256(data).hexdigest()).unlink()
    with pytest.raises(ImageError, match=r"names layer sha256:[0-9a-f]+, which is not in"):
        open_image(str(img))


@pytest.mark.parametrize(("kw", "match"), [
    ({"index": b"{not json"}, r"index.json is not valid JSON"),
    ({"index": b'{"manifests": 3}'}, r"index.json is not an image index"),
    ({"index": b'[' * 100000}, r"index.json is not valid JSON"),
    ({"manifest": b"[]"}, r"is not an image manifest"),
    ({"manifest": b'{"config": {}, "layers": []}'}, r"'config' has no digest"),
    ({"config": b'{"os": 1}'}, r"'os' and 'architecture' are not both strings"),
    ({"config": b'{"os": "linux", "architecture": "amd64", "config": {"Env": "x"}}'},
     r"config.Env is not a list of strings"),
])
def test_bad_documents(tmp_path: Path, kw: dict[str, bytes], match: str) -> None:
    img = layout(tmp_path / "img", [_gz(GOOD)], **kw)
    with pytest.raises(ImageError, match=match):
        open_image(str(img))


def test_index_loop(tmp_path: Path) -> None:
    img = layout(tmp_path / "img", [_gz(GOOD)])
    # an index naming itself is impossible (its digest would change), so two that name
    # each other can't exist either; a chain deeper than the cap stands for the loop
    desc = json.loads((img / "index.json").read_text())["manifests"][0]
    for _ in range(6):
        inner = json.dumps({"schemaVersion": 2, "manifests": [desc]}).encode()
        desc = {"mediaType": "application/vnd.oci.image.index.v1+json", **_blob(img, inner)}
    (img / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    with pytest.raises(ImageError, match=r"nests in a loop or deeper than 4 levels"):
        open_image(str(img))


def test_bad_paths(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImageError, match=r"a folder without index.json"):
        open_image(str(tmp_path / "empty"))
    with pytest.raises(ImageError, match=r"not a regular file or a folder"):
        open_image("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ImageError, match=r"not a regular file or a folder"):
        open_image(str(tmp_path / "fifo"))   # opened without blocking: no hang
    (tmp_path / "junk.tar").write_bytes(b"hello" * 300)
    with pytest.raises(ImageError, match=r"not a tar archive"):
        open_image(str(tmp_path / "junk.tar"))
    (tmp_path / "z.tar.gz").write_bytes(gzip.compress(b"x"))
    with pytest.raises(ImageError, match=r"compressed file; decompress it first"):
        open_image(str(tmp_path / "z.tar.gz"))
    with pytest.raises(ImageError, match=r"cannot be opened"):
        open_image(str(tmp_path / "nothere"))


def test_docker_archive_missing_layer(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in (("manifest.json", json.dumps(
                [{"Config": "c.json", "Layers": ["l/layer.tar"]}]).encode()),
                ("c.json", b'{"os": "linux", "architecture": "amd64"}')):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    (tmp_path / "d.tar").write_bytes(buf.getvalue())
    with pytest.raises(ImageError, match=r"names layer 'l/layer.tar', which is not in the"):
        open_image(str(tmp_path / "d.tar"))


def test_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    img = layout(tmp_path / "img", [_gz([_m(f"f{i}", b"y" * 1000) for i in range(50)])])
    _fails(tmp_path, img, r"pass 0 MiB, the cap \(max_bytes; set MOONPIN_IMAGE_MAX_KEPT",
           max_bytes=10_000)
    (tmp_path / "dest").rmdir()
    monkeypatch.setenv("MOONPIN_IMAGE_MAX_MEMBERS", "20")
    _fails(tmp_path, img, r"more than 20 members.*MOONPIN_IMAGE_MAX_MEMBERS")


def test_gzip_bomb(tmp_path: Path) -> None:
    """200 MiB of zeros in ~200 KB of gzip (one member of 1 MiB of zeros repeated, a valid
    multi-member stream): refused by the expansion cap after 64 MiB."""
    ti = tarfile.TarInfo("zeros")
    ti.size = 200 << 20
    block = gzip.compress(bytes(1 << 20), compresslevel=9)
    img = layout(tmp_path / "img", [gzip.compress(ti.tobuf(format=tarfile.PAX_FORMAT))
                                    + block * 200])
    _fails(tmp_path, img, r"expands more than 250x.*MOONPIN_IMAGE_MAX_RATIO")


def test_huge_pax_header(tmp_path: Path) -> None:
    ti = tarfile.TarInfo("././@PaxHeader")
    ti.type = tarfile.XHDTYPE
    ti.size = 1 << 30
    data = gzip.compress(ti.tobuf(format=tarfile.USTAR_FORMAT) + bytes(4096))
    img = layout(tmp_path / "img", [data])
    _fails(tmp_path, img, r"an extended header of 1073741824 bytes")
