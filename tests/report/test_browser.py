"""The HTML report in a real headless Chromium (Debian's chromium + chromium-driver, through Selenium).

What a reader's browser does with the file: no console error, every chart drawn with a real size and marks,
and untrusted token text inert — no script runs, no request leaves the page (a tripwire HTTP server on
127.0.0.1 is what hostile tokens point at, and the DevTools network log must hold only the file itself).
Screenshots go to ``test-artifacts/`` (``$PRECISIONBOT_TEST_ARTIFACTS``); with
``PRECISIONBOT_UPDATE_SCREENSHOT=1`` the demo's also replaces ``docs/images/report.png`` for the README.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from precisionbot.report.html import render_html
from tests.report import html_scenarios
from tests.support.browser import ROOT, artifacts_dir, chromium, console_errors, requested_urls, tripwire
from tests.support.demo_run import DemoRun

README_IMAGE = ROOT / "docs" / "images" / "report.png"

CHART_SIZES = """
return Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg');
  if (!svg) return [f.id, 0, 0, 0];
  const box = svg.getBoundingClientRect();
  const marks = Array.from(svg.querySelectorAll('path, use')).filter(p => {
    const b = p.getBoundingClientRect(); return b.width > 0 || b.height > 0;
  }).length;
  return [f.id, box.width, box.height, marks];
});
"""


def _open(driver: Any, page: Path) -> None:
    driver.get(page.as_uri())  # returns after the load event: every resource the page asked for was asked for


def _check_charts(driver: Any, expected: int) -> None:
    sizes = driver.execute_script(CHART_SIZES)
    assert len(sizes) == expected, sizes
    for chart, width, height, marks in sizes:
        assert width > 300 and height > 100, (chart, width, height)
        assert marks > 10, (chart, marks)  # axes, ticks and the data itself, laid out with a real size


def _only_the_file(driver: Any, page: Path) -> None:
    urls = requested_urls(driver)
    assert urls and all(u == page.as_uri() for u in urls), urls


def _full_page_screenshot(driver: Any, path: Path, width: int = 1100) -> None:
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, min(max(height, 600), 12_000))
    assert driver.save_screenshot(str(path)), path


def test_every_chart_renders_without_console_errors(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(html_scenarios.charts()), encoding="utf-8")
    with chromium() as driver:
        _open(driver, page)
        assert console_errors(driver) == []
        _check_charts(driver, expected=7)
        _only_the_file(driver, page)
        _full_page_screenshot(driver, artifacts_dir() / "report-charts.png")


def test_hostile_token_text_is_inert(tmp_path: Path) -> None:
    page = tmp_path / "hostile.html"
    with tripwire() as (base_url, hits), chromium() as driver:
        page.write_text(render_html(html_scenarios.hostile(base_url)), encoding="utf-8")
        _open(driver, page)
        assert driver.execute_script("return typeof window.__pwned") == "undefined"
        assert hits == []  # nothing reached the server the tokens point at
        _only_the_file(driver, page)
        # A policy violation is logged as an error: none means nothing even tried to run or load.
        assert console_errors(driver) == []
        body = driver.execute_script("return document.body.innerText")
        assert "<script>window.__pwned=1;fetch(" in body.replace("\u200d", "")  # shown, as text
        assert (
            driver.execute_script("return document.querySelectorAll('script, img, iframe, a[href^=java]').length") == 0
        )
        _full_page_screenshot(driver, artifacts_dir() / "report-hostile.png")


@pytest.mark.slow
def test_the_demo_report_in_a_browser(demo_run: DemoRun) -> None:
    page = demo_run.out / "report.html"
    with chromium() as driver:
        _open(driver, page)
        assert console_errors(driver) == []
        _check_charts(driver, expected=8)
        _only_the_file(driver, page)
        _full_page_screenshot(driver, artifacts_dir() / "demo-report.png")
        if os.environ.get("PRECISIONBOT_UPDATE_SCREENSHOT") == "1":
            driver.set_window_size(1000, 1450)
            shot = artifacts_dir() / "demo-report-top.png"
            assert driver.save_screenshot(str(shot))
            _small_png(shot, README_IMAGE)


def _small_png(source: Path, target: Path) -> None:
    """A palette PNG (256 colours are plenty for text and flat charts): a small file for the README."""
    from PIL import Image

    target.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(source) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
