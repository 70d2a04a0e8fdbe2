"""SGLang's launch arguments read with ``ast`` from its ``server_args.py``.

``server_args`` (the entry: :func:`~moonpin.readers.launch.server_args.extract`), ``flags``
(the flags and their defaults), ``rules`` (the ``assert``/``raise`` rules of ``ServerArgs``),
``values`` (literal values, module constants resolved), ``backends`` (where a backend
option's choice keeps its module), ``choice_modules`` (the options whose choice is a package
of its own or a registry's module: PD disaggregation, HiCache) and ``guarded`` (the imports
SGLang runs under a test on an option's value)."""

from __future__ import annotations

__all__: list[str] = []
