"""What one native extension release requires of another exactly (the meta ``nixl``'s
``nixl-cuNN``), for the pins' judgement and the constraints alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moonpin.resolver.graph import CompatGraph

__all__ = ["exact_pins_of"]


def exact_pins_of(g: CompatGraph, dist: str, version: str, tables: bool) -> dict[str, str]:
    """The releases of other distributions ``dist`` ``version`` requires exactly, as
    ``{dist: version}``: from its explain table
    (:func:`moonpin.resolver.tables.native.release_pins`) while ``tables`` and it holds
    them, else from the facts (:func:`moonpin.resolver.native.exact_pins`)."""
    if tables and g.kb_path is not None:
        from moonpin.resolver.tables.native import release_pins

        got = release_pins(g.kb_path, dist, version)
        if got is not None:
            return got
    from moonpin.resolver import native

    return dict(native.exact_pins(native.known_version(g, dist, version)))
