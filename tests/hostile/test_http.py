"""A hostile index for ``moonpin scrape --from-url``: the loopback server misbehaving
every way it knows (faults of :mod:`tests.lib.server`, redirects to other schemes and in
loops, trickling bodies, proxies' pages), judged through moonpin: exit 0 (recorded) or 2
(refused, naming the URL, with a tip), never a traceback or a hang, and a refused scrape
leaves the KB as it was."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import gen
from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Tally, survey
from tests.lib.server import FakeIndex

ARCHIVE = "/archive/refs/tags/v0.5.99.tar.gz"


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, body in (("sglang/__init__.py", b""),
                           ("sglang/version.py", b'__version__ = "0.5.99"\n'),
                           ("sglang/srt/pg.py", b"from mooncake.pg import join_group\n")):
            info = tarfile.TarInfo("sglang-0.5.99/" + name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def _fault(rng: random.Random, index: FakeIndex) -> str:
    kind = rng.choice(["status", "ignore_range", "short_body", "long_body", "gzip", "stall",
                       "reset", "html", "changed", "trickle", "redirect", "redirect",
                       "body", "none"])
    times = rng.choice([1, 1, 2])
    params: dict[str, Any] = {}
    if kind == "none":
        return "no fault"
    if kind == "body":  # the archive itself is damaged on the server
        data, what = gen.damage_bytes(rng, _archive())
        index.add(ARCHIVE, data)
        return f"served bytes: {what}"
    if kind == "status":
        params = {"code": rng.choice([301, 404, 410, 429, 500, 503, 999]),
                  "retry_after": rng.choice([None, "0", "99999", "soon", "-1"])}
    elif kind == "stall":
        params = {"seconds": rng.choice([0.05, 0.3])}
    elif kind == "reset":
        params = {"rst": rng.random() < 0.5}
    elif kind == "changed":
        params = {"body": rng.choice([b"", b"x" * 100, _archive()[::-1]]), "after": 0}
    elif kind == "trickle":
        params = {"interval": 0.001}
    elif kind == "redirect":
        params = {"location": rng.choice([ARCHIVE, "file:///etc/passwd", "ftp://127.0.0.1/x",
                                          "/elsewhere", "http://[::1", "\x00",
                                          "gopher://x/" + "a" * 5000]),
                  "code": rng.choice([301, 302, 303, 307, 308])}
        times = rng.choice([1, 10**6])
    index.fault(ARCHIVE, kind, times=times, **params)
    return f"{kind} x{times} {params!r}"[:200]


def _surface(tmp_path: Path, kb: Path, n: int, fuzz: bool) -> Tally:
    pristine = kb.read_bytes()
    with FakeIndex() as index:
        index.add("/elsewhere", _archive())

        def make(rng: random.Random, i: int) -> Case:
            index.clear_faults()
            index.clear_requests()
            index.add(ARCHIVE, _archive())
            what = _fault(rng, index)
            kb.write_bytes(pristine)
            return Case(what, ["--kb", str(kb), "scrape", "--from-url",
                               index.url_for(ARCHIVE)], keep_if_refused=[kb], timeout=120)

        return survey("HTTP behaviour of the index", 1919_1919, n, fuzz, tmp_path / "home",
                      make)


def test_hostile_index(tmp_path: Path, empty_kb: Path) -> None:
    _surface(tmp_path, empty_kb, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_index(tmp_path: Path, empty_kb: Path) -> None:
    _surface(tmp_path, empty_kb, FUZZ_N, True).check()
