"""Read members of a zip archive (a wheel) through a byte source, fetching only what is needed.

Format references are to PKWARE's APPNOTE.TXT (6.3.x): §4.3.16 end of central
directory (EOCD), §4.3.15 ZIP64 EOCD locator, §4.3.14 ZIP64 EOCD record,
§4.3.12 central directory header, §4.3.7 local file header, §4.5.3 ZIP64
extended information extra field.

The way uv does it: read the tail (EOCD + central directory) with one suffix
range, then for each wanted member fetch ``header_offset .. + 30 + name + extra +
compressed_size``. Members wanted together are fetched in coalesced ranges.
Every archive is untrusted: offsets, sizes, counts and ratios are checked
before anything is allocated or decompressed, and any violation is an
:class:`~moonpin.kb.errors.ArchiveError` naming the archive and the member.
"""

from __future__ import annotations

import bisect
import itertools
import struct
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from moonpin.kb.errors import ArchiveError

if TYPE_CHECKING:
    from moonpin.scrapers.fetch import Fetcher

__all__ = [
    "ByteSource",
    "BytesSource",
    "HttpSource",
    "RemoteZip",
    "ZipEntry",
    "parse_central_directory",
    "printable",
]

EOCD_SIG = b"PK\x05\x06"
ZIP64_LOCATOR_SIG = b"PK\x06\x07"
ZIP64_EOCD_SIG = b"PK\x06\x06"
CDH_SIG = b"PK\x01\x02"
LFH_SIG = b"PK\x03\x04"
EOCD_SIZE = 22
LFH_SIZE = 30
CDH_SIZE = 46
MAX_COMMENT = 0xFFFF

STORED, DEFLATED = 0, 8
#: PyPI refuses archives whose members expand more than 50x past 64 MiB.
MAX_RATIO = 50
RATIO_FLOOR = 64 * 1024 * 1024
DEFAULT_MEMBER_CAP = 256 * 1024 * 1024


def printable(name: str) -> str:
    """A member name safe to print: control characters and odd bytes escaped."""
    if name.isprintable():
        return name
    return name.encode("unicode_escape").decode("ascii")


class ByteSource(Protocol):
    """Random access to the bytes of one artifact."""

    label: str

    def size(self) -> int: ...

    def tail(self, n: int) -> tuple[int, bytes]:
        """The last ``n`` bytes (fewer if the file is shorter) and where they start."""
        ...

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start`` (inclusive) to ``end`` (exclusive)."""
        ...


class BytesSource:
    """An artifact already in memory or on disk (local wheels, tests)."""

    def __init__(self, data: bytes, label: str = "<bytes>") -> None:
        self.data = data
        self.label = label

    @classmethod
    def from_path(cls, path: Path) -> BytesSource:
        return cls(path.read_bytes(), str(path))

    def size(self) -> int:
        return len(self.data)

    def tail(self, n: int) -> tuple[int, bytes]:
        start = max(0, len(self.data) - n)
        return start, self.data[start:]

    def read(self, start: int, end: int) -> bytes:
        if start < 0 or end > len(self.data) or start > end:
            raise ArchiveError(
                f"{self.label}: read {start}-{end} outside the {len(self.data)}-byte file"
            )
        return self.data[start:end]


class HttpSource:
    """A remote artifact read by HTTP Range, remembering every interval fetched.

    Like pip's lazy wheel, no byte is fetched twice. If the server ignores Range
    and the file is small enough, the whole body the fetcher read is kept.
    """

    def __init__(
        self, fetcher: Fetcher, url: str, size: int | None = None, label: str | None = None
    ) -> None:
        self.fetcher = fetcher
        self.url = url
        self.label = label or url
        self._size = size
        self._starts: list[int] = []  # sorted, disjoint intervals
        self._chunks: list[bytes] = []
        self._whole: bytes | None = None
        self._lock = threading.Lock()
        self.fetched = 0  # body bytes received for this artifact

    def size(self) -> int:
        if self._size is None:
            self._size = self.fetcher.head_size(self.url)
        return self._size

    def _keep(self, start: int, data: bytes, whole: bool) -> None:
        self.fetched += len(data)
        if whole:
            self._whole = data
            self._size = len(data)
            return
        # Keep the intervals disjoint and maximal (merge touching ones), so a range
        # covered by bytes from several fetches is still served from the cache.
        end = start + len(data)
        i = bisect.bisect_left(self._starts, start)
        if i > 0 and self._starts[i - 1] + len(self._chunks[i - 1]) >= start:
            i -= 1
        j = i
        while j < len(self._starts) and self._starts[j] <= end:
            j += 1
        if j == i:
            self._starts.insert(i, start)
            self._chunks.insert(i, data)
            return
        s0 = min(start, self._starts[i])
        e0 = max(end, *(self._starts[k] + len(self._chunks[k]) for k in range(i, j)))
        buf = bytearray(e0 - s0)
        for k in range(i, j):
            off = self._starts[k] - s0
            buf[off : off + len(self._chunks[k])] = self._chunks[k]
        buf[start - s0 : end - s0] = data
        self._starts[i:j] = [s0]
        self._chunks[i:j] = [bytes(buf)]

    def _cached(self, start: int, end: int) -> bytes | None:
        if self._whole is not None:
            return self._whole[start:end]
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0:
            s, chunk = self._starts[i], self._chunks[i]
            if s <= start and end <= s + len(chunk):
                return chunk[start - s : end - s]
        return None

    def tail(self, n: int) -> tuple[int, bytes]:
        with self._lock:
            if self._size is not None:
                start = max(0, self._size - n)
                hit = self._cached(start, self._size)
                if hit is not None:
                    return start, hit
            ans = self.fetcher.get_suffix(self.url, n, size=self._size)
            if self._size is None and ans.size is not None:
                self._size = ans.size
            self._keep(ans.start, ans.data, ans.whole)
            if ans.whole:
                start = max(0, len(ans.data) - n)
                return start, ans.data[start:]
            return ans.start, ans.data

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        with self._lock:
            hit = self._cached(start, end)
            if hit is not None:
                return hit
        size = self.size()
        if start < 0 or end > size:
            raise ArchiveError(f"{self.label}: range {start}-{end} outside the {size}-byte "
                               "file (corrupt archive offsets)")
        with self._lock:
            hit = self._cached(start, end)  # another thread may have fetched it meanwhile
            if hit is not None:
                return hit
            a, b = self._trim(start, end)
            head = self._cached(start, a) if a > start else b""
            tail = self._cached(b, end) if end > b else b""
        # The network call runs outside the lock so prefetch can fetch spans in parallel.
        ans = self.fetcher.get_range(self.url, a, b - 1, size=size)
        with self._lock:
            self._keep(ans.start, ans.data, ans.whole)
        if ans.whole:
            return ans.data[start:end]
        return (head or b"") + ans.data + (tail or b"")

    def _trim(self, start: int, end: int) -> tuple[int, int]:
        """Shrink ``start..end`` (not wholly cached) by a cached prefix and suffix,
        so bytes already held (e.g. the tail) are not fetched again."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0 and start < self._starts[i] + len(self._chunks[i]) < end:
            start = self._starts[i] + len(self._chunks[i])
        j = bisect.bisect_left(self._starts, end) - 1
        if j >= 0 and start < self._starts[j] and self._starts[j] + len(self._chunks[j]) >= end:
            end = self._starts[j]
        return start, end


@dataclass(frozen=True)
class ZipEntry:
    """One central-directory record, already bounds-checked against the archive."""

    name: str
    method: int
    flags: int
    crc: int
    compressed_size: int
    file_size: int
    header_offset: int

    @property
    def span_guess(self) -> int:
        """Bytes from the local header to the end of the data, assuming the local
        extra field is no longer than 64 bytes (checked when read)."""
        return (
            LFH_SIZE + len(self.name.encode("utf-8", "surrogateescape")) + 64 + self.compressed_size
        )


@dataclass(frozen=True)
class _Eocd:
    offset: int
    cd_offset: int
    cd_size: int
    count: int


def _find_eocd(label: str, tail: bytes, tail_start: int, size: int) -> _Eocd:
    """Locate the real EOCD: the last signature whose comment length reaches exactly
    the end of the file (a signature inside the comment does not)."""
    pos = len(tail)
    while True:
        pos = tail.rfind(EOCD_SIG, 0, pos)
        if pos < 0:
            raise ArchiveError(
                f"{label}: not a zip archive (no end-of-central-directory record; "
                "truncated or not a wheel)"
            )
        if pos + EOCD_SIZE <= len(tail):
            (_, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, comment_len) = (
                struct.unpack_from("<4sHHHHIIH", tail, pos)
            )
            if tail_start + pos + EOCD_SIZE + comment_len == size:
                break
        if pos == 0:
            raise ArchiveError(
                f"{label}: no consistent end-of-central-directory record "
                "(truncated file, or a signature only inside the comment)"
            )
    eocd_off = tail_start + pos
    count = n_total
    zip64 = 0xFFFF in (n_total,) or 0xFFFFFFFF in (cd_size, cd_offset)
    # With ZIP64, 16-bit fields may be 0xFFFF: the ZIP64 record holds the values.
    if (disk, cd_disk) != (0, 0) and not (zip64 and 0xFFFF in (disk, cd_disk)):
        raise ArchiveError(f"{label}: multi-disk archives are not supported")
    if not zip64 and n_disk != n_total:
        raise ArchiveError(f"{label}: multi-disk archives are not supported")
    if zip64:
        loc = pos - 20
        if loc < 0 or tail[loc : loc + 4] != ZIP64_LOCATOR_SIG:
            raise ArchiveError(f"{label}: ZIP64 fields set but no ZIP64 locator before the EOCD")
        (_, _, z64_off, _) = struct.unpack_from("<4sIQI", tail, loc)
        rel = z64_off - tail_start
        if rel < 0 or rel + 56 > len(tail) or tail[rel : rel + 4] != ZIP64_EOCD_SIG:
            raise ArchiveError(
                f"{label}: ZIP64 end-of-central-directory record missing or "
                f"out of bounds (offset {z64_off})"
            )
        (_, _, _, _, disk64, cd_disk64, n_disk64, count, cd_size, cd_offset) = (
            struct.unpack_from("<4sQHHIIQQQQ", tail, rel)
        )
        if disk64 != 0 or cd_disk64 != 0 or n_disk64 != count:
            raise ArchiveError(f"{label}: multi-disk archives are not supported")
        eocd_off = z64_off
    if cd_offset + cd_size > eocd_off:
        raise ArchiveError(
            f"{label}: central directory ({cd_offset}+{cd_size}) runs past "
            f"the end record at {eocd_off}"
        )
    if count > cd_size // CDH_SIZE + 1:
        raise ArchiveError(
            f"{label}: {count} entries cannot fit in a {cd_size}-byte central directory"
        )
    return _Eocd(eocd_off, cd_offset, cd_size, count)


def _zip64_extra(extra: bytes, need: Sequence[str]) -> dict[str, int]:
    """Read the ZIP64 extended information field (APPNOTE §4.5.3): only the fields
    whose 32-bit value was 0xFFFFFFFF are present, in this order."""
    out: dict[str, int] = {}
    i = 0
    while i + 4 <= len(extra):
        tag, ln = struct.unpack_from("<HH", extra, i)
        body = extra[i + 4 : i + 4 + ln]
        if tag == 1:
            j = 0
            for key in need:
                if j + 8 > len(body):
                    break
                out[key] = struct.unpack_from("<Q", body, j)[0]
                j += 8
            return out
        i += 4 + ln
    return out


def parse_central_directory(
    label: str, cd: bytes, count: int, archive_size: int, cd_offset: int
) -> list[ZipEntry]:
    """Parse ``count`` records; reject duplicates, out-of-bounds and overlapping members."""
    entries: list[ZipEntry] = []
    seen: set[str] = set()
    pos = 0
    for k in range(count):
        if pos + CDH_SIZE > len(cd) or cd[pos : pos + 4] != CDH_SIG:
            raise ArchiveError(f"{label}: central directory record {k} is truncated or corrupt")
        (_, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, _, _, _, hoff) = (
            struct.unpack_from("<4sHHHHHHIIIHHHHHII", cd, pos)
        )
        raw = cd[pos + CDH_SIZE : pos + CDH_SIZE + nlen]
        extra = cd[pos + CDH_SIZE + nlen : pos + CDH_SIZE + nlen + xlen]
        pos += CDH_SIZE + nlen + xlen + clen
        if pos > len(cd):
            raise ArchiveError(f"{label}: central directory record {k} runs past its end")
        need = [
            key
            for key, v in (("usize", usize), ("csize", csize), ("hoff", hoff))
            if v == 0xFFFFFFFF
        ]
        if need:
            z = _zip64_extra(extra, need)
            if len(z) != len(need):
                raise ArchiveError(f"{label}: record {k} needs a ZIP64 extra field it lacks")
            usize, csize, hoff = z.get("usize", usize), z.get("csize", csize), z.get("hoff", hoff)
        name = raw.decode("utf-8", "surrogateescape") if flags & 0x800 else raw.decode("cp437")
        if name in seen:
            raise ArchiveError(f"{label}: duplicate member name {printable(name)!r}")
        seen.add(name)
        if hoff + LFH_SIZE + nlen + csize > cd_offset:
            raise ArchiveError(
                f"{label}: member {printable(name)!r} ({hoff}+{csize}) runs into "
                "the central directory"
            )
        entries.append(ZipEntry(name, method, flags, crc, csize, usize, hoff))
    by_off = sorted(entries, key=lambda e: e.header_offset)
    for a, b in itertools.pairwise(by_off):
        if a.header_offset + LFH_SIZE + a.compressed_size > b.header_offset:
            raise ArchiveError(
                f"{label}: members {printable(a.name)!r} and "
                f"{printable(b.name)!r} overlap (a zip bomb or a corrupt archive)"
            )
    return entries


class RemoteZip:
    """The central directory of one archive, and its members on demand."""

    def __init__(
        self,
        source: ByteSource,
        *,
        tail_size: int = 16 * 1024,
        member_cap: int = DEFAULT_MEMBER_CAP,
    ) -> None:
        self.source = source
        self.label = source.label
        self.member_cap = member_cap
        size = source.size()
        if size < EOCD_SIZE:
            raise ArchiveError(f"{self.label}: {size} bytes is too short to be a zip archive")
        tail_start, tail = source.tail(tail_size)
        eocd = _find_eocd_any(self.label, source, tail, tail_start, size)
        if eocd.cd_offset < tail_start:
            # The central directory is bigger than the first tail read: fetch the rest.
            tail = source.read(eocd.cd_offset, tail_start) + tail
            tail_start = eocd.cd_offset
        rel = eocd.cd_offset - tail_start
        cd = tail[rel : rel + eocd.cd_size]
        self.entries = parse_central_directory(self.label, cd, eocd.count, size, eocd.cd_offset)
        self.by_name = {e.name: e for e in self.entries}
        self.size = size
        self.cd_bytes = size - eocd.cd_offset
        self._needed: dict[str, int] = {}
        self.partial = False

    @classmethod
    def from_tail(cls, source: ByteSource, *, tail_size: int = 256 * 1024,
                  member_cap: int = DEFAULT_MEMBER_CAP) -> RemoteZip:
        """Only the central-directory records inside one tail read.

        For archives with a huge central directory (torch: ~15k members) where
        only the last members (the ``.dist-info``) are wanted. Records are found
        by signature and each is validated; ``partial`` is set.
        """
        self = cls.__new__(cls)
        self.source, self.label, self.member_cap = source, source.label, member_cap
        size = source.size()
        tail_start, tail = source.tail(tail_size)
        eocd = _find_eocd_any(self.label, source, tail, tail_start, size)
        if eocd.cd_offset >= tail_start:
            return cls(source, tail_size=tail_size, member_cap=member_cap)
        cd_end = eocd.cd_offset + eocd.cd_size - tail_start
        pos = tail.find(CDH_SIG)
        entries: list[ZipEntry] = []
        while 0 <= pos < cd_end:
            try:
                got = parse_central_directory(self.label, tail[pos:cd_end], 1, size,
                                              eocd.cd_offset)
            except ArchiveError:
                pos = tail.find(CDH_SIG, pos + 1)
                continue
            entries.append(got[0])
            nlen, xlen, clen = struct.unpack_from("<HHH", tail, pos + 28)
            pos += CDH_SIZE + nlen + xlen + clen
        self.entries = entries
        self.by_name = {e.name: e for e in entries}
        self.size = size
        self.cd_bytes = size - tail_start
        self._needed = {}
        self.partial = True
        return self

    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    # -- whole members -----------------------------------------------------------

    def prefetch(
        self,
        names: Iterable[str],
        *,
        max_gap: int = 16 * 1024,
        max_span: int = 4 * 1024 * 1024,
        workers: int = 1,
    ) -> None:
        """Fetch the spans of these members in few requests, merging neighbours
        whose gap is at most ``max_gap`` bytes (so a run of small .py members costs
        one request, not hundreds)."""
        spans = sorted(
            (e.header_offset, min(self.size, e.header_offset + e.span_guess))
            for e in (self.by_name[n] for n in names)
        )
        merged: list[list[int]] = []
        for a, b in spans:
            if merged and a - merged[-1][1] <= max_gap and b - merged[-1][0] <= max_span:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        if workers > 1 and len(merged) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers) as ex:
                list(ex.map(lambda ab: self.source.read(ab[0], min(ab[1], self.size)), merged))
        else:
            for a, b in merged:
                self.source.read(a, min(b, self.size))

    def _data_span(self, e: ZipEntry, data_guess: int | None = None) -> tuple[int, int]:
        """Where the member's compressed bytes are; the read that finds the local
        header also fetches ``data_guess`` (default: all) of the data."""
        guess = e.span_guess
        if data_guess is not None:
            guess -= e.compressed_size - min(data_guess, e.compressed_size)
        head = self.source.read(e.header_offset, min(self.size, e.header_offset + guess))
        if len(head) < LFH_SIZE or head[:4] != LFH_SIG:
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r}: no local header at "
                f"offset {e.header_offset}"
            )
        (_, _, _, method, _, _, _, _, _, nlen, xlen) = struct.unpack_from("<4sHHHHHIIIHH", head, 0)
        raw = head[LFH_SIZE : LFH_SIZE + nlen]
        if raw != e.name.encode("utf-8" if e.flags & 0x800 else "cp437", "surrogateescape"):
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r}: local header names "
                f"{printable(raw.decode('utf-8', 'replace'))!r}"
            )
        if method != e.method:
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r}: local header and "
                "central directory disagree on the compression method"
            )
        start = e.header_offset + LFH_SIZE + nlen + xlen
        end = start + e.compressed_size
        if end > self.size:
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r} runs past the end of the file"
            )
        return start, end

    def _check_member(self, e: ZipEntry, cap: int) -> None:
        if e.flags & 0x1:
            raise ArchiveError(f"{self.label}: member {printable(e.name)!r} is encrypted")
        if e.method not in (STORED, DEFLATED):
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r} uses unsupported "
                f"compression method {e.method}"
            )
        if e.file_size > cap:
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r} declares "
                f"{e.file_size} bytes, over the {cap}-byte cap"
            )
        if e.file_size > RATIO_FLOOR and e.file_size > MAX_RATIO * max(1, e.compressed_size):
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r} expands "
                f"{e.file_size / max(1, e.compressed_size):.0f}x "
                "(a zip bomb)"
            )

    def read(self, name: str, *, cap: int | None = None) -> bytes:
        """The whole member, decompressed (bounded by ``cap``) and CRC-checked."""
        e = self._entry(name)
        cap = self.member_cap if cap is None else cap
        self._check_member(e, cap)
        start, end = self._data_span(e)
        comp = self.source.read(start, end)
        self._need(e, end - e.header_offset)
        if e.method == STORED:
            data = comp
        else:
            d = zlib.decompressobj(-15)
            try:
                data = d.decompress(comp, e.file_size + 1)
            except zlib.error as ex:
                raise ArchiveError(
                    f"{self.label}: member {printable(e.name)!r} does not decompress: {ex}"
                ) from ex
        if len(data) != e.file_size:
            raise ArchiveError(
                f"{self.label}: member {printable(e.name)!r} is {len(data)} bytes, "
                f"the central directory says {e.file_size}"
            )
        if zlib.crc32(data) != e.crc:
            raise ArchiveError(f"{self.label}: member {printable(e.name)!r} fails its CRC check")
        return data

    def read_prefix(self, name: str, want: int, *, chunk: int = 128 * 1024) -> bytes:
        """At least the first ``want`` bytes of a member (all of it if shorter),
        fetching compressed bytes in chunks and stopping as soon as enough came out."""
        e = self._entry(name)
        self._check_member(
            e, max(e.file_size, 1) if e.file_size <= self.member_cap else self.member_cap
        )
        want = min(want, e.file_size)
        start, end = self._data_span(e, data_guess=want if e.method == STORED else chunk)
        if e.method == STORED:
            self._need(e, start + want - e.header_offset)
            return self.source.read(start, start + want)
        d = zlib.decompressobj(-15)
        out: list[bytes] = []
        got = 0
        pos = start
        while got < want and pos < end:
            step = min(end, pos + chunk)
            try:
                piece = d.decompress(self.source.read(pos, step), want - got + 1)
            except zlib.error as ex:
                raise ArchiveError(
                    f"{self.label}: member {printable(e.name)!r} does not decompress: {ex}"
                ) from ex
            out.append(piece)
            got += len(piece)
            pos = step
            if d.unconsumed_tail:
                break  # enough came out of this chunk
            chunk *= 2  # the ELF layout asks far; grow the steps
        self._need(e, pos - len(d.unconsumed_tail) - e.header_offset)
        return b"".join(out)[: max(want, 0)]

    def _need(self, e: ZipEntry, nbytes: int) -> None:
        self._needed[e.name] = max(self._needed.get(e.name, 0), nbytes)

    @property
    def needed_bytes(self) -> int:
        """The lower bound for what was read: the central directory plus, per member,
        its local header and the compressed bytes actually consumed."""
        return self.cd_bytes + sum(self._needed.values())

    def _entry(self, name: str) -> ZipEntry:
        try:
            return self.by_name[name]
        except KeyError:
            raise ArchiveError(f"{self.label}: no member {printable(name)!r}") from None


def _find_eocd_any(
    label: str, source: ByteSource, tail: bytes, tail_start: int, size: int
) -> _Eocd:
    """Find the EOCD in the tail; a ZIP64 record or a long comment may need more bytes."""
    try:
        eocd = _find_eocd(label, tail, tail_start, size)
    except ArchiveError:
        if tail_start == 0:
            raise
        more = min(size, MAX_COMMENT + EOCD_SIZE + 20 + 56)
        if more <= len(tail):
            raise
        start = size - more
        tail = source.read(start, tail_start) + tail
        eocd = _find_eocd(label, tail, start, size)
    return eocd
