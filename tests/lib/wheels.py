"""Build wheels, good and hostile, in memory for tests.

:func:`build_wheel` writes a standards-shaped wheel with :mod:`zipfile`
(deterministic: fixed timestamps, so equal inputs give equal bytes).
:func:`hostile_zip` returns malformed or tricky archives written byte by byte;
every one is wheel-shaped (``hostile/__init__.py`` plus
``hostile-1.0.dist-info/{METADATA,WHEEL,RECORD}``) where the kind allows, so it
can be served as ``hostile-1.0-py3-none-any.whl``.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import io
import re
import struct
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "HOSTILE_FILENAME",
    "HOSTILE_KINDS",
    "HOSTILE_METADATA",
    "ZipLayout",
    "build_wheel",
    "dist_info_dir",
    "hostile_zip",
    "normalize_name",
    "record_hash",
]

_DATE_TIME = (1980, 1, 1, 0, 0, 0)
_DOS_TIME, _DOS_DATE = 0, (0 << 9) | (1 << 5) | 1  # 1980-01-01 00:00:00

#: The name a hostile archive can be served under.
HOSTILE_FILENAME = "hostile-1.0-py3-none-any.whl"
#: The METADATA carried by the hostile archives (where they carry one).
HOSTILE_METADATA = b"Metadata-Version: 2.1\nName: hostile\nVersion: 1.0\nRequires-Dist: six\n\n"

HOSTILE_KINDS: tuple[str, ...] = (
    "truncated",
    "no_eocd",
    "eocd_in_comment",
    "cd_out_of_bounds",
    "zip64",
    "duplicate_names",
    "path_traversal",
    "bomb",
    "unsupported_compression",
    "local_header_mismatch",
    "local_extra_differs",
    "data_descriptor",
)

BOMB_SIZE = 50 * 1024 * 1024


def normalize_name(name: str) -> str:
    """The distribution name as it appears in wheel file names (PEP 427 / PEP 503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_info_dir(name: str, version: str) -> str:
    """``<normalized name>-<version>.dist-info``."""
    return f"{normalize_name(name)}-{version.replace('-', '_')}.dist-info"


def record_hash(data: bytes) -> str:
    """``sha256=<urlsafe base64 without padding>`` as written in RECORD."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _expand_tags(tag: str) -> list[str]:
    pys, abis, plats = tag.split("-")
    return [
        f"{py}-{abi}-{plat}"
        for py in pys.split(".")
        for abi in abis.split(".")
        for plat in plats.split(".")
    ]


def build_wheel(
    name: str,
    version: str,
    files: Mapping[str, bytes | str],
    *,
    tag: str = "py3-none-any",
    metadata_extra: Sequence[str] = (),
    requires_dist: Sequence[str] = (),
    compress: int = zipfile.ZIP_DEFLATED,
    record: bool = True,
    dist_info_first: bool = False,
    build: str | None = None,
) -> tuple[str, bytes]:
    """Build a wheel in memory; return ``(filename, bytes)``.

    The file name is ``<normalized name>-<version>[-<build>]-<tag>.whl``. The
    archive holds ``files`` (``str`` values are UTF-8 encoded) and
    ``<dist-info>/METADATA`` (Metadata-Version 2.1, Name, Version, one
    ``Requires-Dist`` per ``requires_dist``, then ``metadata_extra`` lines),
    ``WHEEL`` and, when ``record``, a ``RECORD`` with ``sha256=`` hashes and sizes.
    A key of ``files`` naming a generated dist-info file replaces it (RECORD
    excepted while ``record`` is true). Members are in ``files`` order with the
    dist-info files after them (before them when ``dist_info_first``), RECORD last
    among the dist-info files.
    """
    norm = normalize_name(name)
    ver = version.replace("-", "_")
    dist_info = dist_info_dir(name, version)
    filename = f"{norm}-{ver}{'-' + build if build else ''}-{tag}.whl"

    meta_lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta_lines += [f"Requires-Dist: {req}" for req in requires_dist]
    meta_lines += list(metadata_extra)
    purelib = "true" if tag.endswith("-none-any") else "false"
    wheel_lines = [
        "Wheel-Version: 1.0",
        "Generator: moonpin-tests (0)",
        f"Root-Is-Purelib: {purelib}",
    ]
    wheel_lines += [f"Tag: {t}" for t in _expand_tags(tag)]
    if build:
        wheel_lines.append(f"Build: {build}")

    payload = {k: v.encode() if isinstance(v, str) else bytes(v) for k, v in files.items()}
    generated = {
        f"{dist_info}/METADATA": "\n".join(meta_lines).encode() + b"\n\n",
        f"{dist_info}/WHEEL": "\n".join(wheel_lines).encode() + b"\n\n",
    }
    for key in list(generated):
        if key in payload:
            generated[key] = payload.pop(key)
    record_name = f"{dist_info}/RECORD"
    if record:
        payload.pop(record_name, None)
    elif record_name in payload:
        generated[record_name] = payload.pop(record_name)

    ordered = (
        [*generated.items(), *payload.items()]
        if dist_info_first
        else [
            *payload.items(),
            *generated.items(),
        ]
    )
    members: list[tuple[str, bytes]] = list(ordered)
    if record:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for member, data in members:
            writer.writerow([member, record_hash(data), len(data)])
        writer.writerow([record_name, "", ""])
        record_bytes = buf.getvalue().encode()
        if dist_info_first:
            members.insert(len(generated), (record_name, record_bytes))
        else:
            members.append((record_name, record_bytes))

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for member, data in members:
            info = zipfile.ZipInfo(member, date_time=_DATE_TIME)
            info.compress_type = compress
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return filename, out.getvalue()


# -- a tiny byte-level zip writer for the hostile archives ---------------------------


@dataclass
class _Member:
    name: bytes
    data: bytes
    method: int = zipfile.ZIP_DEFLATED
    local_name: bytes | None = None
    local_extra: bytes = b""
    central_extra: bytes = b""
    zip64: bool = False
    data_descriptor: bool = False
    compressed: bytes | None = None  # override the stored (compressed) bytes


@dataclass
class ZipLayout:
    """Where the parts of an archive written by :func:`_write_zip` are."""

    local_offsets: list[int] = field(default_factory=list)
    cd_offset: int = 0
    cd_size: int = 0
    eocd_offset: int = 0
    zip64_eocd_offset: int | None = None


def _compress(data: bytes, method: int) -> bytes:
    if method == zipfile.ZIP_DEFLATED:
        comp = zlib.compressobj(9, zlib.DEFLATED, -15)
        return comp.compress(data) + comp.flush()
    return data  # stored, or a method we only pretend to use


def _write_zip(
    members: Sequence[_Member], *, comment: bytes = b"", zip64_eocd: bool = False
) -> tuple[bytes, ZipLayout]:
    out = bytearray()
    layout = ZipLayout()
    central = bytearray()
    for m in members:
        stored = m.compressed if m.compressed is not None else _compress(m.data, m.method)
        crc = zlib.crc32(m.data)
        offset = len(out)
        layout.local_offsets.append(offset)
        flags = 0x08 if m.data_descriptor else 0
        needed = 45 if m.zip64 else 20
        local_name = m.local_name if m.local_name is not None else m.name
        lcrc, lcsize, lusize = (0, 0, 0) if m.data_descriptor else (crc, len(stored), len(m.data))
        out += struct.pack(
            "<IHHHHHIIIHH",
            0x04034B50,
            needed,
            flags,
            m.method,
            _DOS_TIME,
            _DOS_DATE,
            lcrc,
            lcsize,
            lusize,
            len(local_name),
            len(m.local_extra),
        )
        out += local_name + m.local_extra + stored
        if m.data_descriptor:
            out += struct.pack("<IIII", 0x08074B50, crc, len(stored), len(m.data))
        extra = m.central_extra
        cd_offset_field = offset
        if m.zip64:
            extra = struct.pack("<HHQ", 0x0001, 8, offset) + extra
            cd_offset_field = 0xFFFFFFFF
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            (3 << 8) | needed,
            needed,
            flags,
            m.method,
            _DOS_TIME,
            _DOS_DATE,
            crc,
            len(stored),
            len(m.data),
            len(m.name),
            len(extra),
            0,
            0,
            0,
            0o644 << 16,
            cd_offset_field,
        )
        central += m.name + extra
    layout.cd_offset = len(out)
    layout.cd_size = len(central)
    out += central
    count = len(members)
    if zip64_eocd:
        layout.zip64_eocd_offset = len(out)
        out += struct.pack(
            "<IQHHIIQQQQ",
            0x06064B50,
            44,
            45,
            45,
            0,
            0,
            count,
            count,
            layout.cd_size,
            layout.cd_offset,
        )
        out += struct.pack("<IIQI", 0x07064B50, 0, layout.zip64_eocd_offset, 1)
    layout.eocd_offset = len(out)
    if zip64_eocd:
        out += struct.pack(
            "<IHHHHIIH",
            0x06054B50,
            0xFFFF,
            0xFFFF,
            0xFFFF,
            0xFFFF,
            0xFFFFFFFF,
            0xFFFFFFFF,
            len(comment),
        )
    else:
        out += struct.pack(
            "<IHHHHIIH",
            0x06054B50,
            0,
            0,
            count,
            count,
            layout.cd_size,
            layout.cd_offset,
            len(comment),
        )
    out += comment
    return bytes(out), layout


def _base_members(**overrides: _Member) -> list[_Member]:
    di = "hostile-1.0.dist-info"
    wheel = (
        b"Wheel-Version: 1.0\nGenerator: moonpin-tests (0)\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n\n"
    )
    code = b"print('hostile')\n"
    record = (
        f"hostile/__init__.py,{record_hash(code)},{len(code)}\n"
        f"{di}/METADATA,{record_hash(HOSTILE_METADATA)},{len(HOSTILE_METADATA)}\n"
        f"{di}/WHEEL,{record_hash(wheel)},{len(wheel)}\n"
        f"{di}/RECORD,,\n"
    ).encode()
    members = {
        "init": _Member(b"hostile/__init__.py", code),
        "metadata": _Member(f"{di}/METADATA".encode(), HOSTILE_METADATA),
        "wheel": _Member(f"{di}/WHEEL".encode(), wheel),
        "record": _Member(f"{di}/RECORD".encode(), record),
    }
    members.update(overrides)
    return list(members.values())


@functools.cache
def hostile_zip(kind: str) -> bytes:
    """A malformed or tricky archive; ``kind`` is one of :data:`HOSTILE_KINDS`.

    ``truncated``
        cut in the middle of the central directory (no EOCD left).
    ``no_eocd``
        complete but for the end-of-central-directory record.
    ``eocd_in_comment``
        the archive comment holds a fake EOCD (pointing at offset 0, claiming no
        comment) followed by more comment bytes; the real EOCD is the only one
        whose comment length reaches the end of the file. ``zipfile`` takes the
        last signature it finds and fails.
    ``cd_out_of_bounds``
        the EOCD's central directory offset lies beyond the end of the file.
    ``zip64``
        a valid archive with a ZIP64 EOCD record and locator; the classic EOCD
        says 0xFFFF / 0xFFFFFFFF and every central entry keeps its local header
        offset in a ZIP64 extra field (offset field 0xFFFFFFFF).
    ``duplicate_names``
        METADATA twice, different contents (the second says ``Name: evil``).
    ``path_traversal``
        members ``../../evil.py``, ``/abs/evil.py``, ``hostile\\win.py`` and
        ``hostile/ctrl\\x07.py`` besides the normal ones.
    ``bomb``
        ``hostile/bomb.bin``: 50 MiB of zeros deflated to ~50 KB (honest headers).
    ``unsupported_compression``
        METADATA declared with compression method 99 (AES; stored bytes).
    ``local_header_mismatch``
        METADATA's local header is named ``evil.py`` (the central directory says
        ``hostile-1.0.dist-info/METADATA``).
    ``local_extra_differs``
        VALID: every local header carries a 28-byte extra field the central
        directory does not have, so data starts later than the central entry implies.
    ``data_descriptor``
        VALID: bit 3 set, local CRC and sizes zero, a data descriptor after each body.

    Results are cached; treat them as immutable.
    """
    if kind == "truncated":
        data, layout = _write_zip(_base_members())
        return data[: layout.cd_offset + layout.cd_size // 2]
    if kind == "no_eocd":
        data, layout = _write_zip(_base_members())
        return data[: layout.eocd_offset]
    if kind == "eocd_in_comment":
        fake = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, 46, 0, 0)
        comment = b"moonpin fake eocd follows:" + fake + b" and this is still the comment"
        data, _ = _write_zip(_base_members(), comment=comment)
        return data
    if kind == "cd_out_of_bounds":
        data, layout = _write_zip(_base_members())
        eocd = bytearray(data[layout.eocd_offset :])
        struct.pack_into("<I", eocd, 16, len(data) + 4096)
        return data[: layout.eocd_offset] + bytes(eocd)
    if kind == "zip64":
        members = _base_members()
        for m in members:
            m.zip64 = True
        data, _ = _write_zip(members, zip64_eocd=True)
        return data
    if kind == "duplicate_names":
        evil = HOSTILE_METADATA.replace(b"Name: hostile", b"Name: evil")
        members = _base_members()
        members.append(_Member(b"hostile-1.0.dist-info/METADATA", evil))
        return _write_zip(members)[0]
    if kind == "path_traversal":
        members = _base_members()
        members += [
            _Member(b"../../evil.py", b"print('escaped')\n"),
            _Member(b"/abs/evil.py", b"print('absolute')\n"),
            _Member(b"hostile\\win.py", b"print('backslash')\n"),
            _Member(b"hostile/ctrl\x07.py", b"print('bell')\n"),
        ]
        return _write_zip(members)[0]
    if kind == "bomb":
        members = _base_members()
        members.insert(1, _Member(b"hostile/bomb.bin", bytes(BOMB_SIZE)))
        return _write_zip(members)[0]
    if kind == "unsupported_compression":
        meta = _Member(b"hostile-1.0.dist-info/METADATA", HOSTILE_METADATA, method=99)
        return _write_zip(_base_members(metadata=meta))[0]
    if kind == "local_header_mismatch":
        meta = _Member(b"hostile-1.0.dist-info/METADATA", HOSTILE_METADATA, local_name=b"evil.py")
        return _write_zip(_base_members(metadata=meta))[0]
    if kind == "local_extra_differs":
        members = _base_members()
        for m in members:
            m.local_extra = struct.pack("<HH", 0xCAFE, 24) + b"moonpin-local-extra-pad!"
        return _write_zip(members)[0]
    if kind == "data_descriptor":
        members = _base_members()
        for m in members:
            m.data_descriptor = True
        return _write_zip(members)[0]
    raise ValueError(f"unknown hostile zip kind {kind!r}; expected one of {HOSTILE_KINDS}")
