"""The image check a worker runs at start (``python -m moonpin.preflight``): the target
environment, the image's facts, libraries and symbol binding, the process-group module,
SGLang's needs, the deep probe and the fix lines."""

__all__: list[str] = []
