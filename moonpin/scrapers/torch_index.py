"""torch releases: the list, and the CUDA major of the wheel the index publishes per platform.

The CUDA major comes from the wheel's own ``Requires-Dist`` evaluated for the
interpreter and platform its tags name (:func:`moonpin.readers.markers.wheel_environment`):
``nvidia-cuda-runtime-cu12==…`` -> 12; ``cuda-toolkit[cudart,…]==13.0.*`` -> 13. A
requirement whose marker excludes the platform does not count: the index's torch 2.9.1 for
aarch64 declares its cu12 packages only for x86_64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from moonpin.kb.errors import ArchiveError
from moonpin.readers.cuda import cuda_major
from moonpin.readers.markers import wheel_environment
from moonpin.scrapers.pypi import IndexFile, parse_metadata
from moonpin.scrapers.remote_zip import HttpSource, RemoteZip

if TYPE_CHECKING:  # the runtime check imports cuda_major: keep pydantic and httpx off it
    from moonpin.kb.models import TorchVariant
    from moonpin.scrapers.fetch import Fetcher

__all__ = ["ARCHES", "choose_wheel", "cuda_major", "scrape_variant"]

ARCHES = ("x86_64", "aarch64")
def choose_wheel(files: tuple[IndexFile, ...], arch: str) -> IndexFile | None:
    """The CPython 3.12 (else any CPython) manylinux wheel for ``arch``."""
    cands = [f for f in files if f.is_wheel and "manylinux" in f.filename
             and f.filename.endswith(f"_{arch}.whl") and "cp3" in f.filename
             and "t-manylinux" not in f.filename]
    cands.sort(key=lambda f: (0 if "-cp312-" in f.filename else 1, f.filename))
    return cands[0] if cands else None


def scrape_variant(fetcher: Fetcher, wheel: IndexFile, arch: str) -> tuple[TorchVariant, int, int]:
    from moonpin.kb.models import TorchVariant

    src = HttpSource(fetcher, wheel.url, wheel.size, label=wheel.filename)
    z = RemoteZip.from_tail(src, tail_size=64 * 1024)
    metas = [n for n in z.names() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
    if len(metas) != 1 and z.partial:
        # The .dist-info is not at the end of this archive: read the whole directory.
        z = RemoteZip(src)
        metas = [n for n in z.names() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
    if len(metas) != 1:
        raise ArchiveError(f"{wheel.filename}: no single .dist-info/METADATA near the end of "
                           "the archive")
    meta = parse_metadata(z.read(metas[0], cap=4 * 1024 * 1024).decode("utf-8", "replace"))
    major, line = cuda_major(meta.requires_dist, wheel_environment(wheel.filename))
    platform = wheel.filename[:-4].rsplit("-", 1)[-1]
    return TorchVariant(
        platform=platform, arch=arch, cuda_major=major,
        evidence=line or "no CUDA runtime requirement for this platform (a CPU build)",
        artifact=wheel.artifact(),
    ), src.fetched, z.needed_bytes
