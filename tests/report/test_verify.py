"""Forged verdicts (issue #17 item 1): the trusted side re-derives every verdict from the stats and its own
thresholds; a claimed PASS that does not hold is INCONCLUSIVE naming the field, never PASS."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from precisionbot.config import DEFAULT_PROFILES, ThresholdsConfig
from precisionbot.report import render_comment
from precisionbot.report.load import load_sections
from precisionbot.report.verify import verify_check, verify_run
from precisionbot.results import CacheStats, CheckResult, EngineInfo, RunResult, Verdict
from precisionbot.results.directory import write_result

TRUSTED = ThresholdsConfig()
LIMITS = DEFAULT_PROFILES["default"]


def stats(mean_k3: float = 1e-6, mx: float = 2e-5, positions: int = 100, **extra: Any) -> dict[str, Any]:
    return {
        "positions": positions,
        "samples": 4,
        "nonfinite": 0,
        "mean_k3": mean_k3,
        "p50": 0.0,
        "p99": mx / 2,
        "p999": mx,
        "max": mx,
        "frac_over": {"1e-4": 0.0, "1e-3": 0.0, "1e-2": 0.0},
        "median_sample_mean_k3": mean_k3,
        **extra,
    }


def check(name: str = "match", verdict: Verdict = Verdict.PASS, **kw: Any) -> CheckResult:
    return CheckResult(name=name, verdict=verdict, reasons=("claimed",), **kw)


def golden(**extra: Any) -> CheckResult:
    s = stats(
        positions=500,
        kl_p50=1e-6,
        kl_p99=1e-4,
        kl_max=1e-3,
        flips=0,
        confident_flips=0,
        flips_by_margin=[],
        nll_increase=0.0,
        nll_increase_se=1e-5,
    )
    s.update(extra)
    return check("golden", stats=s)


def run_of(*checks: CheckResult, verdict: Verdict = Verdict.PASS) -> RunResult:
    return RunResult(verdict=verdict, signature="s", engine=EngineInfo("http://e", "sglang"), checks=checks)


def test_an_honest_pass_stays_a_pass() -> None:
    cache = CacheStats(kept=4, total=4)
    run = run_of(check(stats=stats()), check("prefill_cache_hit", stats=stats(), cache=cache), golden())
    verified = verify_run(run, TRUSTED)
    assert verified.verdict is Verdict.PASS and all(c.verdict is Verdict.PASS for c in verified.checks)


def test_the_run_verdict_is_derived_never_read() -> None:
    run = run_of(check(stats=stats()), check("golden", Verdict.FAIL, stats=stats()), verdict=Verdict.PASS)
    assert verify_run(run, TRUSTED).verdict is Verdict.FAIL


def test_zero_checks_is_never_a_pass() -> None:
    verified = verify_run(run_of(verdict=Verdict.PASS), TRUSTED)
    assert verified.verdict is Verdict.INCONCLUSIVE and "no checks" in verified.checks[0].reasons[0]


@pytest.mark.parametrize(
    ("forged", "field"),
    [
        (check(stats=stats(mean_k3=0.144)), "mean_k3 0.144 is not below kl_div 0.0025"),
        (check(stats=stats(mx=3.0)), "max per-token k3 3 exceeds 0.5"),
        (check(stats=stats(positions=0)), "stats.positions is 0"),
        (check(stats=stats(mean_k3="0")), "stats.mean_k3 is '0', not a number"),  # type: ignore[arg-type]
        (check(stats={**stats(), "frac_over": {"1e-2": 0.5}}), "50 % of positions have k3 over 0.01"),
        (check(stats={**stats(), "frac_over": {}}), "stats.frac_over has no entry '1e-2'"),
        (check(stats=stats(nonfinite=3)), "3 position(s) have a non-finite k3"),
        (check("decode_cache_hit", stats=stats(positions=0), cache=CacheStats(0, 4)), "stats.positions is 0"),
        (check("decode_cache_hit", stats=stats(), cache=CacheStats(0, 4)), "0 of 4 prompts hit the cache"),
        (check("prefill_cache_hit", stats=stats()), "cache (kept/total) is missing"),
        (golden(kl_max=0.5), "KL p99.9 0.5 is above the per-position limit 0.01"),  # an old result: no p99.9
        (golden(kl_max=0.5, kl_p999=0.02), "KL p99.9 0.02 is above the per-position limit 0.01"),
        (golden(confident_flips=2), "stats.confident_flips is 2"),
        (golden(kl_p99=float("nan")), "stats.kl_p99 is nan, not a finite number"),
        (golden(nll_increase=0.05, nll_increase_se=1e-4), "systematic drift"),
        (check("cache_consistency", stats=stats(positions=0)), "stats.positions is 0"),
        (check("cache_consistency", stats=stats(mean_k3=0.01)), "is not below kl_div"),
        (check("layers", stats={"positions": 0, "layers_compared": 0}), "stats.layers_compared is 0"),
        (check("batch_invariance", stats={**stats(), "configurations": []}), "stats.configurations is empty"),
    ],
)
def test_a_forged_pass_is_inconclusive_naming_the_field(forged: CheckResult, field: str) -> None:
    verified = verify_run(run_of(forged), TRUSTED)
    assert verified.verdict is Verdict.INCONCLUSIVE
    reason = verified.checks[0].reasons[0]
    assert reason.startswith("checks[0] says pass, but ") and field in reason


def test_a_cache_helper_less_exact_than_match_is_caught() -> None:
    match = check(stats=stats(mean_k3=1e-6))
    cache = check("prefill_cache_hit", stats=stats(mean_k3=1e-4), cache=CacheStats(4, 4))
    verified = verify_run(run_of(match, cache), TRUSTED)
    assert verified.checks[1].verdict is Verdict.INCONCLUSIVE
    assert "stats.median_sample_mean_k3" in verified.checks[1].reasons[0]


def test_cache_consistency_is_held_to_its_own_no_cache_control_too() -> None:
    match = check(stats=stats(mean_k3=1e-6))
    # Restarts are noisier than match without any cache: the control measured it, so 2e-5 is honest ...
    honest = check("cache_consistency", stats=stats(mean_k3=2e-5, nocache_mean_k3=2e-5))
    assert verify_run(run_of(match, honest), TRUSTED).checks[1].verdict is Verdict.PASS
    # ... but a claimed PASS far above both is not, and neither is one that drops the control.
    for forged in (stats(mean_k3=2e-4, nocache_mean_k3=2e-5), stats(mean_k3=2e-5)):
        verified = verify_run(run_of(match, check("cache_consistency", stats=forged)), TRUSTED)
        assert verified.checks[1].verdict is Verdict.INCONCLUSIVE
        assert "stats.mean_k3" in verified.checks[1].reasons[0]


def test_cache_consistency_restarts_at_the_threshold_hold_its_mean_to_the_control() -> None:
    """A bf16 hybrid model's restarts alone cost about kl_div (3.3e-3 on a clean vLLM server, the cache path
    the same): the mean rule reads 4x the control there, on both sides (scoring.k3.restart_noise_limits)."""
    match = check(stats=stats(mean_k3=1e-3))
    honest = check("cache_consistency", stats=stats(mean_k3=3.26e-3, nocache_mean_k3=3.26e-3))
    assert verify_run(run_of(match, honest), TRUSTED).checks[1].verdict is Verdict.PASS
    # 5x the control is more than restarting costs: a PASS claimed there does not hold.
    forged = check("cache_consistency", stats=stats(mean_k3=1.6e-2, nocache_mean_k3=3.26e-3))
    verified = verify_run(run_of(match, forged), TRUSTED).checks[1]
    assert verified.verdict is Verdict.INCONCLUSIVE and "4x the same restarts without the cache" in verified.reasons[0]


def test_claimed_fail_and_inconclusive_are_kept() -> None:
    for verdict in (Verdict.FAIL, Verdict.INCONCLUSIVE):
        c = check(verdict=verdict, stats=stats())
        assert verify_check(c, LIMITS) == c


def test_the_trusted_thresholds_decide_not_the_producers() -> None:
    honest = check(stats=stats(mean_k3=1e-6, mx=1e-5))
    strict = ThresholdsConfig(profile="deterministic")
    assert verify_run(run_of(honest), strict).verdict is Verdict.INCONCLUSIVE
    loose = replace(LIMITS, kl_div=0.5)
    assert verify_check(check(stats=stats(mean_k3=0.144)), loose).verdict is Verdict.PASS


def forged_dir(tmp_path: Path) -> Path:
    run = run_of(check(stats=stats(mean_k3=0.144)), verdict=Verdict.PASS)
    return write_result(tmp_path / "forged", run).parent


def test_report_renders_a_forged_pass_as_inconclusive(tmp_path: Path) -> None:
    sections = load_sections([forged_dir(tmp_path)])
    body = render_comment(sections)
    assert "✅ PASS" not in body and "INCONCLUSIVE" in body and "stats: mean\\_k3 0.144" in body


def test_stats_must_agree_with_the_checks_own_arrays(tmp_path: Path) -> None:
    from precisionbot.results import PositionRecord

    record = PositionRecord.from_lists([0, 0, 1, 1], [5, 6, 5, 6], [1, 2, 3, 4], [-1.0] * 4, [-1.0, -1.0, -1.0, -2.5])
    # The arrays say sample 1 diverged (k3 of a 1.5-nat difference is 2.7); the stats claim a clean pass.
    forged = check(stats=stats(positions=4, mean_k3=1e-6, mx=1e-5))
    write_result(tmp_path / "d", run_of(forged), {"match": record})
    (section,) = load_sections([tmp_path / "d"])
    assert section.run.verdict is Verdict.INCONCLUSIVE
    assert "stats.mean_k3 is 1e-06 but match.npz gives" in section.run.checks[0].reasons[0]
    zeros = PositionRecord.from_lists([0] * 4, range(4), [1] * 4, [-1.0] * 4, [-1.0] * 4)
    assert verify_check(forged, LIMITS, record=zeros).verdict is Verdict.INCONCLUSIVE  # 1e-06 claimed, 0 measured
    honest = check(stats=stats(positions=4, mean_k3=0.0, mx=0.0))
    assert verify_check(honest, LIMITS, record=zeros).verdict is Verdict.PASS


def test_per_phase_thresholds_are_the_ones_the_helper_used() -> None:
    """kl_div_decode (SGLang's kl_div_thres_decode) judges decode_cache_hit; the others keep kl_div."""
    default = TRUSTED.profiles["default"]
    trusted = ThresholdsConfig(
        profiles={**TRUSTED.profiles, "default": dataclasses.replace(default, kl_div_decode=1e-5)}
    )
    decode = check("decode_cache_hit", stats=stats(mean_k3=1e-4), cache=CacheStats(4, 4))
    prefill = check("prefill_cache_hit", stats=stats(mean_k3=1e-4), cache=CacheStats(4, 4))
    verified = verify_run(run_of(prefill, decode), trusted)
    assert [c.verdict for c in verified.checks] == [Verdict.PASS, Verdict.INCONCLUSIVE]
    assert "not below kl_div_decode 1.00e-05" in verified.checks[1].reasons[0]  # the key that set it
    assert verify_run(run_of(prefill, decode), TRUSTED).verdict is Verdict.PASS


def spec(**extra: Any) -> CheckResult:
    """A spec_decode PASS judged against main's three stored reruns of 1.8 tokens per verify (floor 1.71)."""
    s = stats(greedy_violations=0, unexplained_divergences=0, sampled_p_value=0.4, accept_length=1.75)
    s.update(main_accept_length=1.8, main_accept_reruns=[1.8, 1.8, 1.8], main_accept_stored=True)
    return check("spec_decode", stats={**s, **extra})


def test_spec_decode_acceptance_is_rederived_from_mains_stored_reruns() -> None:
    assert verify_run(run_of(spec()), TRUSTED).verdict is Verdict.PASS
    # Main's reruns, not the claimed floor or mean, decide: a PASS below the floor they give does not hold.
    for forged, field in [
        (spec(accept_length=1.70, main_accept_floor=1.5), "accept_length is below the floor main_accept_reruns"),
        (spec(accept_length=1.70, main_accept_length=1.6), "accept_length is below the floor main_accept_reruns"),
        (spec(main_accept_reruns=[1.8, "x"]), "stats.main_accept_reruns.1 is 'x', not a number"),
        (spec(main_accept_reruns=[]), "stats.main_accept_reruns is not a list of main's figures"),
        (spec(main_accept_reruns=None, accept_length=1.70), "accept_length fell more than the tolerance"),
    ]:
        verified = verify_run(run_of(forged), TRUSTED)
        assert verified.verdict is Verdict.INCONCLUSIVE and field in verified.checks[0].reasons[0], forged.stats
    # A noisy main's spread allows more than 5 %: a PASS inside it holds.
    assert verify_run(run_of(spec(accept_length=1.5, main_accept_reruns=[1.5, 1.9, 2.3])), TRUSTED).verdict is (
        Verdict.PASS
    )
