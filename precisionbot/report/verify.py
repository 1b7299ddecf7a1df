"""Re-deriving a result's verdicts on the trusted side (``report``, ``github comment``). Pure: no I/O.

In the example workflow ``result.json`` is an artifact of the job that ran the PR's code, so every verdict
in it is a claim. :func:`verify_run` keeps what the claims cannot forge:

* the run verdict is derived from the checks (``Verdict.combine``), never read; zero checks is INCONCLUSIVE;
* a check that claims PASS is judged again from its own ``stats`` (and ``cache``) with the thresholds the
  trusted side loaded (``report --config`` / ``github comment --config``, the base branch's config in the
  example workflow), by the same rules the check used: ``scoring.k3.judge_k3`` and ``judge_against_match``
  for the consistency helpers (and ``scoring.window_step.step_fails`` on ``stats.window_step``, when kept),
  ``scoring.golden_judge.stat_fails`` for ``golden``. A PASS those rules reject, a
  field that is missing or not a finite number, zero compared positions, too few cache hits, or a check
  with no rule here becomes INCONCLUSIVE with a reason naming the field;
* a claimed FAIL or INCONCLUSIVE is kept as it is: the PR side can always make its own run fail, so a
  worse verdict needs no proof.

When a consistency helper's ``<check>.npz`` is there, its stats must also be what the arrays give
(positions, SGLang's mean, max). What this cannot do: prove that the numbers came from the engine. Code
that ran on the GPU runner can write any numbers (and a matching ``.npz``); docs/github.md says so. The
noise band of ``golden`` is read from the result too (the trusted side has no baseline store access in the
example workflow).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from precisionbot import metrics
from precisionbot.config import ThresholdsConfig, ThresholdSet
from precisionbot.metrics.flips import NoiseBand
from precisionbot.metrics.routing import BASELINE_FLOOR, PATH_FLOOR
from precisionbot.results import CheckResult, PositionRecord, RunResult, Verdict
from precisionbot.results.run import CACHE_HIT_HELPERS, JUDGED_AGAINST_MATCH, K3_CHECKS
from precisionbot.scoring.golden_judge import stat_fails
from precisionbot.scoring.k3 import (
    MATCH_STAT,
    NOCACHE_STAT,
    enough_cache_hits,
    judge_against_match,
    judge_k3,
    restart_noise_limits,
)
from precisionbot.scoring.spec_rules import SAMPLED_ALPHA, acceptance_fell
from precisionbot.scoring.window_step import step_fails


class _Contradiction(Exception):
    """A field of a claimed PASS that does not hold; ``str()`` names the field."""


def _number(stats: Mapping[str, Any], key: str, *, where: str = "stats") -> float:
    value = stats.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Contradiction(f"{where}.{key} is {_shown(value)}, not a number")
    try:
        out = float(value)
    except OverflowError:
        raise _Contradiction(f"{where}.{key} is out of range") from None
    if not math.isfinite(out):
        raise _Contradiction(f"{where}.{key} is {out}, not a finite number")
    return out


def _count(stats: Mapping[str, Any], key: str, *, where: str = "stats", minimum: int = 0) -> int:
    value = stats.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < 2**63:
        raise _Contradiction(f"{where}.{key} is {_shown(value)}, not a whole number ≥ {minimum}")
    return value


def _optional(stats: Mapping[str, Any], key: str, read: Callable[..., Any], neutral: Any, **kw: Any) -> Any:
    """A key some producers leave out: absent reads as the value that fails no rule. (Requiring it would add
    nothing: whoever can forge a verdict can write the key too; what matters is that a present value holds.)"""
    return neutral if stats.get(key) is None else read(stats, key, **kw)


def _shown(value: Any) -> str:
    if value is None:
        return "missing"
    text = repr(value) if isinstance(value, (str, int, float)) and len(str(value)) < 40 else type(value).__name__
    return text


def _consistency(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    stats = check.stats
    _count(stats, "positions", minimum=1)
    frac = stats.get("frac_over")
    key = metrics.threshold_key(limits.token_k3)
    if not isinstance(frac, Mapping) or key not in frac:
        raise _Contradiction(f"stats.frac_over has no entry {key!r} for the trusted token_k3 {limits.token_k3:g}")
    clean = {
        "nonfinite": _optional(stats, "nonfinite", _count, 0),
        "mean_k3": _number(stats, "mean_k3"),
        "max": _number(stats, "max"),
        "frac_over": {key: _number(frac, key, where="stats.frac_over")},
    }
    # A check with a no-cache control holds its mean to the control too (scoring.k3.restart_noise_limits).
    control = _optional(stats, NOCACHE_STAT, _number, None)
    # The rest of the stats ride along for rules that read more keys; the ones above are checked numbers.
    verdict, reasons = judge_k3({**stats, **clean}, restart_noise_limits(limits, control))
    if verdict is not Verdict.PASS:
        raise _Contradiction(f"stats: {reasons[0]}")
    _window_step(stats)
    # The cache-hit helpers keep only prompts that hit the cache (``cache``: kept/total); ``cache_consistency``
    # re-scores every restart and counts its overlaps instead, so it has no kept/total to check.
    if check.name in CACHE_HIT_HELPERS:
        cache = check.cache
        if cache is None or not 0 < cache.total < 2**63 or not 0 <= cache.kept <= cache.total:
            raise _Contradiction("cache (kept/total) is missing or impossible")
        if not enough_cache_hits(cache.kept, cache.total):
            raise _Contradiction(f"cache: {cache.kept} of {cache.total} prompts hit the cache (more than half needed)")
    _against_match(check, limits, match)


def _against_match(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    """The cache-vs-match rule (``scoring.k3.judge_against_match``) on the checked numbers it reads."""
    if check.name not in JUDGED_AGAINST_MATCH:
        return
    stat = MATCH_STAT.get(check.name, "median_sample_mean_k3")
    mine = _optional(check.stats, stat, _number, None)
    if mine is None:
        return
    own = {stat: mine}
    control = _optional(check.stats, NOCACHE_STAT, _number, None)
    if control is not None:
        own[NOCACHE_STAT] = control
    theirs = None if match is None else _optional(match.stats, stat, _number, None)
    other = None if match is None or theirs is None else replace(match, stats={stat: theirs})
    judged = judge_against_match(replace(check, stats=own), other, limits)
    if judged.verdict is Verdict.FAIL:
        raise _Contradiction(f"stats.{stat}: {judged.reasons[0]}")


def _window_step(stats: Mapping[str, Any]) -> None:
    """``match``'s window-step rule (``scoring.window_step``) from its kept counts. It can turn a PASS into
    FAIL from positions, not from the other stats, so a forged PASS that drops ``stats.window_step`` is not
    caught here; the ``.npz`` cross-check below pins the arrays, not this rule (it needs the engine's
    ``sliding_window_size``, which the result's environment claims too)."""
    step = stats.get("window_step")
    if step is None:
        return
    if not isinstance(step, Mapping):
        raise _Contradiction("stats.window_step is not an object")
    where = "stats.window_step"
    samples, stepped = _count(step, "samples", where=where), _count(step, "stepped", where=where)
    if stepped > samples:
        raise _Contradiction(f"{where}.stepped ({stepped}) exceeds samples ({samples})")
    if step_fails(samples, stepped):
        raise _Contradiction(f"{where}: {stepped} of {samples} samples step at the sliding window's edge")


def _golden(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    stats, t = check.stats, limits.golden
    _count(stats, "positions", minimum=1)
    if _count(stats, "confident_flips") > 0:
        raise _Contradiction(f"stats.confident_flips is {stats['confident_flips']}: a confident flip fails golden")
    clean: dict[str, Any] = {k: _number(stats, k) for k in ("kl_p50", "kl_p99", "kl_max")}
    # Results written before golden had a p99.9 are judged by their max, which is never below it.
    clean["kl_p999"] = _optional(stats, "kl_p999", _number, clean["kl_max"])
    for key in ("nll_increase", "nll_increase_se", "max_abs_delta"):
        clean[key] = _optional(stats, key, _number, 0.0)
    band = _band(stats)
    buckets = stats.get("flips_by_margin") if band is not None else []
    if not isinstance(buckets, list) or len(buckets) > 64:
        raise _Contradiction("stats.flips_by_margin is not a list of buckets (needed with a noise band)")
    clean["flips_by_margin"] = []
    for i, b in enumerate(buckets):
        where = f"stats.flips_by_margin[{i}]"
        if not isinstance(b, Mapping) or not isinstance(b.get("bucket"), str):
            raise _Contradiction(f"{where} is not a bucket")
        clean["flips_by_margin"].append(
            {
                "bucket": b["bucket"][:40],
                "flips": _count(b, "flips", where=where),
                "positions": _count(b, "positions", where=where),
                "rate": _number(b, "rate", where=where),
            }
        )
    fails = stat_fails(clean, band, t)
    if fails:
        raise _Contradiction(f"stats: {fails[0]}")


def _band(stats: Mapping[str, Any]) -> NoiseBand | None:
    if stats.get("band") is None:
        return None
    try:
        band = NoiseBand.from_dict(stats["band"])
        numbers = (band.kl_p50, band.kl_p99, band.max_flip_margin_nats, *band.flip_rate_by_bucket.values())
        if not all(math.isfinite(x) and x >= 0 for x in numbers) or not 0 <= band.pairs < 2**63:
            raise ValueError("a negative or non-finite number")
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        raise _Contradiction("stats.band is not a noise band") from None
    return band


def _batch_invariance(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    configs = check.stats.get("configurations")
    if not isinstance(configs, list) or not configs:
        raise _Contradiction("stats.configurations is empty: nothing was compared")
    if not _number(check.stats, "max_abs_delta") <= limits.batch_abs_delta:
        raise _Contradiction(f"stats.max_abs_delta is above the trusted batch_abs_delta {limits.batch_abs_delta:g}")
    for i, d in enumerate(configs):
        where = f"stats.configurations[{i}]"
        if not isinstance(d, Mapping):
            raise _Contradiction(f"{where} is not an object")
        _count(d, "positions", where=where, minimum=1)
        if not _number(d, "max_abs_delta", where=where) <= limits.batch_abs_delta or _count(d, "flips", where=where):
            raise _Contradiction(f"{where} differs from solo beyond batch_abs_delta {limits.batch_abs_delta:g}")


def _layers(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    _count(check.stats, "layers_compared", minimum=1)
    if not _number(check.stats, "max") <= limits.layers_rel_diff:
        raise _Contradiction(f"stats.max is above the trusted layers_rel_diff {limits.layers_rel_diff:g}")


def _routing(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    """Every compared layer at or above its floor; an absolute floor no lower than the check's own."""
    arms = {arm: check.stats[arm] for arm in ("path", "baseline") if arm in check.stats}
    if not arms:
        raise _Contradiction("stats has neither a path nor a baseline comparison")
    for arm, info in arms.items():
        least = PATH_FLOOR if arm == "path" else BASELINE_FLOOR
        for i, layer in enumerate(info["layers"]):
            where = f"stats.{arm}.layers[{i}]"
            floor = _number(layer, "floor", where=where)
            if str(info["judged_by"]).startswith("absolute") and floor < least:
                raise _Contradiction(f"{where}.floor {floor:g} is below the routing floor {least:g}")
            if _number(layer, "exact", where=where) < floor:
                raise _Contradiction(f"{where}.exact is below its floor {floor:g}")


def _spec_decode(check: CheckResult, limits: ThresholdSet, match: CheckResult | None) -> None:
    """The k3 rules (``match``'s thresholds), then the tokens, acceptance and sampled-path parts; acceptance
    against the floor main's figures give (``scoring.spec_rules.acceptance_floor``), re-derived from
    ``stats.main_accept_reruns`` (main's stored reruns, or the one figure measured in the check)."""
    _consistency(check, limits, None)
    stats = check.stats
    for key in ("greedy_violations", "unexplained_divergences"):
        if _count(stats, key):
            raise _Contradiction(f"stats.{key} is not 0")
    if not _number(stats, "sampled_p_value") >= SAMPLED_ALPHA:
        raise _Contradiction(f"stats.sampled_p_value is below the sampled-path alpha {SAMPLED_ALPHA:g}")
    # Main's figures: its reruns when the check kept them (the floor is re-derived from them with the trusted
    # rule, scoring.spec_rules.acceptance_floor), else its one figure (the 5 % tolerance).
    # The PR's figure over the samples compared with main's (those whose text is main's), else its whole run's.
    pr_key = "accept_length_compared" if "accept_length_compared" in stats else "accept_length"
    reruns = stats.get("main_accept_reruns")
    if reruns is not None:
        if not isinstance(reruns, list) or not 0 < len(reruns) <= 10_000:
            raise _Contradiction("stats.main_accept_reruns is not a list of main's figures")
        figures = {str(i): v for i, v in enumerate(reruns)}
        lengths = [_number(figures, key, where="stats.main_accept_reruns") for key in figures]
        if acceptance_fell(_number(stats, pr_key), lengths):
            raise _Contradiction(f"stats.{pr_key} is below the floor main_accept_reruns give")
        return
    main = _optional(stats, "main_accept_length", _number, None)
    if main is not None and acceptance_fell(_number(stats, pr_key), main):
        raise _Contradiction(f"stats.{pr_key} fell more than the tolerance below main_accept_length")


RULES: Mapping[str, Callable[[CheckResult, ThresholdSet, CheckResult | None], None]] = {
    **dict.fromkeys(K3_CHECKS, _consistency),
    "golden": _golden,
    "batch_invariance": _batch_invariance,
    "layers": _layers,
    "routing": _routing,
    "spec_decode": _spec_decode,
}
"""Check name → the rule that raises ``_Contradiction`` when a claimed PASS does not hold."""


def _agrees(check: CheckResult, record: PositionRecord) -> None:
    """A consistency helper's stats must be what its own ``<check>.npz`` gives (so the heat strip and the
    table cannot tell two stories, and a forger has to forge both consistently)."""
    where = f"{check.name}.npz"
    if len(record) != check.stats.get("positions"):
        raise _Contradiction(f"{where} holds {len(record)} positions, stats.positions says {check.stats['positions']}")
    k3 = metrics.k3(record.delta)
    for key, value in (("mean_k3", metrics.sglang_mean_k3(k3, record.sample)), ("max", float(np.max(k3)))):
        claimed = _number(check.stats, key)
        if not math.isclose(value, claimed, rel_tol=1e-6, abs_tol=1e-12):
            raise _Contradiction(f"stats.{key} is {claimed:.6g} but {where} gives {value:.6g}")


def verify_check(
    check: CheckResult,
    limits: ThresholdSet,
    *,
    index: int = 0,
    match: CheckResult | None = None,
    record: PositionRecord | None = None,
) -> CheckResult:
    """``check`` as the trusted side judges it: a PASS that does not hold is INCONCLUSIVE, naming the field.

    ``record`` (the check's ``.npz``, when there is one) must agree with the stats of a consistency helper."""
    if check.verdict is not Verdict.PASS:
        return check
    limits = limits.for_check(check.name)  # per-phase kl_div_prefill / kl_div_decode, as the check used
    rule = RULES.get(check.name)
    try:
        if rule is None:
            raise _Contradiction(f"name: the comment side has no rule to re-derive a {check.name[:40]!r} verdict")
        try:
            rule(check, limits, match)
            if record is not None and check.name in K3_CHECKS:
                _agrees(check, record)
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:  # a stats key of a rule's own choosing
            raise _Contradiction(f"stats cannot be judged ({type(exc).__name__}: {str(exc)[:80]})") from None
    except _Contradiction as exc:
        reason = (
            f"checks[{index}] says pass, but {exc}; judged again with this side's thresholds (its --config) the "
            "recorded verdict does not hold: was result.json judged with another config, by another precisionbot "
            "version, or modified?"
        )
        return replace(check, verdict=Verdict.INCONCLUSIVE, reasons=(reason,))
    return check


def verify_run(
    run: RunResult, thresholds: ThresholdsConfig, records: Mapping[str, PositionRecord] | None = None
) -> RunResult:
    """``run`` with every check verified (``verify_check``) and the run verdict derived from them.

    The thresholds are the trusted config's, for the model and tp the run names (its profile is the
    config's, whatever the run says it used); ``records`` are the directory's arrays by check name."""
    model = run.environment.get("model")
    tp = run.environment.get("tp")
    limits = thresholds.resolve(
        model if isinstance(model, str) else None, tp if isinstance(tp, int) and not isinstance(tp, bool) else None
    )
    match = run.check("match")
    arrays = records or {}
    match = None if match is None else verify_check(match, limits, record=arrays.get("match"))
    checks = tuple(
        verify_check(c, limits, index=i, match=match, record=arrays.get(c.name)) for i, c in enumerate(run.checks)
    )
    if not checks:
        checks = (CheckResult.inconclusive("result", "result.json lists no checks: zero checks is never a pass"),)
    return replace(run, checks=checks, verdict=Verdict.combine(c.verdict for c in checks))
