"""``baseline history --format html``: the page from a real store, drawn in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot.cli import main
from tests.support.browser import artifacts_dir, chromium, console_errors

SUITE = {
    "checks": ["golden"],
    "samples": 2,
    "max_new_tokens": 16,
    "prompt_tokens": 32,
    "golden": {"top_k": 8, "context_depths": [32], "decode_steps": 8},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two clean baselines with helper reruns, then an accepted change (the mantissa fault's numbers)."""
    root = tmp_path_factory.mktemp("history")
    config = root / "precision.json"
    config.write_text(json.dumps({"suites": {"b": SUITE}, "baselines": {"store": str(root / "store")}}))
    record = ["baseline", "record", "--config", str(config), "--suite", "b", "--engine", "builtin"]
    # main's reruns run with the PR suite's sizes, overridden here to this suite's small ones
    record += [
        "--model-preset",
        "tiny",
        "--reruns",
        "3",
        "--samples",
        "2",
        "--max-new-tokens",
        "16",
        "--prompt-tokens",
        "32",
    ]
    assert main([*record, "--engine-commit", "a" * 40]) == 0
    assert main([*record, "--engine-commit", "b" * 40]) == 0
    accept = ["--accept-reason", "fp32 <router> GEMM", "--accepted-by", "alice", "--pr", "12"]
    assert main([*record, "--engine-commit", "c" * 40, "--fault", "mantissa=2", *accept]) == 0
    return root / "store"


def test_history_page_in_a_browser(store: Path, tmp_path: Path) -> None:
    page = tmp_path / "history.html"
    assert main(["baseline", "history", "--store", str(store), "--format", "html", "--out", str(page)]) == 0
    text = page.read_text()
    assert "fp32 &lt;router&gt; GEMM" in text and "<router>" not in text  # the reason is text, never markup
    with chromium() as driver:
        driver.get(page.as_uri())
        assert console_errors(driver) == []
        charts = driver.find_elements("css selector", "svg.chart")
        assert [c.get_attribute("data-chart") for c in charts] == ["golden", "helpers"]
        assert all(c.size["width"] > 500 and c.size["height"] > 150 for c in charts)
        golden, helpers = charts
        # Three baselines: the first has nothing to be compared with; the other two a drift and a step.
        assert len(golden.find_elements("css selector", "circle.point")) == 4
        points = len(helpers.find_elements("css selector", "circle.point"))
        assert points >= 6 and points % 3 == 0  # each helper with usable reruns, at each of the 3 baselines
        assert len(driver.find_elements("css selector", "line.threshold")) == 2
        assert len(driver.find_elements("css selector", "rect.accepted-mark")) == 2  # on both charts
        body = driver.find_element("css selector", "body").text
        assert "accepted by alice in PR #12: “fp32 <router> GEMM”" in body
        assert "golden.logit_kl 0.01" in body and "kl_div 0.0025" in body
        rows = driver.find_elements("css selector", "tbody tr")
        assert [r.get_attribute("class") for r in rows] == ["", "", "accepted"]
        driver.set_window_size(1100, 1400)
        assert driver.save_screenshot(str(artifacts_dir() / "baseline-history.png"))
