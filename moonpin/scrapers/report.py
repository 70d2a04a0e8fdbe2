"""Progress and warnings leave the core through a reporter; core code never prints."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["Reporter", "StderrReporter"]


class Reporter:
    """No-op reporter. Subclass and override what you want to see."""

    def start(self, what: str, total: int, *, unit: str = "releases") -> None:
        """A batch of ``total`` items (``unit``: releases, source files…) of ``what`` begins."""

    def advance(self, label: str, *, nbytes: int = 0) -> None:
        """One item of the current batch is done (read or failed)."""

    def warn(self, message: str) -> None:
        """Something the user should know that did not stop the work."""

    def finish(self) -> None:
        """The current batch is over."""


class StderrReporter(Reporter):
    """A one-line progress display on a terminal; plain warning lines otherwise.

    ``summary``: print a line per finished batch (a scrape's releases and bytes) even
    when the stream is not a terminal; without it a batch leaves nothing behind.
    """

    #: Seconds between two redraws of the progress line (a tree has thousands of files).
    REDRAW = 0.1
    #: Seconds between two progress lines on a stream that is not a terminal (a CI log):
    #: a line per batch when it starts, then one every PERIOD while it runs, as pip's
    #: downloads say themselves in a log.
    PERIOD = 5.0

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None,
                 summary: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.live = _isatty(self.stream) if live is None else live
        self.summary = summary
        self._lock = threading.Lock()
        self._what = ""
        self._unit = "releases"
        self._total = 0
        self._done = 0
        self._bytes = 0
        self._t0 = time.monotonic()
        self._drawn = 0.0
        self.warnings: list[str] = []

    def start(self, what: str, total: int, *, unit: str = "releases") -> None:
        with self._lock:
            self._what, self._total, self._done, self._bytes = what, total, 0, 0
            self._unit = unit
            self._t0 = time.monotonic()
            self._draw("", force=True)

    def advance(self, label: str, *, nbytes: int = 0) -> None:
        with self._lock:
            self._done += 1
            self._bytes += nbytes
            self._draw(label, force=self._done == self._total)

    def warn(self, message: str) -> None:
        with self._lock:
            self.warnings.append(message)
            if self.live:
                self.stream.write("\r\x1b[K")
            self.stream.write(f"warning: {message}\n")
            self.stream.flush()

    def finish(self) -> None:
        with self._lock:
            if self.live:
                self.stream.write("\r\x1b[K")
            if self.summary:
                elapsed = time.monotonic() - self._t0
                self.stream.write(
                    f"{self._what}: {self._done}/{self._total} {self._unit}, "
                    f"{self._bytes / 1e6:.1f} MB fetched, {elapsed:.1f}s\n"
                )
            self.stream.flush()

    def _draw(self, label: str, *, force: bool = False) -> None:
        if not self.live:
            self._log(label)
            return
        now = time.monotonic()
        if not force and now - self._drawn < self.REDRAW:
            return
        self._drawn = now
        size = f" {self._bytes / 1e6:.1f} MB" if self._bytes else ""
        count = f"{self._done}/{self._total}" if self._total else str(self._done)  # 0: unknown
        line = f"{self._what} {count} {self._unit}{size} {label}"
        self.stream.write(f"\r\x1b[K{line[:200]}")
        self.stream.flush()


    def _log(self, label: str) -> None:
        """A progress line on a stream that is not a terminal: when a batch starts, then
        at most one every :attr:`PERIOD` (none for the batch's last item: ``finish``
        says it)."""
        if not self.summary:
            return
        now = time.monotonic()
        if self._done == 0:
            self._drawn = now
            self.stream.write(f"{self._what}: {self._total} {self._unit} "
                              "to read\n")
        elif now - self._drawn >= self.PERIOD and self._done < self._total:
            self._drawn = now
            size = f", {self._bytes / 1e6:.1f} MB" if self._bytes else ""
            self.stream.write(f"{self._what}: {self._done}/{self._total} {self._unit}{size}, "
                              f"{now - self._t0:.0f}s (last: {label[:80]})\n")
        else:
            return
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False
