"""The shape of a divergence across positions and samples (where it starts says what broke; see
docs/background.md, "Which path diverged").

Pure numpy. A divergence from the very first compared token means the state was already wrong when decoding
started (a prefix restore); one that starts mid-generation points at state written during decode (a window
handoff, a checkpoint rotation); a few samples carrying most of the total points at those requests' shapes
(prompt length, cached tokens, page or chunk remainder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class SampleShape:
    """Per-sample divergence figures, positions in the order given (compared position 0 first)."""

    sample: int
    positions: int
    mean: float
    max: float
    total: float
    onset: int | None
    """Index of the first position whose value exceeds the threshold; None if none does."""
    leading_run: int
    """How many positions from the first one in a row exceed the threshold (0 if the first does not)."""

    @property
    def from_first(self) -> bool:
        """The divergence starts at the first compared position."""
        return self.onset == 0


def sample_shapes(values: npt.ArrayLike, sample: npt.ArrayLike, threshold: float) -> list[SampleShape]:
    """Split per-position ``values`` (k3, KL ...) by ``sample`` id; rows are in position order within a sample.

    One stable sort and ``reduceat`` per figure, so a million positions over thousands of samples stays fast.
    """
    v = np.asarray(values, dtype=np.float64)
    s = np.asarray(sample)
    if v.shape != s.shape or v.ndim != 1:
        raise ValueError(f"sample_shapes: values {v.shape} and sample {s.shape} must be one-dimensional and equal")
    if v.size == 0:
        return []
    order = np.argsort(s, kind="stable")
    v, s = v[order], s[order]
    ids, starts, counts = np.unique(s, return_index=True, return_counts=True)
    local = np.arange(v.size) - np.repeat(starts, counts)  # index within its sample
    over = v > threshold
    big = np.iinfo(np.int64).max
    onset = np.minimum.reduceat(np.where(over, local, big), starts)
    lead = np.minimum.reduceat(np.where(over, big, local), starts)
    totals = np.add.reduceat(v, starts)
    maxima = np.maximum.reduceat(v, starts)
    return [
        SampleShape(
            sample=int(ids[i]),
            positions=int(counts[i]),
            mean=float(totals[i] / counts[i]),
            max=float(maxima[i]),
            total=float(totals[i]),
            onset=None if onset[i] == big else int(onset[i]),
            leading_run=int(counts[i]) if lead[i] == big else int(lead[i]),
        )
        for i in range(ids.size)
    ]


def concentration(totals: npt.ArrayLike, top_fraction: float = 0.1) -> float:
    """Share of the summed divergence carried by the worst ``top_fraction`` of samples (at least one sample).

    1.0 when one sample carries everything; about ``top_fraction`` when every sample is shifted alike.
    0.0 for an all-zero input.
    """
    t = np.sort(np.asarray(totals, dtype=np.float64))[::-1]
    if t.size == 0:
        raise ValueError("concentration: no samples")
    whole = float(np.sum(t))
    if whole <= 0:
        return 0.0
    n = max(1, math.ceil(top_fraction * t.size))
    return float(np.sum(t[:n]) / whole)
