"""A PR comment as GitHub shows it, for the width test and the README's screenshot: GitHub-flavoured Markdown
(tables, strikethrough) rendered by markdown-it-py, raw HTML limited to what the comment uses, inside a column
as wide as a PR conversation's comment body at a 1280 px window, with CSS close to GitHub's ``markdown-body``.

The widths are GitHub's layout at a 1280 px window: the conversation column is 880 px wide at most (the
sidebar takes the rest) and a comment body has 16 px padding on each side, so a table has 848 px before it
scrolls. Tables get GitHub's ``display: block; width: max-content; max-width: 100%; overflow: auto``: a table
wider than the column scrolls inside it, which is what the test measures.
"""

from __future__ import annotations

import html

from markdown_it import MarkdownIt

WINDOW_PX = 1280
COMMENT_COLUMN_PX = 880
"""The PR conversation column at a 1280 px window (GitHub's ``Layout-main`` beside the sidebar)."""

CSS = """
body { margin: 0; background: #fff; font-family: -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial,
       "DejaVu Sans", sans-serif; }
.column { width: COLUMN_PXpx; margin: 24px 0 24px 40px; border: 1px solid #d1d9e0; border-radius: 6px; }
.header { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px; font-size: 14px;
          color: #59636e; border-radius: 6px 6px 0 0; }
.markdown-body { padding: 16px; font-size: 14px; line-height: 1.5; color: #1f2328; word-wrap: break-word; }
.markdown-body h2 { font-size: 1.5em; font-weight: 600; padding-bottom: .3em; border-bottom: 1px solid #d1d9e0b3;
                    margin: 0 0 16px; }
.markdown-body h3 { font-size: 1.25em; font-weight: 600; margin: 24px 0 16px; }
.markdown-body p, .markdown-body ul, .markdown-body table, .markdown-body details { margin: 0 0 16px; }
.markdown-body sub { font-size: 75%; line-height: 0; }
.markdown-body code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
                      font-size: 85%; background: #818b981f; border-radius: 6px; padding: .2em .4em; }
.markdown-body pre { background: #f6f8fa; padding: 16px; overflow: auto; font-size: 85%; border-radius: 6px; }
.markdown-body pre code { background: none; padding: 0; font-size: 100%; }
.markdown-body table { display: block; width: max-content; max-width: 100%; overflow: auto;
                       border-spacing: 0; border-collapse: collapse; font-variant: tabular-nums; }
.markdown-body th { font-weight: 600; }
.markdown-body th, .markdown-body td { padding: 6px 13px; border: 1px solid #d1d9e0; }
.markdown-body tr { background: #fff; border-top: 1px solid #d1d9e0b3; }
.markdown-body tr:nth-child(2n) { background: #f6f8fa; }
""".replace("COLUMN_PX", str(COMMENT_COLUMN_PX))


def comment_html(markdown: str, *, title: str = "precisionbot commented") -> str:
    """``markdown`` (a PR comment) as a page laid out like GitHub's PR conversation at 1280 px."""
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    body = md.render(markdown)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<style>{CSS}</style></head><body><div class='column'><div class='header'>{html.escape(title)}</div>"
        f"<div class='markdown-body'>{body}</div></div></body></html>"
    )


def open_details(markdown: str) -> str:
    """The comment with its ``<details>`` open, so a screenshot shows the worst-positions table."""
    return markdown.replace("<details>", "<details open>")
