"""Hostile source trees and archives for ``moonpin scrape --from-path``, judged through
moonpin: exit 0 (the release recorded, damage named as unparsed/unreadable) or 2 (the
archive or tree refused, naming it), never a traceback or a hang, and a refused scrape
leaves the KB as it was."""

from __future__ import annotations

import io
import os
import random
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.hostile import gen
from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Tally, fresh, survey

PG = b"from mooncake.pg import join_group\n\ndef f(backend):\n    return join_group(backend)\n"

HOSTILE_SOURCES: list[bytes] = [
    b"x = " + b"-" * 100_000 + b"1\n",
    b"x = " + b"+".join([b"'a'"] * 5000) + b"\n",
    b"x = " + b"(" * 5000 + b")" * 5000 + b"\n",
    b"def (:\n",
    b"\xff\xfe\x00garbage\x00",
    b"__version__ = '" + b"9" * 5000 + b"'\n",
    b"import mooncake.pg\n" * 20_000,
    "x = '\udcff'\n".encode("utf-8", "surrogateescape"),
    b"\x00" * 10_000,
]
HOSTILE_VERSIONS = [b"banana", b"9" * 5000, b"", b"1.0+" + b"a" * 300, b"0.5.99\n\x00"]
#: Sources for the members read by name (``sglang/version.py``, ``server_args.py``): one
#: that parses but nests deeper than a recursive walk of its tree goes (a launch rule's
#: condition of 600 additions), on top of those the parser itself refuses.
KNOWN_MEMBER_SOURCES: list[bytes] = [
    *HOSTILE_SOURCES,
    b"import dataclasses\n\n\n@dataclasses.dataclass\nclass ServerArgs:\n"
    b"    elastic_ep_backend: str = None\n\n    def __post_init__(self):\n"
    b"        if self.elastic_ep_backend == " + b"+".join([b"a"] * 600) + b":\n"
    b"            raise ValueError('no')\n",
    b"__version__ = '0.5.99'\nx = " + b"+".join([b"a"] * 100_000) + b"\n",
]


def _tree(root: Path) -> None:
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "version.py").write_text('__version__ = "0.5.99"\n')
    (root / "sglang" / "srt" / "pg_user.py").write_bytes(PG)
    (root / "pyproject.toml").write_text('[project]\nname = "sglang"\n'
                                         'dependencies = ["torch==2.13.0"]\n')
    (root / "Dockerfile").write_text("ARG MOONCAKE_VERSION=0.3.13\n")


def _damage_tree(rng: random.Random, root: Path) -> str:
    what = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["special", "name", "source", "version", "pyproject", "big",
                           "metadata", "deep-folders", "known-member"])
        target = root / "sglang" / "srt" / f"x{rng.randrange(1000)}.py"
        if kind == "special":
            what.append(gen.make_special(rng.choice(gen.SPECIALS), target))
        elif kind == "name":
            raw = rng.choice([b"\xff\xfe.py", b"a\nb.py", b"\x1b[31mred.py", b"\xed\xa0\x80.py"])
            with open(os.path.join(os.fsencode(root / "sglang"), raw), "wb") as f:
                f.write(PG)
            what.append(f"name {raw!r}")
        elif kind == "source":
            target.write_bytes(rng.choice(HOSTILE_SOURCES))
            what.append("hostile source")
        elif kind == "known-member":  # what the scrape reads by name, not by walking
            member = rng.choice(["version.py", "srt/server_args.py"])
            (root / "sglang" / member).write_bytes(rng.choice(KNOWN_MEMBER_SOURCES))
            what.append(f"hostile sglang/{member}")
        elif kind == "version":
            (root / "sglang" / "version.py").write_bytes(
                b"__version__ = '" + rng.choice(HOSTILE_VERSIONS) + b"'\n")
            what.append("hostile version")
        elif kind == "pyproject":
            (root / "pyproject.toml").write_text(rng.choice([
                "[" + ".".join(["a"] * 100_000) + "]\n", "x = " + "[" * 3000 + "]" * 3000,
                "[project]\ndependencies = 5\n", "x = " + "9" * 5000 + "\n", "\x00\xff"]))
            what.append("hostile pyproject")
        elif kind == "big":
            with open(target, "wb") as f:
                f.truncate(20 * 1024 * 1024)
            what.append("a 20 MiB source")
        elif kind == "metadata":
            d = root / "sglang-0.5.99.dist-info"
            d.mkdir(exist_ok=True)
            (d / "METADATA").write_bytes(rng.choice([
                b"\xff\x00garbage", b"Name: sglang\nVersion: banana\n",
                b"Name: sglang\nRequires-Dist: torch (((\n" * 1000,
                b"Name: sglang\nRequires-Python: " + b">=" * 50_000 + b"\n"]))
            what.append("hostile METADATA")
        else:
            p = root / "sglang" / ("d/" * 60)
            p.mkdir(parents=True, exist_ok=True)
            (p / "deep.py").write_bytes(PG)
            what.append("deep folders")
    return ", ".join(what)


def _archive(root: Path, kind: str) -> bytes:
    buf = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    name = "sglang-0.5.99/" + p.relative_to(root).as_posix()
                    info = zipfile.ZipInfo(name.encode("utf-8", "surrogateescape")
                                           .decode("cp437"))  # a name of any bytes
                    zf.writestr(info, p.read_bytes(), zipfile.ZIP_DEFLATED)
    else:
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            tf.add(root, arcname="sglang-0.5.99")
    return buf.getvalue()


def _damage_zip(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Damage where a zip reader looks: a header's flag bits, method, sizes, offsets."""
    b = bytearray(data)
    sigs = [i for i in range(len(b) - 4) if bytes(b[i:i + 4]) in (b"PK\x03\x04", b"PK\x01\x02",
                                                                  b"PK\x05\x06")]
    at = rng.choice(sigs)
    central = b[at:at + 4] == b"PK\x01\x02"
    field = rng.choice(["flags", "method", "version", "crc", "csize", "usize", "nlen",
                        "offset", "name"])
    off = {"version": 4 if not central else 6, "flags": 6 if not central else 8,
           "method": 8 if not central else 10, "crc": 14 if not central else 16,
           "csize": 18 if not central else 20, "usize": 22 if not central else 24,
           "nlen": 26 if not central else 28, "offset": 42 if central else 18,
           "name": 30 if not central else 46}[field]
    if b[at:at + 4] == b"PK\x05\x06":
        off = rng.choice([10, 12, 16, 20])
    value = rng.choice([0, 1, 0x20, 0x800, 99, 136, 0xFFFF, 0xFFFFFFFF, rng.randrange(2**32)])
    width = 2 if field in ("flags", "method", "version", "nlen") else 4
    if field == "name":
        b[at + off:at + off + 2] = rng.choice([b"\xff\xfe", b"\x00\x00", b"..", b"/\\"])
    elif at + off + width <= len(b):
        b[at + off:at + off + width] = struct.pack("<H" if width == 2 else "<I",
                                                   value & (0xFFFF if width == 2 else
                                                            0xFFFFFFFF))
    return bytes(b), f"zip {field}={value:#x} at {at + off}"


def _input(rng: random.Random, folder: Path) -> tuple[Path, str]:
    tree = folder / "tree"
    _tree(tree)
    pick = rng.random()
    if pick < 0.45:
        return tree, _damage_tree(rng, tree)
    kind = rng.choice(["zip", "tgz"])
    if pick < 0.55:
        what = _damage_tree(rng, tree)
        tree_specials = [p for p in tree.rglob("*") if p.is_symlink() or not (
            p.is_file() or p.is_dir())]
        for p in tree_specials:  # tarfile would archive a FIFO; zipfile cannot
            p.unlink()
        for p in tree.rglob("*.py"):
            if p.stat().st_size > 16 * 1024 * 1024:
                p.unlink()
        data = _archive(tree, kind)
    else:
        data = _archive(tree, kind)
        if kind == "zip" and rng.random() < 0.6:
            data, what = _damage_zip(rng, data)
        else:
            data, what = gen.damage_bytes(rng, data)
    out = folder / ("src.zip" if kind == "zip" else "src.tar.gz")
    out.write_bytes(data)
    return out, f"{kind}: {what}"


def _surface(tmp_path: Path, kb: Path, n: int, fuzz: bool) -> Tally:
    pristine = kb.read_bytes()

    def make(rng: random.Random, i: int) -> Case:
        target, what = _input(rng, fresh(tmp_path / f"in{i % 3}"))
        kb.write_bytes(pristine)
        inputs = [target, *target.rglob("*")] if target.is_dir() else [target]
        return Case(what, ["--kb", str(kb), "scrape", "--from-path", str(target)],
                    keep=inputs, keep_if_refused=[kb])

    return survey("scrape trees and archives", 1905, n, fuzz, tmp_path / "home", make)


def test_hostile_trees_and_archives(tmp_path: Path, empty_kb: Path) -> None:
    _surface(tmp_path, empty_kb, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_trees_and_archives(tmp_path: Path, empty_kb: Path) -> None:
    _surface(tmp_path, empty_kb, FUZZ_N, True).check()
