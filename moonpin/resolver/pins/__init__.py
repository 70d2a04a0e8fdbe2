"""A project's pins: read from its files, judged by the one rule, and rewritten.

Three rooms, in the order a run walks them: :mod:`~moonpin.resolver.pins.reading` (the files
and their includes, a reader per kind, into :class:`~moonpin.resolver.pins.reading.base.Pin`
values, and the indexes the files add), :mod:`~moonpin.resolver.pins.judging` (the pinned set,
its verdict and the updates that make it compatible) and :mod:`~moonpin.resolver.pins.writing`
(the files rewritten, the Renovate fragment, the constraints file and the command's output).
:mod:`moonpin.resolver.pins.read` is the one place its clients import from."""

__all__: list[str] = []
