"""Readers: bytes and source text in, facts out, one sub-folder per kind of thing read.

``elf/`` (ELF objects: layout, dynamic section, symbols), ``pyast/`` (Python sources read with
``ast``: SGLang's mooncake use, the imports a module certainly runs, mooncake's loader
modules), ``image/`` (container image files and their layers), ``launch/`` (SGLang's launch
arguments), ``native/`` (the worker's other native extensions), ``cuda`` (the CUDA major
a torch wheel requires) and ``markers`` (the environment a Requires-Dist marker is evaluated
in: a target interpreter's, or a scraped wheel's own tags'). Shared by the scrape and the
runtime check; they import only :mod:`kb` and the standard library (and packaging), never
fetch, never import or execute what they read."""

from __future__ import annotations

__all__: list[str] = []
