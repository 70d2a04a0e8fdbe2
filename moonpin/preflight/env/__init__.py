"""Which environment the check reads, and the context every part of the check is handed.

The :class:`~moonpin.preflight.env.target.Target` (an interpreter, site folders, a root folder or an
image file), the :class:`~moonpin.preflight.env.context.Context` built from it, its root seen from
outside (``chroot``), modules inside zip archives, and whether its pip is externally managed
(PEP 668)."""

__all__: list[str] = []
