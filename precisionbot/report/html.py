"""``report --format html``: one self-contained HTML page per run or matrix, with the golden and per-position charts.

The page says what the PR comment says — the same view model (:mod:`precisionbot.report.view`), so the verdict
table and the diagnosis read word for word alike — and adds the charts (:mod:`precisionbot.report.chart_svg`)
and longer tables (worst positions with their context). Self-contained: inline CSS and SVG, no JavaScript, no
request to anywhere, so it opens from a downloaded artifact or a file on disk.

Safety: every string is escaped by jinja2's HTML autoescape (the view model's strings are Markdown-escaped
for the comment; :func:`precisionbot.report.escape.markdown_plain` undoes exactly that first, so nothing is
escaped twice or left raw); the only markup not escaped is the charts' SVG, which holds no untrusted text and
is checked for active content; a Content-Security-Policy meta tag forbids scripts and every network request,
so even a mistake here cannot run a token's text or call out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, TypeVar

import jinja2
from markupsafe import Markup

from precisionbot.report.chart_data import section_figures
from precisionbot.report.chart_svg import Chart, section_charts
from precisionbot.report.escape import markdown_plain
from precisionbot.report.render import load_template
from precisionbot.report.reproduce import provenance
from precisionbot.report.section import ReportSection
from precisionbot.report.view import Detail, ReportLinks, SectionView, report_view
from precisionbot.results import Verdict

HTML_DETAIL = Detail(worst_rows=25, strips=0, strips_passing=True)
"""The page has room: the job summary's worst positions; charts instead of the text strips."""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
"""No script, no request: the page needs neither, and a hostile token then has nothing to run or call."""

SYMBOLS = {Verdict.PASS: "✓", Verdict.FAIL: "✗", Verdict.INCONCLUSIVE: "⚠"}

T = TypeVar("T")


@dataclass(frozen=True)
class HtmlSection:
    view: SectionView
    """The comment's section view with Markdown escaping undone (the template escapes for HTML)."""
    charts: tuple[Chart, ...]
    anchor: str
    provenance: tuple[tuple[str, str], ...] = ()
    """Engine commit, signature, baseline run, config, workflow run and a command to reproduce (plain text)."""
    has_topk: bool = False
    """Some worst row carries golden's top-k of both sides (a column each)."""


@dataclass(frozen=True)
class HtmlReport:
    icon: str
    verdict: str
    overview: str
    legend: str
    sections: tuple[HtmlSection, ...]
    links: tuple[tuple[str, str], ...]
    csp: str


def _plain(obj: T) -> T:
    """``obj`` (a view dataclass) with every Markdown-escaped string field turned back into plain text."""
    changes: dict[str, Any] = {}
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, str):
            changes[f.name] = markdown_plain(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], (str, tuple)):
            changes[f.name] = _plain_strings(value)
        elif isinstance(value, tuple) and value and hasattr(value[0], "__dataclass_fields__"):
            changes[f.name] = tuple(_plain(v) for v in value)
    return replace(obj, **changes)  # type: ignore[type-var]


def _plain_strings(value: Any) -> Any:
    """Every string in nested tuples (``(check, (reason, ...))`` pairs) with its Markdown escaping undone."""
    if isinstance(value, str):
        return markdown_plain(value)
    if isinstance(value, tuple):
        return tuple(_plain_strings(v) for v in value)
    return value


def _section(index: int, section: ReportSection, view: SectionView, links: ReportLinks | None) -> HtmlSection:
    charts = section_charts(f"s{index}", section_figures(section.run, section.records))
    plain = _plain(view)
    # Text symbols, not emoji: they render in any font (a CI browser has no emoji font) and take the CSS colour.
    plain = replace(plain, icon=SYMBOLS[section.run.verdict], rows=tuple(replace(r, icon=SYMBOLS[c.verdict])
                    for r, c in zip(plain.rows, section.run.checks, strict=True)))  # fmt: skip
    return HtmlSection(
        view=plain,
        charts=charts,
        anchor=f"section-{index}",
        provenance=provenance(section, links),
        has_topk=any(w.topk_ref or w.topk_test for w in plain.worst),
    )


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def html_view(sections: Sequence[ReportSection], *, links: ReportLinks | None = None) -> HtmlReport:
    view = report_view(sections, marker="", detail=HTML_DETAIL, links=links)
    # The page is the full report: a link to itself would only confuse.
    kept = tuple((t, u) for t, u in view.links if not t.startswith("full report"))
    legend = view.sections[0].legend if view.sections else ""
    verdict = Verdict.combine(s.run.verdict for s in sections)
    return HtmlReport(
        icon=SYMBOLS[verdict],
        verdict=view.verdict,
        overview=view.overview,
        legend=markdown_plain(legend).replace("`", ""),
        sections=tuple(_section(i, s, v, links) for i, (s, v) in enumerate(zip(sections, view.sections, strict=True))),
        links=kept,
        csp=CSP,
    )


def render_html(sections: Sequence[ReportSection], *, links: ReportLinks | None = None) -> str:
    """The HTML report of ``sections`` (needs matplotlib: the ``report`` extra)."""
    if not sections:
        raise ValueError("render_html: no sections (give at least one result directory)")
    report = html_view(sections, links=links)
    charts = {c.key: Markup(c.svg) for s in report.sections for c in s.charts}
    return environment().get_template("report.html.j2").render(report=report, svgs=charts)
