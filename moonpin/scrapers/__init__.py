"""Scrapers: fetch release artifacts at the edge, extract facts with pure functions."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
