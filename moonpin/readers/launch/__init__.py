"""SGLang's launch arguments read with ``ast`` from its ``server_args.py``.

``server_args`` (the entry: :func:`~moonpin.readers.launch.server_args.extract`), ``flags``
(the flags and their defaults), ``rules`` (the ``assert``/``raise`` rules of ``ServerArgs``)
and ``values`` (literal values, module constants resolved)."""

from __future__ import annotations

__all__: list[str] = []
