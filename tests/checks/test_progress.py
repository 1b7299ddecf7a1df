from __future__ import annotations

import io

from precisionbot.checks.progress import TerminalProgress, format_duration, render_bar


def test_render_bar_with_eta() -> None:
    assert render_bar(25, 100, "match: replay", 30.0, width=8) == "[##......]  25%  match: replay  30s, ETA 1m30s"
    assert render_bar(0, 100, "x", 1.0, width=4).endswith("ETA ?")
    assert render_bar(100, 100, "x", 3725.0, width=4) == "[####] 100%  x  1h02m, done"
    assert format_duration(59.6) == "1m00s"


def test_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    bar = TerminalProgress(stream)
    bar.start(10)
    bar.phase("match")
    bar.advance(5)
    bar.close()
    assert stream.getvalue() == ""
    forced = io.StringIO()
    bar = TerminalProgress(forced, force=True, min_interval_s=0)
    bar.start(10)
    bar.advance(5)
    assert "50%" in forced.getvalue()
