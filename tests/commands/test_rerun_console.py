"""What the console says about main's reruns: formatted numbers with the reason a rerun is inconclusive, and a
main-noise comparison that cannot happen said before any rerun is spent."""

from __future__ import annotations

from types import SimpleNamespace

from precisionbot.checks.main_noise import skipped_up_front
from precisionbot.commands.baseline import rerun_line
from precisionbot.commands.check import vs_main_skipped
from precisionbot.config import Config, from_mapping
from precisionbot.results import CheckResult, Verdict


def test_rerun_lines_print_formatted_numbers_and_why_a_rerun_is_inconclusive() -> None:
    result = SimpleNamespace(
        checks=[
            CheckResult("match", Verdict.PASS, stats={"mean_k3": 2.4367248499368907e-11}),
            CheckResult("prefill_cache_hit", Verdict.INCONCLUSIVE, reasons=("too few cache hits: 0 of 8",)),
        ]
    )
    line = rerun_line(0, result)
    assert line == (
        "  helper rerun 1: match pass mean_k3 2.4e-11; "
        "prefill_cache_hit inconclusive mean_k3 – (too few cache hits: 0 of 8)"
    )
    assert "2.4367" not in line and "None" not in line


def test_a_comparison_that_cannot_happen_is_said_up_front() -> None:
    assert skipped_up_front(8) is None
    two = skipped_up_front(2)
    assert two is not None and "needs at least 3 samples" in two and "has 2" in two
    assert "at least 3 reruns" in (skipped_up_front(8, reruns=2) or "")
    assert skipped_up_front(8, reruns=5) is None


def test_check_says_it_before_running_when_the_suite_is_too_small() -> None:
    config = from_mapping({"suites": {"pr": {"samples": 2}}})
    assert "has 2" in (vs_main_skipped(config, config.suite("pr")) or "")
    assert vs_main_skipped(Config(), Config().suite("pr")) is None
    off = from_mapping({"suites": {"pr": {"samples": 2}}, "baselines": {"vs_main": False}})
    assert vs_main_skipped(off, off.suite("pr")) is None
