"""The resolver: the one compatibility rule, the graph of releases, the queries and resolved tables.

Its clients beside them: pins (``pins``), launch arguments (``args``) and the matrix
(``matrix``)."""

__all__: list[str] = []
