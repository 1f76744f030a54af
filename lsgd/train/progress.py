"""A one-line progress bar for rank 0 on standard error.

On a terminal the line is redrawn in place at most every half second; in a log
(not a terminal) a line is printed every tenth of the run, so CI logs stay short.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(self, total: float | None, unit: str, enabled: bool,
                 stream: TextIO | None = None) -> None:
        self.total = total
        self.unit = unit
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._last_draw = 0.0
        self._next_fraction = 0.1
        self._start = time.perf_counter()
        self._drawn: float | None = None

    def update(self, done: float, steps: int, fields: Callable[[], dict[str, str]]) -> None:
        """Redraw if due; ``fields`` is only called then (it may sync a GPU)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        fraction = done / self.total if self.total else 0.0
        if self.tty:
            if now - self._last_draw < 0.5:
                return
        elif fraction < self._next_fraction:
            return
        else:
            self._next_fraction = (int(fraction * 10) + 1) / 10
        self._last_draw = now
        self._draw(done, steps, fields(), now, final=False)

    def close(self, done: float, steps: int, fields: dict[str, str]) -> None:
        if self.enabled and (self.tty or self._drawn != done):
            self._draw(done, steps, fields, time.perf_counter(), final=True)

    def _draw(self, done: float, steps: int, fields: dict[str, str], now: float,
              final: bool) -> None:
        elapsed = now - self._start
        self._drawn = done
        if self.total:
            width = 20
            filled = min(width, int(width * done / self.total))
            head = f"[{'#' * filled}{'.' * (width - filled)}] {done:.0f}/{self.total:.0f} {self.unit}"
        else:
            head = f"{done:.0f} {self.unit}"
        rate = steps / elapsed if elapsed > 0 else 0.0
        body = " | ".join([head, *(f"{k} {v}" for k, v in fields.items()), f"{rate:.1f} steps/s"])
        if self.tty:
            self.stream.write("\r" + body[:200].ljust(120) + ("\n" if final else ""))
        else:
            self.stream.write(body + "\n")
        self.stream.flush()
