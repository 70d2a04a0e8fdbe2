"""moonpin: which SGLang, torch and mooncake releases work together, read from real artifacts.

The one import package: ``moonpin.kb`` (the knowledge base), ``moonpin.scrapers`` and
``moonpin.readers`` (fetching and reading artifacts), ``moonpin.resolver`` (the rule, the graph,
queries, pins, launch arguments, the matrix), ``moonpin.check`` (the check a worker runs at
start) and ``moonpin.cli`` (the ``moonpin`` command). Importing it loads nothing else."""

__all__: list[str] = []
