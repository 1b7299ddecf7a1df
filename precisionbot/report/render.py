"""Rendering: view model → Markdown through the jinja2 templates, and → JSON; size limits enforced here.

Templates load with ``importlib.resources`` from the installed package (``precisionbot/templates`` is a
symlink to the top-level ``templates/`` directory, so they ship in the wheel). ``StrictUndefined``: a
template that names a missing field fails loudly in tests instead of printing nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2

from precisionbot.report.escape import label_text
from precisionbot.report.findings import findings
from precisionbot.report.section import ReportSection
from precisionbot.report.view import (
    COMMENT_LEVELS,
    SUMMARY_DETAIL,
    Detail,
    ReportLinks,
    report_view,
    safe_url,
)
from precisionbot.results import Verdict

COMMENT_MARKER = "<!-- precisionbot:comment -->"
"""Hidden marker of the sticky comment (found by this marker *and* the bot's login)."""

GITHUB_COMMENT_MAX_CHARS = 65_536
STEP_SUMMARY_MAX_BYTES = 1_000_000
"""What :func:`render_summary` fits into (UTF-8 bytes), stepping detail down: a round million, under GitHub's
limit of 1 MiB (1,048,576 bytes) per step. ``github comment`` appends the summary with a hard byte cut at that
limit (:func:`precisionbot.gh.workflow.fit_summary`), a last resort that can land mid-table; the 48 KB margin
keeps a rendered summary, and a few lines the step appends beside it, clear of that cut."""


def comment_marker(suite: str | None = None) -> str:
    """The marker for one suite's sticky comment (``None`` = the default, :data:`COMMENT_MARKER`).

    Suite names come from the config; anything but ``[A-Za-z0-9_.-]`` is dropped so the marker stays one
    HTML comment.
    """
    if not suite:
        return COMMENT_MARKER
    safe = "".join(ch for ch in suite if ch.isascii() and (ch.isalnum() or ch in "_.-"))
    while "--" in safe:  # "--" has no place inside an HTML comment
        safe = safe.replace("--", "-")
    return f"<!-- precisionbot:comment suite={safe} -->" if safe else COMMENT_MARKER


def load_template(name: str) -> str:
    """A template's text from the installed package (the HTML report loads its own through this too)."""
    return (resources.files("precisionbot") / "templates" / name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML: the view model escapes every untrusted string itself
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _render(template: str, sections: Sequence[ReportSection], detail: Detail, **kwargs: Any) -> str:
    marker = kwargs.pop("marker", COMMENT_MARKER)
    details_open = kwargs.pop("details_open", "")
    everything = kwargs.pop("everything", sections)
    view = report_view(sections, marker=marker, detail=detail, everything=everything, **kwargs)
    text = environment().get_template(template).render(view=view, details_open=details_open)
    # Collapse the blank lines optional blocks leave behind (never inside a code block: strips have none).
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def _size(text: str) -> int:
    # GitHub counts characters; UTF-8 bytes are never fewer, so measuring bytes is safe for both limits.
    return len(text.encode("utf-8"))


def _trim_note(links: ReportLinks | None, what: str, sections: Sequence[ReportSection] = ()) -> str:
    where = _rest(links, sections)
    return f"Some detail was left out to keep this {what} under its size limit; the full report is in {where}."


def _rest(links: ReportLinks | None, sections: Sequence[ReportSection]) -> str:
    """Where the rest is: the job summary and the artifacts in GitHub Actions (linked when known), else the
    result directories on this machine (a local run has no job summary)."""
    summary = None if links is None else safe_url(links.summary_url or links.run_url)
    if summary:
        where = f"the [job summary]({summary})"
        artifacts = safe_url(links.artifact_url) if links is not None else None
        return where + (f" and the [artifacts]({artifacts})" if artifacts else "")
    dirs = [label_text(s.directory) for s in sections if s.directory]
    if dirs:
        shown = ", ".join(dirs[:3]) + (f" and {len(dirs) - 3} more" if len(dirs) > 3 else "")
        noun = "directory" if len(dirs) == 1 else "directories"
        return f"the result {noun} {shown} (`precisionbot report DIR --format summary`)"
    return "the result directories (`precisionbot report DIR --format summary`)"


def render_comment(
    sections: Sequence[ReportSection],
    *,
    max_chars: int = GITHUB_COMMENT_MAX_CHARS,
    links: ReportLinks | None = None,
    marker: str = COMMENT_MARKER,
) -> str:
    """The PR comment: the most detail that fits in ``max_chars`` (details are trimmed first, then
    diagnosis, then whole sections; a trimmed comment says where the rest is)."""
    if not sections:
        raise ValueError("render_comment: no sections (give at least one result directory)")
    note = ""
    for detail in COMMENT_LEVELS:
        text = _render("comment.md.j2", sections, detail, links=links, marker=marker, note=note)
        if _size(text) <= max_chars:
            return text
        note = _trim_note(links, "comment", sections)
    return _shrink("comment.md.j2", sections, max_chars, links=links, marker=marker, note=note)


def render_summary(
    sections: Sequence[ReportSection],
    *,
    max_bytes: int = STEP_SUMMARY_MAX_BYTES,
    links: ReportLinks | None = None,
) -> str:
    """The job summary: more worst positions and strips than the comment, details open, under ``max_bytes``."""
    if not sections:
        raise ValueError("render_summary: no sections (give at least one result directory)")
    note = ""
    for detail in (SUMMARY_DETAIL, *COMMENT_LEVELS):
        text = _render("summary.md.j2", sections, detail, links=links, note=note, details_open=" open")
        if _size(text) <= max_bytes:
            return text
        note = _trim_note(links, "summary", sections)
    return _shrink("summary.md.j2", sections, max_bytes, links=links, note=note, details_open=" open")


def _shrink(template: str, sections: Sequence[ReportSection], limit: int, **kwargs: Any) -> str:
    """Last resort: the first sections that fit at the smallest detail (verdict and tally still count all of
    them), then a cut at a line boundary."""
    smallest = COMMENT_LEVELS[-1]
    note = kwargs.pop("note")

    def attempt(keep: int) -> str:
        left = f" {len(sections) - keep} more configuration(s) are only in {_rest(kwargs.get('links'), sections)}."
        return _render(template, sections[:keep], smallest, note=note + left, everything=sections, **kwargs)

    lo, hi, best = 1, len(sections) - 1, ""
    while lo <= hi:  # the longest prefix of sections that fits (rendered size grows with the prefix)
        mid = (lo + hi) // 2
        text = attempt(mid)
        if _size(text) <= limit:
            best, lo = text, mid + 1
        else:
            hi = mid - 1
    if best:
        return best
    text = attempt(1) if len(sections) > 1 else _render(template, sections, smallest, note=note, **kwargs)
    tail = f"\n\n> Cut to fit the size limit; see {_rest(kwargs.get('links'), sections)}.\n"
    budget = limit - _size(tail)
    cut = text.encode("utf-8")[: max(0, budget)].decode("utf-8", errors="ignore")
    cut = cut[: cut.rfind("\n") + 1] if "\n" in cut else ""
    return cut + tail


def render_json(sections: Sequence[ReportSection]) -> str:
    """The same data as JSON: the combined verdict and, per section, its result with the findings the comment
    shows (:func:`~precisionbot.report.findings.findings`, recomputed)."""

    out = {
        "schema": 1,
        "verdict": Verdict.combine(s.run.verdict for s in sections).value,
        "sections": [
            {
                "label": s.label,
                "verdict": s.run.verdict.value,
                "previous_verdict": None if s.previous is None else s.previous.verdict.value,
                "result": json.loads(s.run.with_diagnosis(findings(s)).to_json()),
            }
            for s in sections
        ],
    }
    return json.dumps(out, indent=2, allow_nan=False) + "\n"
