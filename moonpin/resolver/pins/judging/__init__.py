"""Judging a pinned set by the one rule: its verdict and the updates that make it compatible.

Torch's local labels, ranges, an SGLang base image's CUDA and what one extension release
requires of another exactly each have their module beside
:mod:`~moonpin.resolver.pins.judging.judge`."""

__all__: list[str] = []
