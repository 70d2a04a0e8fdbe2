"""Writing what a judgement says: the files rewritten, Renovate, constraints, the output.

Rewriting keeps everything but the versions; the Renovate fragment and the constraints file
hold a stack to the versions :func:`~moonpin.resolver.pins.writing.renovate.plan_stack`
chooses."""

__all__: list[str] = []
