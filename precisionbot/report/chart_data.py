"""The HTML report's figures as data: what each chart plots, already thinned. Pure: numpy only, no plotting.

Seed 003 makes its case with four pictures, and the report draws the same ones from a result directory:

* the per-position k3 (golden: KL) along the worst samples of each check, the onset marked: a line high from
  the first generated token is a state that was wrong before generation began (a restored prefix), one that
  rises midway is a handoff, isolated spikes are noise;
* the baseline's top-2 gap (margin) against KL at every scored golden position, flips highlighted, the
  confident-flip margin drawn: flips left of it are near-ties that noise flips too, flips right of it need a
  systematic shift;
* the flip rate per margin bucket against the noise band's rate;
* golden KL by context depth, and the distribution (CDF) of per-position KL for prose and code.

Sizes are bounded here, deterministically (no random sampling, so two renders of one result are identical):
a line keeps each bin's largest value, a scatter keeps every flip, the largest KLs and an even stride of the
rest, a CDF keeps fixed quantiles. :mod:`precisionbot.report.chart_svg` turns these into SVG.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot import metrics
from precisionbot.report.buckets import bucket_numbers
from precisionbot.results import CheckResult, PositionRecord, RunResult, Verdict

F64 = npt.NDArray[np.float64]

LINE_SAMPLES = 4
"""Samples drawn per check: the worst by their largest per-position value."""
LINE_POINTS = 400
"""Points per sample line at most; longer samples are binned and each bin shows its largest value."""
SCATTER_POINTS = 3000
"""Points in the margin-vs-KL scatter at most (every flip is kept first, up to this many)."""
CDF_POINTS = 200
"""Quantiles per CDF curve."""
ONSET_K3 = 1e-3
"""Onset threshold when the check does not record its own (``extra.thresholds.onset_k3``)."""
FLOOR = 1e-12
"""Values at or below this (exact zeros included) are drawn on this line of the log axis."""
BOUNDARY_KEYS = (("chunked_prefill_size", "prefill chunk"), ("sliding_window_size", "sliding window"))
"""Engine settings (``/server_info``, copied into ``result.json``'s environment) drawn as boundaries."""


@dataclass(frozen=True)
class SampleLine:
    sample: int
    position: F64
    """Token positions in the sample (prompt + output), one per point."""
    value: F64
    """The bin's largest k3 (or KL), floored at :data:`FLOOR`; NaN/inf drawn at the top."""
    onset: int | None
    """First position over the threshold, or None."""


@dataclass(frozen=True)
class PositionLines:
    check: str
    measure: str
    """``k3`` (consistency helpers) or ``KL`` (golden)."""
    lines: tuple[SampleLine, ...]
    threshold: float | None
    threshold_label: str
    boundaries: tuple[tuple[str, tuple[int, ...]], ...]
    """``(what, positions)``: prefill chunk starts, the sliding window's edge."""
    samples: int
    """Samples in the check (the lines show the worst :data:`LINE_SAMPLES`)."""


@dataclass(frozen=True)
class MarginScatter:
    margin: F64
    kl: F64
    flip: npt.NDArray[np.bool_]
    positions: int
    """Scored positions before thinning."""
    flips: int
    confident_margin: float | None
    """Flips at a larger baseline margin are confident (``stats.confident_flip_limit_nats``)."""


@dataclass(frozen=True)
class BucketBars:
    check: str
    labels: tuple[str, ...]
    rate: tuple[float, ...]
    band_rate: tuple[float | None, ...]
    flips: tuple[int, ...]


@dataclass(frozen=True)
class DepthLines:
    labels: tuple[str, ...]
    kl_p50: tuple[float, ...]
    kl_p99: tuple[float, ...]
    kl_max: tuple[float, ...]


@dataclass(frozen=True)
class CdfSeries:
    name: str
    kl: F64
    """KL at each quantile in :attr:`KlCdf.fraction` (floored at :data:`FLOOR`)."""
    positions: int


@dataclass(frozen=True)
class KlCdf:
    fraction: F64
    series: tuple[CdfSeries, ...]


@dataclass(frozen=True)
class SectionFigures:
    lines: tuple[PositionLines, ...] = ()
    scatter: MarginScatter | None = None
    buckets: tuple[BucketBars, ...] = ()
    depth: DepthLines | None = None
    cdf: KlCdf | None = None

    def __len__(self) -> int:
        return (
            len(self.lines)
            + (self.scatter is not None)
            + len(self.buckets)
            + (self.depth is not None)
            + (self.cdf is not None)
        )


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _floored(values: F64) -> F64:
    # NaN and inf mean "infinitely wrong": they go to the top, never vanish below the axis.
    out = np.where(np.isfinite(values), values, np.inf)
    return np.maximum(out, FLOOR)


def thin_line(position: npt.NDArray[Any], value: F64, points: int = LINE_POINTS) -> tuple[F64, F64]:
    """``(position, value)`` binned to at most ``points`` points, each the bin's largest value (so a spike is
    never thinned away) at the bin's first position."""
    n = len(value)
    if n <= points:
        return position.astype(np.float64), _floored(value)
    per_bin = math.ceil(n / points)
    starts = np.arange(0, n, per_bin)
    peak = np.maximum.reduceat(_floored(value), starts)
    return position[starts].astype(np.float64), peak


def record_values(check: CheckResult, record: PositionRecord) -> tuple[F64, str]:
    """Per-position values to draw: golden's KL over the top-k (when the arrays hold top-k), else k3."""
    if check.name == "golden" and record.top_ids_ref is not None and record.top_ids_test is not None:
        assert record.top_lp_ref is not None and record.top_lp_test is not None
        kl = metrics.topk_union_kl(
            record.top_ids_ref,
            record.top_lp_ref.astype(np.float64),
            record.top_ids_test,
            record.top_lp_test.astype(np.float64),
        )
        return np.asarray(kl, dtype=np.float64), "KL"
    return metrics.k3(record.delta), "k3"


def _onset_threshold(check: CheckResult) -> tuple[float | None, str]:
    if check.name == "golden":
        band = check.stats.get("band")
        p99 = _num(band.get("kl_p99")) if isinstance(band, Mapping) else None
        return (p99, "noise band KL p99") if p99 else (None, "")
    limits = check.extra.get("thresholds")
    onset = _num(limits.get("onset_k3")) if isinstance(limits, Mapping) else None
    value = onset if onset and onset > 0 else ONSET_K3
    return value, f"onset threshold {value:g}"


def _boundaries(environment: Mapping[str, Any], lo: int, hi: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out = []
    for key, what in BOUNDARY_KEYS:
        size = _num(environment.get(key))
        if not size or size < 1:
            continue
        step = int(size)
        marks: tuple[int, ...]
        if key == "sliding_window_size":
            marks = (step,) if lo <= step <= hi else ()
        else:
            first = (lo // step + 1) * step
            marks = tuple(range(first, hi + 1, step))[:50]
        if marks:
            out.append((what, marks))
    return tuple(out)


def position_lines(
    check: CheckResult,
    record: PositionRecord,
    environment: Mapping[str, Any],
    samples: int = LINE_SAMPLES,
    computed: tuple[F64, str] | None = None,
) -> PositionLines | None:
    """The worst ``samples`` samples of ``check`` as lines along their positions (``computed``: the
    :func:`record_values` of this record, when the caller has them already)."""
    if len(record) == 0:
        return None
    values, measure = computed or record_values(check, record)
    threshold, label = _onset_threshold(check)
    score = np.where(np.isfinite(values), values, np.inf)
    ids = np.unique(record.sample)
    peaks = sorted(((float(np.max(score[record.sample == s])), int(s)) for s in ids), key=lambda p: (-p[0], p[1]))
    lines = []
    for _, s in peaks[:samples]:
        mask = record.sample == s
        order = np.argsort(record.position[mask], kind="stable")
        pos, val = record.position[mask][order], values[mask][order]
        # A passing check has no onset to mark: its values are within the thresholds, a marker would read as a bug.
        marked = threshold is not None and check.verdict is Verdict.FAIL
        over = np.flatnonzero(~(val <= threshold)) if marked else np.zeros(0, dtype=np.int64)
        x, y = thin_line(pos, val)
        lines.append(SampleLine(sample=s, position=x, value=y, onset=int(pos[over[0]]) if len(over) else None))
    return PositionLines(
        check=check.name,
        measure=measure,
        lines=tuple(lines),
        threshold=threshold,
        threshold_label=label,
        boundaries=_boundaries(environment, int(np.min(record.position)), int(np.max(record.position))),
        samples=len(ids),
    )


def thin_scatter(kl: F64, flip: npt.NDArray[np.bool_], points: int = SCATTER_POINTS) -> npt.NDArray[np.int64]:
    """Indices to draw: every flip (up to ``points``, largest KL first), then the largest KLs (a quarter of
    what is left), then an even stride of the rest. Deterministic."""
    n = len(kl)
    if n <= points:
        return np.arange(n, dtype=np.int64)
    key = np.where(np.isfinite(kl), kl, np.inf)
    by_kl = np.argsort(-key, kind="stable")
    flips = by_kl[flip[by_kl]][:points]
    chosen = np.zeros(n, dtype=bool)
    chosen[flips] = True
    left = points - len(flips)
    top = [i for i in by_kl[: left // 4 + len(flips)] if not chosen[i]][: left // 4]
    chosen[top] = True
    rest = np.flatnonzero(~chosen)
    room = points - int(np.count_nonzero(chosen))
    if room > 0 and len(rest):
        chosen[rest[np.linspace(0, len(rest) - 1, min(room, len(rest))).round().astype(np.int64)]] = True
    return np.flatnonzero(chosen).astype(np.int64)


def margin_scatter(check: CheckResult, record: PositionRecord, kl: F64 | None = None) -> MarginScatter | None:
    """Seed 003's scatter: the baseline's top-2 gap against KL at every scored golden position."""
    if record.top_ids_ref is None or record.top_ids_test is None or record.top_lp_ref is None or len(record) == 0:
        return None
    kl = record_values(check, record)[0] if kl is None else kl
    if record.top_lp_ref.shape[1] < 2:
        return None
    margin = np.asarray(metrics.margin(record.top_lp_ref.astype(np.float64)), dtype=np.float64)
    flip = np.asarray(metrics.top1_flip(record.top_ids_ref, record.top_ids_test), dtype=bool)
    keep = thin_scatter(kl, flip)
    limit = _num(check.stats.get("confident_flip_limit_nats"))
    return MarginScatter(
        margin=np.where(np.isfinite(margin[keep]), margin[keep], 0.0),
        kl=_floored(kl[keep]),
        flip=flip[keep],
        positions=len(record),
        flips=int(np.count_nonzero(flip)),
        confident_margin=limit if limit is not None and math.isfinite(limit) else None,
    )


def bucket_bars(check: CheckResult) -> BucketBars | None:
    rows = [r for r in bucket_numbers(check) if r.rate is not None]
    if not rows:
        return None
    return BucketBars(
        check=check.name,
        labels=tuple(r.label for r in rows),
        rate=tuple(float(r.rate or 0.0) for r in rows),
        band_rate=tuple(r.band_rate for r in rows),
        flips=tuple(int(r.flips or 0) for r in rows),
    )


def depth_lines(check: CheckResult) -> DepthLines | None:
    entries = [e for e in check.stats.get("by_depth") or () if isinstance(e, Mapping) and e.get("positions")]
    phases = check.stats.get("by_phase")
    decode = phases.get("decode") if isinstance(phases, Mapping) else None
    if entries and isinstance(decode, Mapping) and decode.get("positions"):
        entries.append({**decode, "depth": "decode tail"})
    if not entries:
        return None

    def col(key: str) -> tuple[float, ...]:
        return tuple(max(_num(e.get(key)) or 0.0, FLOOR) for e in entries)

    return DepthLines(
        labels=tuple(str(e.get("depth", "?")) for e in entries),
        kl_p50=col("kl_p50"),
        kl_p99=col("kl_p99"),
        kl_max=col("kl_max"),
    )


def kl_cdf(check: CheckResult, record: PositionRecord, points: int = CDF_POINTS, kl: F64 | None = None) -> KlCdf | None:
    """The CDF of per-position KL, one curve per document kind (``extra.sample_kinds``: prose, code)."""
    if record.top_ids_ref is None or len(record) == 0:
        return None
    kl = record_values(check, record)[0] if kl is None else kl
    kinds = check.extra.get("sample_kinds")
    groups: list[tuple[str, npt.NDArray[np.bool_]]] = [("all positions", np.ones(len(record), dtype=bool))]
    if isinstance(kinds, Sequence) and not isinstance(kinds, str) and kinds:
        names = np.asarray([str(k) for k in kinds] + [""])
        of = names[np.clip(record.sample, 0, len(kinds))]
        split = [(str(k), of == k) for k in sorted({str(k) for k in kinds})]
        if len(split) > 1:
            groups = split
    fraction = np.linspace(0.0, 1.0, points)
    series = []
    for name, mask in groups:
        values = _floored(kl[mask])
        if len(values):
            series.append(CdfSeries(name=name, kl=np.quantile(values, fraction), positions=len(values)))
    return KlCdf(fraction=fraction, series=tuple(series)) if series else None


def section_figures(run: RunResult, records: Mapping[str, PositionRecord]) -> SectionFigures:
    """Every figure a result directory supports (a check without per-position arrays draws only its stats)."""
    # Golden's per-position KL feeds three figures: computed once.
    golden, golden_record = run.check("golden"), records.get("golden")
    golden_values = record_values(golden, golden_record) if golden and golden_record is not None else None
    lines = []
    # Failing checks first: the first chart on the page is the one that explains the verdict.
    for c in sorted(run.checks, key=lambda c: c.verdict is not Verdict.FAIL):
        record = records.get(c.name)
        computed = golden_values if c is golden else None
        drawn = position_lines(c, record, run.environment, computed=computed) if record is not None else None
        if drawn is not None:
            lines.append(drawn)
    scatter = cdf = None
    if golden is not None and golden_record is not None and golden_values is not None:
        scatter = margin_scatter(golden, golden_record, golden_values[0])
        cdf = kl_cdf(golden, golden_record, kl=golden_values[0])
    buckets = tuple(b for c in run.checks if (b := bucket_bars(c)) is not None)
    return SectionFigures(
        lines=tuple(lines),
        scatter=scatter,
        buckets=buckets,
        depth=depth_lines(golden) if golden is not None else None,
        cdf=cdf,
    )
