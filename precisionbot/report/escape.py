"""Escaping untrusted text (token text decoded by the engine, labels from the config) for GitHub Markdown.

Token text comes from the model: it can hold ``|`` (breaks a table row), backticks, ``<script>``, ``@user``
(pings a stranger), ``#12`` (links an issue), newlines, control bytes and bidi overrides. :func:`token_cell`
makes any string safe *and visible* inside a Markdown table cell:

* whitespace and invisible characters become visible glyphs (a space is ``·``, a newline ``↵``, a tab ``⇥``,
  other control or format characters ``⟨07⟩`` / ``⟨U+202E⟩``), because a diverging token that is "just a
  space" is exactly what a reader needs to see;
* Markdown metacharacters get a backslash; HTML metacharacters and ``|`` become character references, which
  CommonMark decodes to the literal character and never interprets (``&#124;`` also keeps GFM from
  splitting the cell); ``://`` and ``www.`` get a zero-width joiner so GFM does not autolink a URL;
* ``@`` and ``#`` get a zero-width joiner after them, and ``GH-`` before digits too: GitHub's mention and
  issue-reference filters run on the rendered text, where an entity would already be a plain ``@`` again;
* long tokens are capped with ``…``.

Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata

ZWJ = "\u200d"

VISIBLE = {" ": "·", "\n": "↵", "\r": "←", "\t": "⇥"}
"""Whitespace shown as a glyph: arrows from the fonts every Linux desktop and CI image has (DejaVu covers
them), not Unicode's control pictures (``␊``), which Debian's default fonts draw as empty boxes."""

# Characters with an inline meaning in CommonMark/GFM (emphasis, code, links, strikethrough, GitHub math)
# get a backslash; HTML metacharacters and the table separator get numeric references, which every
# CommonMark renderer decodes to the literal character and GFM never splits a cell on.
_BACKSLASH = frozenset("\\`*_[]~$")
_ENTITY = {"<": "&lt;", ">": "&gt;", "&": "&amp;", "|": "&#124;"}
# GFM autolinks plain URLs, on the source and (for some patterns) on text nodes after entities are
# decoded; a zero-width joiner inside the scheme separator or "www." stops it at every stage.
_AUTOLINK = (("://", ":" + ZWJ + "//"), ("www.", "www" + ZWJ + "."))

# GitHub also links "GH-12" (any case) to issue 12; a joiner between the dash and the digits stops it.
_GH_REF = re.compile(r"((?<![0-9A-Za-z])[Gg][Hh]-)(?=[0-9])")

_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}

TOKEN_MAX_CHARS = 24
"""Visible characters kept of a token before it is capped with ``…``."""


def visible(text: str, *, spaces: bool = True) -> str:
    """``text`` with whitespace and invisible characters replaced by visible glyphs (no Markdown escaping).

    ``spaces=False`` keeps plain spaces as they are (prose); everything else is still made visible.
    """
    out: list[str] = []
    for ch in text:
        if ch == " " and not spaces:
            out.append(ch)
        elif ch in VISIBLE:
            out.append(VISIBLE[ch])
        elif unicodedata.category(ch) in _INVISIBLE_CATEGORIES or (unicodedata.category(ch) == "Zs" and ch != " "):
            code = ord(ch)
            out.append(f"⟨{code:02x}⟩" if code < 0x100 else f"⟨U+{code:04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


def cap(text: str, max_chars: int = TOKEN_MAX_CHARS) -> str:
    """``text`` cut to ``max_chars`` characters with a trailing ``…`` when it was longer."""
    if len(text) <= max_chars:
        return text
    return text[: max(1, max_chars - 1)] + "…"


def markdown_text(text: str, *, spaces: bool = True) -> str:
    """Escape ``text`` so it renders literally in Markdown (inline, table cells, headings): no markup, no HTML,
    no mentions or issue links. Newlines are shown as ``↵``, so the result is always one line.
    ``spaces=False`` leaves plain spaces alone (prose such as diagnosis sentences)."""
    out: list[str] = []
    for ch in visible(text, spaces=spaces):
        if ch in _BACKSLASH:
            out.append("\\" + ch)
        else:
            out.append(_ENTITY.get(ch, ch))
        if ch in "@#":
            # The ZWJ breaks GitHub's @mention and #ref autolinking without changing what is displayed
            # (those filters run on the rendered text, where an entity would be a plain "@" again).
            out.append(ZWJ)
    escaped = "".join(out)
    for pattern, replacement in _AUTOLINK:
        escaped = escaped.replace(pattern, replacement)
    return _GH_REF.sub("\\1" + ZWJ, escaped)


def token_cell(text: str, max_chars: int = TOKEN_MAX_CHARS) -> str:
    """Token text for a table cell: visible, capped, escaped (see the module docstring)."""
    return markdown_text(cap(visible(text), max_chars)) if text else "∅"


def label_text(text: str, max_chars: int = 80) -> str:
    """A label (model name, check name, config value) for a heading or a cell."""
    return markdown_text(cap(text, max_chars), spaces=False)


def prose(text: str, max_chars: int = 2000) -> str:
    """A sentence (a diagnosis, a reason, an engine error) rendered literally: spaces kept, markup escaped."""
    return markdown_text(cap(text, max_chars), spaces=False)


def code_block_text(text: str) -> str:
    """Text for inside a fenced code block: spaces and line breaks kept, other invisible characters made
    visible, and no backtick (so nothing can close the fence)."""
    return "\n".join(visible(line, spaces=False) for line in text.split("\n")).replace("`", "ˋ")


_UNENTITY = {v: k for k, v in _ENTITY.items()}


def markdown_plain(escaped: str) -> str:
    """The inverse of :func:`markdown_text`'s escaping: backslashes and character references removed, so the
    same view string can be escaped again for another format (the HTML report escapes it for HTML).

    Visible glyphs and zero-width joiners stay: they are what the reader should see (and a ZWJ is invisible).
    """
    out: list[str] = []
    i = 0
    while i < len(escaped):
        ch = escaped[i]
        if ch == "\\" and i + 1 < len(escaped) and escaped[i + 1] in _BACKSLASH:
            out.append(escaped[i + 1])
            i += 2
            continue
        if ch == "&":
            end = escaped.find(";", i)
            entity = escaped[i : end + 1] if end > 0 else ""
            if entity in _UNENTITY:
                out.append(_UNENTITY[entity])
                i = end + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)
