"""The check a worker runs at start, and CI on an image file (``moonpin check``, ``python -m
moonpin.preflight``, ``moonpin.check()``): will this environment's worker start? Its rooms:
``env`` (which environment), ``installed`` (what is installed), ``pyimport`` (CPython's importer,
modelled), ``loader`` (glibc's loader, modelled), ``judge`` (mooncake's judgements and fix
lines), ``extensions`` (the other native extensions, a loader rule each), ``probe`` (the deep
probe); ``run.py`` walks them, ``verdict.py`` replays a warm start."""

__all__: list[str] = []
