"""Renovate-style regex managers (``--match``/``--dep``): any file, read through a regex with a
``currentValue`` group (and a ``depName`` group, or the dependency named beside it), as
Renovate's ``customManagers`` of type ``regex`` read it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from moonpin.resolver.pins.base import Pin, Text, canon, value_pin

__all__ = ["Pattern", "compile_patterns", "regex_pins"]

#: A compiled pattern and the dependency its ``currentValue`` is a version of ("" when the
#: pattern has a ``depName`` group).
Pattern = tuple[re.Pattern[str], str]


def compile_patterns(patterns: Sequence[tuple[str, str]]) -> list[Pattern]:
    """``(regex, dep name)`` pairs compiled (``re.MULTILINE``). Raises ``ValueError`` naming
    the pattern for one that does not compile or lacks the groups it needs."""
    compiled: list[Pattern] = []
    for regex, dep in patterns:
        try:
            rx = re.compile(regex, re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"pattern {regex!r}: {exc}") from exc
        if "currentValue" not in rx.groupindex:
            raise ValueError(f"pattern {regex!r} has no (?P<currentValue>...) group")
        if not dep and "depName" not in rx.groupindex:
            raise ValueError(f"pattern {regex!r} needs a dep name or a (?P<depName>...) group")
        compiled.append((rx, dep))
    return compiled


def regex_pins(shown: str, text: Text, patterns: Sequence[Pattern]) -> Iterator[Pin]:
    """A pin (kind ``"regex"``) for every match that names a dependency and a value."""
    for rx, dep in patterns:
        for m in rx.finditer(text.text):
            name = dep or (m.group("depName") if "depName" in rx.groupindex else "")
            value = m.group("currentValue")
            if not name or value is None:
                continue
            line0, _ = text.locate(m.start())
            vline, vcol = text.locate(m.start("currentValue"))
            yield value_pin(canon(name), value, line0, vcol, shown, m.group(0), "regex",
                            version_line=vline)
