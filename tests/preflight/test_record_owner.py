"""The owner of a found file, read from the RECORDs (``extensions/verdict._shipped_by``): a
RECORD is CSV (PEP 376, the wheel spec; pip writes it with :mod:`csv`), so a path holding a
comma or a quote is quoted, and a path may leave the site folder (``../``, as pip writes a
scheme's files outside it) or be absolute. Hostile RECORDs name files outside the image's root:
nothing a RECORD names is read (only the found file is, to compare its digest), and a RECORD
whose link leaves the root is refused as missing."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
from pathlib import Path

import pytest

from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.extensions.seam import Facts
from moonpin.preflight.extensions.verdict import _shipped_by
from moonpin.preflight.installed.image_facts import (
    Dist,
    record_hashes,
    record_path,
    record_paths,
)


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _csv_line(*fields: str) -> str:
    """One RECORD line as pip writes it (``csv.writer``, its default dialect)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(fields)
    return out.getvalue().rstrip("\n")


@pytest.mark.parametrize("path", [
    "nixl_ep/__init__.py",
    "a,b/nixl_ep/__init__.py",  # a comma: quoted
    'q"uote/x.py',  # a quote: quoted, doubled
    '"lead/x.py',
    "../../opt/my,lib/nixl_ep/__init__.py",
    "",
])
def test_a_record_path_reads_as_csv_reads_it(path: str) -> None:
    line = _csv_line(path, "sha256=abc", "3")
    assert next(csv.reader([line]))[0] == path  # the control: what pip reads back
    assert record_path(line) == path
    assert record_hashes([line]) == {path: ("abc", 3)}


def test_record_paths_unquote_each_path(tmp_path: Path) -> None:
    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    paths = ["a,b.py", 'c"d.py', "plain.py", "x-1.dist-info/RECORD"]
    (info / "RECORD").write_text("".join(_csv_line(p, "", "") + "\n" for p in paths))
    assert list(record_paths(str(info))) == paths


def _facts(dists: dict[str, Dist], within: Confined, read: list[str]) -> Facts:
    def spy(path: str) -> bytes:
        read.append(path)
        return within.read(path, cap=1 << 20)

    return Facts(torch=None, cuda=None, env={}, gpu=None, gpu_present=False, gpu_said="",
                 dists=dists, suffixes=(), find=lambda name: None, read=spy, within=within)


def _dist(site: Path, name: str, lines: list[str]) -> Dist:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return Dist(name, "1.0", str(site), (), None, meta=str(info))


def test_the_owner_of_a_path_with_a_comma_and_a_quote(tmp_path: Path) -> None:
    """A package found outside the site folder the RECORD is in (a ``..`` path, pip's way
    for a scheme's files there), in a folder whose name holds a comma and a quote: the
    distribution whose RECORD lists it with its digest owns it, not the first that lists it
    under another digest; the file is read once, the RECORD paths never."""
    root = tmp_path / "root"
    site = root / "site"
    found = root / 'opt' / 'my,"lib' / "nixl_ep" / "__init__.py"
    found.parent.mkdir(parents=True)
    data = b"x = 1\n"
    found.write_bytes(data)
    rel = os.path.relpath(found, site)
    assert rel.startswith("..") and "," in rel
    first = _dist(site, "aaa", [_csv_line(rel, f"sha256={_digest(b'other')}", "5")])
    owner = _dist(site, "nixl", [_csv_line(rel, f"sha256={_digest(data)}", str(len(data)))])
    read: list[str] = []
    facts = _facts({"aaa": first, "nixl": owner}, Confined(root), read)
    assert _shipped_by(facts, str(found)) is owner
    assert read == [str(found)]
    # the control: a RECORD that lists it under another digest only is still its lister
    assert _shipped_by(_facts({"aaa": first}, Confined(root), []), str(found)) is first


def test_an_absolute_record_path_is_the_image_s_own(tmp_path: Path) -> None:
    """An absolute RECORD path names a file of the image (its root's), never this host's
    file of that name: the found file under the root matches only its image path."""
    root = tmp_path / "root"
    site = root / "site"
    found = site / "nixl_ep" / "__init__.py"
    found.parent.mkdir(parents=True)
    data = b"y = 2\n"
    found.write_bytes(data)
    line = f"sha256={_digest(data)},{len(data)}"
    host = _dist(site, "host", [f"{found},{line}"])  # the host's path of it: not the image's
    image = _dist(site, "image", [f"/site/nixl_ep/__init__.py,{line}"])
    within = Confined(root)
    assert _shipped_by(_facts({"host": host}, within, []), str(found)) is None
    assert _shipped_by(_facts({"host": host, "image": image}, within, []), str(found)) is image
    # this machine's own check (no root): the absolute path is the file itself
    assert _shipped_by(_facts({"host": host}, NOWHERE, []), str(found)) is host


def test_hostile_record_paths_read_nothing_outside_the_root(tmp_path: Path) -> None:
    """RECORD lines naming files outside the root (``../`` far up, absolute, a NUL, a path of
    64 KiB) match nothing and are never read; a RECORD whose link leaves the root is refused
    (missing), so the distribution owns nothing; the found file is read once."""
    root = tmp_path / "root"
    site = root / "site"
    found = site / "nixl_ep" / "__init__.py"
    found.parent.mkdir(parents=True)
    found.write_bytes(b"z = 3\n")
    secret = tmp_path / "secret.py"
    secret.write_bytes(b"z = 3\n")  # the same bytes outside the root
    line = f"sha256={_digest(b'z = 3' + bytes([10]))},6"
    hostile = _dist(site, "hostile", [
        f"{'../' * 40}{secret.relative_to('/')},{line}",
        f"{secret},{line}",
        f"nixl_ep/\0/../__init__.py,{line}",
        f"{'a/' * 32768}x.py,{line}",
        f"/../../{secret.relative_to('/')},{line}",
    ])
    outside = tmp_path / "outside-RECORD"
    outside.write_text(f"nixl_ep/__init__.py,{line}\n")
    linked = site / "linked-1.0.dist-info"
    linked.mkdir()
    (linked / "RECORD").symlink_to(outside)
    out = Dist("linked", "1.0", str(site), (), None, meta=str(linked))
    read: list[str] = []
    facts = _facts({"hostile": hostile, "linked": out}, Confined(root), read)
    assert _shipped_by(facts, str(found)) is None
    assert read == []  # no RECORD lists it: not even the found file is read
    # the control: the link followed when nothing confines the reads (this machine's check)
    assert _shipped_by(_facts({"linked": out}, NOWHERE, []), str(found)) is out
