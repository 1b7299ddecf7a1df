"""``baseline history``: each baseline's golden and helper statistics over time, against the previous run
*and the first* of its signature.

Seed 003's lesson: ten PRs each within threshold of the one before can end far from where they started, so a
drift is read against the signature's first baseline, not only the previous one. Golden: the mean KL (over
the baseline's top-k + rest) and top-1 flips of each run's record against the first's and the previous
one's (the same prompts: a golden run replays its baseline's token ids). Helpers: each helper's median over
reruns of ``mean_k3`` and its ratio to the first run that has helper reruns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionbot.baselines.accept import accepted
from precisionbot.baselines.catalog import golden_or_warn, list_runs
from precisionbot.baselines.helper_reruns import HelperRuns, load_helpers
from precisionbot.baselines.record import META_NAME, RunMeta
from precisionbot.baselines.skips import warn_skipped
from precisionbot.baselines.store import CorruptObject, Store
from precisionbot.fmt import plain
from precisionbot.results import CONSISTENCY_CHECKS
from precisionbot.results.golden_record import GoldenRecord
from precisionbot.scoring.golden_compare import LayoutMismatch, compare_records


@dataclass(frozen=True)
class HistoryRow:
    run: RunMeta
    golden_vs_first: dict[str, float] | None = None
    """``{"kl_mean", "flips"}`` against the signature's first run; None for the first or a mismatch."""
    golden_vs_previous: dict[str, float] | None = None
    helpers: dict[str, dict[str, float]] = field(default_factory=dict)
    """helper → ``{"mean_k3", "reruns", "vs_first"}`` (``vs_first``: ratio of medians)."""

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {
            "run_id": r.run_id,
            "model": r.model,
            "signature": r.signature,
            "created": r.created,
            "label": r.label,
            "producer": r.producer,
            "engine_commit": r.engine_commit,
            "positions": r.stats.get("positions"),
            "golden_vs_first": _finite(self.golden_vs_first),
            "golden_vs_previous": _finite(self.golden_vs_previous),
            "helpers": _finite(self.helpers),
            "accepted": None if accepted(r) is None else dict(accepted(r) or {}),
            "fingerprint": dict(r.fingerprint),
        }


def _finite(value: Any) -> Any:
    """Strict JSON: an unknown figure (NaN) is ``null``."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _golden(store: Store, meta: RunMeta) -> GoldenRecord | None:
    """The run's golden record; None without one or when it is corrupt (skipped with its warning)."""
    if not isinstance(meta.extra.get("golden"), dict):
        return None
    return golden_or_warn(store, meta)


def _helpers(store: Store, meta: RunMeta) -> HelperRuns | None:
    try:
        return load_helpers(store, meta)
    except CorruptObject as exc:
        warn_skipped(store, meta.prefix + META_NAME, str(exc))
        return None


def _versus(a: GoldenRecord | None, b: GoldenRecord | None) -> dict[str, float] | None:
    if a is None or b is None:
        return None
    try:
        c = compare_records(a, b)
    except LayoutMismatch:
        return None
    kl = c.kl[np.isfinite(c.kl)]
    return {"kl_mean": float(np.mean(kl)) if kl.size else math.nan, "flips": float(np.sum(c.flip))}


def _helper_medians(h: HelperRuns) -> dict[str, dict[str, float]]:
    out = {}
    for name in h.helpers:
        values = h.run_stats[name]["mean_k3"]
        finite = values[np.isfinite(values)]
        out[name] = {"mean_k3": float(np.median(finite)) if finite.size else math.nan, "reruns": h.reruns(name)}
    return out


def history(store: Store, model: str | None = None) -> list[HistoryRow]:
    """Rows oldest first, grouped by (model, signature); failed runs are listed but compared with nothing."""
    runs = list(reversed(list_runs(store, model)))
    groups: dict[tuple[str, str], list[RunMeta]] = {}
    for r in runs:
        groups.setdefault((r.model, r.signature), []).append(r)
    rows: list[HistoryRow] = []
    for members in groups.values():
        rows.extend(_group(store, members))
    return rows


def _group(store: Store, members: Sequence[RunMeta]) -> list[HistoryRow]:
    out: list[HistoryRow] = []
    first: GoldenRecord | None = None
    previous: GoldenRecord | None = None
    first_helpers: dict[str, dict[str, float]] | None = None
    for meta in members:
        if meta.label == "failed":
            out.append(HistoryRow(meta))
            continue
        record = _golden(store, meta)
        vs_first = _versus(first, record) if first is not None else None
        vs_prev = _versus(previous, record) if previous is not None else None
        if first is None:
            first = record
        previous = record if record is not None else previous
        helpers = _helpers(store, meta)
        medians = _helper_medians(helpers) if helpers is not None else {}
        if medians and first_helpers is None:
            first_helpers = medians
        for name, m in medians.items():
            base = (first_helpers or {}).get(name, {}).get("mean_k3")
            m["vs_first"] = m["mean_k3"] / base if base and base > 0 and math.isfinite(base) else math.nan
        out.append(HistoryRow(meta, vs_first, vs_prev, medians))
    return out


def table(rows: Sequence[HistoryRow]) -> list[tuple[str, ...]]:
    """The text table's rows (a header first)."""
    head = ("date", "run", "commit", "label", "signature", "golden KL vs first", "vs prev", "flips vs first")
    helper_cols = tuple(f"{h} mean_k3 (vs first)" for h in CONSISTENCY_CHECKS)
    out = [(*head, *helper_cols, "accepted")]
    for row in rows:
        r = row.run
        first, prev = row.golden_vs_first, row.golden_vs_previous
        cells = [
            r.date,
            r.run_id,
            (r.engine_commit or "-")[:12],
            r.label,
            r.signature,
            _g(first, "kl_mean"),
            _g(prev, "kl_mean"),
            "-" if first is None else str(int(first["flips"])),
        ]
        for h in CONSISTENCY_CHECKS:
            m = row.helpers.get(h)
            if m is None:
                cells.append("-")
            else:
                ratio = m.get("vs_first", math.nan)
                cells.append(f"{_fmt(m['mean_k3'])} ({'-' if math.isnan(ratio) else f'{ratio:.2g}x'})")
        cells.append(accepted_text(r))
        out.append(tuple(cells))
    return out


def accepted_text(meta: RunMeta) -> str:
    """``PR #12 by alice: fp32 router GEMM`` for an accepted change, ``-`` otherwise."""
    a = accepted(meta)
    return "-" if a is None else f"PR #{a.get('pr')} by {a.get('by')}: {a.get('reason')}"


def _g(d: dict[str, float] | None, key: str) -> str:
    return "-" if d is None else _fmt(d[key])


def _fmt(x: float) -> str:

    return "-" if math.isnan(x) else plain(x)
