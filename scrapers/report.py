"""Progress and warnings leave the core through a reporter; core code never prints."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["Reporter", "StderrReporter"]


class Reporter:
    """No-op reporter. Subclass and override what you want to see."""

    def start(self, what: str, total: int) -> None:
        """A batch of ``total`` releases of ``what`` begins."""

    def advance(self, label: str, *, nbytes: int = 0) -> None:
        """One release of the current batch is done (read or failed)."""

    def warn(self, message: str) -> None:
        """Something the user should know that did not stop the work."""

    def finish(self) -> None:
        """The current batch is over."""


class StderrReporter(Reporter):
    """A one-line progress display on a terminal; plain warning lines otherwise."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._lock = threading.Lock()
        self._what = ""
        self._total = 0
        self._done = 0
        self._bytes = 0
        self._t0 = time.monotonic()
        self.warnings: list[str] = []

    def start(self, what: str, total: int) -> None:
        with self._lock:
            self._what, self._total, self._done, self._bytes = what, total, 0, 0
            self._t0 = time.monotonic()
            self._draw("")

    def advance(self, label: str, *, nbytes: int = 0) -> None:
        with self._lock:
            self._done += 1
            self._bytes += nbytes
            self._draw(label)

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
            elapsed = time.monotonic() - self._t0
            self.stream.write(
                f"{self._what}: {self._done}/{self._total} releases, "
                f"{self._bytes / 1e6:.1f} MB fetched, {elapsed:.1f}s\n"
            )
            self.stream.flush()

    def _draw(self, label: str) -> None:
        if not self.live:
            return
        self.stream.write(
            f"\r\x1b[K{self._what} {self._done}/{self._total} {self._bytes / 1e6:.1f} MB {label}"[
                :200
            ]
        )
        self.stream.flush()
