"""The golden check's extra rows in the report: KL summary, the noise band, KL by context depth. Pure.

Depth matters because some bugs grow with context (seed 003: fp8 attention weights without scaling degrade
with depth), so a table of KL by depth tells "wrong everywhere" from "wrong deep in the context".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from precisionbot.fmt import count, sig
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
    band = s.get("band")
    if isinstance(band, Mapping) and band.get("pairs"):
        text += (
            f"; noise band from {count(_num(band, 'pairs'))} producer pair(s): KL p99 {sig(_num(band, 'kl_p99'))},"
            f" σ {sig(_num(band, 'sigma_nats'))} nats, largest flip margin {sig(_num(band, 'max_flip_margin_nats'))}"
        )
    elif "band" in s:
        text += "; no noise band (one producer): fixed thresholds apply"
    return prose(text + ".")


def depth_rows(c: CheckResult | None) -> tuple[DepthRow, ...]:
    """KL by context depth (``stats["by_depth"]``), when the golden check split it."""
    if c is None or not isinstance(c.stats.get("by_depth"), list):
        return ()
    rows = []
    for entry in c.stats["by_depth"]:
        if not isinstance(entry, Mapping) or not entry.get("positions"):
            continue
        rows.append(
            DepthRow(
                depth=label_text(str(entry.get("depth", "?"))),
                positions=count(_num(entry, "positions")),
                kl_p50=sig(_num(entry, "kl_p50")),
                kl_p99=sig(_num(entry, "kl_p99")),
                kl_max=sig(_num(entry, "kl_max")),
                flips=count(_num(entry, "flips")),
            )
        )
    return tuple(rows)
