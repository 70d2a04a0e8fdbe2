"""Tests of moonpin.scrapers.fetch.Fetcher against the misbehaving loopback index."""

from __future__ import annotations

import gzip
import json
import os
import socket
import time
from collections.abc import Iterator

import pytest

from moonpin.kb.errors import FetchError, RangeNotHonoured
from moonpin.scrapers.fetch import Fetcher, RangeAnswer
from tests.lib.server import FakeIndex

BODY = os.urandom(64 * 1024)  # incompressible, distinct bytes
PATH = "/files/blob.bin"


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    with FakeIndex() as idx:
        idx.add(PATH, BODY)
        yield idx


class Rec:
    """A fetcher with recorded sleeps and warnings."""

    def __init__(self, **kw: object) -> None:
        self.sleeps: list[float] = []
        self.warnings: list[str] = []
        opts: dict[str, object] = {"retries": 3, "backoff": 0.01}
        opts.update(kw)
        self.f = Fetcher(
            sleep=self.sleeps.append,
            warn=self.warnings.append,
            **opts,  # type: ignore[arg-type]
        )


@pytest.fixture
def rec() -> Iterator[Rec]:
    r = Rec()
    yield r
    r.f.close()


# -- whole documents -----------------------------------------------------------------


def test_json_ok(index: FakeIndex, rec: Rec) -> None:
    doc = {"a": [1, 2, 3], "b": "ü"}
    url = index.add_json("/pypi/x/json", doc)
    assert rec.f.get_json(url) == doc
    assert rec.sleeps == []
    assert rec.f.stats.requests == 1
    assert rec.f.stats.bytes == len(json.dumps(doc, indent=1).encode())


def test_captive_proxy_html_is_an_error(index: FakeIndex, rec: Rec) -> None:
    url = index.add_json("/pypi/x/json", {"a": 1})
    index.fault("/pypi/x/json", "html")
    with pytest.raises(FetchError) as ei:
        rec.f.get_json(url)
    msg = str(ei.value)
    assert url in msg
    assert "expected JSON" in msg
    assert "text/html" in msg
    assert ei.value.url == url
    assert ei.value.hint
    assert len(index.requests_for("/pypi/x/json")) == 1  # not retried


def test_429_retry_after_is_honoured(index: FakeIndex, rec: Rec) -> None:
    url = index.add_json("/j", {"ok": True})
    index.fault("/j", "status", code=429, retry_after="2", times=1)
    assert rec.f.get_json(url) == {"ok": True}
    assert rec.sleeps == [2.0]
    assert rec.f.stats.retries == 1
    assert [r.status for r in index.requests_for("/j")] == [429, 200]
    assert any("HTTP 429" in w for w in rec.warnings)


def test_retry_after_as_http_date_in_the_past(index: FakeIndex, rec: Rec) -> None:
    url = index.add_json("/j", {"ok": True})
    index.fault("/j", "status", code=503, retry_after="Mon, 01 Jan 2024 00:00:00 GMT", times=1)
    assert rec.f.get_json(url) == {"ok": True}
    assert rec.sleeps == [0.0]


def test_429_retry_after_beyond_max_wait_fails_without_sleeping(
    index: FakeIndex, rec: Rec
) -> None:
    url = index.add_json("/j", {"ok": True})
    index.fault("/j", "status", code=429, retry_after="3600")
    with pytest.raises(FetchError) as ei:
        rec.f.get_json(url)
    assert "Retry-After" in str(ei.value)
    assert url in str(ei.value)
    assert rec.sleeps == []
    assert len(index.requests_for("/j")) == 1


def test_503_twice_then_ok(index: FakeIndex, rec: Rec) -> None:
    url = index.add_json("/j", [1])
    index.fault("/j", "status", code=503, times=2)
    assert rec.f.get_json(url) == [1]
    assert len(rec.sleeps) == 2
    # capped exponential backoff with full jitter: uniform(cap/2, cap), cap = 0.01 * 2**n
    assert 0.005 <= rec.sleeps[0] <= 0.01
    assert 0.01 <= rec.sleeps[1] <= 0.02
    assert rec.f.stats.requests == 3
    assert rec.f.stats.retries == 2


def test_503_forever_gives_up(index: FakeIndex, rec: Rec) -> None:
    url = index.add_json("/j", [1])
    index.fault("/j", "status", code=503)
    with pytest.raises(FetchError) as ei:
        rec.f.get_json(url)
    assert "giving up after 4 attempts" in str(ei.value)
    assert "HTTP 503" in str(ei.value)
    assert len(rec.sleeps) == 3
    assert len(index.requests_for("/j")) == 4


def test_get_bytes_404_is_none(index: FakeIndex, rec: Rec) -> None:
    assert rec.f.get_bytes(index.url_for("/nope.metadata"), max_bytes=1000) is None
    assert rec.sleeps == []


def test_get_bytes_ok_and_cap(index: FakeIndex, rec: Rec) -> None:
    assert rec.f.get_bytes(index.url_for(PATH), max_bytes=len(BODY)) == BODY
    with pytest.raises(FetchError, match="cap"):
        rec.f.get_bytes(index.url_for(PATH), max_bytes=len(BODY) - 1)


def test_other_4xx_not_retried(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "status", code=403)
    with pytest.raises(FetchError, match="HTTP 403"):
        rec.f.get_bytes(index.url_for(PATH), max_bytes=10**6)
    assert rec.sleeps == []
    assert len(index.requests_for(PATH)) == 1


def test_connection_refused_retried_then_fails(rec: Rec) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"http://127.0.0.1:{port}/x.json"
    with pytest.raises(FetchError) as ei:
        rec.f.get_json(url)
    assert "giving up after 4 attempts" in str(ei.value)
    assert "cannot connect" in str(ei.value)
    assert len(rec.sleeps) == 3


def test_stall_once_is_retried() -> None:
    r = Rec(timeout=0.5)
    with FakeIndex() as idx:
        url = idx.add(PATH, BODY)
        idx.fault(PATH, "stall", seconds=2, times=1)
        t0 = time.monotonic()
        assert r.f.get_bytes(url, max_bytes=len(BODY)) == BODY
        assert time.monotonic() - t0 < 1.8
    assert len(r.sleeps) == 1
    assert any("Timeout" in w for w in r.warnings)


def test_stall_forever_fails() -> None:
    r = Rec(timeout=0.4, retries=1)
    with FakeIndex() as idx:
        url = idx.add(PATH, BODY)
        idx.fault(PATH, "stall", seconds=2)
        with pytest.raises(FetchError, match="giving up after 2 attempts"):
            r.f.get_range(url, 0, len(BODY) - 1)
    assert len(r.sleeps) == 1


@pytest.mark.parametrize("rst", [True, False])
def test_reset_is_retried(index: FakeIndex, rec: Rec, rst: bool) -> None:
    index.fault(PATH, "reset", rst=rst, times=1)
    ans = rec.f.get_range(index.url_for(PATH), 10, 19)
    assert ans.data == BODY[10:20]
    assert len(rec.sleeps) == 1
    assert len(index.requests_for(PATH)) == 2


def test_reset_forever_fails(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "reset")
    with pytest.raises(FetchError, match="giving up after 4 attempts"):
        rec.f.get_range(index.url_for(PATH), 10, 19)


# -- ranges -------------------------------------------------------------------------------


def test_get_range_exact(index: FakeIndex, rec: Rec) -> None:
    ans = rec.f.get_range(index.url_for(PATH), 100, 1099)
    assert ans == RangeAnswer(BODY[100:1100], 100, len(BODY))
    (req,) = index.requests_for(PATH)
    assert req.range == "bytes=100-1099"
    assert req.headers.get("Accept-Encoding") == "identity"
    assert rec.f.stats.bytes == 1000
    rec.f.get_range(index.url_for(PATH), 0, 0)
    assert rec.f.stats.bytes == 1001
    assert rec.f.stats.requests == 2


def test_get_range_bad_arguments(rec: Rec) -> None:
    with pytest.raises(ValueError):
        rec.f.get_range("http://127.0.0.1:9/x", 10, 5)
    with pytest.raises(ValueError):
        rec.f.get_range("http://127.0.0.1:9/x", -1, 5)


def test_ignore_range_small_file_read_whole(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "ignore_range")
    ans = rec.f.get_range(index.url_for(PATH), 100, 199)
    assert ans.whole is True
    assert ans.data == BODY
    assert ans.start == 0
    assert ans.size == len(BODY)
    assert any("ignored Range" in w for w in rec.warnings)


def test_ignore_range_big_file_stops_reading() -> None:
    big = os.urandom(8 * 1024 * 1024)
    r = Rec(whole_body_cap=1024 * 1024)
    with FakeIndex() as idx:
        url = idx.add("/big.whl", big)
        idx.fault("/big.whl", "ignore_range")
        with pytest.raises(RangeNotHonoured) as ei:
            r.f.get_range(url, 0, 99)
        assert ei.value.kind == "ignored"
        assert "ignored Range" in str(ei.value)
        assert url in str(ei.value)
        assert idx.wait_answered(timeout=10)  # the server saw the connection close
        (req,) = idx.requests_for("/big.whl")
        assert req.status == 200
        assert req.bytes_sent < len(big) // 2
    assert r.sleeps == []
    assert r.f.stats.bytes < len(big) // 2


def test_ignore_range_big_file_suffix_is_not_retried_as_explicit() -> None:
    big = os.urandom(2 * 1024 * 1024)
    r = Rec(whole_body_cap=64 * 1024)
    with FakeIndex() as idx:
        url = idx.add("/big.whl", big)
        idx.fault("/big.whl", "ignore_range")
        with pytest.raises(RangeNotHonoured) as ei:
            r.f.get_suffix(url, 1000)
        assert ei.value.kind == "ignored"
        assert len(idx.requests_for("/big.whl")) == 1


@pytest.mark.parametrize(
    ("kind", "params", "said"),
    [
        ("wrong_offset", {"shift": 5}, "bytes=100-199"),
        ("long_body", {"extra": 100}, None),
        ("no_content_range", {}, "Content-Range"),
    ],
)
def test_other_bytes_than_asked_is_mismatch(index: FakeIndex, rec: Rec, kind: str,
                                            params: dict[str, int], said: str | None) -> None:
    index.fault(PATH, kind, **params)
    with pytest.raises(RangeNotHonoured) as ei:
        rec.f.get_range(index.url_for(PATH), 100, 199)
    assert ei.value.kind == "mismatch"
    if said is not None:
        assert said in str(ei.value)


def test_error_status_to_range_is_refused(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "status", code=416)
    with pytest.raises(RangeNotHonoured) as ei:
        rec.f.get_range(index.url_for(PATH), 100, 199)
    assert ei.value.kind == "refused"


def test_short_body_retried_then_fails(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "short_body")
    with pytest.raises(FetchError) as ei:
        rec.f.get_range(index.url_for(PATH), 0, 9999)
    assert "giving up after 4 attempts" in str(ei.value)
    assert len(index.requests_for(PATH)) == 4


def test_short_body_once_recovers(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "short_body", times=1)
    ans = rec.f.get_range(index.url_for(PATH), 0, 9999)
    assert ans.data == BODY[:10000]
    assert len(rec.sleeps) == 1


def test_gzip_on_compressible_range_decodes(index: FakeIndex, rec: Rec) -> None:
    body = b"abcdefgh" * 10000
    url = index.add("/text.bin", body)
    index.fault("/text.bin", "gzip")
    ans = rec.f.get_range(url, 1000, 50999)
    assert ans.data == body[1000:51000]
    assert ans.start == 1000
    # on-the-wire (compressed) bytes are counted
    assert rec.f.stats.bytes == len(gzip.compress(body[1000:51000], mtime=0)) < 50000


def test_gzip_on_incompressible_range_never_gives_wrong_bytes(
    index: FakeIndex, rec: Rec
) -> None:
    index.fault(PATH, "gzip")
    try:
        ans = rec.f.get_range(index.url_for(PATH), 1000, 50999)
    except FetchError as e:
        assert index.url_for(PATH) in str(e)
    else:
        assert ans.data == BODY[1000:51000]


def test_suffix_normal(index: FakeIndex, rec: Rec) -> None:
    ans = rec.f.get_suffix(index.url_for(PATH), 1000)
    assert ans == RangeAnswer(BODY[-1000:], len(BODY) - 1000, len(BODY))
    assert [r.range for r in index.requests_for(PATH)] == ["bytes=-1000"]


def test_suffix_longer_than_file(index: FakeIndex, rec: Rec) -> None:
    ans = rec.f.get_suffix(index.url_for(PATH), len(BODY) * 2)
    assert ans.data == BODY
    assert ans.start == 0


def test_no_suffix_falls_back_to_head_and_explicit_range(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "no_suffix")
    ans = rec.f.get_suffix(index.url_for(PATH), 1000)
    assert ans.data == BODY[-1000:]
    assert ans.start == len(BODY) - 1000
    reqs = index.requests_for(PATH)
    assert [(r.method, r.range) for r in reqs] == [
        ("GET", "bytes=-1000"),
        ("HEAD", None),
        ("GET", f"bytes={len(BODY) - 1000}-{len(BODY) - 1}"),
    ]
    assert any("suffix range refused" in w for w in rec.warnings)


def test_no_suffix_with_known_size_skips_head(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "no_suffix")
    ans = rec.f.get_suffix(index.url_for(PATH), 1000, size=len(BODY))
    assert ans.data == BODY[-1000:]
    assert [r.method for r in index.requests_for(PATH)] == ["GET", "GET"]


def test_suffix_head_falls_back(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "suffix_head")
    ans = rec.f.get_suffix(index.url_for(PATH), 1000)
    assert ans.data == BODY[-1000:]
    assert ans.start == len(BODY) - 1000
    assert ans.size == len(BODY)


def test_changed_file_is_reported(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "changed", body=BODY + b"more", after=0)
    with pytest.raises(RangeNotHonoured) as ei:
        rec.f.get_range(index.url_for(PATH), 0, 99, size=len(BODY))
    assert "changed" in str(ei.value)
    assert ei.value.kind == "mismatch"


def test_changed_file_on_suffix_is_reported(index: FakeIndex, rec: Rec) -> None:
    index.fault(PATH, "changed", body=BODY[:-7], after=0)
    with pytest.raises(RangeNotHonoured, match="changed"):
        rec.f.get_suffix(index.url_for(PATH), 100, size=len(BODY))


def test_head_size(index: FakeIndex, rec: Rec) -> None:
    assert rec.f.head_size(index.url_for(PATH)) == len(BODY)
    with pytest.raises(FetchError):
        rec.f.head_size(index.url_for("/missing"))


# ------------------------------------------------------ an untrusted index (issue 19)


def test_redirect_is_followed_when_http(index: FakeIndex, rec: Rec) -> None:
    index.add("/real.bin", b"real bytes")
    index.fault(PATH, "redirect", location="/real.bin", code=301)
    assert rec.f.get_bytes(index.url_for(PATH), max_bytes=100) == b"real bytes"


def test_redirect_loop_is_capped(index: FakeIndex) -> None:
    index.fault(PATH, "redirect", location=PATH)
    r = Rec(max_redirects=4)
    with pytest.raises(FetchError, match="more than 4 redirects") as e:
        r.f.get_bytes(index.url_for(PATH), max_bytes=100)
    assert e.value.hint and len(index.requests_for(PATH)) == 5  # 1 + 4 followed
    r.f.close()


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://x/"])
def test_redirect_to_another_scheme_is_refused(index: FakeIndex, rec: Rec, target: str) -> None:
    index.fault(PATH, "redirect", location=target)
    with pytest.raises(FetchError, match="only http and https") as e:
        rec.f.get_json(index.url_for(PATH))
    assert target.split(":")[0] in str(e.value) and len(index.requests_for(PATH)) == 1


def test_a_file_url_is_never_requested(rec: Rec) -> None:
    with pytest.raises(FetchError, match="only http and https"):
        rec.f.get_bytes("file:///etc/passwd", max_bytes=100)


def test_a_trickling_body_meets_the_deadline(index: FakeIndex) -> None:
    index.fault(PATH, "trickle", interval=0.05)
    r = Rec(deadline=0.6)
    t = time.monotonic()
    with pytest.raises(FetchError, match="too slow"):
        r.f.get_bytes(index.url_for(PATH), max_bytes=len(BODY))
    assert time.monotonic() - t < 5  # not retried: a trickle does not get faster
    assert len(index.requests_for(PATH)) == 1
    r.f.close()


@pytest.mark.parametrize("path", [PATH, "/missing"])
def test_trickling_headers_meet_the_deadline(index: FakeIndex, path: str) -> None:
    """Headers sent a byte every 50 ms (~10 s of them, each read well inside the 30 s
    read timeout): the request ends at its overall deadline, naming the URL and what was
    slow, and is not retried."""
    index.fault(path, "trickle_headers", interval=0.05)
    r = Rec(deadline=0.8)
    t = time.monotonic()
    with pytest.raises(FetchError, match="too slow: the response headers") as e:
        r.f.get_bytes(index.url_for(path), max_bytes=len(BODY))
    took = time.monotonic() - t
    assert 0.7 < took < 5
    assert index.url_for(path) in str(e.value) and "0.8s" in str(e.value) and e.value.hint
    assert len(index.requests_for(path)) == 1 and r.sleeps == []
    (req,) = index.requests_for(path)
    assert not req.done.is_set()  # the server was still sending its headers
    r.f.close()


def test_headers_under_the_deadline_are_read(index: FakeIndex) -> None:
    index.add("/small", b"small body")
    index.fault("/small", "trickle_headers", interval=0.001)
    r = Rec(deadline=30)
    assert r.f.get_bytes(index.url_for("/small"), max_bytes=100) == b"small body"
    assert index.requests_for("/small")[0].fault == "trickle_headers"
    r.f.close()


def test_a_stalled_body_ends_at_the_deadline_not_the_read_timeout(index: FakeIndex) -> None:
    index.fault(PATH, "stall", seconds=20, after=100)
    r = Rec(deadline=0.5, timeout=30.0)
    t = time.monotonic()
    with pytest.raises(FetchError, match="too slow: the body"):
        r.f.get_bytes(index.url_for(PATH), max_bytes=len(BODY))
    assert time.monotonic() - t < 5
    r.f.close()


def test_the_deadline_is_per_request(index: FakeIndex) -> None:
    """Each request gets the whole deadline: many quick ones in a row are not cut."""
    r = Rec(deadline=0.5)
    t = time.monotonic()
    while time.monotonic() - t < 1.0:
        assert r.f.get_range(index.url_for(PATH), 0, 9).data == BODY[:10]
    r.f.close()


def test_a_trickle_below_the_minimum_rate(index: FakeIndex) -> None:
    index.fault(PATH, "trickle", interval=0.02)
    r = Rec(grace=0.3, min_rate=1000)
    with pytest.raises(FetchError, match="bytes/s"):
        r.f.get_bytes(index.url_for(PATH), max_bytes=len(BODY))
    r.f.close()


@pytest.mark.parametrize("length", ["²", "9" * 5000])
def test_odd_content_length_digits_are_not_trusted(length: str) -> None:
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        value = f"bytes {length}-1/{length}".encode("latin-1")
        return httpx.Response(206, headers=[(b"Content-Range", value)], content=b"ab")

    f = Fetcher(httpx.Client(transport=httpx.MockTransport(handler)), retries=0)
    with pytest.raises(RangeNotHonoured, match="Content-Range"):
        f.get_range("http://x/f", 0, 1)


def test_the_deadline_also_bounds_an_environment_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxies httpx mounts from the environment keep working (the client is httpx's
    own) and their connections are bounded by the deadline too."""
    from moonpin.scrapers import fetch

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    f = Fetcher()
    pools = [t._pool for t in [f.client._transport, *f.client._mounts.values()]  # type: ignore[attr-defined]
             if t is not None]
    assert len(pools) >= 2  # the default transport and the proxy's
    assert all(isinstance(p._network_backend, fetch._DeadlineBackend) for p in pools)
    f.close()
