"""The report's view model: every string a template prints, already formatted and escaped. Pure: no I/O.

Templates (``templates/*.md.j2``) do layout only; they receive a :class:`ReportView` whose leaves are
``str`` (or tuples of rows of ``str``), so a template cannot mis-round a number or forget to escape a token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from precisionbot.report.buckets import BucketRow, bucket_rows
from precisionbot.report.diagnosis import known_token_texts
from precisionbot.report.escape import code_block_text, label_text, prose
from precisionbot.report.findings import compared_with, findings
from precisionbot.report.golden import DepthRow, depth_rows, kl_line
from precisionbot.report.heat_strip import LEGEND as STRIP_LEGEND
from precisionbot.report.heat_strip import worst_strips
from precisionbot.report.noise_words import noise_scale
from precisionbot.report.rows import (
    ICONS,
    CheckRow,
    WorstRow,
    check_row,
    environment_line,
    headline,
    legend,
    worst_rows,
)
from precisionbot.report.section import ReportSection
from precisionbot.results import Verdict
from precisionbot.scoring.cache_fit import size_line


@dataclass(frozen=True)
class ReportLinks:
    """Where the rest lives (all optional; shown when given)."""

    run_url: str | None = None
    """The workflow run (its page shows the job summary)."""
    artifact_url: str | None = None
    """The uploaded result directories."""
    summary_url: str | None = None
    """The job summary, when it has its own address."""
    report_url: str | None = None
    """The HTML report with the charts (``report --format html``), e.g. its uploaded artifact."""


@dataclass(frozen=True)
class Detail:
    """How much of the optional material to show; the comment steps down these until it fits."""

    worst_rows: int = 8
    """Worst positions per check."""
    strips: int = 3
    """Heat strips (worst samples) per check."""
    buckets: bool = True
    diagnosis: bool = True
    details: bool = True
    """Anything inside ``<details>`` at all."""
    strips_passing: bool = False
    """Heat strips for passing checks too (the job summary), not only for failing ones."""
    worst_passing: bool = False
    """Worst positions of passing checks too (the job summary and the HTML page have the room)."""


COMMENT_LEVELS = (
    Detail(),
    Detail(worst_rows=5, strips=2),
    Detail(worst_rows=3, strips=0),
    Detail(worst_rows=0, strips=0, buckets=False, details=False),
    Detail(worst_rows=0, strips=0, buckets=False, diagnosis=False, details=False),
)
SUMMARY_DETAIL = Detail(worst_rows=25, strips=5, strips_passing=True, worst_passing=True)


@dataclass(frozen=True)
class SectionView:
    label: str
    icon: str
    verdict: str
    headline: str
    environment: str
    sizes: str
    """What ``check`` did to the suite's sizes to fit the engine's cache (``checks.cache_sizes``), or empty."""
    rows: tuple[CheckRow, ...]
    legend: str
    """One line on k3, SGLang's mean, KL, nats and the top-2 gap: under the first section's table only."""
    has_baseline: bool
    """Some row has a "vs baseline" comparison (else the column is left out)."""
    vs_baseline_label: str
    diagnosis: tuple[str, ...]
    golden_kl: str
    depth: tuple[DepthRow, ...]
    """Golden KL by context depth."""
    worst: tuple[WorstRow, ...]
    worst_omitted: int
    worst_omitted_note: str
    """``6 more positions in the job summary and the artifacts.`` (in Actions) or ``... in DIR/result.json.``"""
    reasons: tuple[tuple[str, tuple[str, ...]], ...]
    """``(check, every reason)`` for the checks whose Why cell shows less than all of them."""
    buckets: tuple[BucketRow, ...]
    strips: str
    """A code block's content (already safe inside a fence), or empty."""
    has_previous: bool
    has_details: bool


@dataclass(frozen=True)
class ReportView:
    marker: str
    icon: str
    verdict: str
    overview: str
    sections: tuple[SectionView, ...]
    links: tuple[tuple[str, str], ...]
    """``(text, url)`` pairs."""
    note: str
    """Why something was left out and where to find it, or empty."""


def rest_where(section: ReportSection, links: ReportLinks | None) -> str:
    """Where what a comment leaves out is: the job summary and the artifacts in GitHub Actions (a run page
    exists), else the result directory on this machine (a local run has neither)."""
    if links is not None and safe_url(links.run_url or links.summary_url):
        return "the job summary and the artifacts"
    if section.directory:
        return f"{label_text(section.directory.rstrip('/'))}/result.json"
    return "the result directory's result.json"


def section_view(section: ReportSection, detail: Detail, links: ReportLinks | None = None) -> SectionView:
    run = section.run
    base, base_word = compared_with(section)
    texts = known_token_texts(run.checks)
    diag = findings(section)
    worst, omitted = (
        worst_rows(run.checks, detail.worst_rows, texts, passing=detail.worst_passing, records=section.records)
        if detail.details
        else ((), 0)
    )
    buckets = tuple(r for c in run.checks for r in bucket_rows(c)) if detail.buckets and detail.details else ()
    strips = _strips(section, detail) if detail.details else ""
    depth = depth_rows(run.check("golden")) if detail.details and detail.buckets else ()
    rows = tuple(check_row(c, base, section.previous, base_word) for c in run.checks)
    # A failing check's Why cell shows its first reason: the rest are listed in full in the details.
    reasons = (
        tuple((r.name, r.reasons) for r in rows if len(r.reasons) > 1 and r.verdict == "fail") if detail.details else ()
    )
    return SectionView(
        label=label_text(section.label),
        icon=ICONS[run.verdict],
        verdict=str(run.verdict).upper(),
        headline=headline(run),
        environment=environment_line(run),
        sizes=prose(size_line(run.environment)),
        rows=rows,
        legend=legend(noise_scale(run.environment), golden=run.check("golden") is not None),
        has_baseline=any(r.vs_baseline != "–" for r in rows),
        vs_baseline_label="vs noise band" if base_word == "band" else "vs baseline",
        diagnosis=tuple(prose(d.text) for d in diag) if detail.diagnosis else (),
        golden_kl=kl_line(run.check("golden")) if detail.details else "",
        depth=depth,
        worst=worst,
        worst_omitted=omitted,
        worst_omitted_note=f"{omitted} more position{'s' if omitted != 1 else ''} in {rest_where(section, links)}."
        if omitted
        else "",
        reasons=reasons,
        buckets=buckets,
        strips=strips,
        has_previous=section.previous is not None,
        has_details=bool(worst or buckets or strips or depth or reasons),
    )


def _strips(section: ReportSection, detail: Detail) -> str:
    if detail.strips <= 0:
        return ""
    lines = []
    shown = (Verdict.FAIL, Verdict.PASS) if detail.strips_passing else (Verdict.FAIL,)
    for c in sorted(section.run.checks, key=lambda c: c.verdict is not Verdict.FAIL):
        record = section.records.get(c.name)
        if record is None or c.verdict not in shown:
            continue
        # Golden's rows are its corpus rows, not samples (see report.golden_positions); a passing check has no onset.
        unit = "row   " if c.name == "golden" else "sample"
        for s in worst_strips(c.name, record, samples=detail.strips):
            onset = s.onset if c.verdict is Verdict.FAIL else "–"
            lines.append(
                f"{s.check:<18} {unit} {s.sample:<4} {s.bars}  max {s.max_k3}, onset {onset}"
                f" ({s.positions} position{'s' if s.positions != 1 else ''}, {s.per_bar}/bar)"
            )
    if not lines:
        return ""
    return code_block_text("\n".join([f"k3 per position, worst samples first; bars: {STRIP_LEGEND}", *lines]))


def safe_url(url: str | None) -> str | None:
    """``url`` fit for a Markdown link target: http(s) only; spaces, parentheses and angle brackets encoded."""
    if not url or not url.startswith(("https://", "http://")):
        return None
    for ch, code in ((" ", "%20"), ("(", "%28"), (")", "%29"), ("<", "%3C"), (">", "%3E"), ("\n", "")):
        url = url.replace(ch, code)
    return url


def report_view(
    sections: Sequence[ReportSection],
    *,
    marker: str,
    detail: Detail,
    links: ReportLinks | None = None,
    note: str = "",
    everything: Sequence[ReportSection] | None = None,
) -> ReportView:
    """The view of ``sections``; ``everything`` (default: the same) is what the verdict and the tally count,
    when a size limit leaves some sections out."""
    total = sections if everything is None else everything
    verdict = Verdict.combine(s.run.verdict for s in total)
    overview = ""
    if len(total) > 1:
        tally = {v: sum(s.run.verdict is v for s in total) for v in Verdict}
        overview = f"{len(total)} configurations: " + ", ".join(f"{n} {v}" for v, n in tally.items() if n)
    link_list = []
    if links is not None:
        for text, url in (
            ("full report (HTML, with charts)", links.report_url),
            ("workflow run", links.run_url),
            ("job summary", links.summary_url),
            ("artifacts (result.json + arrays)", links.artifact_url),
        ):
            safe = safe_url(url)
            if safe:
                link_list.append((text, safe))
    return ReportView(
        marker=marker,
        icon=ICONS[verdict],
        verdict=str(verdict).upper(),
        overview=overview,
        sections=tuple(
            v if i == 0 else replace(v, legend="")
            for i, v in enumerate(section_view(s, detail, links) for s in sections)
        ),
        links=tuple(link_list),
        note=note,
    )
