"""CPython's importer and the module code an import runs, modelled without running any of it.

The meta path and site files, the chain of modules ``import X`` runs, a small evaluator of their
top level, the code run at import by calls into other modules (decorators, module-level calls),
and the bytecode caches the import takes instead of sources."""

__all__: list[str] = []
