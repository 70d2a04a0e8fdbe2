"""Which environment the check reads: the Target, and the Context every part of it is handed.

The :class:`~moonpin.preflight.env.target.Target` (an interpreter, site folders, a root folder
or an image file, assembled as CPython's ``getpath``/``site`` would, with the importer and
loader models below it), the :class:`~moonpin.preflight.env.context.Context` built from it,
and whether its pip is externally managed (PEP 668). Its files are read through the access
layer (:mod:`moonpin.preflight.access`)."""

__all__: list[str] = []
