"""The ``moonpin`` command line: the entry, the parser and one module per command group."""

__all__: list[str] = []
