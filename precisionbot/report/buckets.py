"""Flips by margin bucket (docs/background.md, golden): a flip's meaning depends on how close the baseline's top-2 were.

``stats["flips_by_margin"]`` comes from the golden check. Accepted shapes (the golden check writes the
first; the others keep older or hand-made result files readable):

* ``[{"bucket": "[0, 0.1)", "lo": 0, "hi": 0.1, "flips": 3, "positions": 1200, "rate": 0.0025}, ...]``
  (``precisionbot.metrics.flips.flips_by_margin``), with the band's rate per bucket in
  ``stats["band"]["flip_rate_by_bucket"]``;
* ``{"[0, 0.1)": {"flips": 3, "positions": 1200, "band_rate": 0.002}, "[1, inf)": {...}}``
* ``{"0-0.1": 3, "1+": 0}`` (flip counts only)

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from precisionbot.fmt import count, percent
from precisionbot.report.escape import label_text
from precisionbot.results import CheckResult

# Margins are never negative: a "-" between numbers is a range dash, not a sign.
_NUMBER = re.compile(r"inf|∞|\d+(?:\.\d*)?(?:e[-+]?\d+)?", re.IGNORECASE)


@dataclass(frozen=True)
class BucketRow:
    check: str
    bucket: str
    flips: str
    positions: str
    rate: str
    band_rate: str


def _bounds(label: str) -> tuple[float, float] | None:
    nums = [math.inf if n.lower() in ("inf", "∞") else float(n) for n in _NUMBER.findall(label)]
    if not nums:
        return None
    return (nums[0], nums[1] if len(nums) > 1 else math.inf)


def _bucket_label(lo: float, hi: float) -> str:
    return f"[{lo:g}, ∞)" if math.isinf(hi) else f"[{lo:g}, {hi:g})"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _entries(raw: Any) -> list[tuple[float, float, Mapping[str, Any]]]:
    out: list[tuple[float, float, Mapping[str, Any]]] = []
    if isinstance(raw, Mapping):
        for label, value in raw.items():
            b = _bounds(str(label))
            if b is None:
                continue
            entry = value if isinstance(value, Mapping) else {"flips": value}
            out.append((b[0], b[1], entry))
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping) and _num(item.get("lo")) is not None:
                hi = _num(item.get("hi"))
                out.append((float(item["lo"]), math.inf if hi is None else hi, item))
    return sorted(out, key=lambda e: e[0])


@dataclass(frozen=True)
class BucketNumbers:
    """One bucket's numbers before formatting (the HTML report's bar chart draws these)."""

    label: str
    flips: float | None
    positions: float | None
    rate: float | None
    band_rate: float | None


def bucket_numbers(check: CheckResult) -> tuple[BucketNumbers, ...]:
    """The check's flips-by-margin buckets as numbers (empty when it has none)."""
    out = []
    band = check.stats.get("band")
    band_rates = band.get("flip_rate_by_bucket") if isinstance(band, Mapping) else None
    for lo, hi, entry in _entries(check.stats.get("flips_by_margin")):
        band_rate = _num(entry.get("band_rate"))
        if band_rate is None and isinstance(band_rates, Mapping):
            band_rate = _num(band_rates.get(str(entry.get("bucket"))))
        flips = _num(entry.get("flips"))
        positions = _num(entry.get("positions"))
        rate = _num(entry.get("rate"))
        if rate is None and flips is not None and positions:
            rate = flips / positions
        out.append(BucketNumbers(_bucket_label(lo, hi), flips, positions, rate, band_rate))
    return tuple(out)


def bucket_rows(check: CheckResult) -> tuple[BucketRow, ...]:
    """The check's flips-by-margin rows (empty when it has none)."""
    return tuple(
        BucketRow(
            check=label_text(check.name),
            bucket=b.label,
            flips=count(b.flips),
            positions=count(b.positions),
            rate=percent(b.rate),
            band_rate=percent(b.band_rate),
        )
        for b in bucket_numbers(check)
    )
