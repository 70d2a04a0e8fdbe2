"""The one exception tree every moonpin layer raises from.

Each message names the input that was wrong; ``hint`` carries the line that
fixes it (the CLI prints it as ``tip: ...``).
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "FetchError",
    "KBError",
    "MoonpinError",
    "RangeNotHonoured",
    "UsageError",
]


class MoonpinError(Exception):
    """Root of every error moonpin raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(MoonpinError):
    """Bad input from the user: an unknown release, an unparseable specifier."""


class KBError(MoonpinError):
    """The knowledge-base file is missing, corrupt, or of another schema."""


class FetchError(MoonpinError):
    """A URL could not be read (after retries, where retrying made sense)."""

    def __init__(self, url: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{url}: {message}", hint=hint)
        self.url = url


class RangeNotHonoured(FetchError):
    """The server answered a Range request with something other than the asked bytes.

    ``kind`` is "ignored" (200 with the whole body), "refused" (an error status)
    or "mismatch" (206 with other bytes than asked).
    """

    def __init__(
        self, url: str, message: str, *, kind: str = "mismatch", hint: str | None = None
    ) -> None:
        super().__init__(url, message, hint=hint)
        self.kind = kind


class ArchiveError(MoonpinError):
    """A wheel or archive is malformed, truncated or hostile."""
