"""Seeded generators of hostile values, bytes and special files (no Hypothesis needed:
every input is reproducible from its seed, printed with any failure)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

#: Values that break a JSON document's shape, each of a type the reader must refuse.
HOSTILE_VALUES: list[Any] = [
    [], {}, 5, -1, 1.5, True, "banana", "", None, [5, "x"], {"a": [1, 2]},
    "9" * 5000, 10 ** 40, [[[[[[[[[[]]]]]]]]]], "\x00\udcff".encode("utf-8", "surrogatepass")
    .decode("utf-8", "replace"), "x" * 100_000,
]


def deep(n: int, open_: str = "[", close: str = "]") -> str:
    return open_ * n + close * n


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a node of a parsed JSON document."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def retype(rng: random.Random, doc: Any, *, keep: tuple[Any, ...] = ()) -> tuple[Any, str]:
    """``doc`` with one node (not the root, not under a path in ``keep``) replaced by a
    value of another type: a shape the reader must refuse. Returns (doc, description)."""
    doc = json.loads(json.dumps(doc))
    cands = [p for p in paths(doc) if p and not any(p[:len(k)] == k for k in keep)]
    path = rng.choice(cands)
    old = _get(doc, path)
    # None is left out: for an optional field it is a valid value, not damage (a table
    # edited into another valid table gives another answer; only shape damage is caught)
    choices = [v for v in HOSTILE_VALUES if type(v) is not type(old) and v is not None
               and not (old is None and type(v) in (int, str, bool))
               and not (type(old) is int and type(v) is bool)]
    new = rng.choice(choices)
    parent = _get(doc, path[:-1])
    parent[path[-1]] = new
    return doc, f"{'/'.join(map(str, path))}: {type(old).__name__} -> {str(new)[:30]!r}"


#: Strings a document written on purpose may hold where a name, version or time belongs.
HOSTILE_STRINGS = ["banana", "", "9" * 5000, "1.0+", "1!", "v0.5.18", "2026-01-01T00:00:00",
                   "2026-01-01T00:00:00+14:00", "x" * 100_000, "../../etc/passwd", "-1",
                   "\x00", "sglang", "0.5.18\n", "NaN", "1e999",
                   "0.5.18\x1b]0;owned\x07\x1b[2J", "a\rb\x08c\x9b31m"]


def restring(rng: random.Random, doc: Any) -> tuple[Any, str]:
    """``doc`` with one string node replaced by another string: the shape still fits, the
    value is what a reader must not trust (a version, a time, a name)."""
    doc = json.loads(json.dumps(doc))
    cands = [p for p in paths(doc) if p and isinstance(_get(doc, p), str)]
    if not cands:
        return doc, "no string to replace"
    path = rng.choice(cands)
    new = rng.choice(HOSTILE_STRINGS)
    _get(doc, path[:-1])[path[-1]] = new
    return doc, f"{'/'.join(map(str, path))}: str -> {new[:30]!r}"


def damage_bytes(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    """Bytes-level damage of a JSON (or any) file."""
    kind = rng.choice(["truncate", "flip", "insert", "deep", "bignum", "nul", "bom",
                       "empty", "garbage", "minus"])
    n = len(raw)
    at = rng.randrange(max(n, 1))
    if kind == "truncate":
        return raw[:at], f"truncated at {at}"
    if kind == "flip":
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(max(n, 1))
            if i < len(b):
                b[i] ^= 1 << rng.randrange(8)
        return bytes(b), "bits flipped"
    if kind == "insert":
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
        return raw[:at] + junk + raw[at:], f"{len(junk)} bytes inserted at {at}"
    if kind == "deep":
        d = rng.choice([1000, 5000, 100_000])
        return raw[:at] + deep(d, *rng.choice([("[", "]"), ("{\"a\":", "}")])).encode() \
            + raw[at:], f"{d} nested at {at}"
    if kind == "bignum":
        return (b'{"schema_version": ' + b"9" * rng.choice([4301, 5000, 100_000]) + b"}",
                "a huge integer")
    if kind == "nul":
        return b"\x00" * rng.randint(1, 4096), "NUL bytes"
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw, "a UTF-8 BOM"
    if kind == "empty":
        return b"", "empty"
    if kind == "minus":
        return b"-" * 100_000 + b"1", "100,000 minus signs"
    return os.urandom(rng.randint(1, 2048)), "random bytes"


SPECIALS = ("fifo", "dev-zero", "directory", "loop", "sparse-huge", "dangling", "dev-null")


def make_special(kind: str, path: Path) -> str:
    """Replace ``path`` with a file that is not what a reader expects."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):  # a FIFO too: opening
        path.unlink()  # one for writing would block
    elif path.is_dir():
        import shutil

        shutil.rmtree(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dev-null":
        path.symlink_to("/dev/null")
    elif kind == "directory":
        path.mkdir()
    elif kind == "loop":
        other = path.with_name(path.name + ".loop")
        if other.is_symlink():  # made for an earlier loop at the same path
            other.unlink()
        other.symlink_to(path.name)
        path.symlink_to(other.name)
    elif kind == "sparse-huge":
        with open(path, "wb") as f:
            f.truncate(300 * 1024 * 1024)
    elif kind == "dangling":
        path.symlink_to(path.name + ".nowhere")
    return kind
