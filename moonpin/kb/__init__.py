"""The knowledge base: models, the one JSON file in data/, and how it is written."""

from __future__ import annotations

from moonpin.kb.errors import MoonpinError

__all__ = ["MoonpinError"]
