"""The worker's other native extensions, each judged by its project's own loader rule.

nixl_ep, sgl_kernel, deep_ep and flashinfer, behind one seam (:mod:`.seam`): which extensions the
launch line imports (:mod:`.wanted`), the rules (``*_rule.py``, one per project), and the
verdict, one line per extension (:mod:`.verdict`)."""

__all__: list[str] = []
