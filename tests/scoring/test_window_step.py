"""The window-step rule (``scoring.window_step``): a step in the logprob error at the sliding window's edge.

Synthetic per-position logprobs with production-like noise (the error scales with ``1 - p``) with and
without a step after generated token W; then the rule inside ``match``, the trusted side's re-check, the
``window_handoff`` diagnosis, and one builtin run at W = 64 with the ``swa-decode-window`` fault.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from precisionbot.checks import run_suite
from precisionbot.config import Config, ThresholdsConfig
from precisionbot.report.diagnosis import diagnose
from precisionbot.report.verify import verify_run
from precisionbot.results import CheckResult, EngineInfo, PositionRecord, RunResult, Verdict
from precisionbot.scoring.k3 import AlignedSample, compare
from precisionbot.scoring.window_step import (
    MIN_SIDE,
    STEP_RATIO,
    WindowStep,
    judge_window_step,
    sample_ratio,
    scaled_error,
    step_fails,
    window_steps,
)

W = 256
CONFIG = Config.default()


def _samples(n: int, step: float, *, generated: int = 2 * W, seed: int = 0) -> list[AlignedSample]:
    """``n`` samples; after generated token W the logit error is ``step`` times larger."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt = int(rng.integers(300, 600))
        p = 1 - rng.beta(0.3, 3.0, generated)  # mostly confident tokens, as greedy text is
        lp_ref = np.log(np.clip(p, 1e-6, 1 - 1e-9))
        scale = np.where(np.arange(generated) >= W, step, 1.0) * 2e-3
        lp_test = lp_ref + rng.standard_t(3, generated) * scale * (1 - p)
        out.append(
            AlignedSample(
                sample=i,
                prompt_tokens=prompt,
                position=np.arange(prompt, prompt + generated),
                token_id=np.zeros(generated, dtype=np.int32),
                lp_ref=lp_ref,
                lp_test=lp_test,
            )
        )
    return out


def _match(samples: Sequence[AlignedSample]) -> tuple[CheckResult, PositionRecord]:
    limits = CONFIG.thresholds_for(None, None, "default").for_check("match")
    out = compare("match", samples, limits)
    assert out.record is not None
    return out.result, out.record


def _steps(samples: Sequence[AlignedSample], window: int = W) -> tuple[WindowStep, ...]:
    _, record = _match(samples)
    prompts = {s.sample: s.prompt_tokens for s in samples}
    return window_steps(record.sample, record.position, record.lp_ref, record.lp_test, prompts, window)


def test_a_clean_run_does_not_step_and_a_doubled_error_does() -> None:
    (clean,) = _steps(_samples(8, 1.0))
    assert clean.edge == "generated" and clean.samples == 8 and not clean.fails
    assert 0.7 < clean.median_ratio < 1.4
    (stepped,) = _steps(_samples(8, 2.5))
    assert stepped.fails and stepped.stepped > 4 and stepped.median_ratio > STEP_RATIO


def test_the_rule_needs_both_sides_and_enough_samples() -> None:
    # The generation stops short of the window + MIN_SIDE: no edge is judged.
    assert _steps(_samples(8, 5.0, generated=W + MIN_SIDE - 1)) == ()
    assert not step_fails(2, 2) and step_fails(3, 2) and not step_fails(4, 2)
    err = np.ones(100)
    assert sample_ratio(err, np.arange(100), 50) == 1.0
    assert sample_ratio(err, np.arange(100), 80) is None  # 20 after the edge < MIN_SIDE


def test_the_scaled_error_discounts_confident_text() -> None:
    # The same logit error on a token of probability 0.999 moves its logprob ~1000x less than at 0.5.
    lp = np.log(np.array([0.5, 0.999]))
    err = scaled_error(lp, lp + np.array([0.5, 0.001]) * 1e-3)
    assert err[0] == pytest.approx(err[1], rel=1e-2)


def test_match_fails_with_a_reason_and_the_statistic_kept() -> None:
    result, record = _match(_samples(8, 3.0))
    assert result.verdict is Verdict.PASS
    judged = judge_window_step(result, record, W)
    assert judged.verdict is Verdict.FAIL
    assert "sliding window's edge (generated token 256)" in judged.reasons[0]
    assert judged.stats["window_step"]["stepped"] > 4
    clean, clean_record = _match(_samples(8, 1.0))
    kept = judge_window_step(clean, clean_record, W)
    assert kept.verdict is Verdict.PASS and kept.stats["window_step"]["samples"] == 8
    failed = dataclasses.replace(result, verdict=Verdict.FAIL, reasons=("max per-token k3 0.6 exceeds 0.5",))
    both = judge_window_step(failed, record, W)
    assert both.reasons[0].startswith("max per-token") and "window's edge" in both.reasons[1]


def test_a_forged_pass_with_a_failing_step_is_caught_and_diagnosed() -> None:
    result, record = _match(_samples(8, 3.0))
    judged = judge_window_step(result, record, W)
    forged = dataclasses.replace(judged, verdict=Verdict.PASS)
    run = RunResult.from_checks(
        [forged],
        signature="x",
        engine=EngineInfo(url="http://127.0.0.1:1", kind="sglang"),
        environment={"sliding_window_size": W},
    )
    verified = verify_run(run, ThresholdsConfig())
    assert verified.checks[0].verdict is Verdict.INCONCLUSIVE
    assert "window_step" in verified.checks[0].reasons[0]
    codes = [d.code for d in diagnose([judged], environment={"sliding_window_size": W})]
    assert "window_handoff" in codes


@pytest.mark.slow
@pytest.mark.parametrize("faults", [(), ("swa-decode-window",)], ids=["clean", "swa-decode-window"])
def test_the_builtin_short_decode_window_fails_match_at_a_small_window(faults: tuple[str, ...]) -> None:
    # Production numerics, W = 64, 4 samples x 128 tokens: 64 compared positions on each side of the edge. The byte
    # vocabulary: there the fault's level stays under kl_div, so only the step rule can catch it (with bpe-4096 the
    # one-key window error is larger per token, mean_k3 4e-3, and kl_div alone fails it too).
    from precisionbot.builtin import EngineOptions, parse_fault
    from precisionbot.engines.builtin import BuiltinEngine

    suite = dataclasses.replace(
        CONFIG.suite("consistency"), checks=("match",), samples=4, max_new_tokens=128, prompt_tokens=(64, 96)
    )
    options = EngineOptions(faults=tuple(parse_fault(f) for f in faults), sliding_window_size=64, vocab="byte")
    engine = BuiltinEngine(options=options, batch_size=4, concurrency=1)
    try:
        run = run_suite(engine, CONFIG, suite)
    finally:
        engine.close()
    (match,) = run.result.checks
    assert match.stats["window_step"]["window"] == 64 and match.stats["window_step"]["samples"] == 4
    assert match.stats["mean_k3"] < CONFIG.thresholds_for(None, None, "default").kl_div  # the level passes
    codes = [d.code for d in diagnose(run.result.checks, environment=run.result.environment)]
    if not faults:
        assert match.verdict is Verdict.PASS, match.reasons
        assert "window_handoff" not in codes
        return
    assert match.verdict is Verdict.FAIL, match.reasons
    assert "sliding window's edge (generated token 64)" in match.reasons[0]
    assert "window_handoff" in codes
