"""A per-position picture of the worst samples: a k3 heat strip in Unicode block characters.

GitHub renders a fenced code block in any comment, on any client, so a strip of ``▁▂▃▄▅▆▇█`` (one
character per bin of positions, height = log10 of the bin's largest k3) shows *where* in a sequence the
divergence sits — from the first token (a restored prefix), from the middle (a handoff), scattered (noise)
— at a glance. The numbers under it (onset, max) carry the same facts in plain text. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precisionbot.fmt import count, sig
from precisionbot.metrics import k3
from precisionbot.results import PositionRecord

LEVELS = "▁▂▃▄▅▆▇█"
ZERO = "·"
"""Exactly zero (bit-identical paths): distinguishable from tiny noise."""
LOW_DECADE = -6
"""k3 below 1e-6 draws the lowest bar; each next bar is one decade up; ≥ 1 draws the full block."""
WIDTH = 64
"""Characters per strip; longer samples are binned (each character shows its bin's maximum)."""

LEGEND = f"{ZERO} 0  ▁ <1e-6  ▂ <1e-5  ▃ <1e-4  ▄ <1e-3  ▅ <1e-2  ▆ <0.1  ▇ <1  █ ≥1"


def level(value: float) -> str:
    """The bar for one k3 value (NaN/inf draw the full block: a non-finite logprob is the worst case)."""
    if value == 0.0:
        return ZERO
    if not math.isfinite(value) or value >= 1.0:
        return LEVELS[-1]
    decade = math.floor(math.log10(value))
    return LEVELS[min(len(LEVELS) - 1, max(0, decade - LOW_DECADE + 1))]


def render_strip(values: np.ndarray, width: int = WIDTH) -> tuple[str, int]:
    """``values`` (k3 per position, in order) as at most ``width`` bars; returns ``(bars, positions per bar)``."""
    n = len(values)
    if n == 0:
        return "", 1
    per_bar = max(1, math.ceil(n / width))
    bars = []
    for start in range(0, n, per_bar):
        chunk = values[start : start + per_bar]
        finite = chunk[np.isfinite(chunk)]
        worst = math.inf if len(finite) < len(chunk) else float(np.max(chunk))
        bars.append(level(worst))
    return "".join(bars), per_bar


@dataclass(frozen=True)
class Strip:
    check: str
    sample: int
    bars: str
    per_bar: int
    positions: int
    max_k3: str
    onset: str
    """First position (0 = first compared) over the onset threshold, or ``–``."""


def worst_strips(
    check: str, record: PositionRecord, *, samples: int = 3, onset_k3: float = 1e-3, width: int = WIDTH
) -> tuple[Strip, ...]:
    """Strips for the ``samples`` samples of ``record`` with the largest per-position k3."""
    if len(record) == 0:
        return ()
    values = k3(record.delta)
    # NaN sorts as the worst: a non-finite logprob is never hidden behind a finite one.
    score = np.where(np.isfinite(values), values, np.inf)
    # One sort groups the positions by sample (linear-logarithmic: a mask per sample would be quadratic
    # when every position is its own sample).
    order = np.lexsort((record.position, record.sample))
    ids, starts = np.unique(record.sample[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    peaks = np.maximum.reduceat(score[order], starts)
    chosen = np.lexsort((ids, -peaks))[:samples]
    out = []
    for i in chosen:
        s = int(ids[i])
        v = values[order[starts[i] : ends[i]]]
        bars, per_bar = render_strip(v, width)
        over = np.flatnonzero(~(v <= onset_k3))
        out.append(
            Strip(
                check=check,
                sample=s,
                bars=bars,
                per_bar=per_bar,
                positions=len(v),
                max_k3=sig(float(np.max(np.where(np.isfinite(v), v, np.inf)))),
                onset=count(int(over[0])) if len(over) else "–",
            )
        )
    return tuple(out)
