"""The noise-relative rule: each helper judged against main's reruns of the same signature.

A fixed ``kl_div`` either flakes on a noisy build or hides a regression that doubles the noise under it
(SGLang #19581: decode KL 0.00086 → 0.00272, still "a CI flake"). When the newest good baseline of the run's
signature carries helper reruns recorded with the same suite parameters, a helper that is worse than main
beyond main's rerun noise (``metrics.rerun_stats.compare_to_main``, at ``baselines.vs_main_alpha``) fails with a
``regression`` reason even below the absolute thresholds; one within main's noise says so. Absolute
thresholds keep judging as before. No helper baseline: nothing changes, and the result says why.
"""

from __future__ import annotations

import dataclasses

from precisionbot.baselines.helper_reruns import (
    HELPERS_CORRUPT,
    SIZES_DIFFER,
    HelperRuns,
    helper_params,
    sample_vector,
    select_helper_baseline,
)
from precisionbot.baselines.record import RunMeta
from precisionbot.checks.context import CheckContext
from precisionbot.checks.golden import target_from_context
from precisionbot.errors import DataError, EngineError, StoreError
from precisionbot.fmt import plain, times, times_range
from precisionbot.metrics.rerun_stats import MIN_RERUNS, MainComparison, compare_to_main, describe
from precisionbot.results import CONSISTENCY_CHECKS, CheckOutput, CheckResult, RunResult, Verdict

BRIEF = "brief"
"""``vs_main``'s key for the few words shown when a set-up comparison was skipped (:func:`skipped_notes`)."""

REGRESSION = "regression"
"""The first word of the reason a helper fails with when it is worse than main beyond noise."""


MIN_SAMPLES = 3
"""Samples per run the comparison needs in common with main's reruns (``compare_to_main``'s floor)."""


def skipped_up_front(samples: int, reruns: int | None = None) -> str | None:
    """Why the comparison with main's reruns cannot happen at these sizes, said before any rerun is spent;
    None when it can. ``reruns``: how many are about to be recorded (None: not recording)."""
    if reruns is not None and 0 < reruns < MIN_RERUNS:
        return f"the main-noise comparison needs at least {MIN_RERUNS} reruns of main; {reruns} will be recorded"
    if samples < MIN_SAMPLES:
        return (
            f"the main-noise comparison needs at least {MIN_SAMPLES} samples per run and this suite has {samples}: "
            f"it will be skipped (raise --samples or the suite's samples to {MIN_SAMPLES} or more)"
        )
    return None


def judge_vs_main(
    result: CheckResult, main: HelperRuns, baseline: RunMeta, *, alpha: float, min_ratio: float
) -> CheckResult:
    """``result`` with ``extra["vs_main"]`` and, for a regression, FAIL and a ``regression`` reason first."""
    if result.verdict is Verdict.INCONCLUSIVE or result.name not in main.per_sample or not result.samples:
        return result
    samples = main.per_sample[result.name].shape[1]
    comparison = compare_to_main(
        main.per_sample[result.name], sample_vector(result, samples), alpha=alpha, min_ratio=min_ratio
    )
    if comparison is None:
        note = (
            f"not compared with main: fewer than {MIN_RERUNS} of main's reruns or {MIN_SAMPLES} samples in common "
            f"(baseline {baseline.run_id})"
        )
        return dataclasses.replace(result, extra={**result.extra, "vs_main": {"skipped": note}})
    info = {**comparison.to_dict(), "text": describe(comparison), "baseline": baseline.run_id}
    extra = {**result.extra, "vs_main": info}
    if not comparison.regression:
        return dataclasses.replace(result, reasons=(*result.reasons, _within(comparison)), extra=extra)
    # A helper that passed the absolute thresholds says so under the regression (the rule caught it below them).
    kept = (
        result.reasons
        if result.verdict is Verdict.FAIL
        else tuple(f"absolute thresholds pass: {r}" for r in result.reasons[:1])
    )
    return dataclasses.replace(result, verdict=Verdict.FAIL, reasons=(_regression(comparison), *kept), extra=extra)


def _regression(c: MainComparison) -> str:
    return (
        f"{REGRESSION}: per-sample mean k3 is {times(c.ratio)} main's, above the {times(c.min_ratio)} floor "
        f"(95 % CI {times_range(c.ci_low, c.ci_high)}; over {c.samples} samples and {c.reruns} reruns of main); "
        f"{_p(c)}, below the significance {plain(c.alpha)}: worse than main beyond its rerun noise"
    )


def _within(c: MainComparison) -> str:
    ci = f"95 % CI {times_range(c.ci_low, c.ci_high)}"
    if c.p_value < c.alpha:
        # Beyond main's noise, but the rule also needs the ratio floor (``baselines.vs_main_min_ratio``).
        return (
            f"under main's {times(c.min_ratio)} floor: per-sample mean k3 is {times(c.ratio)} main's ({ci}), "
            f"{_p(c)} over {c.reruns} reruns of main: beyond main's noise, but a regression needs "
            f"{times(c.min_ratio)} or more"
        )
    return f"within main's noise: {times(c.ratio)} main ({ci}), {_p(c)} over {c.reruns} reruns of main"


def _p(c: MainComparison) -> str:
    return "p < 0.001" if c.p_value < 0.001 else f"p = {plain(c.p_value)}"


def apply_vs_main(ctx: CheckContext, outputs: list[CheckOutput]) -> list[CheckOutput]:
    """The rule for a whole run. An engine or corpus problem only skips it (noted on each helper); a store that
    cannot be read is an error naming the key, as for golden (a corrupt baseline must not pass silently)."""
    helpers = {id(o) for o in outputs if o.result.name in CONSISTENCY_CHECKS and o.result.samples}
    if not ctx.config.baselines.vs_main or not helpers:
        return outputs
    if ctx.store is None:
        return _note_skipped(outputs, helpers, "no baseline store was given (--store or baselines.store)")
    try:
        target = target_from_context(ctx)
        found, why = select_helper_baseline(
            ctx.store, target.model, target.signature().digest, helper_params(ctx.suite)
        )
    except (EngineError, DataError) as exc:
        found, why = None, f"could not find the run's signature: {exc}"
    except StoreError as exc:  # after the command's preflight: the helpers' own verdicts stand
        found, why = None, f"the baseline store failed: {exc}"
    if found is None:
        text = str(why)
        shown = text.startswith((SIZES_DIFFER, HELPERS_CORRUPT, "the baseline store failed"))
        return _note_skipped(outputs, helpers, text, text.split(":")[0] if shown else None)
    assert isinstance(why, HelperRuns)
    limits = ctx.config.baselines
    return [
        dataclasses.replace(
            o,
            result=judge_vs_main(o.result, why, found, alpha=limits.vs_main_alpha, min_ratio=limits.vs_main_min_ratio),
        )
        if id(o) in helpers
        else o
        for o in outputs
    ]


def _note_skipped(
    outputs: list[CheckOutput], helpers: set[int], why: str, brief: str | None = None
) -> list[CheckOutput]:
    """Each helper's result with ``extra["vs_main"]["skipped"]`` saying why the rule did not apply, and
    ``brief`` (a few words the comment and ``check``'s stderr show) when the comparison was set up and still
    did not happen: main's reruns at other sizes, a store that failed. No helper baseline at all stays quiet."""
    note: dict[str, dict[str, str]] = {"vs_main": {"skipped": why}}
    if brief:
        note["vs_main"][BRIEF] = brief
    return [
        dataclasses.replace(o, result=dataclasses.replace(o.result, extra={**o.result.extra, **note}))
        if id(o) in helpers
        else o
        for o in outputs
    ]


def skipped_notes(result: RunResult) -> list[str]:
    """The distinct reasons a set-up comparison with main's noise was skipped in ``result`` (those with a
    ``brief``), for ``check``'s one stderr line: they are otherwise only in result.json."""
    out: list[str] = []
    for c in result.checks:
        info = c.extra.get("vs_main")
        if isinstance(info, dict) and info.get(BRIEF) and str(info.get("skipped")) not in out:
            out.append(str(info.get("skipped")))
    return out
