"""The resolver: the one compatibility rule, the graph of releases, the queries and the resolved
tables at its core; its clients beside them: pins (``pins``), launch arguments (``args``) and
the matrix (``matrix``)."""

__all__: list[str] = []
