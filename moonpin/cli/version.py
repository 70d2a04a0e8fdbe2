"""moonpin's version line: its version and the KB's scrape date (standard library only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

__all__ = ["version_line"]


def version_line(kb: str | None) -> str:
    """moonpin's version and the KB's scrape date (read with the standard library only).
    The version is the one a scrape records (``importlib.metadata`` costs 40 ms; a test
    holds the constant to pyproject's)."""
    from moonpin.kb.paths import default_kb_file
    from moonpin.scrapers import __version__ as mine

    path = kb or default_kb_file()
    from moonpin.resolver.tables.documents import summary

    found = summary(path)  # a few kilobytes, when they belong to the KB
    if found is not None:
        when = found.scrape.scraped_at.isoformat()
    else:
        try:
            from moonpin.kb.files import loads_json, read_regular

            doc = loads_json(read_regular(path, cap=256 << 20, what="knowledge base"))
            when = doc["scrape"]["scraped_at"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            when = f"unreadable: {str(e)[:120]}"
    return f"moonpin {mine}; knowledge base {path}, scraped {when}"


