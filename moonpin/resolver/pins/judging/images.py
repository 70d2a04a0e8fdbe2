"""The CUDA an SGLang base image's tag names (``FROM lmsysorg/sglang:v0.5.18-cu130``), against
the torch a project pins.

The tag is read as SGLang names its images and as ``moonpin args --file`` reads the release
in it (:func:`moonpin.resolver.args.manifests.cuda_of_image`): ``-cu130`` is a CUDA 13
image, its torch built for it. So where the project pins no torch, the torch it runs is the
image's: the torch release the SGLang release requires, as the build ``+cu130`` names (its
CUDA major is the label's, as ``--torch 2.13.0+cu130`` is judged). Where it pins one, pip
installs that torch over the image's, and a torch of another CUDA major than the image's
(the index's build, as the knowledge base records it per architecture, or a ``+cuXYZ``
label) is a problem of the set: said, never moved to a build the knowledge base does not
list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from packaging.version import Version

from moonpin.resolver.pins.reading.base import Pin, cut

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph

__all__ = ["Image", "image_of", "image_torch", "torch_mismatch"]


class Image(NamedTuple):
    """An SGLang base image pin and the CUDA its tag names (``cu130``, 13)."""

    pin: Pin
    label: str
    major: int

    def said(self) -> str:
        return (f"{cut(self.pin.path, 200)}:{self.pin.line} {cut(self.pin.raw, 200)} is a "
                f"CUDA {self.major} "
                f"image (its tag's -{self.label})")


def image_of(pins: tuple[Pin, ...], sglang: Pin | None) -> Image | None:
    """The base image whose tag names a CUDA (the judged SGLang pin's when it is one)."""
    images = [p for p in pins if p.kind == "docker-image" and p.name == "sglang"]
    if not images:
        return None
    from moonpin.resolver.args.tags import cuda_of_image

    for p in sorted(images, key=lambda p: p != sglang):
        got = cuda_of_image(p.raw)
        if got is not None:
            return Image(p, got[0], got[1])
    return None


def image_torch(g: CompatGraph, image: Image, sglang: str) -> Pin | None:
    """The torch the image runs when the project pins none: the newest torch release the
    SGLang release admits, as the image's CUDA build (``2.13.0+cu130``); None when the KB
    has no SGLang release or torch for it."""
    s = g.find_sglang(sglang)
    if s is None:
        return None
    admitted = g.torch_for(s)
    if not admitted:
        return None
    version = f"{Version(admitted[-1][0]).public}+{image.label}"
    p = image.pin
    return Pin("torch", f"=={version}", version, p.path, p.line, -1, p.raw, "docker-image",
               note=f"the image's torch: {image.said()}", platform=p.platform,
               platform_at=p.platform_at, platform_tag=p.platform_tag)


def torch_mismatch(g: CompatGraph, image: Image, torch: Pin, arches: list[str]) -> str | None:
    """Why the pinned torch's CUDA major is not the image's (on which architecture), or
    None when they agree or either is not known."""
    from moonpin.resolver import query

    for arch in arches:
        try:
            t = query.resolve_torch(g, torch.version or "", arch)
        except ValueError:  # not a version: said where the pin is judged
            return None
        if t.cuda is None or t.cuda == image.major:
            continue
        on = f" on {arch}" if len(arches) > 1 else ""
        return (f"{image.said()}; {torch.path}:{torch.line} torch=={torch.version} installs "
                f"a CUDA {t.cuda} torch over the image's{on} ({t.cuda_why}): the image's "
                f"CUDA {image.major} libraries and that torch do not match; pin the CUDA "
                f"{image.major} build of torch {t.version.public} (PyTorch's own index "
                f"publishes +cuXYZ builds, which the knowledge base does not list), or "
                f"base the image on SGLang's CUDA {t.cuda} tag")
    return None
