"""The image check a worker runs at start (``moonpin check``), in rooms of one job each.

Will this environment's worker start (``moonpin check``, ``python -m moonpin.preflight``,
``moonpin.check()``)? The target environment and the context handed down (``env``), CPython's
importer modelled (``pyimport``), glibc's loader modelled (``loader``), what is installed
(``installed``), the judgements every project shares with their fix lines (``judge``), the
native extensions, a loader rule each behind one seam, mooncake's with its own lines
(``extensions``), and the deep probe (``probe``); ``run.py`` walks them, each once,
``written.py`` writes the report for its target, ``verdict.py`` replays a warm start."""

__all__: list[str] = []
