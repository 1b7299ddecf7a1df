"""The demo's PR comment rendered as GitHub-flavoured Markdown (markdown-it-py, GitHub's table CSS) in a real
headless Chromium at a 1280 px window: every table fits the comment column without scrolling, so the "Noise or
bug" column is on screen; and the HTML report's worst-positions table fits the page at 1280 px. A screenshot of
each goes to ``test-artifacts/`` (``scripts/docs-figures`` makes the README's ``docs/images/comment.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import artifacts_dir, chromium
from tests.support.demo_run import DemoRun
from tests.support.github_markdown import COMMENT_COLUMN_PX, WINDOW_PX, comment_html, open_details

TABLES = """
return Array.from(document.querySelectorAll(arguments[0])).map(t => {
  const last = t.querySelector('tr').lastElementChild.getBoundingClientRect();
  const box = t.parentElement.getBoundingClientRect();
  return [t.querySelector('tr').lastElementChild.textContent.trim(), t.scrollWidth, t.clientWidth,
          Math.round(last.right), Math.round(box.right)];
});
"""


def _tables(driver: Any, selector: str) -> list[list[Any]]:
    found: list[list[Any]] = driver.execute_script(TABLES, selector)
    return found


@pytest.mark.slow
def test_the_demo_comment_fits_githubs_column_at_1280px(demo_run: DemoRun, tmp_path: Path) -> None:
    comment = (demo_run.out / "comment.md").read_text(encoding="utf-8")
    page = tmp_path / "comment.html"
    page.write_text(comment_html(open_details(comment)), encoding="utf-8")
    with chromium(width=WINDOW_PX, height=1000) as driver:
        driver.get(page.as_uri())
        tables = _tables(driver, ".markdown-body table")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(WINDOW_PX, min(int(height) + 40, 8000))
        driver.save_screenshot(str(artifacts_dir() / "demo-comment-1280.png"))
    assert len(tables) >= 3
    assert "Noise or bug" in [t[0] for t in tables]
    for last, scroll, client, right, column_right in tables:
        assert scroll <= client, f"the table ending in {last!r} scrolls: {scroll} px in {client} px"
        assert right <= column_right, f"the column {last!r} ends at {right} px, past the comment at {column_right}"
        assert client <= COMMENT_COLUMN_PX


@pytest.mark.slow
def test_the_html_reports_worst_table_fits_at_1280px(demo_run: DemoRun) -> None:
    with chromium(width=WINDOW_PX, height=1000) as driver:
        driver.get((demo_run.out / "report.html").as_uri())
        tables = _tables(driver, "table.worst, table.checks")
        widths = driver.execute_script(
            "return Array.from(document.querySelectorAll('figure.chart svg'))"
            ".map(s => [s.getBoundingClientRect().width, s.parentElement.getBoundingClientRect().width])"
        )
    # The worst table ends in golden's top-k of both sides (the demo's golden arrays keep them).
    assert {t[0] for t in tables} >= {"Top-5 baseline / test", "Why"}
    for last, scroll, client, right, box_right in tables:
        assert scroll <= client and right <= box_right, f"the table ending in {last!r} overflows at 1280 px"
    assert widths and all(svg >= 0.98 * figure for svg, figure in widths)  # charts use the page's width
