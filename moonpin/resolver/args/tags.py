"""What an SGLang image reference's tag says (``lmsysorg/sglang:v0.5.18-cu130``): the release
and the CUDA, as SGLang names its images. Read by ``moonpin args --file`` (the release a
manifest's container runs) and ``moonpin pins`` (a Dockerfile's base image), without the
launch-line readers of :mod:`moonpin.resolver.args.manifests`."""

from __future__ import annotations

import re

__all__ = ["cuda_of_image", "sglang_version_in_image", "sglang_version_of_image"]

_IMAGE_VERSION = re.compile(r"(?:^|/)sglang:v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:$|[-_])")


def sglang_version_of_image(image: str | None) -> str | None:
    """``lmsysorg/sglang:v0.5.18-cu130`` -> ``0.5.18`` (SGLang's own images only)."""
    at = sglang_version_in_image(image)
    return at[0] if at else None


#: The CUDA part of SGLang's image tags (``v0.5.18-cu130``, ``v0.5.18-cu126-amd64``):
#: ``cu`` and the toolkit's major and minor digits, PyTorch's local-label spelling.
_IMAGE_CUDA = re.compile(r"(?:^|[-_])cu(\d{2,3})(?=$|[-_])")


def cuda_of_image(image: str | None) -> tuple[str, int] | None:
    """The CUDA an SGLang image's tag names after its release, as a torch local label and
    its major (``lmsysorg/sglang:v0.5.18-cu130`` -> ``("cu130", 13)``; ``-cu126`` -> 12),
    or None for a tag without one (or not an SGLang image). A two-digit ``cu13`` is a
    major alone (``cu130``)."""
    at = sglang_version_in_image(image)
    if image is None or at is None:
        return None
    tail = image[at[1]:].split("@", 1)[0]
    m = _IMAGE_CUDA.search(tail, len(at[0]) if tail.startswith(at[0]) else 0)
    if m is None:
        return None
    digits = m.group(1)
    major = int(digits[:-1]) if len(digits) == 3 else int(digits)
    return (f"cu{digits}" if len(digits) == 3 else f"cu{digits}0"), major


def sglang_version_in_image(image: str | None) -> tuple[str, int] | None:
    """The SGLang release an image reference's tag names and where it starts in the
    reference (``lmsysorg/sglang:v0.5.18-cu130`` -> ``("0.5.18", 17)``), or None."""
    if not image:
        return None
    m = _IMAGE_VERSION.search(image)
    return (m.group(1), m.start(1)) if m else None
