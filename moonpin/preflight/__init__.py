"""The image check a worker runs at start (``moonpin check``), in rooms of one job each.

The target environment and the context handed down (``env``), CPython's importer modelled
(``pyimport``), glibc's loader modelled (``loader``), what is installed (``installed``), the
judgements with their fix lines (``judge``) and the deep probe (``probe``); ``run`` ties them."""

__all__: list[str] = []
