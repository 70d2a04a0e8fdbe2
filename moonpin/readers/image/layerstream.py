"""One layer blob as a stream of uncompressed tar bytes: gzip, zstd or plain (told by the
magic bytes, RFC 1952 ``1f 8b``, RFC 8878 ``28 b5 2f fd``), its sha256 verified while it is
read (no second read), every size bounded.

zstd comes from the ``zstandard`` package on Pythons without ``compression.zstd``
(3.14+), imported only when a zstd layer appears.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import IO, Any

from moonpin.readers.image.manifest import ImageError

__all__ = ["Caps", "LayerReader"]

_CHUNK = 1 << 20
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


class Caps:
    """The limits on one unpack, with the environment variable that raises each."""

    def __init__(self, max_read: int, max_members: int, max_ratio: int) -> None:
        self.max_read, self.max_members, self.max_ratio = max_read, max_members, max_ratio
        self.read = 0      # uncompressed bytes read, all layers
        self.members = 0   # tar members read, all layers


def _zstd_reader(raw: Any) -> Any:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # 3.14+

        return zstd.ZstdFile(raw, "rb")
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError as e:
        raise ImageError("the image has a zstd-compressed layer and the zstandard package is "
                         "not installed (pip install zstandard)") from e
    return zstandard.ZstdDecompressor().stream_reader(raw, read_size=_CHUNK,
                                                      read_across_frames=True)


class _Hashing:
    """The stored bytes of the blob, hashed and counted as they go by. The hash of one
    chunk runs in a worker thread while the next is decompressed (both release the GIL;
    on a 2-core machine that hides the hash, as tar and gzip run in two processes)."""

    def __init__(self, f: IO[bytes], name: str) -> None:
        self.f, self.name = f, name
        self.h = hashlib.sha256()
        self.n = 0
        self._pool: Any = None
        self._fut: Any = None

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(_CHUNK if n is None or n < 0 else min(n, 4 * _CHUNK))
        if self._fut is not None:
            self._fut.result()
            self._fut = None
        if len(data) >= 65536:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(1, thread_name_prefix="moonpin-sha256")
            self._fut = self._pool.submit(self.h.update, data)
        else:
            self.h.update(data)
        self.n += len(data)
        return data

    def hexdigest(self) -> str:
        if self._fut is not None:
            self._fut.result()
            self._fut = None
        return self.h.hexdigest()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def readable(self) -> bool:
        return True


class LayerReader:
    """``read(n)`` gives the layer's uncompressed bytes; :meth:`finish` drains the rest and
    checks the digest, the size and that the compressed stream ended where it should."""

    def __init__(self, f: IO[bytes], size: int, name: str, digest: str | None,
                 diff_id: str | None, caps: Caps, kind: str) -> None:
        self.name, self.digest, self.size, self.caps = name, digest, size, caps
        self.diff_id = diff_id
        self.raw = _Hashing(f, name)
        self._f = f
        self._buf = b""
        self._pos = 0
        self.offset = 0  # uncompressed bytes handed out
        head = self.raw.read(_CHUNK)
        self.kind = kind
        self._z: Any = None
        self._zs: Any = None
        self._uhash: Any = None
        if head[:2] == _GZIP:
            self.comp = "gzip"
            self._z = zlib.decompressobj(31)
            self._pending = head
        elif head[:4] == _ZSTD:
            self.comp = "zstd"
            self._zs = _zstd_reader(_Prefixed(head, self.raw))
            self._pending = b""
        else:
            self.comp = "tar"
            self._pending = head
        if digest is None and diff_id is not None:
            self._uhash = hashlib.sha256()  # legacy docker save: only the diff_id names it
        self._eof = False
        self.out = 0

    def _fill(self) -> bytes:
        """The next piece of uncompressed bytes, b"" at the end."""
        if self.comp == "tar":
            data = self._pending or self.raw.read(_CHUNK)
            self._pending = b""
            return data
        if self.comp == "zstd":
            try:
                return bytes(self._zs.read(_CHUNK))
            except ImageError:
                raise
            except Exception as e:  # zstandard.ZstdError and friends: a corrupt frame
                raise ImageError(f"layer {self.name}: the zstd stream is corrupt ({e})") from e
        while True:
            z = self._z
            if z.unconsumed_tail:
                data = z.unconsumed_tail
            else:
                data = self._pending or self.raw.read(_CHUNK)
                self._pending = b""
            if z.eof:
                rest = z.unused_data + data
                if not rest.strip(b"\0"):
                    if not data:
                        return b""
                    continue
                self._z = z = zlib.decompressobj(31)  # a multi-member gzip stream
                data = rest
            elif not data:
                raise ImageError(f"layer {self.name} is truncated: the gzip stream ends "
                                 "before its end marker")
            try:
                out = z.decompress(data, _CHUNK)
            except zlib.error as e:
                raise ImageError(f"layer {self.name}: the gzip stream is corrupt ({e})") from e
            if out:
                return bytes(out)

    def read(self, n: int = -1) -> bytes:
        """Exactly ``n`` bytes unless the stream ends first (tarfile counts a short read
        as the end of data)."""
        first = self._read1(n)
        if n is None or n < 0 or len(first) >= n or not first:
            return first
        parts = [first]
        got = len(first)
        while got < n:
            more = self._read1(n - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def _read1(self, n: int = -1) -> bytes:
        if self._pos >= len(self._buf):
            if self._eof:
                return b""
            piece = self._fill()
            if not piece:
                self._eof = True
                return b""
            self._count(piece)
            self._buf, self._pos = piece, 0
        pos = self._pos
        end = len(self._buf) if n is None or n < 0 else min(len(self._buf), pos + n)
        self._pos = end
        self.offset += end - pos
        if pos == 0 and end == len(self._buf):
            return self._buf
        return self._buf[pos:end]

    def at_end(self) -> bool:
        return self._eof

    def tell(self) -> int:
        return self.offset

    def seek(self, pos: int, whence: int = 0) -> int:
        """Forward only (what tarfile does to pass a member's data): read and drop."""
        if whence != 0 or pos < self.offset:
            raise ImageError(f"layer {self.name}: the tar reader seeked backwards")
        while self.offset < pos:
            if self._pos >= len(self._buf):
                if not self._read1(0 if self._eof else 1):
                    break
                continue
            step = min(pos - self.offset, len(self._buf) - self._pos)
            self._pos += step  # pass over the bytes without copying them
            self.offset += step
        return self.offset

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def _count(self, piece: bytes) -> None:
        caps = self.caps
        self.out += len(piece)
        caps.read += len(piece)
        if self._uhash is not None:
            self._uhash.update(piece)
        if caps.read > caps.max_read:
            raise ImageError(f"layer {self.name}: the image expands past "
                             f"{caps.max_read >> 30} GiB of tar data, the cap on what moonpin "
                             "reads (set MOONPIN_IMAGE_MAX_READ=<bytes> to raise it)")
        if self.out > (64 << 20) and self.out > caps.max_ratio * max(self.raw.n, 1):
            raise ImageError(f"layer {self.name} expands more than {caps.max_ratio}x (a "
                             "compression bomb?), the cap on what moonpin reads (set "
                             "MOONPIN_IMAGE_MAX_RATIO=<n> to raise it)")

    def finish(self) -> None:
        """Read to the end (what tar left after its end-of-archive blocks) and verify."""
        while self._read1(_CHUNK):
            pass
        rest = self._f.read(1)
        if rest:
            raise ImageError(f"layer {self.name}: bytes after the end of its compressed stream")
        if self.raw.n != self.size:
            raise ImageError(f"layer {self.name} is truncated ({self.raw.n} of {self.size} "
                             "bytes)")
        if self.digest is not None:
            got = "sha256:" + self.raw.hexdigest()
            if got != self.digest:
                raise ImageError(f"layer {self.name}: its sha256 is {got}, not the digest "
                                 f"{self.digest} that names it (corrupt or altered)")
        elif self._uhash is not None:
            got = "sha256:" + self._uhash.hexdigest()
            if got != self.diff_id:
                raise ImageError(f"layer {self.name}: its sha256 is {got}, not the diff_id "
                                 f"{self.diff_id} the config names (corrupt or altered)")

    def close(self) -> None:
        self.raw.close()
        self._f.close()


class _Prefixed:
    """``head`` then the rest of ``raw``: the bytes already read to sniff the magic."""

    def __init__(self, head: bytes, raw: _Hashing) -> None:
        self.head, self.raw = head, raw

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            return out
        return self.raw.read(n)

    def readable(self) -> bool:
        return True
