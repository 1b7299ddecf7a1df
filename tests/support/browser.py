"""A real headless Chromium for the HTML report's tests: Debian's ``chromium`` driven through Selenium and
Debian's ``chromium-driver`` (the same version, from the same package source; nothing is downloaded).

``scripts/test`` installs both with apt-get when they are missing and then sets
``PRECISIONBOT_REQUIRE_BROWSER=1``: from then on a browser that cannot start fails the tests instead of
skipping them. Elsewhere (a laptop without chromium) the tests skip and say why.

Also here: a tiny HTTP server on 127.0.0.1 that records every request, the tripwire for "the page made no
request".
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"
REQUIRE_ENV = "PRECISIONBOT_REQUIRE_BROWSER"
ARTIFACTS_ENV = "PRECISIONBOT_TEST_ARTIFACTS"
ROOT = Path(__file__).resolve().parents[2]


def artifacts_dir() -> Path:
    """Where screenshots go: ``$PRECISIONBOT_TEST_ARTIFACTS``, else ``test-artifacts/`` (git-ignored)."""
    path = Path(os.environ.get(ARTIFACTS_ENV) or ROOT / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (and {REQUIRE_ENV}=1 says it must be there)")
    pytest.skip(reason)


def find_chromium() -> tuple[str, str]:
    """``(browser, driver)`` paths, or skip (fail under ``PRECISIONBOT_REQUIRE_BROWSER=1``) saying what is missing."""
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = shutil.which(DRIVER)
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromium-driver", driver)) if p is None)
        _unavailable(f"{missing} not installed (scripts/test installs Debian's packages with apt-get as root)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        _unavailable("selenium is not installed (pip install -e '.[test]')")
    assert browser is not None and driver is not None
    return browser, driver


@contextmanager
def chromium(width: int = 1100, height: int = 1400) -> Iterator[Any]:
    """A headless Chromium WebDriver with the browser console and network events logged."""
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = find_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",  # no update/safe-browsing calls: the network log is the page's own
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    except WebDriverException as exc:
        _unavailable(f"chromium did not start: {exc.msg or exc}")
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def requested_urls(driver: Any) -> list[str]:
    """Every URL the page asked for (Chrome DevTools' Network.requestWillBeSent events)."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


class _Tripwire(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def tripwire() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that records the path of every request: ``(base_url, hits)``."""
    hits: list[str] = []
    handler = type("Tripwire", (_Tripwire,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
