"""The distributions of the mooncake family: what the scrape reads and what pins and the
check call "mooncake"."""

from __future__ import annotations

__all__ = ["DISTRIBUTIONS"]

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
