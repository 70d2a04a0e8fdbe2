"""The knowledge base: models, the one JSON file in data/, and how it is written."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from moonpin.kb.errors import MoonpinError

__all__ = ["MoonpinError"]


def __getattr__(name: str) -> object:
    # the errors module loads when asked for: a worker start imports moonpin.kb.cache,
    # whose package this is, and needs none of them on its way
    if name == "MoonpinError":
        from moonpin.kb.errors import MoonpinError

        return MoonpinError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
