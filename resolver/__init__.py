"""The resolver: the compatibility graph, queries, pin suggestions and the runtime check."""

# Before any module of moonpin imports what a file ahead of the standard library would
# replace (a `json.py` on PYTHONPATH): named, exit 2, instead of whatever it would raise.
from resolver.stdlib_guard import refused as _refused

if _refused():
    raise SystemExit(2)
