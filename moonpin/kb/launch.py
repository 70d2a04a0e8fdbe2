"""The launch-argument facts of an SGLang release: its command-line options and the
checks its ``ServerArgs`` (or, from 0.5.19, its ``arg_groups`` hooks) make on them.

Plain named tuples (no pydantic, no dataclasses): the runtime check's evaluator of the worker's
launch arguments works on them. :mod:`moonpin.readers.launch.server_args` reads them out of SGLang's
source; :class:`moonpin.kb.models.LaunchRules` is how the KB file stores them.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["Flag", "Rule", "Write"]


class Flag(NamedTuple):
    """One command-line option as the release declares it.

    ``line`` sits before ``deprecated_for`` (the fields with defaults come last); ``nargs``
    and ``const`` are extras the launch parser needs.
    """

    name: str
    dest: str
    default: object
    choices: tuple[str, ...] | None
    type: str | None
    action: str | None
    line: int
    deprecated_for: tuple[str, ...] = ()
    nargs: str | None = None
    const: object = None
    aliases: tuple[str, ...] = ()
    path: str | None = None


class Write(NamedTuple):
    """``self.attr = value`` earlier in the rule's method, under ``guard``."""

    attr: str
    value: str
    guard: str | None
    line: int


class Rule(NamedTuple):
    """One ``assert`` or ``raise`` on the launch arguments: it fails when ``condition``
    holds under ``guard`` (after ``writes``, in order); ``reads`` are the arguments it
    looks at, ``function``/``path``/``line`` where SGLang has it."""

    kind: Literal["assert", "raise"]
    condition: str
    message: str
    reads: tuple[str, ...]
    guard: str | None
    function: str
    line: int
    path: str = "sglang/srt/server_args.py"
    writes: tuple[Write, ...] = ()
