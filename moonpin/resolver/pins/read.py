"""The one place to import the pins API from: what :mod:`~moonpin.resolver.pins.reading`,
:mod:`~moonpin.resolver.pins.judging` and :mod:`~moonpin.resolver.pins.writing` offer their
clients (the commands, :func:`moonpin.judge_pins`).

The contract of the pins read (lines, columns, exact versions, notes, files, includes) is
documented in :mod:`moonpin.resolver.pins.reading.walk`. Judging is
:mod:`moonpin.resolver.pins.judging.judge`, rewriting :mod:`moonpin.resolver.pins.writing.rewrite`,
the command's output :mod:`moonpin.resolver.pins.writing.output`, Renovate
:mod:`moonpin.resolver.pins.writing.renovate` and constraints
:mod:`moonpin.resolver.pins.writing.constraints`.
"""

from __future__ import annotations

from moonpin.resolver.pins.judging.judge import (
    Judgement,
    PinnedSet,
    check_versions,
    judge,
    pinned_set,
    platform_of,
)
from moonpin.resolver.pins.reading.base import (
    GROUP_NAME,
    HASH_NOTE,
    MAX_INCLUDE_DEPTH,
    MOONCAKE_FAMILY,
    NATIVE,
    TRACKED,
    VALUE_KINDS,
    VERSION_VARIABLES,
    Pin,
    PinError,
    read_for_rewrite,
)
from moonpin.resolver.pins.reading.walk import (
    PinsUnreadable,
    file_type,
    index_sources,
    project_files,
    project_python,
    project_pythons,
    read_pins,
    read_pins_or_fail,
)
from moonpin.resolver.pins.writing.renovate import (
    Stack,
    plan_stack,
    renovate_fragment,
    stack_of,
)
from moonpin.resolver.pins.writing.rewrite import apply_updates, write_keeping

#: Every native extension's distribution (:data:`NATIVE`'s).
NATIVE_DISTS: frozenset[str] = frozenset(d for ds in NATIVE.values() for d in ds)

__all__ = [
    "GROUP_NAME",
    "HASH_NOTE",
    "MAX_INCLUDE_DEPTH",
    "MOONCAKE_FAMILY",
    "NATIVE",
    "NATIVE_DISTS",
    "TRACKED",
    "VALUE_KINDS",
    "VERSION_VARIABLES",
    "Judgement",
    "Pin",
    "PinError",
    "PinnedSet",
    "PinsUnreadable",
    "Stack",
    "apply_updates",
    "check_versions",
    "file_type",
    "index_sources",
    "judge",
    "pinned_set",
    "plan_stack",
    "platform_of",
    "project_files",
    "project_python",
    "project_pythons",
    "read_for_rewrite",
    "read_pins",
    "read_pins_or_fail",
    "renovate_fragment",
    "stack_of",
    "write_keeping",
]
