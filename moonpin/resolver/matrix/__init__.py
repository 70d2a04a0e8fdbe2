"""The compatibility matrix: its values, the table and the HTML page."""

__all__: list[str] = []
