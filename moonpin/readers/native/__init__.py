"""Pure readers of the worker's other native extensions: bytes or text in, facts out.

nixl, sglang-kernel, DeepEP and FlashInfer: a package's loader rule from its Python files
(``rules``), the facts of one compiled build from its bytes (``builds``), and the small
evaluator that turns a rule's key expression into the key a torch release gives
(``keyeval``)."""

__all__: list[str] = []
