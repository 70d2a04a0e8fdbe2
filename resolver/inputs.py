"""Normalising query inputs; standard library only, for the fast paths."""

from __future__ import annotations

import re

from kb.errors import UsageError

__all__ = ["ARCHES", "normalize_arch", "normalize_python"]

ARCHES = ("x86_64", "aarch64")


def normalize_python(text: str | None) -> str | None:
    """``3.12`` / ``cp312`` / ``py312`` -> ``cp312``."""
    if text is None:
        return None
    t = text.strip().lower()
    m = re.fullmatch(r"(?:cp|py)?3\.?(\d{1,2})", t)
    if not m:
        raise UsageError(f"cannot read python {text!r}", hint="use e.g. --python 3.12 or cp312")
    return f"cp3{m.group(1)}"


def normalize_arch(text: str | None) -> str | None:
    if text is None:
        return None
    t = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(text.lower(), text.lower())
    if t not in ARCHES:
        raise UsageError(f"unknown platform {text!r}", hint="use --arch x86_64 or aarch64")
    return t
