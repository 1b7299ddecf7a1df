from __future__ import annotations

import io

from precisionbot.checks.progress import TerminalProgress, format_duration, render_bar


def test_render_bar_with_eta() -> None:
    assert render_bar(25, 100, "match: replay", 30.0, width=8) == "[##......]  25%  match: replay  30s, ETA 1m30s"
    assert render_bar(0, 100, "x", 1.0, width=4).endswith("ETA ?")
    assert render_bar(100, 100, "x", 3725.0, width=4) == "[####] 100%  x  1h02m, done"
    assert format_duration(59.6) == "1m00s"


def test_plain_periodic_lines_when_not_a_terminal() -> None:
    """A CI log gets a plain line (no escape codes) at most every plain_interval_s, with the ETA."""
    now = [0.0]
    stream = io.StringIO()
    bar = TerminalProgress(stream, plain_interval_s=30.0, clock=lambda: now[0])
    bar.start(10)
    bar.phase("match")  # the first line at once
    now[0] = 10.0
    bar.advance(2)  # within 30 s of the last line: nothing
    now[0] = 40.0
    bar.advance(3)
    bar.close()
    assert stream.getvalue().splitlines() == ["progress:   0%  match  0s, ETA ?", "progress:  50%  match  40s, ETA 40s"]
    quiet = io.StringIO()
    bar = TerminalProgress(quiet)
    bar.enabled = False  # --quiet
    bar.start(10)
    bar.phase("match")
    bar.close()
    assert quiet.getvalue() == ""
    forced = io.StringIO()
    bar = TerminalProgress(forced, force=True, min_interval_s=0)
    bar.start(10)
    bar.advance(5)
    assert "50%" in forced.getvalue()
