"""Headless progress: one line on the terminal while a batch runs (`compile` without --json/--tui).

    [ 12/200 modules]  6%  3.1 modules/s  ETA 61 s  (2 failed)

Only when stderr is a terminal (never in pipes, logs or CI) and not with --quiet; the line is
redrawn in place at most a few times a second and erased before the summary is printed.
"""
from __future__ import annotations

import os
import time
from typing import IO

from .events import ModuleFinished, RunFinished, RunStarted

REDRAW_PERIOD_S = 0.2


class Progress:
    """An event sink drawing the progress line on `stream`."""

    def __init__(self, stream: IO[str], *, clock=time.monotonic, period_s: float = REDRAW_PERIOD_S):
        self.stream = stream
        self.clock = clock
        self.period_s = period_s
        self.total = 0
        self.done: set[str] = set()
        self.failed = 0
        self.t0 = 0.0
        self._last_draw = -1e9
        self._width = 0

    @staticmethod
    def wanted(stream: IO[str]) -> bool:
        try:
            return os.isatty(stream.fileno()) and os.environ.get("TERM") != "dumb"
        except (AttributeError, OSError, ValueError):
            return False

    def before(self, event) -> None:
        """A sink to put before whatever else writes on the same terminal: erases the line first."""
        if isinstance(event, (ModuleFinished, RunFinished)):
            self.clear()

    def __call__(self, event) -> None:
        if isinstance(event, RunStarted):
            self.total, self.t0 = len(event.modules), self.clock()
            self._draw(force=True)
        elif isinstance(event, ModuleFinished):
            if event.module not in self.done:
                self.done.add(event.module)
                self.failed += not event.ok
            self._draw()
        elif isinstance(event, RunFinished):
            self.clear()

    def line(self) -> str:
        n, total = len(self.done), self.total
        width = len(str(total))
        elapsed = max(self.clock() - self.t0, 1e-9)
        rate = n / elapsed
        parts = [f"[{n:>{width}}/{total} modules]", f"{100 * n // total if total else 100:>3}%"]
        if n:
            parts.append(f"{rate:.1f} modules/s")
            parts.append(f"ETA {(total - n) / rate:.0f} s")
        if self.failed:
            parts.append(f"({self.failed} failed)")
        return "  ".join(parts)

    def _draw(self, force: bool = False) -> None:
        now = self.clock()
        if not force and self._width and now - self._last_draw < self.period_s and len(self.done) < self.total:
            return
        self._last_draw = now
        text = self.line()
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
