"""Normalising query inputs; standard library only, for the fast paths."""

from __future__ import annotations

import re
from collections.abc import Iterable

from moonpin.kb.errors import UsageError

__all__ = ["ARCHES", "CPYTHON_MINORS", "canonical_name", "help_width", "normalize_arch",
           "normalize_python"]

ARCHES = ("x86_64", "aarch64")

#: CPython 3 minor versions released or in development (3.15 is out since October 2026,
#: 3.16 in alpha); a wheel tag the KB holds counts too (``known``).
CPYTHON_MINORS = range(0, 17)

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "x86-64": "x86_64", "x86_64": "x86_64",
                 "arm64": "aarch64", "aarch64": "aarch64", "armv8": "aarch64"}


def normalize_python(text: str | None, *, known: Iterable[str] = ()) -> str | None:
    """``3.12`` / ``cp312`` / ``py312`` / ``312`` -> ``cp312``.

    A python no CPython release has (``3.99``) is a UsageError, unless ``known`` (wheel
    tags such as ``cp316``) holds it.
    """
    if text is None:
        return None
    t = text.strip().lower()
    # 3.12.1 is Python 3.12 (wheels are tagged per minor); a trailing t is the free-threaded
    # ABI (cp313t, PEP 703), a distinct build of its own.
    m = re.fullmatch(r"(?:cp|py)?3\.?(\d{1,2})(t?)", t) or re.fullmatch(
        r"3\.(\d{1,2})\.\d{1,3}(t?)", t)
    if not m:
        raise UsageError(f"cannot read python {text!r} (--python)",
                         hint=f"use e.g. --python 3.12 or cp312 (not {text!r})")
    tag = f"cp3{int(m.group(1))}{m.group(2)}"
    if int(m.group(1)) not in CPYTHON_MINORS and tag not in set(known):
        raise UsageError(f"--python {text!r}: no CPython 3.{int(m.group(1))} exists (known: "
                         f"3.{CPYTHON_MINORS[0]} to 3.{CPYTHON_MINORS[-1]})",
                         hint=f"use e.g. --python 3.12 (not {text!r})")
    return tag


def normalize_arch(text: str | None) -> str | None:
    """``x86_64`` / ``amd64`` / ``x64`` -> ``x86_64``; ``aarch64`` / ``arm64`` -> ``aarch64``."""
    if text is None:
        return None
    t = _ARCH_ALIASES.get(text.strip().lower())
    if t is None:
        import difflib

        near = difflib.get_close_matches(text.strip().lower(), list(_ARCH_ALIASES), n=1,
                                         cutoff=0.6)
        mean = f"did you mean --arch {_ARCH_ALIASES[near[0]]}? " if near else ""  # x86 -> x86_64
        raise UsageError(f"unknown platform --arch {text!r}",
                         hint=f"{mean}use --arch x86_64 or aarch64 (not {text!r})")
    return t


def canonical_name(name: str) -> str:
    """A distribution name normalised as PEP 503 says (what
    ``packaging.utils.canonicalize_name`` returns; that module imports ``packaging.tags``,
    and with it ``platform``, ``subprocess`` and ``logging``: a fifth of a query's time)."""
    return _SEPARATORS.sub("-", name).lower()


_SEPARATORS = re.compile(r"[-_.]+")


def help_width() -> int:
    """The width argparse lays help out in: what it computes itself (the terminal's
    columns, ``$COLUMNS`` first, 80 without a terminal, less 2), without importing
    :mod:`shutil` (and with it three compression modules) to ask."""
    import os
    import sys

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns - 2
