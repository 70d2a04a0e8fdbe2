"""Tests of the test infrastructure itself: the fake index and the wheel builders."""

from __future__ import annotations

import concurrent.futures
import csv
import gzip
import hashlib
import io
import struct
import time
import zipfile
from collections.abc import Iterator
from urllib.parse import urljoin

import httpx
import pytest

from tests.lib.server import FakeIndex
from tests.lib.wheels import (
    BOMB_SIZE,
    HOSTILE_KINDS,
    HOSTILE_METADATA,
    build_wheel,
    hostile_zip,
    record_hash,
)

BODY = bytes(range(256)) * 4  # 1024 distinct-ish bytes
SIZE = len(BODY)
PATH = "/files/blob.bin"


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    """A running fake index with :data:`BODY` at :data:`PATH`."""
    with FakeIndex() as idx:
        idx.add(PATH, BODY)
        yield idx


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    """An httpx client with short timeouts."""
    with httpx.Client(timeout=5.0) as c:
        yield c


def get(client: httpx.Client, index: FakeIndex, rng: str | None = None) -> httpx.Response:
    """GET :data:`PATH`, optionally with a Range header."""
    headers = {"Range": rng} if rng is not None else {}
    return client.get(index.url_for(PATH), headers=headers)


# -- default Range behaviour ---------------------------------------------------------


def test_whole_body(index: FakeIndex, client: httpx.Client) -> None:
    r = get(client, index)
    assert r.status_code == 200
    assert r.content == BODY
    assert r.headers["Content-Length"] == str(SIZE)
    assert r.headers["Accept-Ranges"] == "bytes"
    assert r.headers["ETag"] == '"' + hashlib.sha256(BODY).hexdigest()[:32] + '"'
    assert "Content-Range" not in r.headers


@pytest.mark.parametrize(
    ("rng", "start", "end"),
    [
        ("bytes=2-5", 2, 5),
        ("bytes=0-0", 0, 0),
        ("bytes=1000-", 1000, SIZE - 1),
        ("bytes=-16", SIZE - 16, SIZE - 1),
        ("bytes=-5000", 0, SIZE - 1),  # suffix longer than the file: the whole file
        ("bytes=1000-99999", 1000, SIZE - 1),  # end clamped
        (f"bytes={SIZE - 1}-{SIZE - 1}", SIZE - 1, SIZE - 1),
    ],
)
def test_single_ranges(
    index: FakeIndex, client: httpx.Client, rng: str, start: int, end: int
) -> None:
    r = get(client, index, rng)
    assert r.status_code == 206
    assert r.headers["Content-Range"] == f"bytes {start}-{end}/{SIZE}"
    assert r.headers["Content-Length"] == str(end - start + 1)
    assert r.content == BODY[start : end + 1]


@pytest.mark.parametrize("rng", [f"bytes={SIZE}-", f"bytes={SIZE + 10}-{SIZE + 20}", "bytes=-0"])
def test_unsatisfiable(index: FakeIndex, client: httpx.Client, rng: str) -> None:
    r = get(client, index, rng)
    assert r.status_code == 416
    assert r.headers["Content-Range"] == f"bytes */{SIZE}"
    assert r.content == b""


@pytest.mark.parametrize("rng", ["bytes=0-1,5-6", "bytes=5-2", "items=0-1", "bytes=x-y"])
def test_multi_and_invalid_ranges_get_whole_body(
    index: FakeIndex, client: httpx.Client, rng: str
) -> None:
    r = get(client, index, rng)
    assert r.status_code == 200
    assert r.content == BODY


def test_head(index: FakeIndex, client: httpx.Client) -> None:
    r = client.head(index.url_for(PATH))
    assert r.status_code == 200
    assert r.headers["Content-Length"] == str(SIZE)
    assert r.headers["Accept-Ranges"] == "bytes"
    assert r.content == b""
    r = client.head(index.url_for(PATH), headers={"Range": "bytes=-10"})
    assert r.status_code == 206
    assert r.headers["Content-Range"] == f"bytes {SIZE - 10}-{SIZE - 1}/{SIZE}"
    assert index.bytes_sent(PATH) == 0


def test_unknown_path_404(index: FakeIndex, client: httpx.Client) -> None:
    assert client.get(index.url_for("/nope")).status_code == 404
    assert client.head(index.url_for("/nope")).status_code == 404


def test_if_range_mismatch_sends_whole(index: FakeIndex, client: httpx.Client) -> None:
    etag = get(client, index).headers["ETag"]
    ok = client.get(index.url_for(PATH), headers={"Range": "bytes=0-3", "If-Range": etag})
    assert ok.status_code == 206
    stale = client.get(index.url_for(PATH), headers={"Range": "bytes=0-3", "If-Range": '"x"'})
    assert stale.status_code == 200
    assert stale.content == BODY


def test_percent_encoded_paths(index: FakeIndex, client: httpx.Client) -> None:
    url = index.add("/p/torch-2.1.0+cu121-cp311-cp311-linux_x86_64.whl", b"wheel")
    assert "%2B" in url
    assert client.get(url).content == b"wheel"
    assert client.get(url.replace("%2B", "+")).content == b"wheel"


def test_request_log(index: FakeIndex, client: httpx.Client) -> None:
    get(client, index, "bytes=0-9")
    get(client, index)
    client.head(index.url_for(PATH))
    client.get(index.url_for("/missing?x=1"))
    log = index.requests
    assert [(r.method, r.path, r.range, r.status) for r in log] == [
        ("GET", PATH, "bytes=0-9", 206),
        ("GET", PATH, None, 200),
        ("HEAD", PATH, None, 200),
        ("GET", "/missing", None, 404),
    ]
    assert log[3].target == "/missing?x=1"
    assert [r.bytes_sent for r in log[:3]] == [10, SIZE, 0]
    assert index.bytes_sent(PATH) == 10 + SIZE
    assert index.bytes_sent() == 10 + SIZE + len(b"not found\n")
    assert log[0].headers["Range"] == "bytes=0-9"
    index.clear_requests()
    assert index.requests == []


def test_log_is_thread_safe(index: FakeIndex, client: httpx.Client) -> None:
    def one(i: int) -> int:
        return client.get(index.url_for(PATH), headers={"Range": f"bytes={i}-{i}"}).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(40)))
    assert statuses == [206] * 40
    assert len(index.requests) == 40
    assert sorted(r.range or "" for r in index.requests) == sorted(
        f"bytes={i}-{i}" for i in range(40)
    )
    assert index.bytes_sent(PATH) == 40


# -- faults ----------------------------------------------------------------------------


def test_fault_status_times_and_retry_after(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "status", code=503, times=2, retry_after="1")
    first, second, third = (get(client, index, "bytes=0-3") for _ in range(3))
    assert first.status_code == second.status_code == 503
    assert first.headers["Retry-After"] == "1"
    assert third.status_code == 206
    assert [r.fault for r in index.requests] == ["status", "status", None]


@pytest.mark.parametrize("code", [404, 429, 500, 502])
def test_fault_status_forever(index: FakeIndex, client: httpx.Client, code: int) -> None:
    index.fault(PATH, "status", code=code)
    assert [get(client, index).status_code for _ in range(3)] == [code] * 3
    assert client.head(index.url_for(PATH)).status_code == code
    assert "Retry-After" not in get(client, index).headers


def test_fault_star_and_precedence(index: FakeIndex, client: httpx.Client) -> None:
    other = index.add("/other", b"other")
    index.fault("*", "status", code=500)
    assert client.get(other).status_code == 500
    assert client.get(index.url_for("/unknown")).status_code == 500
    index.fault(PATH, "ignore_range")
    assert get(client, index, "bytes=0-1").status_code == 200
    index.clear_faults("*")
    assert client.get(other).status_code == 200
    index.clear_faults()
    assert get(client, index, "bytes=0-1").status_code == 206


def test_fault_validation(index: FakeIndex) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        index.fault(PATH, "explode")
    with pytest.raises(ValueError, match="does not take"):
        index.fault(PATH, "gzip", level=9)
    with pytest.raises(ValueError, match="body"):
        index.fault(PATH, "changed")


def test_fault_ignore_range(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "ignore_range", times=1)
    r = get(client, index, "bytes=-16")
    assert r.status_code == 200
    assert r.content == BODY
    assert "Content-Range" not in r.headers
    assert get(client, index).status_code == 200  # no Range: does not use up the fault
    assert get(client, index, "bytes=-16").status_code == 206


def test_fault_no_suffix(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "no_suffix")
    assert get(client, index, "bytes=-16").status_code == 501
    ok = get(client, index, "bytes=8-15")
    assert ok.status_code == 206
    assert ok.content == BODY[8:16]
    index.fault(PATH, "no_suffix", code=416)
    assert get(client, index, "bytes=-16").status_code == 416


def test_fault_suffix_head(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "suffix_head")
    r = get(client, index, "bytes=-16")
    assert r.status_code == 206
    assert r.content == BODY[:16]
    assert r.headers["Content-Range"] == f"bytes 0-15/{SIZE}"
    assert get(client, index, "bytes=16-31").content == BODY[16:32]


@pytest.mark.parametrize("shift", [1, -5, 100])
def test_fault_wrong_offset(index: FakeIndex, client: httpx.Client, shift: int) -> None:
    index.fault(PATH, "wrong_offset", shift=shift)
    r = get(client, index, "bytes=200-209")
    assert r.status_code == 206
    start = 200 + shift
    assert r.headers["Content-Range"] == f"bytes {start}-{start + 9}/{SIZE}"
    assert r.content == BODY[start : start + 10]
    assert r.content != BODY[200:210]


def test_fault_short_body(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "short_body", send=7)
    with pytest.raises(httpx.RemoteProtocolError):
        get(client, index, "bytes=0-99")
    logged = index.requests[-1]
    assert (logged.status, logged.bytes_sent, logged.fault) == (206, 7, "short_body")
    index.fault(PATH, "short_body")  # default: half, also on whole-body answers
    with client.stream("GET", index.url_for(PATH)) as r:
        assert r.headers["Content-Length"] == str(SIZE)
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in r.iter_raw():
                received += chunk
    assert bytes(received) == BODY[: SIZE // 2]


def test_fault_long_body(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "long_body", extra=5)
    r = get(client, index, "bytes=10-19")
    assert r.status_code == 206
    assert r.headers["Content-Range"] == f"bytes 10-19/{SIZE}"
    assert r.content == BODY[10:25]
    whole = get(client, index)
    assert len(whole.content) == SIZE + 5


def test_fault_no_content_range(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "no_content_range")
    r = get(client, index, "bytes=10-19")
    assert r.status_code == 206
    assert "Content-Range" not in r.headers
    assert r.content == BODY[10:20]


def test_fault_gzip(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "gzip")
    with client.stream("GET", index.url_for(PATH), headers={"Range": "bytes=-100"}) as r:
        assert r.status_code == 206
        assert r.headers["Content-Encoding"] == "gzip"
        raw = r.read()  # httpx decodes; check the wire form via the log below
    assert raw == BODY[-100:]
    wire = index.requests[-1].bytes_sent
    assert wire == len(gzip.compress(BODY[-100:], mtime=0))


def test_fault_stall_then_completes(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "stall", seconds=0.3, after=10)
    t0 = time.monotonic()
    r = get(client, index)
    assert time.monotonic() - t0 >= 0.25
    assert r.content == BODY


def test_fault_stall_times_out_and_does_not_block_close(client: httpx.Client) -> None:
    idx = FakeIndex()
    idx.add(PATH, BODY)
    idx.fault(PATH, "stall", seconds=60)
    try:
        with pytest.raises(httpx.ReadTimeout):
            client.get(idx.url_for(PATH), timeout=httpx.Timeout(5.0, read=0.3))
        logged = idx.requests[-1]
        assert (logged.status, logged.bytes_sent, logged.fault) == (200, SIZE // 2, "stall")
    finally:
        t0 = time.monotonic()
        idx.close()  # the handler is still asleep server-side
    assert time.monotonic() - t0 < 3


def test_fault_stall_head(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "stall", seconds=0.3)
    with pytest.raises(httpx.ReadTimeout):
        client.head(index.url_for(PATH), timeout=httpx.Timeout(5.0, read=0.1))


@pytest.mark.parametrize("rst", [True, False])
def test_fault_reset(index: FakeIndex, client: httpx.Client, rst: bool) -> None:
    index.fault(PATH, "reset", rst=rst)
    with pytest.raises(httpx.TransportError):
        get(client, index, "bytes=0-99")
    assert index.requests[-1].bytes_sent == 0
    index.clear_faults()
    assert get(client, index, "bytes=0-9").content == BODY[:10]  # the client recovers


def test_fault_trickle_headers(index: FakeIndex) -> None:
    """Headers a byte at a time: a complete, correct answer, slowly; and the byte-wise
    arrival is visible to a client reading with a short per-read timeout."""
    import socket

    index.fault(PATH, "trickle_headers", interval=0.002, times=1)
    t = time.monotonic()
    with httpx.Client(timeout=5.0) as c:
        r = c.get(index.url_for(PATH))
    assert r.status_code == 200 and r.content == BODY
    assert time.monotonic() - t > 0.002 * 100  # well over 100 header bytes, one by one
    assert index.requests_for(PATH)[0].fault == "trickle_headers"
    index.fault(PATH, "trickle_headers", interval=0.05)
    with socket.create_connection(("127.0.0.1", int(index.url.rsplit(":", 1)[1]))) as s:
        s.sendall(f"GET {PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.settimeout(2)
        got, reads = b"", 0
        while len(got) < 3:
            got += s.recv(100)
            reads += 1
    assert got.startswith(b"HTT") and reads >= 2  # not sent in one piece
    assert index.wait_answered(timeout=5)  # gave up once the client went away


def test_wait_answered(index: FakeIndex, client: httpx.Client) -> None:
    index.fault(PATH, "stall", seconds=0.3, after=10)
    assert get(client, index).content == BODY
    assert index.wait_answered(timeout=5)
    index.fault(PATH, "trickle", interval=1.0)
    with client.stream("GET", index.url_for(PATH)) as r:
        next(r.iter_bytes())
        assert not index.wait_answered(timeout=0.2)  # still trickling


def test_fault_html(index: FakeIndex, client: httpx.Client) -> None:
    api = index.add_json("/pypi/x/json", {"info": {}})
    index.fault("*", "html")
    for url in (api, index.url_for(PATH), index.url_for("/unknown")):
        r = client.get(url, headers={"Range": "bytes=-16"})
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/html")
        assert r.content == b"<html>proxy login</html>"
    assert client.head(api).headers["Content-Type"].startswith("text/html")


def test_fault_changed(index: FakeIndex, client: httpx.Client) -> None:
    new = b"a different file" * 10
    index.fault(PATH, "changed", body=new)
    first = get(client, index, "bytes=-16")
    assert first.content == BODY[-16:]
    second = get(client, index, "bytes=-16")
    assert second.headers["Content-Range"] == f"bytes {len(new) - 16}-{len(new) - 1}/{len(new)}"
    assert second.content == new[-16:]
    assert second.headers["ETag"] != first.headers["ETag"]
    head = client.head(index.url_for(PATH))
    assert head.headers["Content-Length"] == str(len(new))
    stale = client.get(
        index.url_for(PATH), headers={"Range": "bytes=0-3", "If-Range": first.headers["ETag"]}
    )
    assert stale.status_code == 200
    assert stale.content == new


# -- the PyPI-style JSON API ------------------------------------------------------------


def test_add_project_relative_urls_and_metadata(client: httpx.Client) -> None:
    fn1, w1 = build_wheel("Demo.Pkg", "1.0", {"demo_pkg/__init__.py": "v = 1\n"})
    fn2, w2 = build_wheel(
        "Demo.Pkg", "2.0+local", {"demo_pkg/__init__.py": "v = 2\n"}, requires_dist=["six"]
    )
    fn3, w3 = build_wheel("Demo.Pkg", "2.0+local", {}, tag="cp311-cp311-manylinux_2_17_x86_64")
    with FakeIndex() as idx:
        project = idx.add_project(
            "demo-pkg",
            {"1.0": {fn1: w1}, "2.0+local": {fn2: w2, fn3: w3}},
            metadata=True,
            requires_python=">=3.10",
            yanked={"1.0"},
        )
        api_url = idx.url + "/pypi/demo-pkg/json"
        assert project.api_url == api_url
        doc = client.get(api_url).json()
        assert doc["info"]["name"] == "demo-pkg"
        assert doc["info"]["version"] == "2.0+local"
        assert doc["info"]["requires_dist"] is None
        assert set(doc["releases"]) == {"1.0", "2.0+local"}
        assert [f["filename"] for f in doc["urls"]] == [fn2, fn3]
        assert doc["releases"]["1.0"][0]["yanked"] is True
        seen = 0
        for version, entries in doc["releases"].items():
            for entry in entries:
                assert entry["url"].startswith("../../packages/")
                assert entry["packagetype"] == "bdist_wheel"
                assert entry["requires_python"] == ">=3.10"
                assert entry["upload_time_iso_8601"].endswith("Z")
                file_url = urljoin(api_url, entry["url"])
                data = client.get(file_url).content
                assert len(data) == entry["size"]
                assert hashlib.sha256(data).hexdigest() == entry["digests"]["sha256"]
                meta = client.get(file_url + ".metadata")
                assert meta.status_code == 200
                digest = hashlib.sha256(meta.content).hexdigest()
                assert entry["core-metadata"] == {"sha256": digest}
                assert entry["data-dist-info-metadata"] == {"sha256": digest}
                assert meta.content.startswith(b"Metadata-Version: 2.1\nName: Demo.Pkg\n")
                assert f"Version: {version}".encode() in meta.content
                seen += 1
        assert seen == 3
        assert {f["python_version"] for f in doc["releases"]["2.0+local"]} == {"py3", "cp311"}
        assert "%2B" in project.files[fn2].url
        per_version = urljoin(api_url, "../demo-pkg/1.0/json")
        pv = client.get(per_version).json()
        assert pv["info"]["version"] == "1.0"
        assert client.get(urljoin(per_version, pv["urls"][0]["url"])).content == w1


def test_add_project_without_metadata(client: httpx.Client) -> None:
    fn, w = build_wheel("plain", "0.1", {"plain.py": ""})
    with FakeIndex() as idx:
        project = idx.add_project("plain", {"0.1": {fn: w, "plain-0.1.tar.gz": b"sdist"}})
        doc = client.get(project.api_url).json()
        wheel_entry, sdist_entry = doc["urls"]
        assert "core-metadata" not in wheel_entry
        assert "data-dist-info-metadata" not in wheel_entry
        assert sdist_entry["packagetype"] == "sdist"
        assert sdist_entry["python_version"] == "source"
        assert client.get(urljoin(project.api_url, wheel_entry["url"]) + ".metadata").status_code
        assert project.files[fn].metadata_url is None


def test_range_read_of_served_wheel(client: httpx.Client) -> None:
    """The access pattern moonpin uses works end to end against the fake index."""
    fn, w = build_wheel("demo", "1.0", {"demo/__init__.py": "x" * 5000}, requires_dist=["a"])
    with FakeIndex() as idx:
        url = idx.add_project("demo", {"1.0": {fn: w}}).files[fn].url
        tail = client.get(url, headers={"Range": "bytes=-16384"})
        assert tail.status_code == 206
        size = int(tail.headers["Content-Range"].rsplit("/", 1)[1])
        eocd = tail.content.rfind(b"PK\x05\x06")
        cd_size, cd_offset = struct.unpack("<II", tail.content[eocd + 12 : eocd + 20])
        cd = client.get(url, headers={"Range": f"bytes={cd_offset}-{cd_offset + cd_size - 1}"})
        assert cd.status_code == 206
        assert size == len(w)
        assert b"demo-1.0.dist-info/METADATA" in cd.content


# -- wheels --------------------------------------------------------------------------


def _verify_record(data: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
        listed = {row[0] for row in rows}
        assert listed == set(names)
        for path, digest, size in rows:
            if path == record_name:
                assert (digest, size) == ("", "")
                continue
            content = zf.read(path)
            assert digest == record_hash(content)
            assert int(size) == len(content)
    return names


def test_build_wheel_record_and_layout() -> None:
    files: dict[str, str | bytes] = {
        "my_fancy_pkg/__init__.py": "x = 1\n",
        "my_fancy_pkg/data,with,commas.txt": b"\x00\x01",
    }
    args = ("My.Fancy-Pkg", "1.2.3", files)
    fn, data = build_wheel(
        *args,
        tag="py2.py3-none-any",
        requires_dist=["six>=1", "torch==2.1.0; extra == 'gpu'"],
        metadata_extra=["Requires-Python: >=3.9", "Provides-Extra: gpu"],
    )
    assert fn == "my_fancy_pkg-1.2.3-py2.py3-none-any.whl"
    names = _verify_record(data)
    assert names[-1] == "my_fancy_pkg-1.2.3.dist-info/RECORD"
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        meta = zf.read("my_fancy_pkg-1.2.3.dist-info/METADATA").decode()
        wheel = zf.read("my_fancy_pkg-1.2.3.dist-info/WHEEL").decode()
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())
    assert meta.startswith("Metadata-Version: 2.1\nName: My.Fancy-Pkg\nVersion: 1.2.3\n")
    assert "Requires-Dist: torch==2.1.0; extra == 'gpu'\n" in meta
    assert "Requires-Python: >=3.9\n" in meta
    assert "Tag: py2-none-any\nTag: py3-none-any\n" in wheel
    assert build_wheel(*args)[1] == build_wheel(*args)[1]  # deterministic bytes


def test_build_wheel_options() -> None:
    _, data = build_wheel(
        "pkg", "1.0", {"pkg.py": ""}, dist_info_first=True, compress=zipfile.ZIP_STORED
    )
    names = _verify_record(data)
    assert names[:3] == [
        "pkg-1.0.dist-info/METADATA",
        "pkg-1.0.dist-info/WHEEL",
        "pkg-1.0.dist-info/RECORD",
    ]
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    _, bare = build_wheel("pkg", "1.0", {"pkg.py": ""}, record=False)
    with zipfile.ZipFile(io.BytesIO(bare)) as zf:
        assert "pkg-1.0.dist-info/RECORD" not in zf.namelist()
    custom = b"Metadata-Version: 2.1\nName: other\nVersion: 9\n\n"
    _, swapped = build_wheel("pkg", "1.0", {"pkg-1.0.dist-info/METADATA": custom})
    with zipfile.ZipFile(io.BytesIO(swapped)) as zf:
        assert zf.read("pkg-1.0.dist-info/METADATA") == custom
    _verify_record(swapped)
    assert build_wheel("x", "1", {}, build="7")[0] == "x-1-7-py3-none-any.whl"


# -- hostile archives ------------------------------------------------------------------

_EOCD = b"PK\x05\x06"


def _open(data: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(data))


def _strict_eocd(data: bytes) -> int:
    """The offset of the one EOCD whose comment length reaches the end of the data."""
    pos = len(data)
    while (pos := data.rfind(_EOCD, 0, pos)) >= 0:
        (comment_len,) = struct.unpack("<H", data[pos + 20 : pos + 22])
        if pos + 22 + comment_len == len(data):
            return pos
    raise AssertionError("no consistent EOCD")


def test_hostile_kinds_are_known() -> None:
    for kind in HOSTILE_KINDS:
        assert hostile_zip(kind).startswith(b"PK\x03\x04")
    with pytest.raises(ValueError):
        hostile_zip("nice")


def test_hostile_truncated() -> None:
    data = hostile_zip("truncated")
    assert b"PK\x01\x02" in data
    assert _EOCD not in data
    with pytest.raises(zipfile.BadZipFile):
        _open(data)


def test_hostile_no_eocd() -> None:
    data = hostile_zip("no_eocd")
    assert _EOCD not in data
    assert data.count(b"PK\x01\x02") == 4  # the central directory is complete
    with pytest.raises(zipfile.BadZipFile):
        _open(data)


def test_hostile_eocd_in_comment() -> None:
    data = hostile_zip("eocd_in_comment")
    assert data.count(_EOCD) == 2
    real = _strict_eocd(data)
    assert real < data.rfind(_EOCD)  # the last signature is the fake one
    with pytest.raises(zipfile.BadZipFile):  # zipfile is fooled by the fake
        _open(data)
    without_comment = data[: real + 20] + b"\0\0"
    with _open(without_comment) as zf:
        assert zf.read("hostile-1.0.dist-info/METADATA") == HOSTILE_METADATA


def test_hostile_cd_out_of_bounds() -> None:
    data = hostile_zip("cd_out_of_bounds")
    eocd = _strict_eocd(data)
    (cd_offset,) = struct.unpack("<I", data[eocd + 16 : eocd + 20])
    assert cd_offset > len(data)
    with pytest.raises((zipfile.BadZipFile, ValueError)):
        with _open(data) as zf:
            zf.read("hostile-1.0.dist-info/METADATA")


def test_hostile_zip64() -> None:
    data = hostile_zip("zip64")
    eocd = _strict_eocd(data)
    fields = struct.unpack("<IHHHHIIH", data[eocd : eocd + 22])
    assert fields[3:7] == (0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    assert data[eocd - 20 : eocd - 16] == b"PK\x06\x07"  # locator
    (record_offset,) = struct.unpack("<Q", data[eocd - 12 : eocd - 4])
    assert data[record_offset : record_offset + 4] == b"PK\x06\x06"
    with _open(data) as zf:
        assert zf.testzip() is None
        assert zf.read("hostile-1.0.dist-info/METADATA") == HOSTILE_METADATA
        assert all(i.extra.startswith(b"\x01\x00\x08\x00") for i in zf.infolist())


def test_hostile_duplicate_names() -> None:
    with _open(hostile_zip("duplicate_names")) as zf:
        names = zf.namelist()
        assert names.count("hostile-1.0.dist-info/METADATA") == 2
        contents = {zf.open(i).read() for i in zf.infolist() if i.filename.endswith("METADATA")}
    assert contents == {HOSTILE_METADATA, HOSTILE_METADATA.replace(b"hostile", b"evil", 1)}


def test_hostile_path_traversal() -> None:
    with _open(hostile_zip("path_traversal")) as zf:
        names = zf.namelist()
    assert "../../evil.py" in names
    assert "/abs/evil.py" in names
    assert "hostile\\win.py" in names
    assert "hostile/ctrl\x07.py" in names


def test_hostile_bomb() -> None:
    data = hostile_zip("bomb")
    assert len(data) < 200_000
    with _open(data) as zf:
        info = zf.getinfo("hostile/bomb.bin")
        assert info.file_size == BOMB_SIZE
        assert info.file_size / info.compress_size > 500
        assert zf.read("hostile-1.0.dist-info/METADATA") == HOSTILE_METADATA
        with zf.open(info) as member:
            assert member.read(4096) == bytes(4096)


def test_hostile_unsupported_compression() -> None:
    with _open(hostile_zip("unsupported_compression")) as zf:
        info = zf.getinfo("hostile-1.0.dist-info/METADATA")
        assert info.compress_type == 99
        with pytest.raises(NotImplementedError):
            zf.read(info)
        assert zf.read("hostile/__init__.py") == b"print('hostile')\n"


def test_hostile_local_header_mismatch() -> None:
    data = hostile_zip("local_header_mismatch")
    with _open(data) as zf:
        info = zf.getinfo("hostile-1.0.dist-info/METADATA")
        (name_len,) = struct.unpack("<H", data[info.header_offset + 26 : info.header_offset + 28])
        assert data[info.header_offset + 30 : info.header_offset + 30 + name_len] == b"evil.py"
        with pytest.raises(zipfile.BadZipFile, match="differ"):
            zf.read(info)


def test_hostile_local_extra_differs() -> None:
    data = hostile_zip("local_extra_differs")
    with _open(data) as zf:
        info = zf.getinfo("hostile-1.0.dist-info/METADATA")
        assert info.extra == b""
        assert zf.read(info) == HOSTILE_METADATA  # valid archive
    (extra_len,) = struct.unpack("<H", data[info.header_offset + 28 : info.header_offset + 30])
    assert extra_len == 28


def test_hostile_data_descriptor() -> None:
    data = hostile_zip("data_descriptor")
    with _open(data) as zf:
        info = zf.getinfo("hostile-1.0.dist-info/METADATA")
        assert info.flag_bits & 0x08
        assert zf.testzip() is None
        assert zf.read(info) == HOSTILE_METADATA
    crc, csize, usize = struct.unpack(
        "<III", data[info.header_offset + 14 : info.header_offset + 26]
    )
    assert (crc, csize, usize) == (0, 0, 0)
