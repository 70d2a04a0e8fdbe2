"""The ``moonpin`` command line: the entry, the parser and one module per command group."""

# Before any module of moonpin imports what a file ahead of the standard library would
# replace (a `json.py` on PYTHONPATH): named, exit 2, instead of whatever it would raise.
from moonpin.guard import refused as _refused

if _refused():
    raise SystemExit(2)

__all__: list[str] = []
