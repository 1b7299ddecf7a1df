"""The report: diagnosis (pure), the view model (pure), and rendering to the PR comment, the job summary and JSON.

Public API (others call these)::

    diagnose(checks, *, baseline_stats=None, previous=None, environment=None, localization=None)
        -> tuple[Diagnosis, ...]
    findings(section) -> tuple[Diagnosis, ...]   # what every output lists for one section
    render_comment(sections, *, max_chars=65_536, links=None, marker=COMMENT_MARKER) -> str
    render_summary(sections, *, max_bytes=STEP_SUMMARY_MAX_BYTES, links=None) -> str
    render_json(sections) -> str
    ReportSection(label, run, previous=None, baseline_stats=None, records={}), ReportLinks(...)
    COMMENT_MARKER, comment_marker(suite)
"""

from __future__ import annotations

from precisionbot.report.diagnosis import diagnose
from precisionbot.report.findings import findings
from precisionbot.report.render import (
    COMMENT_MARKER,
    comment_marker,
    render_comment,
    render_json,
    render_summary,
)
from precisionbot.report.section import ReportSection
from precisionbot.report.view import ReportLinks

__all__ = [
    "COMMENT_MARKER",
    "ReportLinks",
    "ReportSection",
    "comment_marker",
    "diagnose",
    "findings",
    "render_comment",
    "render_json",
    "render_summary",
]
