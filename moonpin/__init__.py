"""moonpin: which SGLang, torch and mooncake releases work together, read out of the real
release artifacts.

The one import package: ``moonpin.kb`` (the knowledge base), ``moonpin.scrapers``,
``moonpin.readers`` (bytes readers), ``moonpin.resolver`` (graph, queries, pins, the check,
the command line)."""

# Before any module of moonpin imports what a file ahead of the standard library would
# replace (a `json.py` on PYTHONPATH): named, exit 2, instead of whatever it would raise.
from moonpin.resolver.stdlib_guard import refused as _refused

if _refused():
    raise SystemExit(2)

__all__: list[str] = []
