"""``baseline history --format html``: each model's golden drift and helper noise over its baselines, one
self-contained page (inline SVG, no script, nothing fetched).

Per model and signature: golden's mean KL against the signature's *first* baseline and against the previous
one (ten steps each under the threshold can add up to a drift none of them shows), and each consistency
helper's mean k3 (the median over the baseline's reruns), with the thresholds drawn, accepted changes
marked (who, which PR, why) and failed runs crossed out. Pure: rows and thresholds in, HTML out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from precisionbot.baselines.accept import accepted
from precisionbot.baselines.history import HistoryRow, table
from precisionbot.config import ThresholdSet
from precisionbot.results import CONSISTENCY_CHECKS

WIDTH, HEIGHT, PAD_L, PAD_R, PAD_T, PAD_B = 760, 220, 70, 20, 16, 46
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b1f24; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 14px; margin: 14px 0 4px; }
table { border-collapse: collapse; font-size: 12px; margin-top: 8px; }
td, th { border: 1px solid #d0d7de; padding: 2px 6px; text-align: left; white-space: nowrap; }
.accepted { background: #fff8c5; } .failed { color: #8c959f; text-decoration: line-through; }
svg text { font: 11px system-ui, sans-serif; fill: #57606a; }
.note { color: #57606a; }
"""


def history_page(rows: Sequence[HistoryRow], thresholds: ThresholdSet, store_uri: str) -> str:
    groups: dict[tuple[str, str], list[HistoryRow]] = {}
    for row in rows:
        groups.setdefault((row.run.model, row.run.signature), []).append(row)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<title>precisionbot baseline history</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Baseline history <span class='note'>{_e(store_uri)}</span></h1>",
        "<p class='note'>Golden: mean KL of each baseline against the signature's first (the drift) and the "
        "previous one. Helpers: the median over the baseline's reruns of each helper's mean k3. Dashed: the "
        "thresholds; yellow: an accepted numerics change; grey, struck out: a failed run (never a baseline).</p>",
    ]
    if not groups:
        parts.append("<p>No runs in this store.</p>")
    for (model, signature), members in groups.items():
        parts.append(f"<h2 id='{_e(signature)}'>{_e(model)} <span class='note'>signature {_e(signature)}</span></h2>")
        parts.append(_accepts(members))
        labels = [_label(r) for r in members]
        marks = [i for i, r in enumerate(members) if accepted(r.run) is not None]
        first = [None if r.golden_vs_first is None else r.golden_vs_first.get("kl_mean") for r in members]
        prev = [None if r.golden_vs_previous is None else r.golden_vs_previous.get("kl_mean") for r in members]
        parts.append("<h3>Golden: mean KL (nats) against the first baseline and the previous one</h3>")
        parts.append(
            _chart(
                labels,
                [("vs first (drift)", first), ("vs previous", prev)],
                [(f"golden.logit_kl {thresholds.golden.logit_kl:g} (per-position limit)", thresholds.golden.logit_kl)],
                marks,
                "golden",
            )
        )
        helper_series = []
        for h in CONSISTENCY_CHECKS:
            values = [r.helpers.get(h, {}).get("mean_k3") for r in members]
            if any(v is not None for v in values):
                helper_series.append((h, values))
        if helper_series:
            parts.append("<h3>Helpers: mean k3 (median over the baseline's reruns)</h3>")
            parts.append(
                _chart(labels, helper_series, [(f"kl_div {thresholds.kl_div:g}", thresholds.kl_div)], marks, "helpers")
            )
        parts.append(_table(members))
    parts.append("</body></html>")
    return "\n".join(parts)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _label(row: HistoryRow) -> str:
    return f"{(row.run.engine_commit or '-')[:7]} {row.run.date[5:]}"


def _accepts(members: Sequence[HistoryRow]) -> str:
    items = []
    for r in members:
        a = accepted(r.run)
        if a is not None:
            replaced = a.get("replaces") or {}
            items.append(
                f"<li class='accepted'>{_e(r.run.date)}: accepted by {_e(a.get('by'))} in PR #{_e(a.get('pr'))}: "
                f"“{_e(a.get('reason'))}” (replaces {_e(replaced.get('run_id', 'nothing'))})</li>"
            )
    return f"<ul>{''.join(items)}</ul>" if items else ""


def _chart(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    lines: Sequence[tuple[str, float]],
    marks: Sequence[int],
    name: str,
) -> str:
    values = [v for _, vs in series for v in vs if v is not None and math.isfinite(v)]
    top = max([*values, *(y for _, y in lines), 1e-12]) * 1.15
    n = len(labels)
    inner_w, inner_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def x(i: int) -> float:
        return PAD_L + (inner_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return PAD_T + inner_h * (1 - v / top)

    out = [
        f"<svg class='chart' data-chart='{_e(name)}' width='{WIDTH}' height='{HEIGHT}' "
        f"viewBox='0 0 {WIDTH} {HEIGHT}' role='img' aria-label='{_e(name)}'>",
        f"<line x1='{PAD_L}' y1='{PAD_T + inner_h}' x2='{WIDTH - PAD_R}' y2='{PAD_T + inner_h}' stroke='#8c959f'/>",
        f"<line x1='{PAD_L}' y1='{PAD_T}' x2='{PAD_L}' y2='{PAD_T + inner_h}' stroke='#8c959f'/>",
        f"<text x='{PAD_L - 6}' y='{PAD_T + 4}' text-anchor='end'>{top:.2g}</text>",
        f"<text x='{PAD_L - 6}' y='{PAD_T + inner_h}' text-anchor='end'>0</text>",
    ]
    for i in marks:
        out.append(
            f"<rect class='accepted-mark' x='{x(i) - inner_w / n / 2:.1f}' y='{PAD_T}' width='{inner_w / n:.1f}' "
            f"height='{inner_h}' fill='#fff8c5'/>"
        )
        out.append(f"<text x='{x(i):.1f}' y='{PAD_T + 10}' text-anchor='middle'>accepted</text>")
    for text, level in lines:
        out.append(
            f"<line class='threshold' x1='{PAD_L}' y1='{y(level):.1f}' x2='{WIDTH - PAD_R}' y2='{y(level):.1f}' "
            "stroke='#cf222e' stroke-dasharray='5 4'/>"
        )
        out.append(f"<text x='{WIDTH - PAD_R}' y='{y(level) - 4:.1f}' text-anchor='end'>{_e(text)}</text>")
    for k, (text, vs) in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        points = [(x(i), y(v)) for i, v in enumerate(vs) if v is not None and math.isfinite(v)]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            dash = " stroke-dasharray='6 3'" if k % 2 else ""  # equal series (vs first = vs previous) stay visible
            out.append(f"<polyline fill='none' stroke='{colour}' stroke-width='2'{dash} points='{path}'/>")
        for px, py in points:
            out.append(f"<circle class='point' cx='{px:.1f}' cy='{py:.1f}' r='3' fill='{colour}'/>")
        out.append(f"<text x='{PAD_L + 8 + 150 * k}' y='{HEIGHT - 6}' style='fill:{colour}'>■ {_e(text)}</text>")
    for i, text in enumerate(labels):
        out.append(f"<text x='{x(i):.1f}' y='{PAD_T + inner_h + 14}' text-anchor='middle'>{_e(text)}</text>")
    out.append("</svg>")
    return "".join(out)


def _table(members: Sequence[HistoryRow]) -> str:
    cells = table(members)
    head = "".join(f"<th>{_e(c)}</th>" for c in cells[0])
    body = []
    for row, line in zip(members, cells[1:], strict=True):
        cls = "accepted" if accepted(row.run) is not None else ("failed" if row.run.label == "failed" else "")
        body.append(f"<tr class='{cls}'>" + "".join(f"<td>{_e(c)}</td>" for c in line) + "</tr>")
    rows = "".join(body)
    return f"<div style='overflow-x:auto'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
