"""A project's pins: readers per file kind, the judge, rewriting, the Renovate fragment,
constraints and the output."""

__all__: list[str] = []
