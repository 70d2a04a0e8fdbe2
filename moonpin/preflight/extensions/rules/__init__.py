"""The projects' loader rules behind the seam: one module a project, read from its own files.

Each module here is the protocol of :mod:`moonpin.preflight.extensions.seam` for one project
(``nixl_rule``, ``nixl_bindings_rule``, ``sgl_kernel_rule``, ``deepep_rule``,
``flashinfer_rule``, ``mooncake_rule``), found by name through the seam's ``RULES``; mooncake's
rule says its own lines (``OWN_LINES``) with :mod:`.mooncake_pg` and :mod:`.mooncake_jit`.
Adding a project is one module here, its entries in the seam's ``RULES`` and
``DISTRIBUTIONS``, and its recipe in ``moonpin/scrapers/projects/``."""

__all__: list[str] = []
