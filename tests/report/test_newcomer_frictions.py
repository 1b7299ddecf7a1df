"""What the PR comment, the job summary and the HTML report say, read as a newcomer would (issue 36's frictions
6, 7, 8, 16-21 and 25): each test fails on the wording that confused them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from precisionbot.baselines.helper_reruns import HelperRuns
from precisionbot.baselines.record import RunMeta
from precisionbot.checks.main_noise import judge_vs_main
from precisionbot.fmt import times, times_range
from precisionbot.metrics.rerun_stats import compare_to_main, describe
from precisionbot.report import ReportLinks, ReportSection, render_comment
from precisionbot.report.chart_data import position_lines
from precisionbot.report.diagnosis import GOLDEN_ONLY, diagnose
from precisionbot.report.evidence import read_position
from precisionbot.report.reproduce import check_command, provenance
from precisionbot.report.rows import check_row, headline, short_reason, worst_rows
from precisionbot.report.view import Detail, section_view
from precisionbot.results import (
    CheckResult,
    EngineInfo,
    PositionRecord,
    RunResult,
    SampleSummary,
    Verdict,
    WorstPosition,
)

META = RunMeta("r1", "m", "s", {}, "2026-11-30T00:00:00", "baseline_established", "default")


def _helper(values: np.ndarray, name: str = "match") -> CheckResult:
    samples = tuple(SampleSummary(i, 100, 64, float(v), float(v) * 30, None, False) for i, v in enumerate(values))
    return CheckResult(name, Verdict.PASS, ("mean_k3 6e-05 < kl_div 0.0025; max k3 0.0013",), {}, samples=samples)


def _main(level: float, reruns: int = 3, samples: int = 4) -> HelperRuns:
    return HelperRuns(params={}, token_k3=0.01, per_sample={"match": np.full((reruns, samples), level)}, run_stats={})


# ---- 6 and 16: the main-noise rule is named, a degenerate interval is one figure, one number format ----


def test_a_pass_beyond_mains_noise_names_the_ratio_floor() -> None:
    # Identical reruns of main, a PR 1.41x as noisy: beyond main's noise (p < 0.001) but under the 1.5x floor.
    c = compare_to_main(np.full((3, 4), 6e-5), np.full(4, 6e-5 * 1.41))
    assert c is not None and c.p_value < 0.001 and not c.regression
    assert describe(c) == "1.41× main's mean k3, under the 1.5× floor (p < 0.001)"
    assert "within main's noise" not in describe(c)


def test_identical_reruns_give_one_figure_not_a_degenerate_interval() -> None:
    judged = judge_vs_main(_helper(np.full(4, 6e-5 * 1.41)), _main(6e-5), META, alpha=0.01, min_ratio=1.5)
    reason = judged.reasons[-1]
    assert reason.startswith("under main's 1.5× floor: per-sample mean k3 is 1.41× main's (95 % CI 1.41×)"), reason
    assert "1.41-1.41" not in reason and "1.41–1.41" not in reason
    assert times_range(1.27, 1.35) == "1.27–1.35×" and times_range(1.2701, 1.2702) == "1.27×"


def test_a_huge_ratio_reads_alike_in_the_cell_and_the_reason() -> None:
    judged = judge_vs_main(_helper(np.full(4, 6e-5 * 10775)), _main(6e-5), META, alpha=0.01, min_ratio=1.5)
    row = check_row(judged, None, None)
    assert judged.verdict is Verdict.FAIL
    assert times(10775.0) == "10,800×"
    assert "10,800×" in row.vs_main and "10,800×" in judged.reasons[0]
    assert "1.08e+04" not in judged.reasons[0] and "10775" not in row.vs_main


# ---- 17: the Why cell is the first reason, measured against its limit ----


def test_the_why_cell_is_the_first_reason_cut_to_its_measure() -> None:
    reasons = (
        "mean_k3 0.333 is not below kl_div 0.0025 (SGLang's threshold)",
        "57.3 % of positions have k3 over 0.01 (at most 2 % allowed)",
        "max per-token k3 8.07 exceeds 0.5",
    )
    c = CheckResult("prefill_cache_hit", Verdict.FAIL, reasons, {"positions": 10})
    row = check_row(c, None, None)
    assert row.why == "mean\\_k3 0.333 is not below kl\\_div 0.0025 (+2 more below)"
    assert len(row.reasons) == 3
    assert short_reason("regression: per-sample mean k3 is 3.51× main's, above the 1.5× floor (95 % CI 3.51×)") == (
        "regression: per-sample mean k3 is 3.51× main's, above the 1.5× floor"
    )
    # An inconclusive check keeps its whole reason: the fix is the point.
    why = "no baseline store was given: pass --store URI or set baselines.store in the config"
    assert "--store URI" in check_row(CheckResult("golden", Verdict.INCONCLUSIVE, (why,), {}), None, None).why


# ---- 18: a check with flips is not called clean ----


def _run(*checks: CheckResult) -> RunResult:
    return RunResult(
        verdict=Verdict.combine(c.verdict for c in checks),
        signature="s",
        engine=EngineInfo(url="http://127.0.0.1:1", kind="sglang", commit="abc1234def"),
        checks=checks,
    )


def test_the_headline_calls_a_passing_check_with_flips_within_thresholds() -> None:
    tie = WorstPosition(0, 5, 1, "a", -0.7, -0.69, -0.01, 5e-5, margin_ref=0.05, flip=True)
    match = CheckResult("match", Verdict.PASS, ("ok",), {"flips": 2}, worst=(tie, replace(tie, position=6)))
    cache = CheckResult("prefill_cache_hit", Verdict.FAIL, ("bad",), {"flips": 9})
    decode = CheckResult("decode_cache_hit", Verdict.PASS, ("ok",), {"flips": 0})
    text = headline(_run(match, cache, decode))
    assert "match clean" not in text and "match within thresholds (2 flips at near-ties)" in text
    assert "decode\\_cache\\_hit clean" in text


# ---- 19: each flip threshold is named where it appears ----


def test_each_flip_threshold_is_named() -> None:
    systematic = WorstPosition(0, 5, 1, "a", -0.5, -2.0, 1.5, 1.0, margin_ref=1.6, flip=True)
    tie = replace(systematic, delta=0.05, k3=1e-3, margin_ref=0.1)
    assert read_position(systematic).why == "flip at gap 1.6 > 0.4, the systematic-flip gap"
    assert read_position(tie).why == "flip at gap 0.1 < 0.3, a near-tie"
    section = ReportSection(label="x", run=_run(CheckResult("golden", Verdict.FAIL, ("bad",), {})))
    legend = section_view(section, Detail()).legend
    assert "0.4 nats (the systematic-flip gap)" in legend and "0.3 nats is a near-tie" in legend
    assert "confident-flip margin" in legend


# ---- 7, 8 and 20: golden alone, golden's measure, golden's rows ----


def _golden(verdict: Verdict = Verdict.FAIL) -> CheckResult:
    tail = WorstPosition(3, 111, 480, " function", -16.87, -16.89, 0.02, 2e-4, margin_ref=0.36, flip=False)
    stats = {
        "positions": 1147,
        "kl_limit_nats": 0.01,
        "kl_p99": 0.0066,
        "by_depth": [
            {"depth": "[0, 128)", "positions": 508, "kl_p99": 0.0005},
            {"depth": "[128, 256)", "positions": 512, "kl_p99": 0.0072},
        ],
        "by_phase": {"decode": {"positions": 127, "kl_p99": 0.001}},
    }
    reason = "KL p99.9 0.0106 is above the per-position limit 0.01 nats: largest KL 0.0147 at golden row 3 (prefill)"
    return CheckResult("golden", verdict, (reason,), stats, worst=(tail,))


def _golden_record() -> PositionRecord:
    ids = np.arange(20, dtype=np.int32)[None, :]
    lp_ref = np.log(np.full((1, 20), 0.04, dtype=np.float32))
    lp_test = lp_ref.copy()
    lp_test[0, 0], lp_test[0, 1] = np.log(0.14), np.log(0.0001)  # the mass moved among the top-k
    return PositionRecord(
        sample=np.array([3]),
        position=np.array([111]),
        token_id=np.array([480]),
        lp_ref=np.array([-16.87]),
        lp_test=np.array([-16.89]),
        top_ids_ref=ids,
        top_lp_ref=lp_ref,
        top_ids_test=ids,
        top_lp_test=lp_test,
    )


def test_a_golden_only_failure_gets_a_diagnosis_naming_a_shared_op_and_where_kl_concentrates() -> None:
    helpers = [CheckResult(n, Verdict.PASS, ("ok",), {}) for n in ("match", "prefill_cache_hit", "decode_cache_hit")]
    found = diagnose([*helpers, _golden()])
    golden_only = [d for d in found if d.code == GOLDEN_ONLY]
    assert len(golden_only) == 1, found
    text = golden_only[0].text
    assert "prefill and decode agree with each other" in text and "shared op" in text
    assert "not a cache or state path" in text and "context depth [128, 256)" in text
    # Not when a helper failed too: that one localises.
    failing = [replace(helpers[0], verdict=Verdict.FAIL), *helpers[1:], _golden()]
    assert not [d for d in diagnose(failing) if d.code == GOLDEN_ONLY]


def test_goldens_worst_row_reads_the_kl_the_verdict_names() -> None:
    golden = _golden()
    (row,), _ = worst_rows([golden], 8, {}, records={"golden": _golden_record()})
    # The verdict's "largest KL ... at golden row 3, position 111" and the row agree: the row shows that KL.
    assert row.where == "row 3 · 111" and "KL " in row.delta_k3
    assert "weighs ≈ 0 in KL" not in row.reading and row.reading.startswith("bug (KL ")
    assert row.topk_ref and row.topk_test
    # Without the arrays the row says which measure its tail reading is about.
    (plain,), _ = worst_rows([golden], 8, {})
    assert "the scored token's" in plain.reading


# ---- 21: where the rest is, locally and in Actions ----


def _many_worst() -> RunResult:
    worst = tuple(WorstPosition(0, i, 1, "a", -1.0, -2.0, 1.0, 0.7, margin_ref=0.1, flip=False) for i in range(12))
    return _run(CheckResult("match", Verdict.FAIL, ("bad",), {"positions": 12}, worst=worst))


def test_a_local_comment_points_at_the_result_directory_not_the_job_summary() -> None:
    section = ReportSection(label="x", run=_many_worst(), directory="results/pr")
    local = render_comment([section])
    assert "4 more positions in results/pr/result.json." in local and "job summary" not in local
    actions = render_comment([section], links=ReportLinks(run_url="https://github.com/o/r/actions/runs/1"))
    assert "4 more positions in the job summary and the artifacts." in actions


# ---- 25: the HTML page says where it came from ----


def test_provenance_names_commit_run_and_a_command_to_reproduce() -> None:
    run = replace(_run(_golden()), environment={"suite": "pr", "samples": 8, "max_new_tokens": 64, "model": "qwen3-8b"})
    lines = dict(provenance(ReportSection(label="x", run=run, directory="out"), None))
    assert lines["engine commit"] == "abc1234def" and lines["signature"] == "s"
    command = check_command(ReportSection(label="x", run=run))
    assert command.startswith(
        "precisionbot check --engine-url http://127.0.0.1:1 --engine-kind sglang --model qwen3-8b --suite pr "
        "--checks golden --samples 8 --max-new-tokens 64 --baseline-store STORE"
    )
    assert "not recorded in result.json" in command


def test_a_passing_check_gets_no_onset_marker() -> None:
    record = PositionRecord(
        sample=np.zeros(6, dtype=np.int32),
        position=np.arange(6, dtype=np.int32),
        token_id=np.ones(6, dtype=np.int32),
        lp_ref=np.full(6, -1.0),
        lp_test=np.array([-1.0, -1.0, -1.3, -1.3, -1.3, -1.3]),
    )
    check = CheckResult("match", Verdict.FAIL, ("bad",), {"positions": 6})
    failing = position_lines(check, record, {})
    passing = position_lines(replace(check, verdict=Verdict.PASS), record, {})
    assert failing is not None and failing.lines[0].onset == 2
    assert passing is not None and all(line.onset is None for line in passing.lines)


def test_the_html_pages_reason_list_is_plain_text() -> None:
    from precisionbot.report.html import render_html

    reasons = ("mean_k3 0.333 is not below kl_div 0.0025", "max per-token k3 8.07 > 0.5")
    run = _run(CheckResult("prefill_cache_hit", Verdict.FAIL, reasons, {"positions": 10}))
    page = render_html([ReportSection(label="x", run=run)])
    assert "Every reason of prefill_cache_hit" in page and "k3 8.07 &gt; 0.5" in page
    assert "prefill\\_cache" not in page and "&amp;gt;" not in page
