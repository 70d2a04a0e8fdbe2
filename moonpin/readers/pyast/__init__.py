"""Python sources read with ``ast``, never imported or run.

``usage`` with ``facts`` and ``walk`` (the mooncake imports, calls and backend literals of
SGLang's sources), ``imports`` (the imports a module's top level certainly runs), ``loader``
(what a mooncake loader module, ``mooncake/pg.py`` / ``ep.py``, needs), ``toplevel`` (a
module's top level parsed without its functions' bodies) and ``astname`` (the dotted name of
an expression). Imports nothing here: ``astname`` and ``imports`` are on
the worker-start path."""

from __future__ import annotations

__all__: list[str] = []
