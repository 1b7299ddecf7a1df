"""Golden Markdown files, one per comment path, plus structural checks through a CommonMark parser.

Regenerate after an intended change, then review the diff like code::

    PRECISIONBOT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/report/test_golden.py -q
    git diff tests/report/golden/
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from precisionbot.report import COMMENT_MARKER, ReportLinks, render_comment, render_summary
from precisionbot.report.escape import cap, visible
from tests.report import markdown, scenarios

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("PRECISIONBOT_UPDATE_GOLDEN") == "1"
LINKS = ReportLinks(
    run_url="https://github.com/o/r/actions/runs/42",
    artifact_url="https://github.com/o/r/actions/runs/42/artifacts/7",
)


def _compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with PRECISIONBOT_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: regenerate it if intended and review"


@pytest.mark.parametrize("scenario", sorted(scenarios.SCENARIOS))
def test_comment_matches_golden(scenario: str) -> None:
    sections = scenarios.SCENARIOS[scenario]()
    # The oversized case gets a small limit so its golden file stays reviewable; the real limit is below.
    limit = 6_000 if scenario == "oversized" else 65_536
    _compare(f"{scenario}.comment.md", render_comment(sections, links=LINKS, max_chars=limit))


@pytest.mark.parametrize("scenario", ["prefill_restore", "matrix"])
def test_summary_matches_golden(scenario: str) -> None:
    _compare(f"{scenario}.summary.md", render_summary(scenarios.SCENARIOS[scenario](), links=LINKS))


@pytest.mark.parametrize("scenario", sorted(scenarios.SCENARIOS))
@pytest.mark.parametrize("kind", ["comment", "summary"])
def test_structure_survives_a_commonmark_parser(scenario: str, kind: str) -> None:
    sections = scenarios.SCENARIOS[scenario]()
    text = render_comment(sections, links=LINKS) if kind == "comment" else render_summary(sections, links=LINKS)
    for group in markdown.raw_cell_counts(text):
        assert len(set(group)) == 1, f"a table row has a different cell count: {group}"
    for table in markdown.tables(text):
        assert all(len(row) == len(table.header) for row in table.rows)
    for fragment in markdown.raw_html(text):
        assert markdown.ALLOWED_HTML.match(fragment), f"raw HTML got through: {fragment!r}"
    if kind == "comment":
        assert text.startswith(COMMENT_MARKER + "\n")
        assert text.count(COMMENT_MARKER) == 1


def test_nasty_tokens_render_as_their_visible_text() -> None:
    text = render_comment(scenarios.nasty())
    (worst,) = [t for t in markdown.tables(text) if "Token" in t.header]
    col = worst.header.index("Token")
    shown = {row[col].replace("\u200d", "") for row in worst.rows}
    for token in scenarios.NASTY_TOKENS:
        expected = cap(visible(token), 24) if token else "id 1112"
        if expected in shown:
            continue
        # Rows beyond the comment's limit are in the summary; every shown one must be exact.
        assert len(shown) < len(scenarios.NASTY_TOKENS)
    assert len(shown) >= 8
    assert all(row[-1].startswith(("bug", "noise", "unclear", "unattributable")) for row in worst.rows)
    summary = render_summary(scenarios.nasty())
    (worst,) = [t for t in markdown.tables(summary) if "Token" in t.header]
    shown = {row[col].replace("\u200d", "") for row in worst.rows}
    assert shown == {cap(visible(t), 24) if t else "id 1112" for t in scenarios.NASTY_TOKENS}


@pytest.mark.parametrize("render", [render_comment, render_summary])
def test_nasty_text_neither_mentions_nor_links(render) -> None:  # type: ignore[no-untyped-def]
    text = render(scenarios.nasty())
    # GitHub links @user and #123 in the rendered text; a zero-width joiner after the sigil stops both.
    shown = markdown.rendered_text(text)
    assert "@octocat" not in text
    if render is render_summary:
        assert "@\u200doctocat" in shown and "#\u200d12" in shown
    assert re.search(r"[@#][A-Za-z0-9]", shown) is None, re.findall(r".{8}[@#][A-Za-z0-9].{8}", shown)
    assert "https://evil" not in shown
    tokens = markdown.parser().parse(text)
    links = [c for t in tokens for c in (t.children or []) if c.type == "link_open"]
    assert not links


def test_oversized_comment_fits_and_says_where_the_rest_is() -> None:
    sections = scenarios.oversized(n_sections=40, n_worst=2000)
    text = render_comment(sections, links=LINKS)
    assert len(text.encode("utf-8")) <= 65_536
    assert "job summary" in text and LINKS.run_url in text
    full = render_summary(sections, links=LINKS)
    assert len(full.encode("utf-8")) <= 1_000_000
    assert full.count("### ") == 40  # every configuration is in the summary


def test_huge_matrix_drops_sections_last() -> None:
    sections = scenarios.oversized(n_sections=400, n_worst=5)
    text = render_comment(sections, max_chars=20_000)
    assert len(text.encode("utf-8")) <= 20_000
    assert "more configuration(s)" in text
    assert text.startswith(COMMENT_MARKER)
