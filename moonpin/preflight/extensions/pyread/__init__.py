"""Readers of a package's own Python: what ``import <package>`` runs, followed with ``ast``.

:mod:`.plain`: a package no loader rule reads, followed as a plain import to the compiled
modules it reaches."""

__all__: list[str] = []
