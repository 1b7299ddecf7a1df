"""A one-line progress bar with ETA for long checks (on a terminal only; silent in CI logs and pipes)."""

from __future__ import annotations

import threading
import time
from typing import TextIO


def format_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def render_bar(done: int, total: int, label: str, elapsed_s: float, width: int = 24) -> str:
    """``[#########...............]  37%  match: replay  1m02s, ETA 1m45s`` (pure)."""
    frac = min(1.0, done / total) if total > 0 else 0.0
    filled = int(frac * width)
    eta = f"ETA {format_duration(elapsed_s * (1 - frac) / frac)}" if 0 < frac < 1 else "ETA ?"
    if frac >= 1:
        eta = "done"
    return f"[{'#' * filled}{'.' * (width - filled)}] {100 * frac:3.0f}%  {label}  {format_duration(elapsed_s)}, {eta}"


class TerminalProgress:
    """Redraws one line on ``stream`` (stderr), at most every ``min_interval_s``; no output unless it is a tty."""

    def __init__(self, stream: TextIO, total: int = 0, *, min_interval_s: float = 0.2, force: bool = False) -> None:
        self.total = total
        self.stream = stream
        self.enabled = force or (hasattr(stream, "isatty") and stream.isatty())
        self.min_interval_s = min_interval_s
        self.done = 0
        self.label = ""
        self._t0 = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()

    def start(self, total: int) -> None:
        with self._lock:
            self.total, self.done, self._t0 = total, 0, time.monotonic()

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
            if self.enabled:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval_s:
            return
        self._last = now
        self.stream.write("\r\x1b[2K" + render_bar(self.done, self.total, self.label, now - self._t0))
        self.stream.flush()
