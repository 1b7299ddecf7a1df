"""Noise or bug: flips judged by margin, the flips noise would explain, and the producers' noise band.

Pure numpy. Seeds 001 and 003: a flip at a small top-2 margin is what noise does; a flip at a large margin
needs a systematic shift. Under independent Gaussian logit noise σ, P(flip | m) = Φ(−m / (√2 σ))
(``metrics.flip_probability``), so the observed margins give the number of flips noise explains.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.metrics.core import flip_probability

MARGIN_EDGES_NATS = (0.0, 0.1, 0.3, 1.0, math.inf)
"""Flip buckets by the reference's top-1 − top-2 margin: [0, 0.1), [0.1, 0.3), [0.3, 1), [1, ∞) nats."""

KL_FLOOR = 1e-6
"""kern's floor for band KL statistics, so a perfectly deterministic band does not demand a KL of exactly 0."""


def bucket_label(lo: float, hi: float) -> str:
    return f"[{lo:g}, {'∞' if math.isinf(hi) else f'{hi:g}'})"


def flips_by_margin(
    margins_nats: npt.ArrayLike,
    flips: npt.ArrayLike,
    edges: Sequence[float] = MARGIN_EDGES_NATS,
) -> list[dict[str, Any]]:
    """Per margin bucket: ``{"bucket", "lo", "hi", "positions", "flips", "rate"}`` (rate 0 for an empty bucket).

    ``margins_nats[N]`` are the reference's top-1 − top-2 logprobs, ``flips[N]`` whether the top-1 changed.
    """
    m = np.asarray(margins_nats, dtype=np.float64)
    f = np.asarray(flips, dtype=bool)
    if m.shape != f.shape:
        raise ValueError(f"flips_by_margin: margins {m.shape} and flips {f.shape} differ")
    out = []
    for lo, hi in itertools.pairwise(edges):
        sel = (m >= lo) & (m < hi)
        n = int(np.count_nonzero(sel))
        k = int(np.count_nonzero(f & sel))
        out.append(
            {
                "bucket": bucket_label(lo, hi),
                "lo": lo,
                "hi": hi,
                "positions": n,
                "flips": k,
                "rate": k / n if n else 0.0,
            }
        )
    return out


@dataclass(frozen=True)
class FlipExpectation:
    """How many flips independent logit noise σ explains, against how many were seen."""

    observed: int
    expected: float
    """Σ P(flip | margin) over all compared positions."""
    p_at_least_observed: float
    """P(X ≥ observed) for X the number of noise flips (Poisson-binomial; Poisson approximation for large N)."""
    sigma_nats: float

    @property
    def more_than_noise(self) -> bool:
        """True when noise this size would produce as many flips less than 1 % of the time."""
        return self.observed > 0 and self.p_at_least_observed < 0.01


def expected_flips(margins_nats: npt.ArrayLike, observed: int, sigma_nats: float) -> FlipExpectation:
    """The expected number of noise flips given the reference margins, and the tail probability of ``observed``.

    Exact Poisson-binomial (dynamic programming) over the positions whose flip probability is not negligible
    when there are at most 4,096 of them; otherwise the Poisson approximation (Le Cam: error ≤ Σ p²).
    """
    p = flip_probability(np.asarray(margins_nats, dtype=np.float64), sigma_nats)
    expected = float(np.sum(p))
    if observed <= 0:
        return FlipExpectation(observed, expected, 1.0, sigma_nats)
    live = p[p > 1e-18]
    tail = _poisson_binomial_tail(live, observed) if live.size <= 4096 else poisson_sf(observed, expected)
    return FlipExpectation(observed, expected, tail, sigma_nats)


def _poisson_binomial_tail(p: npt.NDArray[np.float64], k: int) -> float:
    if k > p.size:
        return 0.0
    # dist[j] = P(exactly j successes so far), truncated at k (the last cell holds "≥ k").
    dist = np.zeros(k + 1)
    dist[0] = 1.0
    for pi in p:
        moved = dist[:-1] * pi
        dist[:-1] *= 1.0 - pi
        dist[1:] += moved  # the last cell ("≥ k") keeps its mass either way: it absorbs
    return float(min(max(dist[k], 0.0), 1.0))


def poisson_sf(observed: float, expected: float) -> float:
    """P(X ≥ observed) for X ~ Poisson(expected): how surprising ``observed`` flips are if noise causes them.

    Exact sums (in log space, the upper tail summed directly so tiny tails keep their digits) up to 10,000
    terms; beyond that the Wilson–Hilferty approximation of P(Gamma(k, 1) ≤ λ), accurate to a few digits
    there and bounded in time for any input (a result file claiming 10¹² flips must not hang a report).
    """
    if not observed > 0:
        return 1.0
    if not expected > 0:
        return 0.0
    if not (math.isfinite(observed) and math.isfinite(expected)):
        return 0.0 if math.isinf(observed) else 1.0
    k, lam = math.ceil(observed), float(expected)
    if k > 10_000 or lam > 10_000:
        z = ((lam / k) ** (1 / 3) - (1 - 1 / (9 * k))) / math.sqrt(1 / (9 * k))
        return float(min(max(0.5 * math.erfc(-z / math.sqrt(2)), 0.0), 1.0))

    def term(j: int) -> float:
        return math.exp(j * math.log(lam) - lam - math.lgamma(j + 1))

    if k <= lam:  # the lower side is the small one: 1 − P(X < k) does not cancel badly here
        return float(min(max(1.0 - math.fsum(term(j) for j in range(k)), 0.0), 1.0))
    total = 0.0
    for j in range(k, k + 20_000):  # terms shrink geometrically past λ
        t = term(j)
        total += t
        if t < total * 1e-17:
            break
    return float(min(total, 1.0))


@dataclass(frozen=True)
class NoiseBand:
    """What known-good producers disagree by (kern's band): a candidate beyond it is more than noise."""

    pairs: int
    """Producer pairs compared."""
    max_flip_margin_nats: float
    """Largest reference margin at which any producer pair flipped (0 when none flipped)."""
    flip_rate_by_bucket: dict[str, float] = field(default_factory=dict)
    kl_p50: float = KL_FLOOR
    kl_p99: float = KL_FLOOR
    sigma_nats: float = 0.0
    """RMS of the producers' logprob differences: a rough per-logit noise σ for ``expected_flips``."""

    @property
    def is_zero(self) -> bool:
        """A deterministic build: the producers agree exactly, so fixed thresholds rule."""
        return self.max_flip_margin_nats == 0.0 and self.sigma_nats == 0.0 and self.kl_p99 <= KL_FLOOR

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "max_flip_margin_nats": self.max_flip_margin_nats,
            "flip_rate_by_bucket": dict(self.flip_rate_by_bucket),
            "kl_p50": self.kl_p50,
            "kl_p99": self.kl_p99,
            "sigma_nats": self.sigma_nats,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoiseBand:
        return cls(
            pairs=int(data["pairs"]),
            max_flip_margin_nats=float(data["max_flip_margin_nats"]),
            flip_rate_by_bucket={str(k): float(v) for k, v in data["flip_rate_by_bucket"].items()},
            kl_p50=float(data["kl_p50"]),
            kl_p99=float(data["kl_p99"]),
            sigma_nats=float(data["sigma_nats"]),
        )


@dataclass(frozen=True)
class PairComparison:
    """One producer-vs-producer (or candidate-vs-reference) comparison over the same positions."""

    margins_nats: npt.NDArray[np.float64]
    flips: npt.NDArray[np.bool_]
    kl: npt.NDArray[np.float64]
    delta_lp: npt.NDArray[np.float64]
    """Logprob differences of the scored tokens (nats)."""


def noise_band(pairs: Sequence[PairComparison]) -> NoiseBand:
    """The band from known-good producer pairs: largest flip margin, flip rate per bucket, KL p50/p99 (floored)."""
    if not pairs:
        raise ValueError("noise_band: needs at least one producer pair (two producers)")
    margins = np.concatenate([p.margins_nats for p in pairs])
    flips = np.concatenate([p.flips for p in pairs])
    kl = np.concatenate([p.kl for p in pairs])
    delta = np.concatenate([p.delta_lp for p in pairs])
    flipped = margins[flips]
    rates = {b["bucket"]: float(b["rate"]) for b in flips_by_margin(margins, flips)}
    finite = delta[np.isfinite(delta)]
    kl = kl[np.isfinite(kl)]  # an infinite pair KL is a broken producer, not a band: percentiles of the rest
    if kl.size == 0:
        kl = np.zeros(1)
    return NoiseBand(
        pairs=len(pairs),
        max_flip_margin_nats=float(np.max(flipped)) if flipped.size else 0.0,
        flip_rate_by_bucket=rates,
        kl_p50=max(float(np.percentile(kl, 50)), KL_FLOOR),
        kl_p99=max(float(np.percentile(kl, 99)), KL_FLOOR),
        sigma_nats=float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0,
    )


def confident_flip_limit(
    band: NoiseBand | None, no_band_margin_nats: float = 1.0, band_abs_delta_nats: float = 0.0
) -> float:
    """The reference margin (nats) above which a flip is *confident*: more than noise can do.

    With a band (at least one producer pair, not a deterministic zero band): the band's largest flip margin or
    twice the largest |Δ logprob| the producers showed, whichever is larger. A flip needs the top-1 and top-2 to
    move apart by the margin, which noise that moves single logprobs by up to d can do up to 2d (two producers
    see few flips, so their largest flip margin alone is a noisy estimate). Otherwise ``no_band_margin_nats``.
    """
    if band is None or band.pairs == 0 or band.is_zero:
        return no_band_margin_nats
    return max(band.max_flip_margin_nats, 2.0 * band_abs_delta_nats)


def confident_flips(
    margins_nats: npt.ArrayLike,
    flips: npt.ArrayLike,
    band: NoiseBand | None,
    no_band_margin_nats: float = 1.0,
    band_abs_delta_nats: float = 0.0,
) -> npt.NDArray[np.bool_]:
    """Flips at a margin above :func:`confident_flip_limit`."""
    m = np.asarray(margins_nats, dtype=np.float64)
    f = np.asarray(flips, dtype=bool)
    out: npt.NDArray[np.bool_] = f & (m > confident_flip_limit(band, no_band_margin_nats, band_abs_delta_nats))
    return out
