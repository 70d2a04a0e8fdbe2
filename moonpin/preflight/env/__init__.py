"""Which environment the check reads: the :class:`~moonpin.preflight.env.target.Target` (an
interpreter, site folders, a root folder or an image file), its root seen from outside
(``chroot``), modules inside zip archives, and whether its pip is externally managed (PEP 668)."""

__all__: list[str] = []
