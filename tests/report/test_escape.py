"""Escaping against an independent reader: what markdown-it-py (CommonMark + GFM tables) shows must be the
visible form of the input, with no markup, HTML, link or extra cell."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precisionbot.report.escape import ZWJ, cap, code_block_text, label_text, prose, token_cell, visible
from tests.report import markdown


def _cell_as_seen(cell: str) -> tuple[list[str], str]:
    """Render ``cell`` in a 3-column table row and return (cells as seen, all of the document's text)."""
    doc = f"| a | b | c |\n|---|---|---|\n| x | {cell} | y |\n"
    (table,) = markdown.tables(doc)
    return table.rows[0], markdown.rendered_text(doc)


@pytest.mark.parametrize(
    ("token", "shown"),
    [
        ("a|b", "a|b"),
        (" Artificial", "·Artificial"),
        ("line\nnext", "line↵next"),
        ("\t", "⇥"),
        ("\x07", "⟨07⟩"),
        ("\x00", "⟨00⟩"),
        ("\u202e", "⟨U+202E⟩"),
        ("\u00a0", "⟨a0⟩"),
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),
        ("**b** _i_ `c` ~~s~~ $m$", "**b**·_i_·`c`·~~s~~·$m$"),
        ("\\|", "\\|"),
        ("&amp;", "&amp;"),
        ("", "∅"),
    ],
)
def test_token_cell_shows_exactly_the_visible_text(token: str, shown: str) -> None:
    cells, _ = _cell_as_seen(token_cell(token, max_chars=100))
    assert cells == ["x", shown, "y"]


def test_mentions_refs_and_urls_are_neutralised() -> None:
    cell = token_cell("@octocat #12 https://evil.example www.evil.example", max_chars=100)
    cells, text = _cell_as_seen(cell)
    assert cells[1].replace(ZWJ, "") == "@octocat·#12·https://evil.example·www.evil.example"
    # What GitHub's mention, issue-ref and URL autolinkers look for never appears in the rendered text.
    assert "@o" not in text and "#1" not in text and "://" not in text and "www." not in text


def test_long_tokens_are_capped() -> None:
    assert cap("x" * 30, 24) == "x" * 23 + "…"
    cells, _ = _cell_as_seen(token_cell("y" * 500))
    assert cells[1] == "y" * 23 + "…"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_stays_one_literal_cell(text: str) -> None:
    cells, _ = _cell_as_seen(token_cell(text, max_chars=1000))
    assert len(cells) == 3
    expected = visible(text) if text else "∅"
    # Our own ZWJs (after @ and #) are the only invisible characters left; one in the input shows as ⟨U+200D⟩.
    assert cells[1].replace(ZWJ, "") == expected
    assert not markdown.raw_html(f"| a |\n|---|\n| {token_cell(text)} |\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_prose_renders_literally_in_a_list_item(text: str) -> None:
    doc = f"- **check** fail: {prose(text)}\n"
    assert not markdown.raw_html(doc)
    tokens = markdown.parser().parse(doc)
    assert [t.type for t in tokens].count("bullet_list_open") == 1  # no nested list, heading or block
    kinds = {c.type for t in tokens for c in (t.children or [])}
    assert kinds <= {"text", "strong_open", "strong_close", "softbreak"}


def test_label_keeps_spaces_and_escapes_markup() -> None:
    assert label_text("Qwen3 8B") == "Qwen3 8B"
    assert label_text("a_b") == "a\\_b"
    assert label_text("x" * 100).endswith("…")


def test_code_block_text_cannot_close_the_fence() -> None:
    text = code_block_text("```\nrm -rf /\x07")
    assert "```" not in text and "`" not in text
    assert text.splitlines() == ["ˋˋˋ", "rm -rf /⟨07⟩"]
