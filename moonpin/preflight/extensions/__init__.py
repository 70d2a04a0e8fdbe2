"""The worker's native extensions, each judged by its project's own loader rule.

nixl_ep, sgl_kernel, deep_ep, flashinfer and mooncake, behind one seam (:mod:`.seam`): which
extensions the launch line imports (:mod:`.wanted`), the rules (:mod:`.rules`, one module per
project, mooncake's own lines, its rule's ``OWN_LINES`` judgement, among them), the verdict,
one line per extension (:mod:`.verdict`), the rules' shared ``ast`` readings
(:mod:`.astread`) and a package no rule reads (:mod:`.pyread`)."""

__all__: list[str] = []
