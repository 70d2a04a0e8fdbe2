"""The image check a worker runs at start (``moonpin check``), in rooms of one job each.

Will this environment's worker start (``moonpin check``, ``python -m moonpin.preflight``,
``moonpin.check()``)? The target environment and the context handed down (``env``), CPython's
importer modelled (``pyimport``), glibc's loader modelled (``loader``), what is installed
(``installed``), mooncake's judgements with their fix lines (``judge``), the other native
extensions, a loader rule each (``extensions``), and the deep probe (``probe``); ``run.py`` walks
them, ``verdict.py`` replays a warm start."""

__all__: list[str] = []
