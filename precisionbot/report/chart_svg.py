"""The HTML report's charts: :mod:`precisionbot.report.chart_data` data → inline SVG with matplotlib.

matplotlib is the optional ``report`` extra (``pip install 'precisionbot[report]'``): the plan and comment jobs
that only post Markdown never import this module. Figures are drawn on a ``Figure`` with the SVG canvas
directly (no pyplot: no global state, no GUI backend), with text kept as ``<text>`` (small files, searchable),
no date in the metadata and a fixed hash salt per chart, so one result renders to the same bytes every time.

Nothing untrusted is drawn: titles and labels are fixed strings and check names (``[A-Za-z0-9_.-]`` only);
token text stays in the HTML tables, escaped. Every SVG is still checked for anything active (scripts, event
handlers, links outside the document) before it is inlined.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionbot.errors import ConfigError
from precisionbot.report.chart_data import (
    FLOOR,
    BucketBars,
    DepthLines,
    KlCdf,
    MarginScatter,
    PositionLines,
    SectionFigures,
)

WIDTH_IN, HEIGHT_IN = 10.5, 3.4
"""Drawn for the page's full width (the SVG scales to it; the text stays readable at 1280 px)."""
COLORS = ("#c0392b", "#2471a3", "#7d3c98", "#b9770e", "#148f77", "#566573")
STYLE = {
    "svg.fonttype": "none",
    "font.size": 8.5,
    "font.family": "sans-serif",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "legend.frameon": False,
    "legend.fontsize": 7.5,
}
_ACTIVE = re.compile(
    r"<\s*(script|foreignObject|iframe|object|embed|image|a|use\s[^>]*href\s*=\s*\"(?!#))|\son[a-z]+\s*=|javascript:"
    r"|href\s*=\s*\"(?!#)|url\((?!#)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Chart:
    key: str
    """Unique per report (an HTML id): ``s0-lines-match``."""
    title: str
    caption: str
    """What to read in it, one or two sentences (plain text: the template escapes it)."""
    svg: str


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError(
            "the HTML report draws its charts with matplotlib, which is not installed: "
            "pip install 'precisionbot[report]' (or use --format markdown)"
        ) from exc
    return matplotlib, Figure, FigureCanvasSVG


def safe_name(text: str) -> str:
    """A check name fit for a chart title: letters, digits and ``_.-`` only (the rest become ``?``)."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_.-") else "?" for ch in text)[:40]


def tick_label(text: str) -> str:
    """Tick text from a result file (golden's depth labels): printable, at most 24 characters; drawn with
    ``parse_math=False`` so a ``$`` is a dollar sign, never matplotlib math text."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:24]


def inline_svg(svg: str, prefix: str = "") -> str:
    """matplotlib's SVG document as an element to inline in HTML: no XML prolog or DOCTYPE, every id (and
    every reference to one) prefixed with ``prefix`` so several charts in one page never share an id;
    refused if it holds anything active (a script, an event handler, a link to outside the document)."""
    start = svg.find("<svg")
    if start < 0:
        raise ValueError("matplotlib produced no <svg> element")
    body = svg[start:].strip()
    if _ACTIVE.search(body):
        raise ValueError("a chart's SVG holds active content; refusing to inline it")
    if prefix:
        body = body.replace(' id="', f' id="{prefix}-').replace('href="#', f'href="#{prefix}-')
        body = body.replace("url(#", f"url(#{prefix}-")
    return body


class _Drawing:
    def __init__(self, key: str) -> None:
        self.key = key
        matplotlib, figure_cls, canvas_cls = _matplotlib()
        self._matplotlib = matplotlib
        self._canvas_cls = canvas_cls
        self.figure = figure_cls(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")

    def svg(self) -> str:
        buf = io.StringIO()
        self._canvas_cls(self.figure)
        with self._matplotlib.rc_context({**STYLE, "svg.hashsalt": self.key}):
            self.figure.savefig(buf, format="svg", metadata={"Date": None})
        return inline_svg(buf.getvalue(), self.key)


def zero_line(*arrays: Any) -> float:
    """Where exact zeros are drawn on a log axis: a decade below the smallest value above ``FLOOR`` (so the
    axis spans the data, not a fixed 1e-12…1), or 1e-6 when every value is zero."""
    values = [np.asarray(a, dtype=float).ravel() for a in arrays]
    joined = np.concatenate(values) if values else np.empty(0)
    positive = joined[np.isfinite(joined) & (joined > FLOOR)]
    if positive.size == 0:
        return 1e-6
    return float(10.0 ** (math.floor(math.log10(float(positive.min()))) - 1))


def lift(values: Any, zero: float) -> Any:
    """``values`` with everything at or below ``FLOOR`` (exact zeros) moved up to the ``zero`` line."""
    out = np.asarray(values, dtype=float).copy()
    out[out <= FLOOR] = zero
    return out


def _log_axis(axis: Any, zero: float | None = None) -> None:
    """A log axis labelled ``1e-4`` in plain text: matplotlib's default ``$10^{-4}$`` goes through its math
    text parser, which took half the render time (and is not selectable text in the page). ``zero``: the
    line exact zeros are drawn on, labelled ``0``."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def label(v: float, _: object) -> str:
        if v <= 0 or (zero is not None and math.isclose(v, zero, rel_tol=1e-6)):
            return "0"
        return f"1e{round(math.log10(v))}"

    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


@contextmanager
def _drawing(key: str) -> Iterator[_Drawing]:
    # Styles apply when artists are created, so the whole drawing happens inside the rc context.
    matplotlib = _matplotlib()[0]
    with matplotlib.rc_context(STYLE):
        yield _Drawing(key)


def _line_chart(key: str, fig: PositionLines) -> Chart:
    # Golden's rows are its corpus rows, not the helpers' samples.
    unit = "row" if fig.check == "golden" else "sample"
    with _drawing(key) as d:
        ax = d.figure.add_subplot()
        zero = zero_line(*(line.value for line in fig.lines))
        for i, line in enumerate(fig.lines):
            color = COLORS[i % len(COLORS)]
            ax.plot(line.position, lift(line.value, zero), lw=1.1, color=color, label=f"{unit} {line.sample}")
            if line.onset is not None:
                ax.axvline(line.onset, color=color, ls=":", lw=1.0)
                ymax = max(float(line.value.max()), zero * 10)
                ax.plot([line.onset], [ymax], marker="v", color=color, ms=5, ls="none")
        if fig.threshold is not None:
            ax.axhline(fig.threshold, color="#555", ls="--", lw=0.8, label=fig.threshold_label)
        for what, marks in fig.boundaries:
            for k, x in enumerate(marks):
                ax.axvline(x, color="#999", ls="-.", lw=0.8, label=what if k == 0 else None, zorder=0)
        ax.set_yscale("log")
        ax.set_ylim(bottom=zero / 2)
        _log_axis(ax.yaxis, zero)
        ax.set_xlabel("token position in the sample (prompt + output)")
        ax.set_ylabel(f"{fig.measure} per position (nats)")
        # Outside the axes: the lines fill the whole plot, a legend inside would hide some of them.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        name = safe_name(fig.check)
        title = f"{name}: per-position {fig.measure}, worst {len(fig.lines)} of {fig.samples} {unit}s"
        ax.set_title(title, loc="left", fontsize=9)
        svg = d.svg()
    onset = "a ▼ and dotted line mark each sample's onset (first position over the threshold); "
    caption = (
        f"Each line is one sample's {fig.measure} along its positions (bins show their largest value; "
        "exact zeros sit on the bottom line, labelled 0); "
        + (onset if fig.measure == "k3" and any(line.onset is not None for line in fig.lines) else "")
        + "high from the first generated token: the state was wrong before generation began; rising midway: "
        "a handoff; isolated spikes: noise."
    )
    return Chart(key=key, title=title, caption=caption, svg=svg)


def _scatter_chart(key: str, fig: MarginScatter) -> Chart:
    with _drawing(key) as d:
        ax = d.figure.add_subplot()
        keep = ~fig.flip
        zero = zero_line(fig.kl)
        kl = lift(fig.kl, zero)
        ax.scatter(fig.margin[keep], kl[keep], s=4, color="#7f8c8d", alpha=0.6, lw=0, label="no flip")
        ax.scatter(fig.margin[fig.flip], kl[fig.flip], s=16, color="#c0392b", marker="x", lw=1.0, label="top-1 flip")
        if fig.confident_margin is not None and fig.confident_margin > 0:
            ax.axvline(fig.confident_margin, color="#333", ls="--", lw=0.9, label="confident-flip margin")
        ax.set_yscale("log")
        ax.set_ylim(bottom=zero / 2)
        _log_axis(ax.yaxis, zero)
        ax.set_xlabel("baseline top-2 gap (margin, nats)")
        ax.set_ylabel("KL per position (nats)")
        ax.legend(loc="upper right")
        shown = len(fig.kl)
        title = f"golden: margin vs KL, {fig.flips:,} flips over {fig.positions:,} positions"
        ax.set_title(title, loc="left", fontsize=9)
        svg = d.svg()
    caption = (
        "Each point is a scored position; red crosses are top-1 flips. Flips at small margins (left of the dashed "
        "line) are near-ties that noise flips too; flips far right of it need a systematic logit shift. Positions "
        "with a KL of exactly 0 sit on the bottom line, labelled 0."
        + (f" {shown:,} of {fig.positions:,} positions drawn (every flip kept)." if shown < fig.positions else "")
    )
    return Chart(key=key, title=title, caption=caption, svg=svg)


def _bucket_chart(key: str, fig: BucketBars) -> Chart:
    with _drawing(key) as d:
        ax = d.figure.add_subplot()
        xs = list(range(len(fig.labels)))
        pct = [100.0 * r for r in fig.rate]
        ax.bar([x - 0.2 for x in xs], pct, width=0.4, color="#c0392b", label="this run")
        band = [100.0 * (b or 0.0) for b in fig.band_rate]
        if any(b is not None for b in fig.band_rate):
            ax.bar([x + 0.2 for x in xs], band, width=0.4, color="#95a5a6", label="noise band")
        for x, p, n in zip(xs, pct, fig.flips, strict=True):
            ax.annotate(f"{n:,}", (x - 0.2, p), ha="center", va="bottom", fontsize=7, annotation_clip=False)
        ax.set_xticks(xs, [tick_label(t) for t in fig.labels], parse_math=False)
        ax.set_xlabel("baseline top-2 gap (margin, nats)")
        ax.set_ylabel("flip rate (%)")
        ax.legend(loc="upper right")
        title = f"{safe_name(fig.check)}: flip rate by margin bucket"
        ax.set_title(title, loc="left", fontsize=9)
        svg = d.svg()
    caption = (
        "Flips per bucket of the baseline's top-2 gap (the counts above the bars), against the rate the noise "
        "band's known-good producers show: noise flips near-ties; a rate well above the band at large margins is "
        "a bug."
    )
    return Chart(key=key, title=title, caption=caption, svg=svg)


def _depth_chart(key: str, fig: DepthLines) -> Chart:
    with _drawing(key) as d:
        ax = d.figure.add_subplot()
        xs = list(range(len(fig.labels)))
        zero = zero_line(fig.kl_max, fig.kl_p99, fig.kl_p50)
        for values, name, color in (
            (fig.kl_max, "max", "#c0392b"),
            (fig.kl_p99, "p99", "#b9770e"),
            (fig.kl_p50, "p50", "#2471a3"),
        ):
            ax.plot(xs, lift(values, zero), marker="o", ms=3.5, lw=1.2, color=color, label=name)
        ax.set_xticks(xs, [tick_label(t) for t in fig.labels], parse_math=False)
        ax.set_yscale("log")
        ax.set_ylim(bottom=zero / 2)
        _log_axis(ax.yaxis, zero)
        ax.set_xlabel("context depth (tokens); the last point is the decode tail")
        ax.set_ylabel("golden KL (nats)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        title = "golden: KL by context depth"
        ax.set_title(title, loc="left", fontsize=9)
        svg = d.svg()
    caption = (
        "A curve rising to the right is a bug that grows with context "
        "(for example fp8 attention weights without scaling)."
    )
    return Chart(key=key, title=title, caption=caption, svg=svg)


def _cdf_chart(key: str, fig: KlCdf) -> Chart:
    with _drawing(key) as d:
        ax = d.figure.add_subplot()
        zero = zero_line(*(s.kl for s in fig.series))
        for i, s in enumerate(fig.series):
            ax.step(lift(s.kl, zero), fig.fraction, where="post", lw=1.3, color=COLORS[(i + 1) % len(COLORS)],
                    label=f"{safe_name(s.name)} ({s.positions:,} positions)")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlim(left=zero / 2)
        _log_axis(ax.xaxis, zero)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("KL per position (nats)")
        ax.set_ylabel("fraction of positions ≤ x")
        ax.legend(loc="lower right")
        title = "golden: distribution of per-position KL"
        ax.set_title(title, loc="left", fontsize=9)
        svg = d.svg()
    caption = (
        "The share of positions at or below each KL. A curve shifted right is a global change; a long flat top "
        "that ends far right is a few positions carrying the damage; positions at exactly 0 start on the left "
        "line, labelled 0. Prose and code are drawn apart when the result says which is which."
    )
    return Chart(key=key, title=title, caption=caption, svg=svg)


def section_charts(prefix: str, figures: SectionFigures) -> tuple[Chart, ...]:
    """Every chart of one section, in reading order: lines (failing checks' first, as the figures come), then
    golden's scatter, bucket bars, depth and CDF."""
    out = [_line_chart(f"{prefix}-lines-{i}", f) for i, f in enumerate(figures.lines)]
    if figures.scatter is not None:
        out.append(_scatter_chart(f"{prefix}-scatter", figures.scatter))
    out.extend(_bucket_chart(f"{prefix}-buckets-{i}", b) for i, b in enumerate(figures.buckets))
    if figures.depth is not None:
        out.append(_depth_chart(f"{prefix}-depth", figures.depth))
    if figures.cdf is not None:
        out.append(_cdf_chart(f"{prefix}-cdf", figures.cdf))
    return tuple(out)
