"""The pure part of the consistency helpers: k3, SGLang's mean, tails and the verdict rules."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from precisionbot.config import Config
from precisionbot.results import Verdict
from precisionbot.scoring.k3 import AlignedSample, compare, judge_k3

DEFAULT = Config.default().thresholds_for(None, None, "default")
DETERMINISTIC = Config.default().thresholds_for(None, None, "deterministic")


def _sample(i: int, ref: list[float], test: list[float], prompt: int = 10) -> AlignedSample:
    n = len(ref)
    return AlignedSample(
        sample=i,
        prompt_tokens=prompt,
        position=np.arange(prompt, prompt + n),
        token_id=np.arange(n) + 100,
        lp_ref=np.asarray(ref, dtype=np.float64),
        lp_test=np.asarray(test, dtype=np.float64),
        token_text=tuple(f"tok{j}" for j in range(n)),
    )


def sglang_reference_mean(replay: list[list[float]], generation: list[list[float]]) -> float:
    """SGLang's kl_test_utils formula, written independently: logr = replay − generation,
    k3 = exp(logr) − 1 − logr, mean per sequence, unweighted mean over sequences."""
    per_seq = []
    for r, g in zip(replay, generation, strict=True):
        ks = [math.exp(a - b) - 1 - (a - b) for a, b in zip(r, g, strict=True)]
        per_seq.append(sum(ks) / len(ks))
    return sum(per_seq) / len(per_seq)


def test_mean_k3_parity_with_sglang_formula() -> None:
    rng = np.random.default_rng(7)
    replay, gen, samples = [], [], []
    for i in range(5):
        n = int(rng.integers(3, 40))  # unequal lengths: the mean is per sequence first
        g = -rng.exponential(1.0, n)
        r = g + rng.normal(0, 0.2, n)
        replay.append(r.tolist())
        gen.append(g.tolist())
        samples.append(_sample(i, r.tolist(), g.tolist()))
    out = compare("match", samples, DEFAULT)
    assert out.result.stats["mean_k3"] == pytest.approx(sglang_reference_mean(replay, gen), rel=1e-12)
    assert out.record is not None
    assert np.allclose(out.record.delta, np.concatenate([np.subtract(r, g) for r, g in zip(replay, gen, strict=True)]))


def test_identical_paths_pass_even_deterministic() -> None:
    s = [_sample(i, [-0.5, -1.0, -2.0], [-0.5, -1.0, -2.0]) for i in range(3)]
    for limits in (DEFAULT, DETERMINISTIC):
        out = compare("match", s, limits)
        assert out.result.verdict is Verdict.PASS
        assert out.result.stats["mean_k3"] == 0.0
        assert out.result.worst == ()


def test_strict_threshold_and_tail_rules() -> None:
    stats = {"nonfinite": 0, "mean_k3": 0.0025, "frac_over": {"1e-2": 0.0}, "max": 0.01}
    verdict, reasons = judge_k3(stats, DEFAULT)
    assert verdict is Verdict.FAIL  # SGLang passes iff mean < kl_div: equality fails
    assert reasons == ("mean_k3 0.0025 is not below kl_div 0.0025 (SGLang's threshold)",)
    verdict, reasons = judge_k3({**stats, "mean_k3": 1e-4, "frac_over": {"1e-2": 0.05}}, DEFAULT)
    assert verdict is Verdict.FAIL and "5 % of positions have k3 over 0.01" in reasons[0]
    verdict, reasons = judge_k3({**stats, "mean_k3": 1e-4, "max": 0.9}, DEFAULT)
    assert verdict is Verdict.FAIL and reasons == ("max per-token k3 0.9 exceeds 0.5",)
    verdict, reasons = judge_k3({**stats, "mean_k3": 1e-4, "nonfinite": 2}, DEFAULT)
    assert verdict is Verdict.FAIL and "non-finite" in reasons[0]
    assert judge_k3({**stats, "mean_k3": 1e-4}, DEFAULT)[0] is Verdict.PASS


def test_a_per_phase_threshold_is_named_by_the_key_that_set_it() -> None:
    """kl_div_prefill set: the reason names kl_div_prefill (the key a user edits), not kl_div."""
    stats = {"nonfinite": 0, "mean_k3": 0.5, "frac_over": {"1e-2": 0.0}, "max": 0.01}
    limits = dataclasses.replace(DEFAULT, kl_div_prefill=1e-15)
    _, reasons = judge_k3(stats, limits.for_check("prefill_cache_hit"))
    assert reasons == ("mean_k3 0.5 is not below kl_div_prefill 1.00e-15 (SGLang's threshold)",)
    _, reasons = judge_k3(stats, limits.for_check("decode_cache_hit"))  # kl_div_decode unset: kl_div applies
    assert reasons == ("mean_k3 0.5 is not below kl_div 0.0025 (SGLang's threshold)",)
    assert limits.for_check("prefill_cache_hit") == dataclasses.replace(limits, kl_div=1e-15)


def test_one_outlier_token_fails_on_max_not_on_mean() -> None:
    # 4000 clean positions and one 2-nat outlier: the mean passes SGLang's rule, the tail rule catches it.
    ref = [-1.0] * 4000
    test = [-1.0] * 3999 + [-3.0]
    out = compare("match", [_sample(0, ref, test)], DEFAULT)
    assert out.result.stats["mean_k3"] < DEFAULT.kl_div
    assert out.result.verdict is Verdict.FAIL
    assert any("max per-token k3" in r for r in out.result.reasons)
    worst = out.result.worst[0]
    assert (worst.position, worst.token_text, worst.delta) == (10 + 3999, "tok3999", pytest.approx(2.0))
    assert worst.k3 == pytest.approx(math.exp(2) - 3)


def test_tiny_noise_passes_default_fails_deterministic() -> None:
    s = [_sample(i, [-1.0, -2.0, -0.3], [-1.0 + 1e-3, -2.0, -0.3 - 2e-3]) for i in range(4)]
    assert compare("match", s, DEFAULT).result.verdict is Verdict.PASS
    det = compare("match", s, DETERMINISTIC).result
    assert det.verdict is Verdict.FAIL
    assert det.extra["thresholds"]["kl_div"] == 1e-9


def test_sample_summaries_and_onsets() -> None:
    clean = _sample(0, [-1.0] * 6, [-1.0] * 6, prompt=20)
    from_first = _sample(1, [-1.0] * 6, [-1.5] * 6, prompt=30)
    mid = _sample(2, [-1.0] * 6, [-1.0] * 3 + [-1.5] * 3, prompt=40)
    out = compare("prefill_cache_hit", [clean, from_first, mid], DEFAULT).result
    by = {s.sample: s for s in out.samples}
    assert by[0].onset is None and not by[0].contiguous_from_first
    assert by[1].onset == 0 and by[1].contiguous_from_first and by[1].prompt_tokens == 30
    assert by[2].onset == 3 and not by[2].contiguous_from_first
    assert by[1].max_k3 == pytest.approx(math.exp(0.5) - 1.5)


def test_nothing_compared_is_inconclusive_never_pass() -> None:
    out = compare("match", [], DEFAULT)
    assert out.result.verdict is Verdict.INCONCLUSIVE
    assert out.record is None


def test_token_threshold_outside_default_set_gets_its_own_fraction() -> None:
    limits = dataclasses.replace(DEFAULT, token_k3=5e-3)
    out = compare("match", [_sample(0, [-1.0, -1.0], [-1.0, -1.2])], limits).result
    assert out.stats["frac_over"]["5e-3"] == 0.5


def test_cache_helper_less_exact_than_match_fails() -> None:
    from precisionbot.scoring.k3 import judge_against_match

    match = compare("match", [_sample(i, [-1.0] * 4, [-1.0] * 4) for i in range(3)], DEFAULT).result
    noisy_match = compare("match", [_sample(i, [-1.0] * 4, [-1.01] * 4) for i in range(3)], DEFAULT).result
    cache = compare("decode_cache_hit", [_sample(i, [-1.0] * 4, [-1.01] * 4) for i in range(3)], DEFAULT).result
    assert cache.verdict is Verdict.PASS  # tiny in absolute terms
    judged = judge_against_match(cache, match, DEFAULT)
    assert judged.verdict is Verdict.FAIL
    assert "above 4x match's 0 " in judged.reasons[0]
    # The same noise on both paths is not a cache bug.
    assert judge_against_match(cache, noisy_match, DEFAULT).verdict is Verdict.PASS


def test_a_no_cache_control_sets_the_noise_when_match_is_quieter() -> None:
    from precisionbot.scoring.k3 import judge_against_match, noise_reference

    quiet = compare("match", [_sample(i, [-1.0] * 4, [-1.0] * 4) for i in range(3)], DEFAULT).result
    noisy = [_sample(i, [-1.0] * 4, [-1.01] * 4) for i in range(3)]
    cc = compare("cache_consistency", noisy, DEFAULT).result
    assert judge_against_match(cc, quiet, DEFAULT).verdict is Verdict.FAIL  # match alone: a false alarm
    # The same requests without the cache were as noisy: restarting costs that much, the cache nothing.
    controlled = dataclasses.replace(cc, stats={**cc.stats, "nocache_mean_k3": cc.stats["mean_k3"]})
    assert noise_reference(controlled, quiet) == (cc.stats["mean_k3"], "the no-cache control's")
    assert judge_against_match(controlled, quiet, DEFAULT).verdict is Verdict.PASS
    # ... and no match at all still judges against the control: 5x its noise fails.
    quieter = dataclasses.replace(cc, stats={**cc.stats, "nocache_mean_k3": cc.stats["mean_k3"] / 5})
    judged = judge_against_match(quieter, None, DEFAULT)
    assert judged.verdict is Verdict.FAIL
    assert "above 4x the no-cache control's" in judged.reasons[0]


def test_restart_noise_raises_the_mean_rule_only_above_kl_div() -> None:
    from precisionbot.config import DEFAULT_PROFILES
    from precisionbot.scoring.k3 import restart_noise_limits

    limits = DEFAULT_PROFILES["default"]
    assert restart_noise_limits(limits, None) is limits
    assert restart_noise_limits(limits, 1e-4) is limits  # 4e-4 < kl_div 0.0025: SGLang's threshold stands
    raised = restart_noise_limits(limits, 3.26e-3)
    assert raised.kl_div == pytest.approx(4 * 3.26e-3) and raised.max_token_k3 == limits.max_token_k3
    assert raised.kl_div_key == "4x the same restarts without the cache (0.00326)"
