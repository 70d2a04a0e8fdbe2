"""ELF objects read from their bytes: layout, what a prefix says, dynamic symbols.

``layout`` (the ELF header and program headers, the segments they describe), ``analysis``
(what a prefix of a shared object says: ``DT_NEEDED``, run paths, strings, version needs) and
``symbols`` (the dynamic symbols through the hash tables, as the loader looks them up).
Imports nothing here: the check's loader model imports only the modules it needs."""

from __future__ import annotations

__all__: list[str] = []
