"""Readers: bytes and source text in, facts out.

ELF, Python ``ast``, the mooncake loader's scheme, CUDA requirements, SGLang's launch arguments.
Shared by the scrape and the runtime check; they import only :mod:`kb` and the standard library
(and packaging), never fetch, never import or execute what they read."""

from __future__ import annotations

__all__: list[str] = []
