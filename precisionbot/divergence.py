"""The shape of a divergence across positions and samples (seed 002: where it starts says what broke).

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
    """Split per-position ``values`` (k3, KL ...) by ``sample`` id (rows in position order within a sample)."""
    v = np.asarray(values, dtype=np.float64)
    s = np.asarray(sample)
    if v.shape != s.shape:
        raise ValueError(f"sample_shapes: values {v.shape} and sample {s.shape} differ")
    out = []
    for sid in np.unique(s):
        x = v[s == sid]
        over = x > threshold
        hits = np.flatnonzero(over)
        lead = int(np.argmin(over)) if not over.all() else int(over.size)
        out.append(
            SampleShape(
                sample=int(sid),
                positions=int(x.size),
                mean=float(np.mean(x)),
                max=float(np.max(x)),
                total=float(np.sum(x)),
                onset=int(hits[0]) if hits.size else None,
                leading_run=lead,
            )
        )
    return out


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
