"""Progress with an ETA for long checks: a redrawn bar on a terminal, plain periodic lines elsewhere.

A CI log (stderr is a pipe) keeps every byte and cannot redraw, so there a line such as
``progress:  37%  match: replay  1m02s, ETA 1m45s`` is printed at most every ``PLAIN_INTERVAL_S``: an empty log
for minutes reads as a hung engine, and a hung engine must be told apart from a slow one.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TextIO

PLAIN_INTERVAL_S = 30.0
"""Seconds between plain progress lines when stderr is not a terminal."""


def format_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def render_status(done: int, total: int, label: str, elapsed_s: float) -> str:
    """`` 37%  match: replay  1m02s, ETA 1m45s`` (pure): what the bar and the plain lines both say."""
    frac = min(1.0, done / total) if total > 0 else 0.0
    eta = f"ETA {format_duration(elapsed_s * (1 - frac) / frac)}" if 0 < frac < 1 else "ETA ?"
    if frac >= 1:
        eta = "done"
    return f"{100 * frac:3.0f}%  {label}  {format_duration(elapsed_s)}, {eta}"


def render_bar(done: int, total: int, label: str, elapsed_s: float, width: int = 24) -> str:
    """``[#########...............]  37%  match: replay  1m02s, ETA 1m45s`` (pure)."""
    frac = min(1.0, done / total) if total > 0 else 0.0
    filled = int(frac * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {render_status(done, total, label, elapsed_s)}"


class TerminalProgress:
    """Redraws one line on ``stream`` (stderr) at most every ``min_interval_s`` when it is a tty; otherwise
    (``plain``) writes a plain line at most every ``plain_interval_s``. ``enabled = False`` silences both."""

    def __init__(
        self,
        stream: TextIO,
        total: int = 0,
        *,
        min_interval_s: float = 0.2,
        force: bool = False,
        plain_interval_s: float = PLAIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.tty = force or (hasattr(stream, "isatty") and stream.isatty())
        self.enabled = True
        self.min_interval_s = min_interval_s
        self.plain_interval_s = plain_interval_s
        self.clock = clock
        self.done = 0
        self.label = ""
        self._t0 = clock()
        self._last = -math.inf
        self._lock = threading.Lock()

    def start(self, total: int) -> None:
        with self._lock:
            self.total, self.done, self._t0 = total, 0, self.clock()

    def phase(self, label: str) -> None:
        with self._lock:
            self.label = label
            self._draw(force=True)

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            self._draw()

    def close(self) -> None:
        with self._lock:
            if self.enabled and self.tty:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not self.tty:
            if now - self._last >= self.plain_interval_s:
                self._last = now
                self.stream.write(f"progress: {render_status(self.done, self.total, self.label, now - self._t0)}\n")
                self.stream.flush()
            return
        if not force and now - self._last < self.min_interval_s:
            return
        self._last = now
        self.stream.write("\r\x1b[2K" + render_bar(self.done, self.total, self.label, now - self._t0))
        self.stream.flush()
