"""The deep probe: the environment's own interpreter imports the extensions in a reaped child.

By design the one place the check runs the target's code."""

__all__: list[str] = []
