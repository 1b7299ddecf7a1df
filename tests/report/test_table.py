"""The check table and golden details read honestly (QA of the demo comment): each row says what its mean /
p99 / max measure, the decode tail has a depth row, comparison cells explain themselves, a zero noise band
is not reported as a measurement, and a text-less token borrows its text from elsewhere in the run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from precisionbot.report import diagnose, render_comment
from precisionbot.results import CheckResult, Verdict, WorstPosition
from tests.report import markdown, scenarios


def _golden(**stats: Any) -> CheckResult:
    base = {
        "positions": 100,
        "samples": 4,
        "mean_k3": 0.24,  # SGLang's mean of per-sample means: a 1-position decode sample dominates it
        "p99": 1e-9,
        "max": 1.8,
        "frac_over": {"1e-2": 0.0004},
        "kl_mean": 1.3e-4,
        "kl_p50": 0.0,
        "kl_p99": 0.0,
        "kl_max": 0.67,
        "flips": 2,
        "band": None,
    }
    return CheckResult(name="golden", verdict=Verdict.FAIL, reasons=("x",), stats={**base, **stats})


def _table(checks: list[CheckResult], **kwargs: Any) -> markdown.Table:
    run = scenarios.run(checks, baseline=None)
    text = render_comment([scenarios.ReportSection("x", run, **kwargs)])
    return markdown.tables(text)[0]


def test_golden_row_shows_kl_and_helpers_show_sglang_k3() -> None:
    table = _table([scenarios.clean("match"), _golden()])
    col = {h: i for i, h in enumerate(table.header)}
    rows = {r[0]: r for r in table.rows}
    assert rows["golden"][col["Mean · p99 · max (nats)"]] == "KL 0.00013 · 0 · 0.67"
    assert rows["match"][col["Mean · p99 · max (nats)"]].startswith("k3 ")


def test_no_comparison_anywhere_drops_the_vs_baseline_column() -> None:
    table = _table([scenarios.clean("match"), _golden()])
    assert not any(h.startswith("vs") for h in table.header)


def test_a_zero_band_is_said_as_agreement_and_not_compared_against() -> None:
    band = {"pairs": 1, "kl_p50": 1e-6, "kl_p99": 1e-6, "sigma_nats": 0.0, "max_flip_margin_nats": 0.0}
    w = WorstPosition(4, 4096, 46, ".", -0.889, -2.33, 1.44, 1.8, margin_ref=1.04, flip=True)
    golden = replace(_golden(band=band), worst=(w,))
    run = scenarios.run([golden], baseline=None)
    text = render_comment([scenarios.ReportSection("x", run)])
    assert "agree bit for bit (zero noise band): fixed thresholds apply" in text
    assert "σ 0" not in text and "now 0" not in text
    assert not any(h.startswith("vs") for h in markdown.tables(text)[0].header)


def test_a_comparison_cell_names_both_numbers() -> None:
    table = _table([_golden(kl_p99=0.0)], baseline_stats={"golden": {"kl_p99": 3e-5}})
    assert table.header[-2] == "vs baseline (p99)"
    assert table.rows[0][-2] == "0 (baseline 3e-05)"


def test_decode_tail_is_the_last_depth_row() -> None:
    golden = _golden(
        by_depth=[{"depth": "[0, 512)", "positions": 90, "kl_p50": 0.0, "kl_p99": 0.0, "kl_max": 0.0, "flips": 0}],
        by_phase={
            "prefill": {"positions": 90, "kl_p50": 0.0, "kl_p99": 0.0, "kl_max": 0.0, "flips": 0},
            "decode": {"positions": 10, "kl_p50": 0.01, "kl_p99": 0.56, "kl_max": 0.67, "flips": 2},
        },
    )
    tables = markdown.tables(render_comment([scenarios.ReportSection("x", scenarios.run([golden], baseline=None))]))
    depth = next(t for t in tables if t.header[0].startswith("golden: context depth"))
    assert [r[0] for r in depth.rows] == ["[0, 512)", "decode tail (generated)"]
    assert depth.rows[-1][1:] == ["10", "0.01", "0.56", "0.67", "2"]


def test_a_gap_compared_with_a_threshold_keeps_enough_digits() -> None:
    w = WorstPosition(4, 4096, 46, "", -0.889, -2.33, 1.44, 1.8, margin_ref=1.0437, flip=True)
    (finding,) = [d for d in diagnose([replace(_golden(), worst=(w,))]) if d.code == "systematic_flip"]
    assert "gap 1.04 nats" in finding.text


def test_a_text_less_token_borrows_the_text_of_the_same_id_elsewhere() -> None:
    blank = WorstPosition(4, 4096, 46, "", -0.889, -2.33, 1.44, 1.8, margin_ref=1.04, flip=True)
    named = WorstPosition(1, 300, 46, ".", -1.0, -1.2, 0.2, 0.02, margin_ref=0.5, flip=False)
    unknown = WorstPosition(5, 4097, 99, "", -0.5, -0.9, 0.4, 0.09, margin_ref=0.2, flip=True)
    helper = replace(scenarios.clean("match"), verdict=Verdict.FAIL, worst=(named,))
    golden = replace(_golden(), worst=(blank, unknown))
    text = render_comment([scenarios.ReportSection("x", scenarios.run([helper, golden], baseline=None))])
    worst = next(t for t in markdown.tables(text) if "Token" in t.header)
    tokens = {(r[0], r[1]): r[2] for r in worst.rows}
    assert tokens[("golden", "row 4 · 4,096")] == ". (id 46)"
    assert tokens[("golden", "row 5 · 4,097")] == "id 99 (no text: test took another token)"
    assert "(scored token “.”, gap 1.04 nats)" in text


def test_the_legend_explains_the_jargon() -> None:
    text = render_comment(scenarios.all_pass())
    for word in ("k3:", "δ²/2", "Mean of k3: SGLang's mean", "kl_div", "KL (golden):", "nats", "Top-2 gap (margin):"):
        assert word in text
