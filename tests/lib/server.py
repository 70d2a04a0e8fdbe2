"""A hermetic, misbehaving package index for tests.

:class:`FakeIndex` is a real threaded HTTP/1.1 server on ``127.0.0.1`` (port 0)
that serves registered byte strings, honours single ``Range`` requests the way
the real index does, speaks a PyPI-compatible JSON API (``/pypi/<name>/json``
with *relative* file URLs) and misbehaves on demand (see :meth:`FakeIndex.fault`).

Example::

    with FakeIndex() as index:
        url = index.add("/f.bin", b"0123456789")
        index.fault("/f.bin", "status", code=503, times=1, retry_after="0")
        ...
        assert index.requests[0].status == 503

Paths are matched after percent-decoding and without the query string, so a
file registered as ``/packages/x/torch-2.1.0+cu121-....whl`` is found whether the
client asks for ``+`` or ``%2B``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import hashlib
import io
import json
import socket
import struct
import threading
import time as _time
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "FAULT_KINDS",
    "FakeIndex",
    "Logged",
    "Resource",
    "ServedFile",
    "ServedProject",
]

#: Fault kind -> the keyword parameters it accepts (``times`` is accepted by all).
FAULT_KINDS: dict[str, frozenset[str]] = {
    "status": frozenset({"code", "retry_after", "body"}),
    "ignore_range": frozenset(),
    "no_suffix": frozenset({"code"}),
    "suffix_head": frozenset(),
    "wrong_offset": frozenset({"shift"}),
    "short_body": frozenset({"send"}),
    "long_body": frozenset({"extra"}),
    "no_content_range": frozenset(),
    "gzip": frozenset(),
    "stall": frozenset({"seconds", "after"}),
    "reset": frozenset({"rst"}),
    "html": frozenset({"body"}),
    "changed": frozenset({"body", "after", "content_type"}),
    "trickle": frozenset({"interval"}),
    "trickle_headers": frozenset({"interval"}),
    "redirect": frozenset({"location", "code"}),
}

_HTML_BODY = b"<html>proxy login</html>"
_LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"


@dataclass
class Logged:
    """One request as the server saw it and answered it.

    ``status`` is the status decided for the answer (0 only for an instant while
    it is being decided); ``bytes_sent`` counts body bytes actually written to
    the socket so far (not headers) and grows while a response is being written.
    ``fault`` names the fault kind that altered this answer, if any.
    """

    method: str
    path: str
    range: str | None
    status: int = 0
    bytes_sent: int = 0
    target: str = ""
    fault: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: set once the server is done with this request (answered whole, or given up on
    #: because the client went away): what a test waits on instead of sleeping
    done: threading.Event = field(default_factory=threading.Event, repr=False,
                                  compare=False)


@dataclass(frozen=True)
class Resource:
    """A registered body with its content type and strong ETag."""

    body: bytes
    content_type: str

    @property
    def etag(self) -> str:
        """A strong ETag derived from the SHA-256 of the body."""
        return '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'


@dataclass(frozen=True)
class ServedFile:
    """One distribution file published by :meth:`FakeIndex.add_project`."""

    filename: str
    version: str
    path: str
    url: str
    relative_url: str
    sha256: str
    size: int
    metadata_url: str | None


@dataclass(frozen=True)
class ServedProject:
    """What :meth:`FakeIndex.add_project` published."""

    name: str
    api_path: str
    api_url: str
    document: dict[str, Any]
    files: dict[str, ServedFile]


@dataclass
class _Fault:
    kind: str
    params: dict[str, Any]
    times: int | None
    fired: int = 0
    seen: int = 0

    def take(self) -> bool:
        """Consume one use of the fault; False once ``times`` is exhausted."""
        if self.times is not None and self.fired >= self.times:
            return False
        self.fired += 1
        return True


@dataclass
class _Plan:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    send_limit: int | None = None
    stall: tuple[int, float] | None = None
    reset: bool | None = None  # None: no reset; False: FIN after headers; True: RST
    trickle: float | None = None  # seconds between body bytes, one at a time
    trickle_headers: float | None = None  # seconds between bytes of the status and headers
    fault: str | None = None


# A parsed Range header: ("none",) | ("multi",) | ("bad",) | ("span", start, end|None)
# | ("suffix", n)
_RangeSpec = tuple[Any, ...]


def _parse_range(value: str | None) -> _RangeSpec:
    if value is None:
        return ("none",)
    unit, sep, spec = value.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return ("bad",)
    spec = spec.strip()
    if "," in spec:
        return ("multi",)
    first, dash, last = spec.partition("-")
    first, last = first.strip(), last.strip()
    if not dash:
        return ("bad",)
    try:
        if first == "":
            return ("suffix", int(last)) if last.isdigit() else ("bad",)
        if not first.isdigit() or (last and not last.isdigit()):
            return ("bad",)
        start = int(first)
        end = int(last) if last else None
    except ValueError:
        return ("bad",)
    if end is not None and end < start:
        return ("bad",)
    return ("span", start, end)


def _resolve(spec: _RangeSpec, size: int) -> tuple[int, int] | None:
    """Inclusive (start, end) for a satisfiable span/suffix, None if unsatisfiable."""
    if spec[0] == "suffix":
        n = spec[1]
        if n <= 0 or size == 0:
            return None
        return (max(0, size - n), size - 1)
    start, end = spec[1], spec[2]
    if start >= size:
        return None
    return (start, size - 1 if end is None or end >= size else end)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # never join handler threads (a stall must not block close)
    index: FakeIndex


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 30  # idle keep-alive connections do not live forever

    def setup(self) -> None:
        """Disable Nagle: headers and body go out in separate writes (no 40 ms stalls)."""
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def do_GET(self) -> None:
        """Serve a GET."""
        self.server.index._handle(self, head=False)

    def do_HEAD(self) -> None:
        """Serve a HEAD."""
        self.server.index._handle(self, head=True)


class FakeIndex:
    """A threaded HTTP server on 127.0.0.1 serving registered bodies; see the module doc.

    The server starts listening and serving in the constructor; use it as a
    context manager (or call :meth:`close`) to stop it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._resources: dict[str, Resource] = {}
        self._faults: dict[str, _Fault] = {}
        self._log: list[Logged] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.index = self
        port = int(self._server.server_address[1])
        self.url: str = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"FakeIndex:{port}",
            daemon=True,
        )
        self._thread.start()

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> FakeIndex:
        """Return the (already running) server."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.close()

    def close(self) -> None:
        """Stop serving, wake any stalled handler and close the listening socket."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- registration ------------------------------------------------------------

    def url_for(self, path: str) -> str:
        """The absolute URL of ``path`` on this server."""
        return self.url + path

    def add(self, path: str, body: bytes, content_type: str = "application/octet-stream") -> str:
        """Serve ``body`` at ``path`` (percent-decoded form); return its absolute URL."""
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/': {path!r}")
        key = unquote(path)
        with self._lock:
            self._resources[key] = Resource(bytes(body), content_type)
        return self.url + quote(key)

    def add_json(self, path: str, obj: object) -> str:
        """Serve ``obj`` as ``application/json`` at ``path``; return its absolute URL."""
        return self.add(path, json.dumps(obj, indent=1).encode(), "application/json")

    def remove(self, path: str) -> None:
        """Stop serving ``path`` (it answers 404 afterwards)."""
        with self._lock:
            self._resources.pop(unquote(path), None)

    def add_project(
        self,
        name: str,
        files: Mapping[str, Mapping[str, bytes]],
        *,
        metadata: bool | Mapping[str, bytes] = False,
        requires_python: str | None = None,
        yanked: Collection[str] = (),
        latest: str | None = None,
    ) -> ServedProject:
        """Publish a project the way PyPI's JSON API shows it.

        ``files`` is ``{version: {filename: bytes}}``; the latest version is
        ``latest`` or else the last key of ``files``. Each file is served at
        ``/packages/<b2[:2]>/<b2[2:4]>/<b2[4:]>/<filename>`` (``b2`` the BLAKE2b-256
        hex digest, as on PyPI) and listed with the RELATIVE url
        ``../../packages/...`` in ``/pypi/<name>/json`` (and ``../../../packages/...``
        in the per-version ``/pypi/<name>/<version>/json``).

        ``metadata``: when true, each wheel's ``*.dist-info/METADATA`` is served at
        ``<file path>.metadata`` (PEP 658) and the file entries carry
        ``"core-metadata"`` and ``"data-dist-info-metadata"`` (``{"sha256": ...}``,
        or ``False`` when the wheel has no readable METADATA). A mapping
        ``{filename: bytes}`` serves exactly those bytes instead (for files it names).
        Without ``metadata`` those keys are absent, as on PyPI's JSON API.

        ``yanked`` names versions or filenames to mark ``"yanked": true``.
        """
        if not files:
            raise ValueError("a project needs at least one version")
        versions = list(files)
        latest = latest if latest is not None else versions[-1]
        if latest not in files:
            raise ValueError(f"latest {latest!r} is not among the versions")
        base_time = _dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc)
        served: dict[str, ServedFile] = {}
        entries: dict[str, list[dict[str, Any]]] = {}
        for index, version in enumerate(versions):
            stamp = base_time + _dt.timedelta(days=index)
            entries[version] = []
            for filename, data in files[version].items():
                digest = hashlib.blake2b(data, digest_size=32).hexdigest()
                sha = hashlib.sha256(data).hexdigest()
                md5 = hashlib.md5(data).hexdigest()
                rel = f"packages/{digest[:2]}/{digest[2:4]}/{digest[4:]}/{quote(filename)}"
                path = "/" + unquote(rel)
                self.add(path, data)
                entry: dict[str, Any] = {
                    "comment_text": "",
                    "digests": {
                        "blake2b_256": digest,
                        "md5": md5,
                        "sha256": sha,
                    },
                    "downloads": -1,
                    "filename": filename,
                    "has_sig": False,
                    "md5_digest": md5,
                    "packagetype": _packagetype(filename),
                    "python_version": _python_version(filename),
                    "requires_python": requires_python,
                    "size": len(data),
                    "upload_time": stamp.strftime("%Y-%m-%dT%H:%M:%S"),
                    "upload_time_iso_8601": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    "url": "../../" + rel,
                    "yanked": version in yanked or filename in yanked,
                    "yanked_reason": None,
                }
                metadata_url: str | None = None
                if metadata:
                    meta: bytes | None
                    if isinstance(metadata, Mapping):
                        meta = metadata.get(filename)
                        if meta is None:
                            meta = _wheel_metadata(data)
                    else:
                        meta = _wheel_metadata(data)
                    flag: dict[str, str] | bool = False
                    if meta is not None:
                        metadata_url = self.add(path + ".metadata", meta)
                        flag = {"sha256": hashlib.sha256(meta).hexdigest()}
                    entry["core-metadata"] = flag
                    entry["data-dist-info-metadata"] = flag
                entries[version].append(entry)
                served[filename] = ServedFile(
                    filename=filename,
                    version=version,
                    path=path,
                    url=self.url + "/" + rel,
                    relative_url=entry["url"],
                    sha256=sha,
                    size=len(data),
                    metadata_url=metadata_url,
                )

        def info(version: str) -> dict[str, Any]:
            return {
                "name": name,
                "version": version,
                "requires_dist": None,
                "requires_python": requires_python,
                "summary": "",
                "yanked": False,
                "yanked_reason": None,
            }

        document: dict[str, Any] = {
            "info": info(latest),
            "last_serial": 1,
            "releases": entries,
            "urls": entries[latest],
            "vulnerabilities": [],
        }
        api_path = f"/pypi/{name}/json"
        api_url = self.add_json(api_path, document)
        for version in versions:
            per_version = [dict(e, url="../" + e["url"]) for e in entries[version]]
            self.add_json(
                f"/pypi/{name}/{version}/json",
                {
                    "info": info(version),
                    "last_serial": 1,
                    "urls": per_version,
                    "vulnerabilities": [],
                },
            )
        return ServedProject(name, api_path, api_url, document, served)

    # -- faults ----------------------------------------------------------------

    def fault(self, path: str, kind: str, **params: Any) -> None:
        """Make ``path`` (exact, percent-decoded; or ``"*"`` for every path) misbehave.

        One fault per path; a new call replaces the old one. An exact-path fault
        takes precedence over ``"*"``. Every kind accepts ``times=N`` (apply to
        the first N requests it concerns, then behave; default: forever). Kinds and
        their parameters are listed in :data:`FAULT_KINDS`:

        ``status``
            answer ``code`` (default 503) with an optional ``Retry-After: retry_after``.
        ``ignore_range``
            requests with a Range header get 200 and the whole body.
        ``no_suffix``
            suffix ranges get ``code`` (default 501); explicit ranges are fine.
        ``suffix_head``
            ``bytes=-N`` gets 206 with the FIRST N bytes and ``bytes 0-(N-1)/size``.
        ``wrong_offset``
            206 answers serve (consistently) the range moved by ``shift`` (default 1).
        ``short_body``
            Content-Length is right but only ``send`` bytes (default half) are
            written, then the connection closes.
        ``long_body``
            ``extra`` (default 100) bytes more than asked (206: Content-Range still
            names the requested span; Content-Length covers the longer body).
        ``no_content_range``
            206 without Content-Range.
        ``gzip``
            ``Content-Encoding: gzip`` with the (range) body gzipped.
        ``stall``
            headers and ``after`` body bytes (default half) are sent, then the
            handler sleeps ``seconds`` (default 5; cut short by :meth:`close`) before
            the rest. For HEAD it sleeps before the headers.
        ``reset``
            the connection is closed right after the headers: with a TCP RST
            (``rst=True``, default) or a plain FIN (``rst=False``).
        ``html``
            200 ``text/html`` ``<html>proxy login</html>`` (captive proxy), any path.
        ``changed``
            after the first ``after`` (default 1) requests, ``body`` (required) is
            served instead, with its own size and ETag.
        ``trickle``
            the body is written one byte every ``interval`` seconds (default 0.5; cut
            short by :meth:`close`): never a stalled read, yet no end in sight.
        ``trickle_headers``
            the status line and headers are written one byte every ``interval`` seconds
            (default 0.5; cut short by :meth:`close`), then the body at once: a client
            bounded only per read waits as long as the server likes for the headers.
        ``redirect``
            answer ``code`` (default 302) with ``Location: location`` (required; relative
            or absolute, any scheme: a loop, ``file://``, ``ftp://``).
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        times = params.pop("times", None)
        unknown = set(params) - FAULT_KINDS[kind]
        if unknown:
            raise ValueError(f"fault {kind!r} does not take {sorted(unknown)}")
        if kind == "changed" and not isinstance(params.get("body"), bytes):
            raise ValueError("fault 'changed' needs body=<bytes>")
        if kind == "redirect" and not isinstance(params.get("location"), str):
            raise ValueError("fault 'redirect' needs location=<str>")
        key = path if path == "*" else unquote(path)
        with self._lock:
            self._faults[key] = _Fault(kind, dict(params), times)

    def clear_faults(self, path: str | None = None) -> None:
        """Remove the fault on ``path``, or every fault when ``path`` is None."""
        with self._lock:
            if path is None:
                self._faults.clear()
            else:
                self._faults.pop(path if path == "*" else unquote(path), None)

    # -- the log -----------------------------------------------------------------

    @property
    def requests(self) -> list[Logged]:
        """A snapshot (new list) of every request received so far, in arrival order."""
        with self._lock:
            return list(self._log)

    def requests_for(self, path: str) -> list[Logged]:
        """The logged requests for one (percent-decoded) path."""
        key = unquote(path)
        return [r for r in self.requests if r.path == key]

    def wait_answered(self, timeout: float = 5.0) -> bool:
        """Wait until the server is done with every request logged so far (each answered
        whole, or abandoned when its client went away); False if ``timeout`` passed first."""
        end = _time.monotonic() + timeout
        return all(r.done.wait(max(0.0, end - _time.monotonic())) for r in self.requests)

    def clear_requests(self) -> None:
        """Forget the request log."""
        with self._lock:
            self._log.clear()

    def bytes_sent(self, path: str | None = None) -> int:
        """Body bytes written so far, for one path or for all."""
        logged = self.requests if path is None else self.requests_for(path)
        return sum(r.bytes_sent for r in logged)

    # -- serving -------------------------------------------------------------------

    def _handle(self, h: _Handler, *, head: bool) -> None:
        target = h.path
        path = unquote(urlsplit(target).path)
        entry = Logged(
            method=h.command,
            path=path,
            range=h.headers.get("Range"),
            target=target,
            headers={k: v for k, v in h.headers.items()},
        )
        with self._lock:
            self._log.append(entry)
            plan = self._plan(path, entry.range, h.headers.get("If-Range"), head=head)
        entry.fault = plan.fault
        try:
            self._send(h, plan, head=head, entry=entry)
        finally:
            entry.done.set()

    def _plan(
        self, path: str, range_header: str | None, if_range: str | None, *, head: bool
    ) -> _Plan:
        """Decide the response (called with the lock held)."""
        fault = self._faults.get(path) or self._faults.get("*")
        kind = fault.kind if fault is not None else None
        fired: str | None = None

        def use() -> bool:
            nonlocal fired
            assert fault is not None
            if fault.take():
                fired = fault.kind
                return True
            return False

        if fault is not None:
            fault.seen += 1
        if kind == "status" and fault is not None and use():
            code = int(fault.params.get("code", 503))
            hdrs = [("Content-Type", "text/plain")]
            if fault.params.get("retry_after") is not None:
                hdrs.append(("Retry-After", str(fault.params["retry_after"])))
            body = fault.params.get("body", f"error {code}\n".encode())
            return _Plan(code, hdrs, body, fault="status")
        if kind == "redirect" and fault is not None and use():
            code = int(fault.params.get("code", 302))
            return _Plan(code, [("Location", str(fault.params["location"]))], b"",
                         fault="redirect")
        if kind == "html" and fault is not None and use():
            body = fault.params.get("body", _HTML_BODY)
            return _Plan(200, [("Content-Type", "text/html; charset=utf-8")], body, fault="html")

        resource = self._resources.get(path)
        if (
            kind == "changed"
            and fault is not None
            and fault.seen > int(fault.params.get("after", 1))
            and use()
        ):
            resource = Resource(
                fault.params["body"],
                fault.params.get(
                    "content_type",
                    resource.content_type if resource else "application/octet-stream",
                ),
            )

        if resource is None:
            plan = _Plan(404, [("Content-Type", "text/plain")], b"not found\n")
        else:
            plan = self._plan_resource(
                resource, range_header, if_range, kind, fault.params if fault else {}, use
            )

        if plan.status == 206 and kind == "wrong_offset" and fault is not None and use():
            assert resource is not None
            size = len(resource.body)
            start, end = _content_range_of(plan)
            shift = int(fault.params.get("shift", 1))
            new_start = max(0, min(start + shift, size - 1))
            new_end = min(size - 1, new_start + (end - start))
            plan.body = resource.body[new_start : new_end + 1]
            _set_header(plan, "Content-Range", f"bytes {new_start}-{new_end}/{size}")
        if plan.status == 206 and kind == "no_content_range" and fault is not None and use():
            plan.headers = [(k, v) for k, v in plan.headers if k != "Content-Range"]
        if (
            kind == "long_body"
            and fault is not None
            and plan.status in (200, 206)
            and not head
            and use()
        ):
            extra = int(fault.params.get("extra", 100))
            assert resource is not None
            tail = b""
            if plan.status == 206:
                _, end = _content_range_of(plan)
                tail = resource.body[end + 1 : end + 1 + extra]
            plan.body += tail + b"\0" * (extra - len(tail))
        if kind == "gzip" and fault is not None and plan.status in (200, 206) and use():
            plan.body = gzip.compress(plan.body, mtime=0)
            plan.headers.append(("Content-Encoding", "gzip"))
        if kind == "short_body" and fault is not None and plan.body and not head and use():
            plan.send_limit = int(fault.params.get("send", len(plan.body) // 2))
        if kind == "stall" and fault is not None and use():
            after = int(fault.params.get("after", len(plan.body) // 2))
            plan.stall = (after, float(fault.params.get("seconds", 5.0)))
        if kind == "reset" and fault is not None and use():
            plan.reset = bool(fault.params.get("rst", True))
        if kind == "trickle" and fault is not None and not head and use():
            plan.trickle = float(fault.params.get("interval", 0.5))
        if kind == "trickle_headers" and fault is not None and use():
            plan.trickle_headers = float(fault.params.get("interval", 0.5))
        plan.fault = fired
        return plan

    def _plan_resource(
        self,
        resource: Resource,
        range_header: str | None,
        if_range: str | None,
        kind: str | None,
        params: Mapping[str, Any],
        use: Callable[[], bool],
    ) -> _Plan:
        body = resource.body
        size = len(body)
        base = [
            ("Content-Type", resource.content_type),
            ("Accept-Ranges", "bytes"),
            ("ETag", resource.etag),
            ("Last-Modified", _LAST_MODIFIED),
        ]
        spec = _parse_range(range_header)
        if spec[0] != "none" and if_range is not None and if_range.strip() != resource.etag:
            spec = ("none",)  # the representation changed: RFC 9110 says send it whole
        if spec[0] in ("none", "bad", "multi"):
            return _Plan(200, base, body)
        if kind == "ignore_range" and use():
            return _Plan(200, base, body)
        if spec[0] == "suffix" and kind == "no_suffix" and use():
            code = int(params.get("code", 501))
            return _Plan(code, [("Content-Type", "text/plain")], b"suffix ranges unsupported\n")
        if spec[0] == "suffix" and kind == "suffix_head" and spec[1] > 0 and size and use():
            n = min(spec[1], size)
            return _Plan(206, [*base, ("Content-Range", f"bytes 0-{n - 1}/{size}")], body[:n])
        span = _resolve(spec, size)
        if span is None:
            return _Plan(416, [*base, ("Content-Range", f"bytes */{size}")], b"")
        start, end = span
        return _Plan(
            206, [*base, ("Content-Range", f"bytes {start}-{end}/{size}")], body[start : end + 1]
        )

    def _send(self, h: _Handler, plan: _Plan, *, head: bool, entry: Logged) -> None:
        entry.status = plan.status
        try:
            if head and plan.stall is not None:
                self._closing.wait(plan.stall[1])
            if plan.trickle_headers is not None:
                if not self._trickle_headers(h, plan):
                    return
            else:
                h.send_response(plan.status)
                for name, value in plan.headers:
                    h.send_header(name, value)
                h.send_header("Content-Length", str(len(plan.body)))
                h.end_headers()
            if plan.reset is not None:
                h.close_connection = True
                if plan.reset:
                    with contextlib.suppress(OSError):
                        h.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        h.connection.close()
                return
            if head:
                return
            body = plan.body
            if plan.send_limit is not None:
                body = body[: plan.send_limit]
                h.close_connection = True
            if plan.trickle is not None:
                for i in range(len(body)):
                    self._write(h, body[i : i + 1], entry)
                    if self._closing.wait(plan.trickle):
                        h.close_connection = True
                        return
                return
            if plan.stall is not None:
                after = max(0, min(plan.stall[0], len(body)))
                self._write(h, body[:after], entry)
                self._closing.wait(plan.stall[1])
                body = body[after:]
            self._write(h, body, entry)
        except OSError:  # the client went away
            h.close_connection = True

    def _trickle_headers(self, h: _Handler, plan: _Plan) -> bool:
        """Write the status line and headers a byte at a time; False when cut short."""
        assert plan.trickle_headers is not None
        lines = [f"HTTP/1.1 {plan.status} {h.responses.get(plan.status, ('',))[0]}",
                 *(f"{k}: {v}" for k, v in plan.headers), f"Content-Length: {len(plan.body)}"]
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        for i in range(len(raw)):
            h.wfile.write(raw[i:i + 1])
            h.wfile.flush()
            if self._closing.wait(plan.trickle_headers):
                h.close_connection = True
                return False
        return True

    @staticmethod
    def _write(h: _Handler, data: bytes, entry: Logged) -> None:
        for chunk in _chunks(data, 65536):
            # counted before the write: a client may read the bytes (and a test look at
            # the log) before this thread runs again
            entry.bytes_sent += len(chunk)
            try:
                h.wfile.write(chunk)
            except OSError:
                entry.bytes_sent -= len(chunk)
                raise
        h.wfile.flush()


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(data), size):
        yield bytes(view[i : i + size])


def _content_range_of(plan: _Plan) -> tuple[int, int]:
    for name, value in plan.headers:
        if name == "Content-Range":
            first, _, last = value.removeprefix("bytes ").split("/")[0].partition("-")
            return int(first), int(last)
    raise AssertionError("206 plan without Content-Range")


def _set_header(plan: _Plan, name: str, value: str) -> None:
    plan.headers = [(k, v) for k, v in plan.headers if k != name] + [(name, value)]


def _packagetype(filename: str) -> str:
    if filename.endswith(".whl"):
        return "bdist_wheel"
    if filename.endswith(".egg"):
        return "bdist_egg"
    return "sdist"


def _python_version(filename: str) -> str:
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        if len(parts) >= 5:
            return parts[-3]
    return "source"


def _wheel_metadata(data: bytes) -> bytes | None:
    """The ``<x>.dist-info/METADATA`` of a wheel, or None if it cannot be read."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for name in zf.namelist():
                parts = name.split("/")
                if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
                    return zf.read(name)
    except (zipfile.BadZipFile, NotImplementedError, OSError, ValueError, EOFError):
        return None
    return None
