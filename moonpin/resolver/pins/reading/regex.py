"""Renovate-style regex managers (``--match``/``--dep``): any file, read through a regex with a
``currentValue`` group (and a ``depName`` group, or the dependency named beside it), as
Renovate's ``customManagers`` of type ``regex`` read it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from moonpin.resolver.pins.reading.base import Pin, Text, canon, value_pin

__all__ = ["Pattern", "compile_patterns", "python_syntax", "regex_pins"]

#: A compiled pattern and the dependency its ``currentValue`` is a version of ("" when the
#: pattern has a ``depName`` group).
Pattern = tuple[re.Pattern[str], str]


def python_syntax(regex: str) -> str:
    """``regex`` with Renovate's named groups (``(?<currentValue>...)``, the JavaScript and
    RE2 spelling its ``matchStrings`` use) written as Python's ``(?P<currentValue>...)``, so
    a pattern copied from a ``renovate.json`` works as it is. Lookbehinds (``(?<=``,
    ``(?<!``), escaped parentheses and character classes are left alone."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":  # an escape: the next character is literal, whatever it is
            out.append(regex[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if regex[i + 1:i + 2] == "]":  # `[]...]`: a leading ] is a member
                out.append("[]")
                i += 2
                continue
        elif (regex.startswith("(?<", i) and i + 3 < len(regex)
              and (regex[i + 3].isalpha() or regex[i + 3] == "_")):
            out.append("(?P<")
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def compile_patterns(patterns: Sequence[tuple[str, str]]) -> list[Pattern]:
    """``(regex, dep name)`` pairs compiled (``re.MULTILINE``; Renovate's ``(?<name>...)``
    groups read as Python's ``(?P<name>...)``). Raises ``ValueError`` naming the pattern for
    one that does not compile or lacks the groups it needs."""
    compiled: list[Pattern] = []
    for regex, dep in patterns:
        try:
            rx = re.compile(python_syntax(regex), re.MULTILINE)
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
