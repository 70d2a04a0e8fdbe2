"""The resolver: the compatibility graph, queries, pin suggestions and the runtime check."""
