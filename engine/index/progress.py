"""The progress line of ``engine index``: files done / total, units, rates and ETA, on stderr.

It redraws on every update an indexer reports and, from a heartbeat thread, at least once a
second whatever the indexers do (a model loading, one huge file embedding, a commit), so a
user never watches a frozen line for more than ``HEARTBEAT_S``. On a terminal it redraws one
line in place; into a pipe or log file it writes a line per ``LOG_EVERY_S``.

    with ProgressLine(enabled=True) as bar:
        bar.stage("scan", "listing files")
        update_index(..., progress=bar, live=bar)
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

HEARTBEAT_S = 1.0
LOG_EVERY_S = 1.5  # non-terminal output: one line this often at most (and at least, via the heartbeat)
REDRAW_S = 0.2  # terminal: at most this often on updates


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressLine:
    """Callable as ``progress(name, done_files, total_files, units)`` (engine.index.build.Progress)."""

    def __init__(self, enabled: bool = True, stream: TextIO | None = None, unit: str = "units") -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.unit = unit
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._name, self._detail = "", ""
        self._done = self._total = self._units = 0
        self._t0 = self._last = time.monotonic()
        self.lines = 0  # lines written (for tests and logs)

    # -- lifecycle ----------------------------------------------------------------
    def __enter__(self) -> ProgressLine:
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="index-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._finish_line()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self._draw(force=True)

    # -- updates ------------------------------------------------------------------
    def stage(self, name: str, detail: str = "") -> None:
        """A new phase (an index starts, a scan, a model load): resets rates and the ETA."""
        with self._lock:
            if self._name and self._name != name:
                self._finish_line_locked()
            self._name, self._detail = name, detail
            self._done = self._total = self._units = 0
            self._t0 = time.monotonic()
        self._draw(force=True)

    def __call__(self, name: str, done: int, total: int, units: int) -> None:
        with self._lock:
            if name != self._name:
                if self._name:
                    self._finish_line_locked()
                self._name, self._t0 = name, time.monotonic()
            news = (done, total, units) != (self._done, self._total, self._units) or bool(self._detail)
            self._detail = ""
            self._done, self._total, self._units = done, total, units
        if news:
            self._draw(force=done >= total)

    # -- rendering ----------------------------------------------------------------
    def text(self) -> str:
        now = time.monotonic()
        elapsed = now - self._t0
        if self._detail and not self._total:
            return f"{self._name:<9} {self._detail} {_duration(elapsed)}"
        width = 24
        fill = int(width * self._done / self._total) if self._total else width
        rate = self._done / elapsed if elapsed > 0 else 0.0
        unit_rate = self._units / elapsed if elapsed > 0 else 0.0
        eta = (self._total - self._done) / rate if rate > 0 else None
        return (
            f"{self._name:<9} [{'#' * fill}{'.' * (width - fill)}] {self._done}/{self._total} files "
            f"{self._units:,} {self.unit} ({unit_rate:,.1f}/s) {_duration(elapsed)}"
            + (f" ETA {_duration(eta)}" if eta is not None and self._done < self._total else "")
        )

    def _draw(self, *, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            now = time.monotonic()
            if not self._name or (not force and now - self._last < (REDRAW_S if self.tty else LOG_EVERY_S)):
                return
            self._last = now
            line = self.text()
            if self.tty:
                self.stream.write(f"\r\x1b[K{line}")
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
            self.lines += 1

    def _finish_line(self) -> None:
        with self._lock:
            self._finish_line_locked()

    def _finish_line_locked(self) -> None:
        if self.enabled and self.tty and self._name:
            self.stream.write(f"\r\x1b[K{self.text()}\n")
            self.stream.flush()
        self._name = ""
