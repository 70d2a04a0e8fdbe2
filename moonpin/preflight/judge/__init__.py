"""The judgements every project shares, one concern each, with their fix lines.

torch, SGLang's needs, pins and launch line (and the backends it refuses), the libraries and
symbols a build maps, the fix lines and their shell form. Each project's own judgement is its
loader rule's, behind the seam (:mod:`moonpin.preflight.extensions`), which calls these."""

__all__: list[str] = []
