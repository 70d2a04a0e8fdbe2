"""SGLang launch arguments, checked.

The scraped rules, launch lines found in deployment files, and the cross-check against an
installed SGLang."""

__all__: list[str] = []
