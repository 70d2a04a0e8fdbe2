"""The distributions of the mooncake family: what the scrape reads and what pins and the
check call "mooncake"."""

from __future__ import annotations

__all__ = ["DISTRIBUTIONS", "torch_cpu_exclusions", "torch_requirement"]

#: Every distribution of the mooncake family on the index.
DISTRIBUTIONS = (
    "mooncake-transfer-engine",
    "mooncake-transfer-engine-cuda13",
    "mooncake-transfer-engine-non-cuda",
    "mooncake-transfer-engine-efa",
    "mooncake-transfer-engine-efa-cuda13",
    "mooncake-transfer-engine-rocm",
    "mooncake-transfer-engine-npu",
    "mooncake-transfer-engine-musa",
)


def torch_cpu_exclusions(versions: list[str] | tuple[str, ...]) -> list[str]:
    """``!=V+cpu`` for each public torch ``V``: PEP 440's ``==V`` (and ``<=V``) admits every
    local build of V and pip and uv take the highest, so the ``2.13.0+cpu`` a
    ``--find-links`` folder or an extra index (PyTorch's CPU index, as many CI images
    configure) offers wins over the index's CUDA build; a local version beside ``!=``
    counts its label (PEP 440, "Version exclusion"), so this excludes that build alone.
    A version with a local label (``2.13.0+cu130``) is already one build: nothing."""
    return [f"!={v}+cpu" for v in versions if "+" not in v and v[:1].isdigit()]


def torch_requirement(version: str) -> str:
    """``torch==V`` as moonpin writes it: with the CPU build of a public ``V`` excluded
    (``torch==2.13.0,!=2.13.0+cpu``; see :func:`torch_cpu_exclusions`)."""
    return ",".join([f"torch=={version}", *torch_cpu_exclusions([version])])
