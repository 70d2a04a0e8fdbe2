"""The worker's native extensions, each judged by its project's own loader rule.

nixl_ep, sgl_kernel, deep_ep, flashinfer and mooncake, behind one seam (:mod:`.seam`): which
extensions the launch line imports (:mod:`.wanted`), the rules (``*_rule.py``, one per project),
the verdict, one line per extension (:mod:`.verdict`), and mooncake's own lines, its rule's
``OWN_LINES`` judgement (:mod:`.mooncake_pg`, :mod:`.mooncake_jit`)."""

__all__: list[str] = []
