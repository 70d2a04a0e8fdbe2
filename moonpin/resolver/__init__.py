"""The resolver: the compatibility rule, graph, queries and resolved tables at its core;
the image check (``check``), pins (``pins``), the matrix (``matrix``), launch arguments
(``args``) and the command line (``cli``) beside them."""

__all__: list[str] = []
