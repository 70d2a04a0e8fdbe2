"""A project's pins, judged and rewritten.

Readers per file kind, the judge, rewriting, the Renovate fragment, constraints and the
output."""

__all__: list[str] = []
