"""The golden check's extra rows in the report: KL summary, the noise band, KL by context depth. Pure.

Depth matters because some bugs grow with context (fp8 attention weights without scaling degrade
with depth), so a table of KL by depth tells "wrong everywhere" from "wrong deep in the context".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from precisionbot.fmt import count, sig
from precisionbot.metrics.flips import KL_FLOOR
from precisionbot.report.escape import label_text, prose
from precisionbot.results import CheckResult


@dataclass(frozen=True)
class DepthRow:
    depth: str
    positions: str
    kl_p50: str
    kl_p99: str
    kl_max: str
    flips: str


def _num(stats: Mapping[str, Any], key: str) -> float | None:
    v = stats.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def zero_band(band: Mapping[str, Any]) -> bool:
    """The producers agreed bit for bit (``NoiseBand.is_zero``): the band's KL is a floor, not a measurement."""
    return (
        _num(band, "sigma_nats") == 0.0
        and not _num(band, "max_flip_margin_nats")
        and not any((_num(band, k) or 0.0) > KL_FLOOR for k in ("kl_p50", "kl_p99"))
    )


def kl_line(c: CheckResult | None) -> str:
    """One sentence: KL tails and, when there is one, the noise band they are judged against."""
    if c is None or "kl_p99" not in c.stats:
        return ""
    s = c.stats
    text = (
        f"golden KL over the baseline's top-k + rest: p50 {sig(_num(s, 'kl_p50'))}, "
        f"p99 {sig(_num(s, 'kl_p99'))}, max {sig(_num(s, 'kl_max'))} nats"
    )
    phases = s.get("by_phase")
    if isinstance(phases, Mapping):
        parts = [
            f"{name} KL p99 {sig(_num(p, 'kl_p99'))} over {count(_num(p, 'positions'))} positions"
            for name, p in phases.items()
            if isinstance(p, Mapping) and p.get("positions")
        ]
        if len(parts) > 1:
            # Teacher-forced prefill vs decode steps: a divergence only in decode points at decode-time state.
            text += "; by phase: " + ", ".join(parts)
    diverged = s.get("decode_divergence")
    if isinstance(diverged, list) and diverged:
        # Why the position count moves between runs: after a sample's generation leaves the baseline's, the
        # contexts differ and nothing after that step can be compared.
        text += (
            f"; {count(len(diverged))} decode row(s) generated another token than the baseline, and decode is compared "
            "up to and including that step, so the position count moves with where generation leaves the baseline's"
        )
    band = s.get("band")
    if isinstance(band, Mapping) and band.get("pairs") and zero_band(band):
        text += (
            f"; the {count(_num(band, 'pairs'))} producer pair(s) of the baseline agree bit for bit "
            "(zero noise band): fixed thresholds apply"
        )
    elif isinstance(band, Mapping) and band.get("pairs"):
        text += (
            f"; noise band from {count(_num(band, 'pairs'))} producer pair(s): KL p99 {sig(_num(band, 'kl_p99'))},"
            f" σ {sig(_num(band, 'sigma_nats'))} nats, largest flip margin {sig(_num(band, 'max_flip_margin_nats'))}"
        )
    elif "band" in s:
        text += "; no noise band (one producer): fixed thresholds apply"
    return prose(text + ".")


def _depth_row(label: str, entry: Mapping[str, Any]) -> DepthRow:
    return DepthRow(
        depth=label,
        positions=count(_num(entry, "positions")),
        kl_p50=sig(_num(entry, "kl_p50")),
        kl_p99=sig(_num(entry, "kl_p99")),
        kl_max=sig(_num(entry, "kl_max")),
        flips=count(_num(entry, "flips")),
    )


def depth_rows(c: CheckResult | None) -> tuple[DepthRow, ...]:
    """KL by context depth (``stats["by_depth"]``, teacher-forced prefill positions), when the golden check
    split it, and a last row for the decode tail (``stats["by_phase"]["decode"]``): the generated positions
    past each prompt fall in no depth bucket, and a decode-time divergence lives exactly there."""
    if c is None or not isinstance(c.stats.get("by_depth"), list):
        return ()
    rows = [
        _depth_row(label_text(str(entry.get("depth", "?"))), entry)
        for entry in c.stats["by_depth"]
        if isinstance(entry, Mapping) and entry.get("positions")
    ]
    phases = c.stats.get("by_phase")
    decode = phases.get("decode") if isinstance(phases, Mapping) else None
    if rows and isinstance(decode, Mapping) and decode.get("positions"):
        rows.append(_depth_row("decode tail (generated)", decode))
    return tuple(rows)
