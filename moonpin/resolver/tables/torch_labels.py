"""A torch label's CUDA as the tables read it, and whether a build's CUDA words fit it.

Standard library only at import (``packaging`` is imported when a label is parsed): the
runtime check's fix line reads it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # the runtime check imports this module: no `re`, `json` or `pathlib` here
    from collections.abc import Iterable

__all__ = [
    "cuda_assumed",
    "cuda_fits",
    "label_class",
    "label_classes",
    "label_cuda",
    "torch_label",
]


def torch_label(torch: str) -> tuple[str, int | None] | None:
    """(public release, CUDA major) of an installed torch's label as the tables can answer
    for it (``2.14.1+cu130`` -> ``("2.14.1", 13)``; ``2.14.1`` -> ``("2.14.1", None)``: the
    index's own build); None for a label the tables do not resolve (not a version, a local
    part other than ``cuNNN``: ``+cpu``, ``+rocm6.4``). The tables assumed the index's
    variant of each torch; a local label names another."""

    from packaging.version import InvalidVersion, Version

    try:
        tv = Version(torch)
    except InvalidVersion:
        return None
    said = label_cuda(tv.local) if tv.local else None
    if tv.local and (said is None or said[0] is None):
        return None
    return tv.public, said[0] if said else None


def label_cuda(local: str) -> tuple[int | None, str] | None:
    """What a torch's local label says of its CUDA: ``cu126`` -> 12 (the last digit is the
    minor: ``cu92`` is 9), ``cpu`` and ``rocm6.4`` -> None (no CUDA), each with the words
    saying so; None when the label says nothing of it (then the index's variant of the
    release is what it is)."""
    import re

    m = re.fullmatch(r"cu(\d{2,5})", local)  # a CUDA release: never thousands of digits
    if m:
        return int(m.group(1)[:-1]), f"local label +{local}"
    if local == "cpu":
        return None, "local label +cpu (a CPU build)"
    if local.startswith("rocm"):
        return None, f"local label +{local} (ROCm, no CUDA)"
    return None


def label_class(local: str, majors: Iterable[int]) -> str | None:
    """The class of torch builds a local label is judged as, among the CUDA ``majors`` some
    extension build links: ``cu<N>`` for one of them, ``cu`` for any other CUDA major (no
    build links it: each is judged alike), ``none`` for a build without CUDA; None when the
    label says nothing of CUDA (the index's variant). Verdicts differ between classes only
    (the rule compares the majors a build links with torch's); see
    :meth:`Resolved.at_label`."""
    said = label_cuda(local)
    if said is None:
        return None
    if said[0] is None:
        return "none"
    return f"cu{said[0]}" if said[0] in set(majors) else "cu"


def label_classes(majors: Iterable[int]) -> list[tuple[str, str]]:
    """Each class of :func:`label_class` with a local label of it (``("cu12", "cu120")``)."""
    ms = sorted(set(majors))
    return ([(f"cu{m}", f"cu{m}0") for m in ms]
            + [("cu", f"cu{(ms[-1] if ms else 0) + 1}0"), ("none", "cpu")])


def cuda_assumed(words: Iterable[str | None], major: int | None) -> bool:
    """Whether the tables' ``CUDA major`` checks (``words``: their details, ``... torch
    2.14.1 is CUDA 13 (...)``) were made for a torch of CUDA ``major`` (None: the index's own
    build, always): False when they name only another CUDA (the resolver must answer)."""
    import re

    if major is None:
        return True
    assumed = {int(m.group(1)) for w in words
               if (m := re.search(r"torch \S+ is CUDA (\d+)", w or ""))}
    return not assumed or major in assumed


def cuda_fits(words: str | None, major: int | None) -> bool:
    """Whether a compatible wheel's ``CUDA major`` words say its build links CUDA ``major``
    (or is built at import against torch's; None words: it links none)."""
    return (major is None or words is None or f"build links CUDA {major}," in words
            or "built at import" in words)
