"""What issue "the first hour of a new user" asked of the comment: reasons in the check table, each diagnosis once,
noise words from the model's precision, a worst-positions table of at most seven columns without passing
checks' rows, tail tokens not called bugs, no empty header fields, and the run's cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from precisionbot.report import render_comment, render_summary
from precisionbot.report.evidence import Reading, read_position
from precisionbot.report.golden import kl_line
from precisionbot.report.noise_words import noise_scale
from precisionbot.report.rows import cost_text, environment_line
from precisionbot.results import CheckResult, EngineInfo, Verdict, WorstPosition
from precisionbot.results.cost import PRICES, run_cost
from tests.report import markdown, scenarios
from tests.support.demo_run import DemoRun


def _worst_table(text: str) -> markdown.Table:
    (table,) = [t for t in markdown.tables(text) if "Noise or bug" in t.header]
    return table


def test_worst_positions_fit_in_seven_columns_and_keep_noise_or_bug() -> None:
    table = _worst_table(render_comment(scenarios.golden_failure()))
    assert len(table.header) <= 7
    assert table.header[-1] == "Noise or bug"
    assert all(len(row) == len(table.header) for row in table.rows)


def test_passing_checks_leave_the_comments_worst_table_but_not_the_summarys() -> None:
    sections = scenarios.golden_failure()
    passing = {c.name for s in sections for c in s.run.checks if c.verdict is Verdict.PASS}
    comment_checks = {row[0].replace("\\_", "_") for row in _worst_table(render_comment(sections)).rows}
    summary_checks = {row[0].replace("\\_", "_") for row in _worst_table(render_summary(sections)).rows}
    assert passing and not comment_checks & passing
    assert summary_checks & passing


def test_reasons_live_in_the_check_table_not_in_bullets() -> None:
    text = render_comment(scenarios.golden_failure())
    table = markdown.tables(text)[0]
    assert table.header[-1] == "Why"
    golden = next(r for r in table.rows if r[0] == "golden")
    assert "3 confident flips" in golden[-1]
    assert "- **golden**" not in text


@pytest.mark.slow
def test_the_demo_comment_says_each_diagnosis_once(demo_run: DemoRun) -> None:
    text = (demo_run.out / "comment.md").read_text(encoding="utf-8")
    assert text.count("starts at the first generated token") == 1
    assert text.count("cannot cross") == 1 and text.count("cannot do that") == 0
    assert "bf16 noise" not in text  # the builtin engine states no dtype: no precision is named for it
    table = _worst_table(text)
    assert not any(row[0] == "match" for row in table.rows)  # match passed


@pytest.mark.parametrize(
    ("environment", "words"),
    [
        ({"dtype": "bfloat16"}, "bf16 noise (~1e-3 nats)"),
        ({"dtype": "float32"}, "f32 noise (~1e-5 nats)"),
        ({"dtype": "auto", "model_path": "/models/tiny-llama-Q4_0.gguf"}, "Q4_0 noise (~1e-3 nats)"),
        ({"model_path": "/models/qwen3-0.6b-f32.gguf"}, "f32 noise (~1e-5 nats)"),
        ({"model_path": "Qwen/Qwen3-8B"}, "rounding noise (~1e-3 nats at bf16)"),
    ],
)
def test_noise_words_follow_the_models_precision(environment: dict[str, str], words: str) -> None:
    assert noise_scale(environment).words == words


def test_an_f32_run_never_says_bf16() -> None:
    (section,) = scenarios.golden_failure()
    run = replace(section.run, environment={**section.run.environment, "dtype": "float32"})
    text = render_comment([replace(section, run=run)])
    assert "bf16" not in text and "f32 noise (\\~1e-5 nats)" in text


def test_a_tail_token_is_not_called_a_bug() -> None:
    # A quantized model's corpus token at logprob -17: moving it by 2 nats moves the distribution by ~e-17.
    tail = WorstPosition(1, 40, 7, "zyx", -17.2, -15.1, -2.1, 6.0, margin_ref=3.0, flip=False)
    assert read_position(tail).reading is Reading.TAIL
    # The same |Δ| on a token the model expects is a bug.
    likely = replace(tail, lp_ref=-0.5, lp_test=-2.6)
    assert read_position(likely).reading is Reading.BUG


def test_a_passing_checks_large_delta_is_not_called_a_bug() -> None:
    w = WorstPosition(0, 5, 9, "a", -1.0, -1.3, 0.3, 0.05, margin_ref=2.0, flip=False)
    run = scenarios.run([CheckResult("match", Verdict.PASS, stats={"max": 0.05}, worst=(w,))])
    (row,) = _worst_table(render_summary([scenarios.ReportSection("x", run)])).rows
    assert row[-1].startswith("unclear") and "match passed" in row[-1]


def test_no_empty_header_fields() -> None:
    golden = CheckResult("golden", Verdict.PASS, stats={"kl_p99": 1e-6}, extra={"baseline": {"created": "2026-11-30"}})
    run = scenarios.run([golden], baseline=None, model=None, model_path="tiny.gguf")
    run = replace(run, engine=EngineInfo(url="http://127.0.0.1:1", kind="llamacpp", commit=None))
    line = environment_line(run)
    assert "engine llamacpp ·" in line + " ·" and "–" not in line
    assert "baseline from 2026-11-30" in line


def test_the_cost_of_a_run() -> None:
    cost = run_cost(300.0, "p5.48xlarge")
    assert cost.gpu_minutes == pytest.approx(40.0)  # 5 minutes on 8 GPUs
    assert cost.usd == pytest.approx(PRICES["p5.48xlarge"].usd_per_hour / 12)
    assert run_cost(300.0, "p5.48xlarge", usd_per_hour=30.0).usd == pytest.approx(2.5)
    unknown = run_cost(300.0, "x9.huge")
    assert unknown.usd is None and unknown.gpu_minutes is None
    text = cost_text({"wall_s": 300.0, **run_cost(300.0, "g6e.xlarge").to_dict()})
    assert text == "checks took 5.0 min, 5.0 GPU-min on g6e.xlarge ≈ 0.16 USD (on-demand list price 2025-06)"
    assert cost_text({"wall_s": 42.0}) == "checks took 42 s"
    assert "$" not in text  # GitHub renders text between two dollar signs as math


def test_the_comment_states_the_cost() -> None:
    (section,) = scenarios.golden_failure()
    timing = {"wall_s": 600.0, **run_cost(600.0, "g6e.12xlarge").to_dict()}
    run = replace(section.run, extra={**section.run.extra, "timing": timing})
    text = render_comment([replace(section, run=run)])
    assert "checks took 10 min, 40 GPU-min on g6e.12xlarge ≈ 1.75 USD" in text


def test_why_golden_positions_vary_between_runs_is_said() -> None:
    golden = CheckResult(
        "golden",
        Verdict.PASS,
        stats={"kl_p50": 0.0, "kl_p99": 1e-4, "kl_max": 0.1, "decode_divergence": [{"sample": 3, "step": 5}]},
    )
    line = kl_line(golden)
    assert "1 decode row(s) generated another token than the baseline" in line
    assert "the position count moves" in line
