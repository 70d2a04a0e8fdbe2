"""Core-metadata headers as the check reads them (image_facts._headers): the lines before
the first empty one, unfolded, whatever line endings the file uses; the long description
after them is not read line by line."""

from __future__ import annotations

import random

import pytest

from moonpin.preflight.installed import image_facts


def _reference(text: str) -> dict[str, list[str]]:
    """What the reader answered when it split the whole text into lines."""
    out: dict[str, list[str]] = {}
    last: str | None = None
    for line in text.splitlines():
        if not line:
            break
        if line[0] in " \t" and last is not None:
            out[last][-1] += "\n" + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip().lower()
        out.setdefault(last, []).append(value.strip())
    return out


_PIECES = ["Name: torch", "Version: 2.13.0", "Requires-Dist: x", "  folded", "\tmore",
           "Summary: a: b", "no colon", "", "Description: long", "\x0c", "Version: 9"]
_ENDS = ["\n", "\r\n", "\r", "\x85", "\u2028"]


@pytest.mark.parametrize("seed", range(300))
def test_the_same_headers_as_reading_every_line(seed: int) -> None:
    rnd = random.Random(seed)
    text = "".join(rnd.choice(_PIECES) + rnd.choice(_ENDS) for _ in range(rnd.randrange(12)))
    assert image_facts._headers(text) == _reference(text)


def test_the_description_is_not_split() -> None:
    text = "Name: sglang\nVersion: 0.5.21\n\n" + "Version: 1.0\n" * 1000
    assert image_facts._headers(text) == {"name": ["sglang"], "version": ["0.5.21"]}
