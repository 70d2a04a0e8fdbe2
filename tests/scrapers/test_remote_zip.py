"""Tests of moonpin.scrapers.remote_zip: the range-reading zip reader."""

from __future__ import annotations

import io
import itertools
import os
import random
import zipfile
from collections.abc import Iterator

import pytest

from moonpin.kb.errors import ArchiveError
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.remote_zip import BytesSource, HttpSource, RemoteZip, printable
from tests.lib.server import FakeIndex, Logged
from tests.lib.wheels import (
    BOMB_SIZE,
    HOSTILE_FILENAME,
    HOSTILE_KINDS,
    HOSTILE_METADATA,
    build_wheel,
    hostile_zip,
)

WHL_PATH = "/packages/demo-1.0-py3-none-any.whl"


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    with FakeIndex() as idx:
        yield idx


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(sleep=lambda s: None, retries=2, backoff=0.01)
    yield f
    f.close()


def _spans(reqs: list[Logged], size: int) -> list[tuple[int, int]]:
    """Inclusive byte spans the server was asked for (GETs only)."""
    out = []
    for r in reqs:
        if r.method != "GET":
            continue
        assert r.range is not None, "a whole-body GET"
        spec = r.range.removeprefix("bytes=")
        a, _, b = spec.partition("-")
        if a == "":
            out.append((max(0, size - int(b)), size - 1))
        else:
            out.append((int(a), int(b)))
    return out


def _assert_no_overlap(spans: list[tuple[int, int]]) -> None:
    spans = sorted(spans)
    for (_a1, b1), (a2, _b2) in itertools.pairwise(spans):
        assert a2 > b1, f"bytes fetched twice: {spans}"


def _demo_wheel() -> tuple[dict[str, bytes], bytes]:
    rng = random.Random(1)
    files: dict[str, bytes] = {
        "demo/big.bin": rng.randbytes(200 * 1024),  # incompressible: pushes the rest away
        "demo/__init__.py": b"VERSION = '1.0'\n" * 50,
        "demo/data.txt": b"hello world\n" * 1000,
    }
    _, data = build_wheel("demo", "1.0", files)
    return files, data


# -- a normal wheel over HTTP ----------------------------------------------------------


def test_wheel_over_http(index: FakeIndex, fetcher: Fetcher) -> None:
    files, data = _demo_wheel()
    url = index.add(WHL_PATH, data)
    src = HttpSource(fetcher, url, size=len(data))
    z = RemoteZip(src)
    ref = zipfile.ZipFile(io.BytesIO(data))
    assert z.names() == ref.namelist()
    assert "demo-1.0.dist-info/METADATA" in z.names()
    assert z.read("demo/big.bin") == files["demo/big.bin"]
    assert z.read("demo/__init__.py") == files["demo/__init__.py"]
    meta = z.read("demo-1.0.dist-info/METADATA")
    assert meta == ref.read("demo-1.0.dist-info/METADATA")
    assert b"Name: demo" in meta
    reqs = index.requests_for(WHL_PATH)
    assert len(reqs) <= 3
    _assert_no_overlap(_spans(reqs, len(data)))
    assert src.fetched == sum(b - a + 1 for a, b in _spans(reqs, len(data)))
    # everything needed is now cached: reading again costs nothing
    z.read("demo/big.bin")
    assert len(index.requests_for(WHL_PATH)) == len(reqs)


def test_tail_plus_one_member_costs_few_requests(index: FakeIndex, fetcher: Fetcher) -> None:
    files, data = _demo_wheel()
    url = index.add(WHL_PATH, data)
    z = RemoteZip(HttpSource(fetcher, url), tail_size=4096)  # no size: HEAD first
    assert z.read("demo/big.bin") == files["demo/big.bin"]
    reqs = index.requests_for(WHL_PATH)
    assert len(reqs) <= 3
    _assert_no_overlap(_spans(reqs, len(data)))
    assert index.bytes_sent(WHL_PATH) <= len(data)  # no byte twice


def test_crc_is_verified() -> None:
    _, data = build_wheel("demo", "1.0", {"demo/x.txt": b"x" * 100}, compress=zipfile.ZIP_STORED)
    pos = data.index(b"x" * 100)
    bad = data[:pos] + b"y" + data[pos + 1 :]
    z = RemoteZip(BytesSource(bad, "bad.whl"))
    with pytest.raises(ArchiveError, match="CRC") as ei:
        z.read("demo/x.txt")
    assert "bad.whl" in str(ei.value)


def test_missing_member(index: FakeIndex) -> None:
    _, data = build_wheel("demo", "1.0", {"demo/x.py": b""})
    z = RemoteZip(BytesSource(data, "d.whl"))
    with pytest.raises(ArchiveError, match="no member"):
        z.read("demo/nope.py")
    assert z.read("demo/x.py") == b""


def test_prefetch_coalesces(index: FakeIndex, fetcher: Fetcher) -> None:
    rng = random.Random(2)
    files = {f"pkg/mod{i:03d}.py": rng.randbytes(300) for i in range(120)}
    files["pkg/zz_big.bin"] = rng.randbytes(100 * 1024)  # keeps the modules out of the tail
    _, data = build_wheel("pkg", "1.0", files)
    url = index.add(WHL_PATH, data)
    z = RemoteZip(HttpSource(fetcher, url, size=len(data)), tail_size=8192)
    before = len(index.requests_for(WHL_PATH))
    names = [n for n in z.names() if n.endswith(".py")]
    assert len(names) == 120
    z.prefetch(names)
    after_prefetch = len(index.requests_for(WHL_PATH))
    assert after_prefetch - before <= 3
    for n in names:
        assert z.read(n) == files[n]
    assert len(index.requests_for(WHL_PATH)) == after_prefetch  # all served from cache
    _assert_no_overlap(_spans(index.requests_for(WHL_PATH), len(data)))


def test_prefetch_parallel(index: FakeIndex, fetcher: Fetcher) -> None:
    rng = random.Random(3)
    files = {}
    for i in range(6):
        files[f"pkg/small{i}.py"] = rng.randbytes(500)
        files[f"pkg/gap{i}.bin"] = rng.randbytes(40 * 1024)  # gaps > max_gap
    _, data = build_wheel("pkg", "1.0", files)
    url = index.add(WHL_PATH, data)
    z = RemoteZip(HttpSource(fetcher, url, size=len(data)), tail_size=4096)
    smalls = [f"pkg/small{i}.py" for i in range(6)]
    z.prefetch(smalls, workers=4)
    n = len(index.requests_for(WHL_PATH))
    for name in smalls:
        assert z.read(name) == files[name]
    assert len(index.requests_for(WHL_PATH)) == n


def test_central_directory_larger_than_first_tail(index: FakeIndex, fetcher: Fetcher) -> None:
    files = {f"pkg/sub/module_number_{i:04d}.py": f"x = {i}\n" for i in range(400)}
    _, data = build_wheel("pkg", "1.0", files)
    ref = zipfile.ZipFile(io.BytesIO(data))
    cd_size = len(data) - ref.infolist()[-1].header_offset  # rough: > 400 * 46
    assert cd_size > 1024
    url = index.add(WHL_PATH, data)
    z = RemoteZip(HttpSource(fetcher, url, size=len(data)), tail_size=1024)
    assert z.names() == ref.namelist()
    assert z.read("pkg/sub/module_number_0123.py") == b"x = 123\n"
    assert len(index.requests_for(WHL_PATH)) <= 3
    _assert_no_overlap(_spans(index.requests_for(WHL_PATH), len(data)))


def test_read_prefix_of_large_deflated_member(index: FakeIndex, fetcher: Fetcher) -> None:
    rng = random.Random(4)
    big = rng.randbytes(3 * 1024 * 1024)  # deflate cannot shrink it
    _, data = build_wheel("pkg", "1.0", {"pkg/lib.so": big})
    url = index.add(WHL_PATH, data)
    z = RemoteZip(HttpSource(fetcher, url, size=len(data)))
    entry = z.by_name["pkg/lib.so"]
    assert entry.method == zipfile.ZIP_DEFLATED
    assert entry.compressed_size > 3_000_000
    index.clear_requests()
    assert z.read_prefix("pkg/lib.so", 4096) == big[:4096]
    assert index.bytes_sent(WHL_PATH) < entry.compressed_size // 4
    # a longer prefix keeps going
    assert z.read_prefix("pkg/lib.so", 700_000) == big[:700_000]


def test_read_prefix_stored_and_short(fetcher: Fetcher) -> None:
    _, data = build_wheel(
        "pkg", "1.0", {"pkg/a.txt": b"abcdef" * 10}, compress=zipfile.ZIP_STORED
    )
    z = RemoteZip(BytesSource(data))
    assert z.read_prefix("pkg/a.txt", 4) == b"abcd"
    assert z.read_prefix("pkg/a.txt", 10_000) == b"abcdef" * 10


# -- hostile archives -----------------------------------------------------------------

#: kinds whose archive is valid (if tricky) and must read correctly
VALID_KINDS = {"zip64", "local_extra_differs", "data_descriptor", "eocd_in_comment"}
#: kinds that are rejected when the archive is opened
OPEN_FAILS = {"truncated", "no_eocd", "cd_out_of_bounds", "duplicate_names"}
#: kinds that open but whose (named) member is rejected when read
READ_FAILS = {
    "bomb": ("hostile/bomb.bin", "zip bomb|cap"),
    "unsupported_compression": ("hostile-1.0.dist-info/METADATA", "compression method 99"),
    "local_header_mismatch": ("hostile-1.0.dist-info/METADATA", "local header"),
}


def test_every_hostile_kind_is_classified() -> None:
    assert set(HOSTILE_KINDS) == VALID_KINDS | OPEN_FAILS | set(READ_FAILS) | {"path_traversal"}


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
@pytest.mark.parametrize("over_http", [False, True])
def test_hostile(kind: str, over_http: bool, index: FakeIndex, fetcher: Fetcher) -> None:
    data = hostile_zip(kind)
    label = f"{HOSTILE_FILENAME}[{kind}]"
    if over_http:
        url = index.add("/" + HOSTILE_FILENAME, data)
        src: BytesSource | HttpSource = HttpSource(fetcher, url, size=len(data), label=label)
    else:
        src = BytesSource(data, label)
    if kind in OPEN_FAILS:
        with pytest.raises(ArchiveError) as ei:
            RemoteZip(src, tail_size=256)
        assert label in str(ei.value)
        return
    z = RemoteZip(src, tail_size=256)
    meta = "hostile-1.0.dist-info/METADATA"
    if kind in READ_FAILS:
        member, pattern = READ_FAILS[kind]
        with pytest.raises(ArchiveError, match=pattern) as ei:
            # the honest 50 MiB bomb is under the default 256 MiB cap and the 64 MiB
            # ratio floor, so a caller-given cap is what refuses it
            z.read(member, cap=1024 * 1024 if kind == "bomb" else None)
        assert label in str(ei.value)
        if member != meta:
            assert z.read(meta) == HOSTILE_METADATA
        return
    assert z.read(meta) == HOSTILE_METADATA
    assert z.read("hostile/__init__.py") == b"print('hostile')\n"
    assert z.read_prefix(meta, 10) == HOSTILE_METADATA[:10]
    if kind == "path_traversal":
        names = z.names()
        for n in ("../../evil.py", "/abs/evil.py", "hostile\\win.py", "hostile/ctrl\x07.py"):
            assert n in names
        assert z.read("../../evil.py") == b"print('escaped')\n"


def test_duplicate_names_message() -> None:
    with pytest.raises(ArchiveError, match="duplicate member name"):
        RemoteZip(BytesSource(hostile_zip("duplicate_names"), "dup.whl"))


def test_printable_escapes_control_characters() -> None:
    z = RemoteZip(BytesSource(hostile_zip("path_traversal")))
    ctrl = "hostile/ctrl\x07.py"
    assert ctrl in z.names()
    shown = printable(ctrl)
    assert "\x07" not in shown
    assert shown == "hostile/ctrl\\x07.py"
    assert shown.isprintable()
    assert printable("../../evil.py") == "../../evil.py"
    assert printable("a\nb\x1b[31m") == "a\\nb\\x1b[31m"
    with pytest.raises(ArchiveError) as ei:
        z.read("evil\x1b[2J")
    assert "\x1b" not in str(ei.value)


def _patch_cd_usize(data: bytes, name: bytes, usize: int) -> bytes:
    """Rewrite the uncompressed size a central-directory record declares for ``name``."""
    pos = data.index(b"PK\x01\x02")
    while True:
        nlen = int.from_bytes(data[pos + 28 : pos + 30], "little")
        if data[pos + 46 : pos + 46 + nlen] == name:
            break
        pos = data.index(b"PK\x01\x02", pos + 4)
    out = bytearray(data)
    out[pos + 24 : pos + 28] = usize.to_bytes(4, "little")
    return bytes(out)


def test_bomb_with_lying_large_size_is_refused_by_ratio() -> None:
    data = _patch_cd_usize(hostile_zip("bomb"), b"hostile/bomb.bin", 200 * 1024 * 1024)
    z = RemoteZip(BytesSource(data, "bomb.whl"))
    with pytest.raises(ArchiveError, match="zip bomb") as ei:
        z.read("hostile/bomb.bin")
    assert "bomb.whl" in str(ei.value)
    with pytest.raises(ArchiveError, match="zip bomb"):
        z.read_prefix("hostile/bomb.bin", 10)


def test_bomb_with_lying_small_size_is_bounded() -> None:
    data = _patch_cd_usize(hostile_zip("bomb"), b"hostile/bomb.bin", 1000)
    z = RemoteZip(BytesSource(data, "bomb.whl"))
    with pytest.raises(ArchiveError, match="the central directory says 1000"):
        z.read("hostile/bomb.bin")
    assert z.read_prefix("hostile/bomb.bin", 10**6) == bytes(1000)


def test_bomb_cap_and_bounded_prefix() -> None:
    z = RemoteZip(BytesSource(hostile_zip("bomb"), "bomb.whl"), member_cap=1024 * 1024)
    assert z.by_name["hostile/bomb.bin"].file_size == BOMB_SIZE
    with pytest.raises(ArchiveError, match="cap") as ei:
        z.read("hostile/bomb.bin")
    assert "bomb.whl" in str(ei.value)
    z2 = RemoteZip(BytesSource(hostile_zip("bomb"), "bomb.whl"))
    assert z2.read_prefix("hostile/bomb.bin", 1000) == bytes(1000)


# -- local bytes, truncation, from_tail ----------------------------------------------------


def test_bytes_source() -> None:
    files, data = _demo_wheel()
    z = RemoteZip(BytesSource(data, "local.whl"))
    assert z.label == "local.whl"
    for name, body in files.items():
        assert z.read(name) == body
    src = BytesSource(b"0123456789")
    assert src.tail(3) == (7, b"789")
    assert src.tail(100) == (0, b"0123456789")
    assert src.read(2, 5) == b"234"
    with pytest.raises(ArchiveError, match="outside"):
        src.read(5, 11)


def test_from_path(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    _, data = build_wheel("demo", "1.0", {"demo/a.py": b"a = 1\n"})
    p = tmp_path / "demo-1.0-py3-none-any.whl"
    p.write_bytes(data)
    z = RemoteZip(BytesSource.from_path(p))
    assert str(p) in z.label
    assert z.read("demo/a.py") == b"a = 1\n"


@pytest.mark.parametrize("cut", [1, 22, 100, 1000])
def test_truncated_file(cut: int) -> None:
    _, data = _demo_wheel()
    with pytest.raises(ArchiveError) as ei:
        RemoteZip(BytesSource(data[:-cut], "cut.whl"))
    assert "cut.whl" in str(ei.value)


def test_too_short_and_not_a_zip() -> None:
    with pytest.raises(ArchiveError, match="too short"):
        RemoteZip(BytesSource(b"PK", "tiny.whl"))
    with pytest.raises(ArchiveError, match="not a zip"):
        RemoteZip(BytesSource(os.urandom(5000).replace(b"PK", b"pk"), "noise.whl"))


def test_corrupt_deflate_stream() -> None:
    body = b"some text " * 500
    _, data = build_wheel("demo", "1.0", {"demo/t.txt": body})
    ref = zipfile.ZipFile(io.BytesIO(data))
    info = ref.getinfo("demo/t.txt")
    start = info.header_offset + 30 + len(info.filename)
    bad = bytearray(data)
    for i in range(start, start + 20):
        bad[i] ^= 0xFF
    z = RemoteZip(BytesSource(bytes(bad), "z.whl"))
    with pytest.raises(ArchiveError, match=r"z\.whl"):
        z.read("demo/t.txt")


def test_from_tail_finds_metadata(index: FakeIndex, fetcher: Fetcher) -> None:
    files = {f"torch/lib/part_{i:05d}.py": f"# {i}\n" for i in range(3000)}
    _, data = build_wheel("torch", "2.1.0", files, requires_dist=["filelock"])
    url = index.add(WHL_PATH, data)
    src = HttpSource(fetcher, url, size=len(data))
    z = RemoteZip.from_tail(src, tail_size=8192)
    assert z.partial is True
    names = z.names()
    assert "torch-2.1.0.dist-info/METADATA" in names
    assert "torch-2.1.0.dist-info/RECORD" in names
    assert len(names) < 3000  # only the records inside the tail
    full = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert names == full[-len(names) :]  # every record in the tail, in order, none invented
    meta = z.read("torch-2.1.0.dist-info/METADATA")
    assert b"Requires-Dist: filelock" in meta
    assert index.bytes_sent(WHL_PATH) < len(data) // 4


def test_from_tail_small_archive_is_complete() -> None:
    files, data = _demo_wheel()
    z = RemoteZip.from_tail(BytesSource(data))
    assert z.partial is False
    assert len(z.names()) == len(files) + 3
