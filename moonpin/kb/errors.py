"""The one exception tree every moonpin layer raises from.

Each message names the input that was wrong; ``hint`` carries the line that
fixes it (the CLI prints it as ``tip: ...``).
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "FetchError",
    "FileError",
    "KBError",
    "MoonpinError",
    "RangeNotHonoured",
    "ReadRefused",
    "UsageError",
    "WriteFailed",
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


class FileError(MoonpinError, OSError):
    """A file moonpin reads or writes is not what it must be, or cannot be made.

    Also an :class:`OSError` (``errno``, ``strerror``, ``filename`` set), so a caller that
    already treats "cannot read/write" as one outcome keeps doing so; the CLI maps it, as
    every :class:`MoonpinError`, to exit 2 with its ``tip:`` line. ``str()`` names the
    path, what the file is for, and what is wrong with it.
    """

    def __init__(self, path: str, reason: str, *, what: str = "file", errno: int = 0,
                 hint: str | None = None) -> None:
        OSError.__init__(self, errno, reason, path)
        self.hint = hint
        self.path = path
        self.what = what
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.what} {self.path!r}: {self.reason}"

    def __reduce__(self) -> tuple[object, ...]:  # picklable across process pools
        return (_rebuild, (type(self), self.path, self.reason, self.what, self.errno or 0,
                           self.hint))


def _rebuild(cls: type[FileError], path: str, reason: str, what: str, errno: int,
             hint: str | None) -> FileError:
    return cls(path, reason, what=what, errno=errno, hint=hint)


class ReadRefused(FileError):
    """:func:`moonpin.kb.files.read_regular` refused a file: not a regular file (a FIFO, a device,
    a folder, a symlink loop), larger than the limit for its kind, or not readable.
    ``limit`` is the size cap in bytes that applied."""

    def __init__(self, path: str, reason: str, *, what: str = "file", errno: int = 0,
                 hint: str | None = None, limit: int | None = None) -> None:
        super().__init__(path, reason, what=what, errno=errno, hint=hint)
        self.limit = limit


class WriteFailed(FileError):
    """A file (or the lock beside it) could not be written; what was there is unchanged."""
