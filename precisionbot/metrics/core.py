"""k3, tail statistics and the helpers' numbers: pure numpy, natural logs (nats), no I/O. The stable API is
``precisionbot.metrics`` (docs/architecture.md), which re-exports this module and ``distributions``.

Shapes: ``[N]`` is one value per scored position, ``[N, V]`` a full vocabulary row per position, ``[N, k]``
a top-k list per position sorted by descending logprob (column 0 is the top-1).

Sign convention: ``delta = lp_ref - lp_test`` (SGLang's ``logr = replay - generation``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
F64 = npt.NDArray[np.float64]

DEFAULT_THRESHOLDS = (1e-4, 1e-3, 1e-2)
"""Per-token k3 thresholds whose exceedance fractions every report shows."""

PERCENTILES = (0.1, 1.0, 5.0, 10.0, 50.0, 90.0, 95.0, 99.0, 99.9)
"""llama.cpp's ``--kl-divergence`` percentile set (plus min and max), so figures compare with the community's."""

_SERIES_CUTOFF = 1e-2


def k3(delta: ArrayLike) -> F64:
    """Schulman's k3 estimator per token: ``exp(δ) − 1 − δ`` (nats), elementwise, float64.

    ``δ = lp_ref − lp_test``; k3 ≥ 0 with equality only at δ = 0, ≈ δ²/2 for small δ. ``expm1(δ) − δ``
    cancels for tiny δ (1e-8 would give 0 or noise), so below |δ| = 1e-2 a Taylor series is used; its
    truncation error there is below 1e-15 relative.

    >>> float(k3(1e-8))
    5.0000000166666665e-17
    """
    d = np.asarray(delta, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.atleast_1d(np.expm1(d) - d)
    d = np.atleast_1d(d)
    small = np.abs(d) < _SERIES_CUTOFF
    if np.any(small):
        s = d[small]
        # δ²/2! + δ³/3! + ... + δ⁷/7!, Horner form.
        out[small] = s * s * (1 / 2 + s * (1 / 6 + s * (1 / 24 + s * (1 / 120 + s * (1 / 720 + s / 5040)))))
    result: F64 = out.reshape(np.shape(delta))
    return result


def logprob_errors(lp_ref: ArrayLike, lp_test: ArrayLike) -> dict[str, float]:
    """Error of the test path's logprobs against the reference (nats): MSE, RMSE, max |Δ|, mean Δ.

    Δ is ``lp_ref − lp_test``, the sign convention everywhere else (so ``mean`` agrees with the checks'
    ``mean_delta``). Seed 000: |Δ| = 0.1, 0.1, 0.05, 0.2 → MSE 0.015625, max error 0.2.
    """
    a = np.asarray(lp_ref, dtype=np.float64)
    b = np.asarray(lp_test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"logprob_errors: shapes differ {a.shape} vs {b.shape}")
    if a.size == 0:
        raise ValueError("logprob_errors: no positions to compare (empty input)")
    d = a - b
    mse = float(np.mean(d * d))
    return {
        "mse": mse,
        "rmse": math.sqrt(mse),
        "max_abs": float(np.max(np.abs(d))),
        "mean": float(np.mean(d)),
    }


def rel_diff(x: ArrayLike, y: ArrayLike) -> float:
    """SGLang's tensor comparator: ``1 − 2Σxy / Σ(x² + y²)`` in float64 (0 = identical, 1 = orthogonal).

    Two all-zero tensors compare as 0. Threshold used upstream: 1e-3.
    """
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"rel_diff: shapes differ {np.shape(x)} vs {np.shape(y)}")
    denom = float(np.dot(a, a) + np.dot(b, b))
    if denom == 0.0:
        return 0.0
    return 1.0 - 2.0 * float(np.dot(a, b)) / denom


def threshold_key(threshold: float) -> str:
    """The JSON key of a threshold: 1e-4 → ``"1e-4"``, 2.5e-3 → ``"2.5e-3"``."""
    return np.format_float_scientific(threshold, trim="-", exp_digits=1)


def percentile_key(q: float) -> str:
    """``p50``, ``p99``, ``p999`` (99.9), ``p001`` (0.1) ...: the stats key of a percentile."""
    if q == int(q) and q >= 10:
        return f"p{int(q)}"
    if q == int(q):
        return f"p0{int(q)}"
    return "p" + f"{q:g}".replace(".", "").rjust(3, "0")


def tail_stats(values: ArrayLike, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> dict[str, Any]:
    """Tail statistics of per-position values (k3, KL, |Δ| ...): the ``stats`` keys of result.json.

    Keys: ``positions``, ``mean``, ``mean_se`` (standard error), ``min``, the llama.cpp percentiles
    (``p001`` = 0.1 %, ``p01``, ``p05``, ``p10``, ``p50``, ``p90``, ``p95``, ``p99``, ``p999``; linear
    interpolation), ``max``, ``argmax`` (index of the max), ``frac_over`` (``{"1e-4": fraction > 1e-4, ...}``),
    ``nonfinite`` (count of NaN/inf) and ``nonfinite_at`` (their first indices). NaN or inf is never averaged
    away: statistics are over the finite values and the non-finite ones are reported, so a verdict can fail on
    them. Empty input is a ``ValueError``.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise ValueError("tail_stats: no positions (empty input); a check that compared nothing cannot pass")
    finite = np.isfinite(v)
    bad = np.flatnonzero(~finite)
    f = v[finite]
    out: dict[str, Any] = {
        "positions": int(v.size),
        "nonfinite": int(bad.size),
        "nonfinite_at": bad[:10].tolist(),
    }
    if f.size == 0:
        out.update({"mean": math.nan, "mean_se": math.nan, "min": math.nan, "max": math.nan, "argmax": None})
        out.update({percentile_key(q): math.nan for q in PERCENTILES})
        out["frac_over"] = {threshold_key(t): math.nan for t in thresholds}
        return out
    qs = np.percentile(f, PERCENTILES)
    out["mean"] = float(np.mean(f))
    out["mean_se"] = float(np.std(f, ddof=1) / math.sqrt(f.size)) if f.size > 1 else 0.0
    out["min"] = float(np.min(f))
    out.update({percentile_key(q): float(x) for q, x in zip(PERCENTILES, qs, strict=True)})
    out["max"] = float(np.max(f))
    out["argmax"] = int(np.flatnonzero(finite)[np.argmax(f)])
    out["frac_over"] = {threshold_key(t): float(np.count_nonzero(f > t) / v.size) for t in thresholds}
    return out


def mean_block_se(values: ArrayLike, block: int = 64) -> tuple[float, float]:
    """Mean of ``values`` and its standard error from means of consecutive blocks of ``block`` positions.

    Neighbouring tokens' errors are correlated (they share context), so the textbook ``σ/√N`` overstates how
    sure a mean is; block means are close to independent. With fewer than two blocks the plain standard error
    is returned. NaN/inf are ignored; an empty input is a ``ValueError``.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        raise ValueError("mean_block_se: no finite values (empty input)")
    nb = v.size // block
    if nb < 2:
        se = float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
        return float(np.mean(v)), se
    means = v[: nb * block].reshape(nb, block).mean(axis=1)
    return float(np.mean(v)), float(np.std(means, ddof=1) / math.sqrt(nb))


def sglang_mean_k3(k3_values: ArrayLike, sample: ArrayLike) -> float:
    """SGLang's helper number: the unweighted mean over samples of each sample's mean k3.

    Pass iff ``< kl_div`` (strict), so thresholds port unchanged from ``kl_test_utils.py``.
    """
    v = np.asarray(k3_values, dtype=np.float64)
    s = np.asarray(sample)
    if v.size == 0:
        raise ValueError("sglang_mean_k3: no positions (empty input)")
    _, inv = np.unique(s, return_inverse=True)
    sums = np.bincount(inv, weights=v)
    counts = np.bincount(inv)
    return float(np.mean(sums / counts))


def delta_p_stats(lp_ref: ArrayLike, lp_test: ArrayLike) -> dict[str, Any]:
    """llama.cpp's Δp table: Δp = p_test − p_ref of the scored token; mean ± se, percentiles, RMS Δp."""
    dp = np.exp(np.asarray(lp_test, dtype=np.float64)) - np.exp(np.asarray(lp_ref, dtype=np.float64))
    stats = tail_stats(dp, thresholds=())
    del stats["frac_over"]
    stats["rms"] = float(np.sqrt(np.mean(dp[np.isfinite(dp)] ** 2))) if np.isfinite(dp).any() else math.nan
    return stats


def same_top(flips: ArrayLike) -> tuple[float, float]:
    """Fraction of positions whose top-1 agrees, with its binomial standard error (llama.cpp's "same top p")."""
    f = np.asarray(flips, dtype=bool)
    if f.size == 0:
        raise ValueError("same_top: no positions (empty input)")
    rate = 1.0 - float(np.mean(f))
    return rate, math.sqrt(rate * (1.0 - rate) / f.size)


def flip_probability(margin_nats: ArrayLike, sigma: float) -> F64:
    """P(top-1 flip | margin m) under independent Gaussian logit noise σ on both logits: Φ(−m / (√2 σ)).

    Computed as ``½ erfc(m / (2σ))``, accurate deep in the tail (no ``1 − Φ`` cancellation). Seed 003 with
    σ = 0.1: m = 0.1 → ≈ 0.24; m = 0.5 → ≈ 2e-4; m = 1 → ≈ 8e-13.
    """
    if not sigma > 0:
        raise ValueError(f"flip_probability: sigma must be > 0, got {sigma}")
    m = np.asarray(margin_nats, dtype=np.float64)
    out: F64 = 0.5 * np.asarray(_erfc(m / (2.0 * sigma)), dtype=np.float64)
    return out


_erfc = np.frompyfunc(math.erfc, 1, 1)


def accuracy_bound(kl_per_step: Iterable[float]) -> float:
    """Upper bound on the change of any sequence-level success probability: √(½ Σ_t KL_t) (Pinsker + chain rule).

    Seed 003: 500 steps × 7e-4 → ≈ 0.42.
    """
    total = float(np.sum(np.asarray(list(kl_per_step), dtype=np.float64)))
    return math.sqrt(0.5 * max(total, 0.0))
