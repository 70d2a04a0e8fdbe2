"""A torch pinned with a local label (``torch==2.13.0+cu126``): a build of its own, kept
where an update can keep it, and said where one cannot.

The knowledge base holds the torch builds the package index publishes (one CUDA major per
release and architecture); PyTorch's own index publishes ``+cuXYZ`` builds it does not list.
So a labelled torch is judged as the build it names (its CUDA major is the label's), an
update that moves SGLang keeps it when the new release admits the same torch release, and an
update that must move torch to another release goes to the index's build and says that the
label's CUDA is left (never proposing ``2.11.0+cu126``, a build the knowledge base does not
know).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

from moonpin.resolver.pins.reading.base import Pin

if TYPE_CHECKING:
    from packaging.version import Version as VersionT

    from moonpin.resolver.graph import CompatGraph

__all__ = ["admits", "labelled", "left_behind"]


def labelled(pin: Pin | None) -> str | None:
    """The pinned torch when it names a local build (``2.13.0+cu126``), else None."""
    if pin is None or pin.name != "torch" or not pin.version or "+" not in pin.version:
        return None
    try:
        return pin.version if Version(pin.version).local else None
    except ValueError:  # not a version: said where the pin is judged
        return None


def admits(g: CompatGraph, sglang: VersionT, torch: str) -> bool:
    """Whether the SGLang release admits the torch release a labelled build is of."""
    s = g.sglang.get(sglang)
    public = Version(Version(torch).public)
    return s is not None and any(Version(t) == public for t, _ in g.torch_for(s))


def left_behind(g: CompatGraph, pin: Pin, new_torch: str) -> str:
    """What moving a labelled torch to the index's ``new_torch`` leaves: ``""`` when the
    pin has no label or the target keeps it."""
    label = labelled(pin)
    if label is None or "+" in new_torch:
        return ""
    from moonpin.resolver import query

    have = query.resolve_torch(g, label, "x86_64").cuda
    new = query.resolve_torch(g, new_torch, "x86_64").cuda
    return (f"; torch=={label} is a CUDA {have} build and the index's torch {new_torch} is "
            f"CUDA {new if new is not None else 'unknown'} (a +{Version(label).local} build "
            "of it is not in the knowledge base: PyTorch's own index publishes +cuXYZ builds)")
