"""Noise-relative statistics for the consistency helpers: a PR's run against main's reruns, and thresholds
from a fitted rerun distribution. Pure: numpy and ``math`` only, no I/O, no scipy (the runtime needs none;
the tests check every distribution function against scipy).

**The unit of noise is the run.** Every rerun scores the same prompts, so resampling prompts inside one run
measures prompt-to-prompt spread, not what changes between two runs of the same build (batch composition,
reduction order, which near-tie tokens flip). The comparison therefore works on per-sample values paired by
sample id and takes its spread from main's R reruns:

* per sample ``i`` and run ``r``: ``y[r, i] = log(max(mean_k3[r, i], floor))`` (k3 noise is multiplicative:
  a build twice as noisy doubles every sample's mean k3, whatever its level);
* a run's deviation from main is the **median over samples** of ``y[r, i] - mean_r' y[r', i]`` (robust to
  the handful of tokens that carry a mean k3);
* under "the PR is one more rerun of main" the PR's deviation minus the mean of main's deviations, divided by
  ``s * sqrt(1 + 1/R)`` (``s``: the spread of main's deviations), follows Student's t with ``R - 1`` degrees
  of freedom — a prediction-interval test, exact for normal deviations and checked on simulated runs.

The ratio shown is ``exp(deviation)``: the PR's typical per-sample mean k3 over main's. Pooling main's
per-sample residuals instead (many more degrees of freedom) was tried and rejected: when whole runs differ
(a run-level effect) it raised the false-alarm rate up to tenfold in simulation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.fmt import times

MIN_RERUNS = 3
"""Fewest main reruns a comparison or a fit rests on (2 degrees of freedom for the spread)."""
FLOOR_K3 = 1e-9
"""Per-sample mean k3 at or below this counts as exact (SGLang's deterministic gate): two exact samples are
equal, and a log of 0 never appears."""
EXTRAPOLATION = 10.0
"""A fit may extrapolate one decade past what R reruns resolve: a per-run rate ``f`` needs ``R ≥ 1 / (10 f)``."""
TRIM = 0.2
"""Fraction of samples cut from each end before averaging a run's per-sample log-ratios."""
TOLERANCE_CONFIDENCE = 0.9
"""A suggested threshold is the upper 90 % confidence bound of the fitted quantile (the fit's uncertainty)."""

Matrix = npt.NDArray[np.float64]


# ---- distributions (tested against scipy) -----------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """Student's t upper tail ``P(T > t)``."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def t_ppf(q: float, df: float) -> float:
    """Student's t quantile (bisection on ``t_sf``; monotone, 1e-12 relative)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf(mid, df) > 1.0 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def z_ppf(q: float) -> float:
    return NormalDist().inv_cdf(q)


def _chi_scale_grid(df: int, points: int = 4001) -> tuple[Matrix, Matrix]:
    """Grid over ``u = s / sigma`` (``df · u²`` is chi-square with ``df`` degrees of freedom) and its density."""
    hi = 1.0 + 12.0 / math.sqrt(df)
    u = np.linspace(1e-9, hi, points)
    v = df * u * u
    log_pdf = (df / 2.0 - 1.0) * np.log(v) - v / 2.0 - (df / 2.0) * math.log(2.0) - math.lgamma(df / 2.0)
    return u, np.exp(log_pdf) * 2.0 * df * u


@functools.lru_cache(maxsize=256)
def tolerance_factor(n: int, p: float, confidence: float = TOLERANCE_CONFIDENCE) -> float:
    """One-sided normal tolerance factor ``k``: ``mean + k·sd`` of ``n`` draws is above the ``p`` quantile
    with probability ``confidence``. Exact (the noncentral-t factor) by integrating over the sample sd:
    ``P = E[Φ(√n (k·u - z_p))]`` with ``u = s / σ``; ``k`` by bisection."""
    if n < 2:
        return math.inf
    zp = z_ppf(p)
    u, w = _chi_scale_grid(n - 1)
    du = float(u[1] - u[0])
    cdf = np.vectorize(NormalDist().cdf)

    def coverage(k: float) -> float:
        return float(np.sum(cdf(math.sqrt(n) * (k * u - zp)) * w) * du)

    lo, hi = zp, zp + 1.0
    while coverage(hi) < confidence:
        hi += 2.0 * (hi - zp)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if coverage(mid) < confidence else (lo, mid)
    return 0.5 * (lo + hi)


# ---- PR vs main -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MainComparison:
    """A PR's helper run against main's reruns of the same signature."""

    ratio: float
    """The PR's typical per-sample mean k3 over main's (``exp`` of the trimmed-mean log-ratio, centred)."""
    ci_low: float
    ci_high: float
    """95 % confidence interval of ``ratio``."""
    p_value: float
    """One-sided: the chance a clean rerun of main is at least this much worse than main's average."""
    reruns: int
    samples: int
    """Samples compared (present in the PR and in at least two of main's reruns)."""
    ratio_of_means: float
    """Plain descriptive figure: the PR's mean of per-sample mean k3 over main's (same samples)."""
    alpha: float
    min_ratio: float

    @property
    def regression(self) -> bool:
        """Worse than main beyond noise at ``alpha``, and by at least ``min_ratio``."""
        return self.p_value < self.alpha and self.ratio >= self.min_ratio

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "ci95": [self.ci_low, self.ci_high],
            "p_value": self.p_value,
            "reruns": self.reruns,
            "samples": self.samples,
            "ratio_of_means": self.ratio_of_means,
            "alpha": self.alpha,
            "min_ratio": self.min_ratio,
            "regression": self.regression,
        }


def _logs(values: npt.ArrayLike, floor: float) -> Matrix:
    arr = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(arr), np.nan, np.log(np.maximum(arr, floor)))


def compare_to_main(
    main: npt.ArrayLike,
    pr: npt.ArrayLike,
    *,
    alpha: float = 0.001,
    min_ratio: float = 1.5,
    floor: float = FLOOR_K3,
) -> MainComparison | None:
    """``main``: ``[R, S]`` per-sample mean k3 of main's reruns (NaN where a rerun did not keep a sample);
    ``pr``: ``[S]`` the PR's, aligned by sample id. ``None`` when fewer than ``MIN_RERUNS`` reruns or fewer
    than 3 shared samples leave nothing to judge by."""
    y = _logs(np.atleast_2d(main), floor)
    p = _logs(pr, floor)
    if y.shape[1] != p.shape[0]:
        raise ValueError(f"main has {y.shape[1]} samples per rerun, the PR {p.shape[0]}")
    counts = np.sum(np.isfinite(y), axis=0)
    usable = np.isfinite(p) & (counts >= 2)
    y, p, counts = y[:, usable], p[usable], counts[usable]
    runs = [r for r in range(y.shape[0]) if np.isfinite(y[r]).any()]
    if len(runs) < MIN_RERUNS or p.size < 3:
        return None
    y = y[runs]
    ref = np.nanmean(y, axis=0)
    e = np.array([trimmed_mean((y[r] - ref)[np.isfinite(y[r])]) for r in range(len(runs))])
    reruns = len(runs)
    centre = float(np.mean(e))
    delta = trimmed_mean(p - ref) - centre
    spread = float(np.std(e, ddof=1))
    se = spread * math.sqrt(1.0 + 1.0 / reruns)
    df = reruns - 1
    p_value = t_sf(delta / se, df) if se > 0.0 else _p_without_spread(delta)
    half = t_ppf(0.975, df) * se
    main_means = np.exp(y).copy()
    main_means[~np.isfinite(y)] = np.nan
    ratio_of_means = float(np.mean(np.exp(p)) / np.mean(np.nanmean(main_means, axis=0)))
    return MainComparison(
        ratio=math.exp(delta),
        ci_low=math.exp(delta - half),
        ci_high=math.exp(delta + half),
        p_value=p_value,
        reruns=reruns,
        samples=int(p.size),
        ratio_of_means=ratio_of_means,
        alpha=alpha,
        min_ratio=min_ratio,
    )


def _p_without_spread(delta: float) -> float:
    """Main reran bit-identically: any difference at all is beyond its noise."""
    return 0.0 if delta > 0 else (0.5 if delta == 0 else 1.0)


def trimmed_mean(values: npt.NDArray[np.float64], cut: float = TRIM) -> float:
    """Mean of ``values`` without the lowest and highest ``cut`` fraction (``int(cut · n)`` each side)."""
    x = np.sort(values)
    k = int(cut * x.size)
    return float(np.mean(x[k : x.size - k]))


def describe(c: MainComparison) -> str:
    """The report's words, naming the rule that decided: ``3.5× main's mean k3 (p < 0.001, floor 1.5×)`` (a
    regression), ``1.3× main's mean k3, under the 1.5× floor (p < 0.001)`` (beyond main's noise but by less than
    ``min_ratio``) or ``within main's noise (1.1× main's mean k3, p = 0.32)``."""
    ratio, floor = f"{times(c.ratio)} main's mean k3", times(c.min_ratio)
    if c.regression:
        return f"{ratio} ({p_text(c.p_value)}, floor {floor})"
    if c.p_value < c.alpha:
        return f"{ratio}, under the {floor} floor ({p_text(c.p_value)})"
    return f"within main's noise ({ratio}, {p_text(c.p_value)})"


def p_text(p: float) -> str:
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.2g}" if p < 0.1 else f"p = {p:.2f}"


# ---- threshold suggestion ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """A threshold for one statistic of one helper, from a log-normal fit over R clean reruns."""

    reruns: int
    rate: float
    """The per-run false-alarm rate this threshold targets."""
    threshold: float | None
    """Upper ``TOLERANCE_CONFIDENCE`` bound of the fitted ``1 - rate`` quantile; None when refused."""
    point: float | None
    """The fitted quantile itself."""
    largest_seen: float
    mu: float
    sigma: float
    """Log-normal parameters (of ``log`` values)."""
    needed_reruns: int
    """Reruns this rate needs (``ceil(1 / (EXTRAPOLATION · rate))``, at least ``MIN_RERUNS + 2``)."""
    refused: str | None = None
    """Why no threshold is suggested, in words."""


def reruns_needed(rate: float) -> int:
    return max(MIN_RERUNS + 2, math.ceil(1.0 / (EXTRAPOLATION * rate) - 1e-9))


def suggest(values: Sequence[float] | npt.ArrayLike, rate: float) -> Suggestion:
    """Fit ``log(values)`` with a normal distribution and bound its ``1 - rate`` quantile."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = int(x.size)
    need = reruns_needed(rate)
    largest = float(np.max(x)) if n else math.nan
    if n == 0 or np.any(x <= 0.0):
        zeros = int(np.sum(x <= 0.0))
        return Suggestion(
            n, rate, None, None, largest, math.nan, math.nan, need, f"{zeros} of {n} reruns are 0: no log-normal fit"
        )
    logs = np.log(x)
    mu = float(np.mean(logs))
    sigma = float(np.std(logs, ddof=1)) if n > 1 else math.nan
    refusal = None
    if n > 1 and bool(np.all(x == x[0])):
        # A run-to-run deterministic engine (the builtin one's production numerics, any deterministic mode):
        # a fit would put the threshold at the value itself, so any change at all would fail it.
        refusal = (
            f"all {n} reruns gave {largest:.3g}: main reruns bit-identically, so there is no run-to-run noise to"
            " fit (keep the absolute thresholds)"
        )
    elif n < need:
        refusal = f"{n} reruns cannot support a rate of {rate:.2g} per run (needs {need})"
    if refusal is not None:
        return Suggestion(n, rate, None, None, largest, mu, sigma, need, refusal)
    point = math.exp(mu + z_ppf(1.0 - rate) * sigma)
    bound = math.exp(mu + tolerance_factor(n, 1.0 - rate) * sigma)
    return Suggestion(n, rate, bound, point, largest, mu, sigma, need)
