"""Noise or bug, per position and per check (the three readings of docs/background.md, "Noise or bug"). Pure: no I/O.

* **Cross-path |Δ|** of one token's logprob between the two paths: bf16 run-to-run noise is ~1e-3 nats and
  two correct kernels differ by up to ~1e-2, so |Δ| above 0.1 nats is a data difference, not rounding.
* **Top-2 gap** (the reference's top-1 minus top-2 logprob) at a flip: logprob differences are logit
  differences, so the gap is the force needed to flip. A flip across a gap above 0.4 nats needs a systematic
  shift; below 0.3 nats any small perturbation can flip it and the flip alone proves nothing.
* **Tail tokens**: a scored token both paths give less than 1e-4 probability (logprob below −9.2) can move by
  a nat without moving the distribution: its weight in KL is its probability. A quantized model scores rare
  corpus tokens at −17 and moves them by whole nats; that is a rounding of the tail, not evidence of a bug, so
  such a position reads ``tail`` (the KL and the flips judge the check).
* **Flips against noise**: under Gaussian logit noise σ a position with margin m flips with probability
  Φ(−m / (√2σ)); summed over the positions that is the number of flips noise explains. Seeing many more
  (a Poisson tail below 1 %) is evidence of a bug even when each flip sits at a small gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from precisionbot.metrics.flips import poisson_sf
from precisionbot.results import WorstPosition

NOISE_DELTA_NATS = 1e-2
"""|Δ| at or below this is within what two correct bf16 kernels differ by (up to ~1e-2)."""
BUG_DELTA_NATS = 0.1
"""|Δ| above this is two orders of magnitude over bf16 run-to-run noise (~1e-3): a data difference."""
SYSTEMATIC_GAP_NATS = 0.4
"""A flip across a top-2 gap above this needs a systematic logit shift (0.455 in docs/background.md's cache bug)."""
UNATTRIBUTABLE_GAP_NATS = 0.3
"""A flip across a top-2 gap below this cannot be attributed: near-ties flip under ordinary noise."""
TAIL_LOGPROB = math.log(1e-4)
"""A scored token below this logprob on both paths is in the tail: its |Δ| weighs next to nothing in KL."""
EXCESS_FLIPS_P = 0.01
"""Poisson tail probability below which the observed flips are more than noise explains."""


class Reading(str, Enum):
    """What one position's numbers say."""

    NOISE = "noise"
    UNCLEAR = "unclear"
    UNATTRIBUTABLE = "unattributable"
    TAIL = "tail"
    BUG = "bug"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PositionEvidence:
    reading: Reading
    why: str
    """A few words: ``|Δ| 0.51 > 0.1``, ``flip at gap 0.46 > 0.4``, ``flip at gap 0.12 < 0.3``."""
    systematic_flip: bool


def _num(value: float, threshold: float) -> str:
    """``value`` to 2 significant figures, or more when 2 would print it equal to ``threshold``."""
    for digits in (2, 3, 4, 6):
        text = f"{value:.{digits}g}"
        if float(text) != threshold:
            return text
    return f"{value:.6g}"


SYSTEMATIC_GAP_NAME = "the systematic-flip gap"
NEAR_TIE_NAME = "a near-tie"
"""What the two top-2 gaps are called wherever they appear (0.4 above which a flip needs a systematic shift; 0.3
below which a flip is a near-tie), so no bare ``> 0.4`` sits next to golden's confident-flip margin (1 nat)."""


def read_position(w: WorstPosition, *, kl: float | None = None, kl_limit: float | None = None) -> PositionEvidence:
    """Classify one position by its cross-path |Δ| and, at a flip, the reference's top-2 gap.

    ``kl`` (golden: the position's KL over the top-k, when the arrays are there) and ``kl_limit`` (golden's
    per-position limit, ``thresholds.golden.logit_kl``): a position over the limit reads as a bug by its KL, the
    measure golden judges, even when the scored token itself barely moved (the mass moved among the top-k)."""
    delta = abs(w.delta)
    gap = w.margin_ref
    if w.flip and gap is not None and gap > SYSTEMATIC_GAP_NATS:
        return PositionEvidence(
            Reading.BUG,
            f"flip at gap {_num(gap, SYSTEMATIC_GAP_NATS)} > {SYSTEMATIC_GAP_NATS:g}, {SYSTEMATIC_GAP_NAME}",
            True,
        )
    if kl is not None and kl_limit is not None and math.isfinite(kl) and kl > kl_limit:
        return PositionEvidence(Reading.BUG, f"KL {_num(kl, kl_limit)} > the per-position limit {kl_limit:g}", False)
    if not w.flip and math.isfinite(delta) and delta > NOISE_DELTA_NATS and max(w.lp_ref, w.lp_test) < TAIL_LOGPROB:
        return PositionEvidence(
            Reading.TAIL, f"p < 1e-4 on both paths: the scored token's |Δ| {delta:.2g} weighs ≈ 0 in KL", False
        )
    if not math.isfinite(delta) or delta > BUG_DELTA_NATS:
        return PositionEvidence(Reading.BUG, f"|Δ| {_num(delta, BUG_DELTA_NATS)} > {BUG_DELTA_NATS:g}", False)
    if w.flip and gap is not None and gap < UNATTRIBUTABLE_GAP_NATS:
        return PositionEvidence(
            Reading.UNATTRIBUTABLE,
            f"flip at gap {_num(gap, UNATTRIBUTABLE_GAP_NATS)} < {UNATTRIBUTABLE_GAP_NATS:g}, {NEAR_TIE_NAME}",
            False,
        )
    if delta <= NOISE_DELTA_NATS and not w.flip:
        return PositionEvidence(Reading.NOISE, f"|Δ| {_num(delta, NOISE_DELTA_NATS)} ≤ {NOISE_DELTA_NATS:g}", False)
    return PositionEvidence(Reading.UNCLEAR, f"|Δ| {delta:.2g} between noise and 0.1", False)


@dataclass(frozen=True)
class FlipEvidence:
    observed: int
    expected: float
    p_value: float

    @property
    def excess(self) -> bool:
        """More flips than noise explains (Poisson tail below ``EXCESS_FLIPS_P``)."""
        return self.p_value < EXCESS_FLIPS_P


def flip_evidence(observed: int | None, expected: float | None, *, p_value: float | None = None) -> FlipEvidence | None:
    """Observed flips against the number noise explains, when both are known; ``p_value`` (P(X ≥ observed)
    computed elsewhere, e.g. exactly) wins over the Poisson approximation."""
    if observed is None or expected is None or not math.isfinite(expected):
        return None
    if p_value is None or not math.isfinite(p_value):
        p_value = poisson_sf(int(observed), float(expected))
    return FlipEvidence(int(observed), float(expected), float(p_value))
