"""Where the knowledge base lives; standard library only, so light callers stay light."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["default_kb_file", "default_kb_path"]


def default_kb_file() -> str:
    """The KB this process reads when none is named.

    ``MOONPIN_KB`` wins; then the copy installed inside the ``kb`` package (a
    wheel install); then ``data/kb.json`` of the source checkout (editable).
    A string, so the runtime check need not load :mod:`pathlib`.
    """
    env = os.environ.get("MOONPIN_KB")
    if env:
        return env
    here = os.path.dirname(os.path.realpath(__file__))
    packaged = os.path.join(here, "data", "kb.json")  # importlib.resources.files("kb")
    if os.path.isfile(packaged):
        return packaged
    return os.path.join(os.path.dirname(here), "data", "kb.json")


def default_kb_path() -> Path:
    """:func:`default_kb_file` as a :class:`~pathlib.Path`."""
    from pathlib import Path

    return Path(default_kb_file())
