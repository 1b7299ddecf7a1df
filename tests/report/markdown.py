"""Reading our Markdown back with a CommonMark + GFM-tables parser (markdown-it-py), independently of how
we wrote it: table shapes, cell texts, and any raw HTML that got through."""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

ALLOWED_HTML = re.compile(
    r"^(<!-- precisionbot:comment( suite=[A-Za-z0-9_.-]+)? -->\s*|</?sub>|<details( open)?>|</details>"
    r"|<summary>[A-Za-z ,.-]*</summary>|\s)+$"
)
"""The only raw HTML the report writes itself: the marker, <sub>, <details>, <summary>."""


def parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough")


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


def _text(inline) -> str:  # type: ignore[no-untyped-def]
    """The text a reader sees in an inline token (entities and escapes decoded, markup dropped)."""
    out = []
    for child in inline.children or []:
        if child.type in ("text", "code_inline", "html_inline"):
            out.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            out.append("\n")
    return "".join(out)


def tables(markdown: str) -> list[Table]:
    tokens = parser().parse(markdown)
    out: list[Table] = []
    row: list[str] | None = None
    in_head = False
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            out.append(Table([], []))
        elif tok.type == "thead_open":
            in_head = True
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open"):
            assert row is not None
            row.append(_text(tokens[i + 1]))
        elif tok.type == "tr_close":
            assert row is not None
            if in_head:
                out[-1].header = row
            else:
                out[-1].rows.append(row)
    return out


def raw_html(markdown: str) -> list[str]:
    """Every raw HTML fragment the parser found (blocks and inline)."""
    found = []
    for tok in parser().parse(markdown):
        if tok.type == "html_block":
            found.append(tok.content)
        for child in tok.children or []:
            if child.type == "html_inline":
                found.append(child.content)
    return found


def raw_cell_counts(markdown: str) -> list[list[int]]:
    """Cells per line of each table, counted on the source: a stray ``|`` adds a cell (the parser would
    silently drop the extra one, so this is the check that catches it)."""
    groups: list[list[int]] = []
    previous_was_row = False
    for line in markdown.splitlines():
        is_row = line.startswith("|")
        if is_row:
            if not previous_was_row:
                groups.append([])
            groups[-1].append(len(re.split(r"(?<!\\)\|", line.strip())) - 2)
        previous_was_row = is_row
    return groups


def rendered_text(markdown: str) -> str:
    """All text a reader sees (inline content of every block), one block per line."""
    return "\n".join(_text(tok) for tok in parser().parse(markdown) if tok.type == "inline")


def list_after(markdown: str, lead: str) -> list[str]:
    """The text of each item of the first bullet list after the paragraph that reads ``lead`` (empty when
    there is none): what a reader sees under a heading such as **What it points to**."""
    tokens = parser().parse(markdown)
    start = next(
        (i for i, tok in enumerate(tokens) if tok.type == "inline" and _text(tok) == lead),
        None,
    )
    if start is None:
        return []
    items: list[str] = []
    depth = 0
    for i in range(start + 1, len(tokens)):
        tok = tokens[i]
        if tok.type == "bullet_list_open":
            depth += 1
        elif tok.type == "bullet_list_close":
            depth -= 1
            if depth == 0:
                break
        elif tok.type == "inline" and depth == 1:
            items.append(_text(tok))
        elif depth == 0 and tok.type == "paragraph_open":
            break  # another paragraph first: no list follows the lead
    return items
