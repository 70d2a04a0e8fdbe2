"""The one place that talks HTTP: retries, backoff, Range verification, byte counts.

Everything else receives a :class:`Fetcher` (tests hand it a client bound to a
loopback server or an ``httpx.MockTransport``).

Retry policy: 429 and 500/502/503/504, timeouts, resets and truncated bodies are
retried with capped exponential backoff and full jitter, honouring
``Retry-After`` (seconds or an HTTP date) up to ``max_wait``. TLS failures and
other 4xx are not retried: they will not get better by asking again.

The index is untrusted: only ``http``/``https`` URLs are requested or followed (a file
URL or a redirect to ``file://``/``ftp://`` is a :class:`~moonpin.kb.errors.FetchError`),
redirects are followed here, at most ``max_redirects`` of them, and every request has one
overall ``deadline`` (connect, TLS, request, response headers and body, to the last byte)
besides the per-read ``timeout``: a server that sends its headers or its body one byte a
second never trips the read timeout, and is not retried either (it does not get faster).
The deadline is kept at the socket: every connect and read of the client's connections is
given at most the time the request has left (see :class:`_DeadlineBackend`).
"""

from __future__ import annotations

import email.utils
import json
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpcore
import httpx

from moonpin.kb.errors import FetchError, RangeNotHonoured

__all__ = ["FetchStats", "Fetcher", "RangeAnswer"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_USER_AGENT = "moonpin (+compatibility scraper; range reads only)"


@dataclass
class FetchStats:
    requests: int = 0
    retries: int = 0
    bytes: int = 0  # body bytes received, all requests
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, requests: int = 0, retries: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.retries += retries
            self.bytes += nbytes


@dataclass(frozen=True)
class RangeAnswer:
    """Bytes ``start .. start+len(data)`` of a file of ``size`` bytes.

    ``whole`` is True when the server ignored Range and the whole (small enough)
    body was read instead; the caller should keep it and ask no more.
    """

    data: bytes
    start: int
    size: int | None
    whole: bool = False


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """Parse ``bytes a-b/size`` (RFC 9110 §14.4); None when absent or malformed."""
    if not value or not value.startswith("bytes "):
        return None
    span, _, total = value[6:].partition("/")
    a, _, b = span.partition("-")
    if not (_digits(a) and _digits(b)):
        return None
    return int(a), int(b), int(total) if _digits(total) else None


def _digits(text: str) -> bool:
    """ASCII digits only, and few enough for ``int()`` (``"²".isdigit()`` is True)."""
    return text.isascii() and text.isdigit() and len(text) <= 30


_REDIRECTS = frozenset({301, 302, 303, 307, 308})


_STATUS_HINT = "check the URL, or --index-url / MOONPIN_INDEX_URL (a proxy may be answering)"


_CAP_HINT = "check the URL: moonpin reads no file that large from it"


def _status(resp: httpx.Response) -> str:
    if resp.status_code in _REDIRECTS:
        return f"HTTP {resp.status_code}, a redirect without a Location"
    return f"HTTP {resp.status_code}"


def _short(url: str) -> str:
    return url if len(url) <= 200 else url[:200] + f"... ({len(url)} characters)"


def _join(first: str, base: httpx.URL, location: str) -> str:
    try:
        return str(base.join(location))
    except (httpx.InvalidURL, ValueError) as e:
        raise FetchError(first, f"redirected to an invalid URL {_short(location)!r}: {e}",
                         hint="check --index-url / MOONPIN_INDEX_URL") from e


def _require_http(first: str, url: str) -> None:
    """Only http(s) is requested: an index or redirect naming ``file://`` or ``ftp://``
    (or anything else) is refused, never opened."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        where = "" if url == first else f"redirected to {_short(url)!r}; "
        raise FetchError(first, f"{where}only http and https URLs are followed "
                         f"(not {scheme or 'a relative URL'!s})",
                         hint="check --index-url / MOONPIN_INDEX_URL, or the index's file URLs")


#: When the request this thread is sending must be over (``time.monotonic()``), or None.
_DEADLINE: ContextVar[float | None] = ContextVar("moonpin_fetch_deadline", default=None)

_T = TypeVar("_T")


class _DeadlinePassed(Exception):
    """The request's overall deadline passed while ``phase`` ("connect", "tls", "read",
    "write") was under way. Not an httpcore error, so httpx passes it through as it is."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


def _bounded(phase: str, timeout: float | None, call: Callable[[float | None], _T]) -> _T:
    """``call(timeout)``, with the timeout cut to what the current request has left."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return call(timeout)
    left = deadline - time.monotonic()
    if left <= 0:
        raise _DeadlinePassed(phase)
    if timeout is not None and timeout <= left:
        return call(timeout)
    try:
        return call(left)
    except (httpcore.ConnectTimeout, httpcore.ReadTimeout, httpcore.WriteTimeout) as e:
        raise _DeadlinePassed(phase) from e


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write ends by the request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _bounded("read", timeout, lambda t: self._inner.read(max_bytes, t))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _bounded("write", timeout, lambda t: self._inner.write(buffer, t))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(_bounded(
            "tls", timeout, lambda t: self._inner.start_tls(ssl_context, server_hostname, t)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend, its connections bounded by the request's deadline."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(_bounded("connect", timeout, lambda t: self._inner.connect_tcp(
            host, port, t, local_address, socket_options)))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:
        return _DeadlineStream(_bounded("connect", timeout, lambda t: (
            self._inner.connect_unix_socket(path, t, socket_options))))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound_by_deadline(client: httpx.Client) -> None:
    """Put :class:`_DeadlineBackend` under each of ``client``'s connection pools (the
    default transport and any proxy mounts from the environment, which a transport of our
    own would turn off). httpx has no public way to reach the pool, hence the private
    names; a transport without one (``httpx.MockTransport``) opens no socket to bound."""
    mounts = getattr(client, "_mounts", {})
    for transport in [getattr(client, "_transport", None), *mounts.values()]:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]


_PHASES = {"connect": "connecting", "tls": "the TLS handshake", "write": "sending the request",
           "read": "the response headers"}


class Fetcher:
    """HTTP GETs with retries, verified ranges and a running byte count."""

    def __init__(
        self,
        client: httpx.Client | None = None,
        *,
        retries: int = 5,
        backoff: float = 0.5,
        max_wait: float = 60.0,
        timeout: float = 30.0,
        whole_body_cap: int = 32 * 1024 * 1024,
        sleep: Callable[[float], None] = time.sleep,
        warn: Callable[[str], None] | None = None,
        deadline: float = 300.0,
        min_rate: int = 1024,
        grace: float = 30.0,
        max_redirects: int = 10,
    ) -> None:
        self.client = client or httpx.Client(
            timeout=httpx.Timeout(timeout, connect=10.0),
            follow_redirects=False,  # followed by _send, which checks each target
            headers={"User-Agent": _USER_AGENT},
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
        )
        _bound_by_deadline(self.client)
        self.retries = retries
        self.backoff = backoff
        self.max_wait = max_wait
        self.whole_body_cap = whole_body_cap
        self.json_cap = 64 * 1024 * 1024  # torch's project JSON is ~1 MB; leave room
        self.sleep = sleep
        self.warn = warn or (lambda _msg: None)
        self.stats = FetchStats()
        #: seconds one request may take, from connecting to its last body byte
        self.deadline = deadline
        #: past ``grace`` seconds, a body arriving slower than this on average is abandoned
        self.min_rate = min_rate
        self.grace = grace
        self.max_redirects = max_redirects

    def close(self) -> None:
        self.client.close()

    # -- the retry loop --------------------------------------------------------

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        handle: Callable[[httpx.Response], Any],
    ) -> Any:
        """Send with retries; ``handle`` reads the streamed response and returns the result.

        Redirects are followed here (never by the client): each target must be http(s),
        and more than ``max_redirects`` is an error."""
        attempt = 0
        first = url
        redirects = 0
        while True:
            wait: float | None = None
            why = ""
            _require_http(first, url)
            started = time.monotonic()
            token = _DEADLINE.set(started + self.deadline)
            answered = False
            try:
                with self.client.stream(method, url, headers=headers,
                                        follow_redirects=False) as resp:
                    answered = True
                    self.stats.add(requests=1)
                    resp.extensions["moonpin.started"] = started
                    resp.extensions["moonpin.deadline"] = started + self.deadline
                    if resp.status_code in _REDIRECTS and "Location" in resp.headers:
                        redirects += 1
                        url, method = self._redirect(first, resp, method, redirects)
                        continue
                    if resp.status_code not in _RETRY_STATUS:
                        return handle(resp)
                    why, wait = self._retry_wait(url, resp, attempt)
            except (_DeadlinePassed, httpx.HTTPError) as e:
                why = self._transient(e, url, started, answered)
            finally:
                _DEADLINE.reset(token)
            if attempt >= self.retries:
                raise FetchError(
                    url,
                    f"giving up after {attempt + 1} attempts: {why}",
                    hint="check the network or the index URL (--index-url / MOONPIN_INDEX_URL)",
                )
            if wait is None:
                wait = self._backoff(attempt)
            attempt += 1
            self.stats.add(retries=1)
            self.warn(f"{url}: {why}; retry {attempt}/{self.retries} in {wait:.1f}s")
            self.sleep(wait)

    def _redirect(self, first: str, resp: httpx.Response, method: str, redirects: int,
                  ) -> tuple[str, str]:
        """Where a redirect goes (an http(s) URL) and with which method; FetchError past
        ``max_redirects``."""
        target = _join(first, resp.url, resp.headers["Location"])
        if redirects > self.max_redirects:
            raise FetchError(
                first, f"more than {self.max_redirects} redirects (the last "
                f"to {_short(target)}): a redirect loop?",
                hint="check --index-url / MOONPIN_INDEX_URL, or the proxy in between")
        _require_http(first, target)
        if resp.status_code == 303 and method != "HEAD":
            method = "GET"
        return target, method

    def _retry_wait(self, url: str, resp: httpx.Response, attempt: int,
                    ) -> tuple[str, float]:
        """Why a retryable status is retried and after how long (its ``Retry-After``,
        else the backoff); FetchError when the server asks for more than ``max_wait``."""
        why = f"HTTP {resp.status_code}"
        wait = _retry_after(resp.headers.get("Retry-After"))
        if wait is not None and wait > self.max_wait:
            raise FetchError(
                url,
                f"HTTP {resp.status_code} with Retry-After {wait:.0f}s, "
                f"more than the {self.max_wait:.0f}s moonpin waits",
                hint="try again later, or use a mirror with --index-url",
            )
        return why, wait if wait is not None else self._backoff(attempt)

    def _transient(self, e: Exception, url: str, started: float, answered: bool) -> str:
        """Why a failed request is worth retrying; FetchError for one that is not (the
        deadline passed, TLS, a body that cannot be decoded, a URL that cannot be asked)."""
        if isinstance(e, _DeadlinePassed):
            what = "the body" if answered else _PHASES.get(e.phase, e.phase)
            raise FetchError(
                url, f"too slow: {what} still not done after "
                f"{time.monotonic() - started:.1f}s, past the {self.deadline:g}s a whole "
                f"request may take (connect, headers and body)",
                hint="try again later, or use a mirror with --index-url") from None
        if isinstance(e, httpx.ConnectError):
            if isinstance(e.__cause__, ssl.SSLError) or "SSL" in str(e) or "certificate" in str(e):
                raise FetchError(
                    url, f"TLS error: {e}", hint="check the index certificate or SSL_CERT_FILE"
                ) from e
            return f"cannot connect: {e}"
        if isinstance(e, (httpx.TimeoutException, httpx.RemoteProtocolError,
                          httpx.NetworkError)):
            return f"{type(e).__name__}: {e}"
        if isinstance(e, httpx.DecodingError):
            raise FetchError(url, f"the body could not be decoded ({e})",
                             hint="a proxy may be altering the answer; check --index-url"
                             ) from e
        # UnsupportedProtocol, InvalidURL, LocalProtocolError
        raise FetchError(url, f"cannot be requested: {type(e).__name__}: {e}",
                         hint="check --index-url / MOONPIN_INDEX_URL") from e

    def _backoff(self, attempt: int) -> float:
        cap = min(self.max_wait, self.backoff * (2**attempt))
        return random.uniform(cap / 2, cap)

    # -- whole documents -------------------------------------------------------

    def get_json(self, url: str) -> Any:
        """GET a JSON document; a 200 that is not JSON (a captive proxy's page) is an error."""

        def handle(resp: httpx.Response) -> Any:
            if resp.status_code != 200:
                raise FetchError(url, _status(resp), hint=_STATUS_HINT)
            body = self._read_capped(url, resp, self.json_cap)
            ctype = resp.headers.get("Content-Type", "")
            try:
                return json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise FetchError(
                    url,
                    f"expected JSON, got {ctype or 'no content type'} starting {body[:40]!r}",
                    hint="a proxy may be answering for the index; check --index-url",
                ) from e

        return self._send("GET", url, {"Accept": "application/json"}, handle)

    def get_bytes(self, url: str, *, max_bytes: int) -> bytes | None:
        """GET a small file whole; None on 404 (e.g. a missing PEP 658 ``.metadata``)."""

        def handle(resp: httpx.Response) -> bytes | None:
            if resp.status_code == 404:
                return None
            if resp.status_code != 200:
                raise FetchError(url, _status(resp), hint=_STATUS_HINT)
            return self._read_capped(url, resp, max_bytes)

        result: bytes | None = self._send("GET", url, {}, handle)
        return result

    def _read_capped(self, url: str, resp: httpx.Response, cap: int) -> bytes:
        declared = resp.headers.get("Content-Length")
        deadline = resp.extensions.get("moonpin.deadline")
        started = resp.extensions.get("moonpin.started", 0.0)
        if declared and _digits(declared) and int(declared) > cap:
            raise FetchError(url, f"response of {int(declared)} bytes exceeds the {cap}-byte cap",
                             hint=_CAP_HINT)
        chunks: list[bytes] = []
        n = 0
        seen = 0
        # iter_bytes decodes any Content-Encoding; the byte count stays on-the-wire.
        for chunk in resp.iter_bytes():
            n += len(chunk)
            self.stats.add(nbytes=resp.num_bytes_downloaded - seen)
            seen = resp.num_bytes_downloaded
            if n > cap:
                raise FetchError(url, f"response exceeds the {cap}-byte cap", hint=_CAP_HINT)
            chunks.append(chunk)
            now = time.monotonic()
            if deadline is not None and (now > deadline or (
                    now - started > self.grace and n < self.min_rate * (now - started))):
                raise FetchError(
                    url, f"still sending after {now - started:.0f}s ({n:,} bytes so far, "
                    f"limits: {self.deadline:.0f}s a request, {self.min_rate:,} bytes/s after "
                    f"{self.grace:.0f}s): too slow to wait for",
                    hint="try again later, or use a mirror with --index-url")
        return b"".join(chunks)

    # -- ranges ----------------------------------------------------------------

    def get_range(self, url: str, start: int, end: int, *, size: int | None = None) -> RangeAnswer:
        """Bytes ``start..end`` inclusive, verified against Content-Range.

        Never send multi-range requests: the index answers them with 200 and the
        whole body. A 200 to a single range is read whole only when the file is no
        bigger than ``whole_body_cap``; otherwise :class:`RangeNotHonoured`.
        """
        if start < 0 or end < start:
            raise ValueError(f"bad range {start}-{end}")
        return self._range(url, f"bytes={start}-{end}", start, end - start + 1, size)

    def get_suffix(self, url: str, n: int, *, size: int | None = None) -> RangeAnswer:
        """The last ``n`` bytes. Falls back to an explicit range (HEAD for the size)
        when the server refuses suffix ranges or answers them with the wrong bytes."""
        try:
            ans = self._range(url, f"bytes=-{n}", None, n, size)
        except RangeNotHonoured as e:
            if e.kind == "ignored":
                raise
            size = size if size is not None else self.head_size(url)
            self.warn(f"{url}: suffix range refused ({e}); using an explicit range")
            start = max(0, size - n)
            return self.get_range(url, start, size - 1, size=size)
        return ans

    def head_size(self, url: str) -> int:
        def handle(resp: httpx.Response) -> int:
            if resp.status_code != 200:
                raise FetchError(url, f"HEAD answered {_status(resp)}", hint=_STATUS_HINT)
            length = resp.headers.get("Content-Length", "")
            if not _digits(length):
                raise RangeNotHonoured(url, "HEAD gave no Content-Length; cannot locate the end")
            return int(length)

        result: int = self._send("HEAD", url, {"Accept-Encoding": "identity"}, handle)
        return result

    def _range(
        self, url: str, header: str, start: int | None, want: int, size: int | None
    ) -> RangeAnswer:
        def handle(resp: httpx.Response) -> RangeAnswer:
            if resp.status_code == 200:
                total = resp.headers.get("Content-Length", "")
                total_n = int(total) if _digits(total) else size
                if total_n is None or total_n > self.whole_body_cap:
                    raise RangeNotHonoured(
                        url,
                        kind="ignored",
                        message=f"server ignored Range ({header}) and started sending the "
                        f"whole body ({total_n if total_n is not None else 'unknown'} bytes); "
                        f"stopped reading",
                        hint="use an index or mirror that honours HTTP Range requests",
                    )
                body = self._read_capped(url, resp, self.whole_body_cap)
                self.warn(f"{url}: server ignored Range; read the whole {len(body)} bytes")
                return RangeAnswer(body, 0, len(body), whole=True)
            if resp.status_code != 206:
                raise RangeNotHonoured(url, f"HTTP {resp.status_code} to {header}", kind="refused")
            cr = _content_range(resp.headers.get("Content-Range"))
            if cr is None:
                raise RangeNotHonoured(url, f"206 without a usable Content-Range to {header}")
            a, b, total = cr
            if start is not None and a != start:
                raise RangeNotHonoured(url, f"asked {header}, got Content-Range {a}-{b}")
            if start is None and total is not None and a != max(0, total - want):
                raise RangeNotHonoured(url, f"asked {header}, got bytes {a}-{b}/{total}")
            if size is not None and total is not None and total != size:
                raise RangeNotHonoured(
                    url, f"file is {total} bytes now, the index said {size}: it changed"
                )
            expected = b - a + 1
            body = self._read_capped(url, resp, expected + 1)
            if len(body) != expected:
                raise RangeNotHonoured(url, f"asked {header}, got {len(body)} bytes for {a}-{b}")
            return RangeAnswer(body, a, total)

        try:
            answer: RangeAnswer = self._send(
                "GET", url, {"Range": header, "Accept-Encoding": "identity"}, handle
            )
        except FetchError as e:
            if "exceeds the" in str(e):
                raise RangeNotHonoured(url, f"asked {header}, got more bytes than that") from e
            raise
        return answer
