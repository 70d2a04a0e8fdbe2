"""ELF objects read from their bytes: layout, dynamic section, what a prefix says, symbols.

``layout`` (the ELF header and program headers, the segments they describe: the one reader of
them), ``dynamic`` (the one decoder of the dynamic section: its entries, string table and the
names the loader reads), ``analysis`` (what a prefix of a shared object says: ``DT_NEEDED``,
run paths, strings, version needs) and ``symbols`` (the dynamic symbols through the hash
tables, as the loader looks them up).
Imports nothing here: the check's loader model imports only the modules it needs."""

from __future__ import annotations

__all__: list[str] = []
