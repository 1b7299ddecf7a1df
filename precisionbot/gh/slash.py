"""``/precision <verb> [key=value ...]`` on the first line of a PR comment. Pure.

``parse_command(body)`` returns None when the comment is not addressed to us (ignored quietly), a
``SlashCommand`` when it is well formed, or a ``Malformed``. The gate answers a ``Malformed`` from someone with
the ``rerun`` role with a 😕 reply naming the problem and the usage text; anyone else gets a bare 😕 reaction
for every command, malformed or not (a reply would let anyone make the bot write).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from precisionbot.results import CHECK_NAMES

PREFIX = "/precision"
VERBS = ("rerun", "baseline", "bisect", "accept", "help")
KEYS = {
    "rerun": ("models", "checks", "samples", "sha"),
    "baseline": ("models", "sha"),
    "bisect": ("good", "models", "checks"),
    "accept": ("reason", "models"),
    "help": (),
}
_KEY_END = re.compile(r'\S="')
"""Where a ``key="`` ends (a key is at least one non-space character)."""
_REASONS = re.compile(
    r"""
    (   [Rr] (?<!\S[Rr])                       # a word starts here
        [Ee][Aa][Ss][Oo][Nn]="[^"]*"            # reason="...": the value runs to the next quote
        (?:[Rr][Ee][Aa][Ss][Oo][Nn]="[^"]*")*   # and the pairs that follow right after its closing quote
    )
    """,
    re.VERBOSE,
)
"""A run of ``reason="..."`` pairs. The letters are spelled out: ``re.IGNORECASE`` would also read ``ſ`` as
``s``, where the key is compared with ``str.lower()`` (which maps only ``A``-``Z`` onto these letters)."""
_LINE_END = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
"""Where ``str.splitlines`` cuts: the first line is found without splitting the rest of the comment."""
MAX_SAMPLES = 4096
MAX_REASON = 500
_NAME_LIST = re.compile(r"[A-Za-z0-9._@/,-]*")
_NAME_START = re.compile(r",[._@/-]")
"""A name is ``[A-Za-z0-9][A-Za-z0-9._@/-]*``: the whole list is checked in two scans (a match per name took
17 ms for the 32,756 names a comment can hold)."""
_SHA = re.compile(r"^[0-9a-f]{7,40}$")

USAGE = (
    """\
**precisionbot** commands (first line of a PR comment):

* `/precision rerun [models=a,b] [checks=match,golden] [samples=N] [sha=<head commit>]`: run the checks \
again on this PR's head (write access or above). PRs from forks need `sha=` naming the commit you reviewed \
in full (all 40 hex digits).
* `/precision baseline [models=a,b]`: record new golden baselines from the default branch after an \
intentional numerics change (maintain or admin).
* `/precision bisect [good=<sha>]`: find the first commit of this PR (after `good`, default its merge \
base) whose checks fail (write access or above; not for PRs from forks).
* `/precision accept reason="..."`: once this PR is merged, record its numbers as the new golden baseline \
with your reason, login and the baseline it replaces (maintain or admin).
* `/precision help`: this message.

Check names: """
    + ", ".join(f"`{c}`" for c in CHECK_NAMES)
    + "."
)


@dataclass(frozen=True)
class SlashCommand:
    verb: str
    models: tuple[str, ...] = ()
    """Empty = every configured model."""
    checks: tuple[str, ...] = ()
    """Empty = the suite's checks."""
    samples: int | None = None
    sha: str | None = None
    """The commit the commenter reviewed (7 to 40 hex digits; the gate wants all 40 for PRs from forks); the
    run is refused unless the PR head still starts with it."""
    good: str | None = None
    """``bisect``: the known-good commit (7 to 40 hex digits); None = the PR's merge base."""
    reason: str | None = None
    """``accept``: why the numbers changed (required)."""


@dataclass(frozen=True)
class Malformed:
    problem: str
    """One sentence saying what is wrong; the reply adds the usage text."""


def parse_command(body: str) -> SlashCommand | Malformed | None:
    """Parse the first line of ``body``; None when it does not start with ``/precision``.

    Any commenter on a public PR chooses ``body`` (up to GitHub's 65,536 characters), so every step is one
    forward pass over the first line, whatever its shape: the rest of the comment is never split, and the
    quoted values are found as ``_holds_pair`` says, never by retrying inside a word. Nothing is cut at a
    length either: a cap would make the answer depend on where the cut falls, and a linear parse needs none.
    """
    text = body.lstrip("\ufeff").strip()
    end = _LINE_END.search(text)
    first = (text[: end.start()] if end else text).strip()
    words = first.split()
    if not words or words[0].lower() != PREFIX:
        return None
    if len(words) == 1:
        return Malformed("the command needs a verb")
    verb = words[1].lower()
    if verb not in VERBS:
        return Malformed(f"unknown verb `{_clip(words[1])}`")
    values: dict[str, str] = {}
    rest = first.split(None, 2)[2] if len(words) > 2 else ""
    if _holds_pair(rest):
        reasons = _reasons(rest) if verb == "accept" else None
        if reasons is None:
            return Malformed('only `reason` takes a quoted value (`/precision accept reason="..."`)')
        values["reason"], outside = reasons
        words = words[:2] + outside.split()
    for word in words[2:]:
        key, sep, value = word.partition("=")
        key = key.lower()
        if not sep or not value:
            return Malformed(f"`{_clip(word)}` is not `key=value`")
        if key not in KEYS[verb]:
            allowed = ", ".join(f"`{k}`" for k in KEYS[verb]) or "none"
            return Malformed(f"`{_clip(key)}` is not an option of `{verb}` (options: {allowed})")
        if key in values:
            return Malformed(f"`{key}` is given twice")
        values[key] = value
    return _build(verb, values)


def _holds_pair(text: str) -> bool:
    """Whether ``text`` holds a ``key="value"`` pair: its first ``key="`` has a quote after it.

    The pairs are those that the pattern ``(\\S+?)="([^"]*)"`` finds with ``finditer``, which the parser used
    until it was found to retry from every start inside a word: in a 65,536-character word without ``="``
    each try ran to the word's end, billions of steps (a minute). What the pattern finds: a pair starts
    where a word starts or where the previous pair's closing quote ends; its key runs to the first ``="``
    after at least one character (the lazy ``+?``); its value runs to the next quote, across words if need
    be; once no quote is left, nothing more matches. So no pair can start before the first ``\\S="``, and a
    pair starts there exactly when a quote follows it. One forward scan, as in ``_reasons``;
    ``tests/gh/test_slash.py`` checks both against the pattern on generated text.
    """
    end = _KEY_END.search(text)
    return end is not None and text.find('"', end.end()) >= 0


def _reasons(rest: str) -> tuple[str, str] | None:
    """The last ``reason="..."`` value in ``rest`` (it holds a pair) and the text outside the pairs, a space
    for each; None when some pair has another key.

    When every key is ``reason``, the pairs are exactly the runs that ``_REASONS`` takes from left to
    right: a run starts a word, and neither a value nor a word without a pair holds ``reason="``; what is
    left then holds no ``\\S="`` that a quote follows. When some key is not ``reason``, no run starts in or
    reaches into the first such pair's key, so its ``\\S="`` is left, and a quote follows it: in its own
    text, or in a later run that began inside its value (which is why each run is put back as a lone quote).
    """
    pieces = _REASONS.split(rest)  # outside, run, outside, ..., run, outside
    if _holds_pair(' " '.join(pieces[::2])):
        return None
    last = pieces[-2]  # the value of its last pair lies between its last two quotes
    return last[last.rindex('"', 0, -1) + 1 : -1], " ".join(pieces[::2])


def _build(verb: str, values: dict[str, str]) -> SlashCommand | Malformed:
    models = _names(values.get("models"))
    if isinstance(models, Malformed):
        return models
    checks = _names(values.get("checks"))
    if isinstance(checks, Malformed):
        return checks
    unknown = [c for c in checks if c not in CHECK_NAMES]
    if unknown:
        return Malformed(f"unknown check `{_clip(unknown[0])}`")
    samples: int | None = None
    if "samples" in values:
        raw = values["samples"]
        # ASCII digits only: "²".isdigit() is true and int("²") raises.
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_SAMPLES:
            return Malformed(f"`samples` must be a whole number from 1 to {MAX_SAMPLES}, not `{_clip(raw)}`")
        samples = int(raw)
    sha = values.get("sha")
    if sha is not None:
        sha = sha.lower()
        if not _SHA.match(sha):
            return Malformed(f"`sha` must be 7 to 40 hex digits, not `{_clip(sha)}`")
    good = values.get("good")
    if good is not None:
        good = good.lower()
        if not _SHA.match(good):
            return Malformed(f"`good` must be 7 to 40 hex digits, not `{_clip(good)}`")
    reason = " ".join(values.get("reason", "").split()) or None
    if verb == "accept" and reason is None:
        return Malformed('`accept` needs `reason="why the numbers changed"`')
    if reason is not None and len(reason) > MAX_REASON:
        return Malformed(f"the reason is longer than {MAX_REASON} characters")
    return SlashCommand(verb=verb, models=models, checks=checks, samples=samples, sha=sha, good=good, reason=reason)


def _names(raw: str | None) -> tuple[str, ...] | Malformed:
    if raw is None:
        return ()
    names = tuple(filter(None, raw.split(",")))
    if not names or not _NAME_LIST.fullmatch(raw) or _NAME_START.search("," + raw):
        return Malformed(f"`{_clip(raw)}` is not a comma-separated list of names")
    return tuple(dict.fromkeys(names))


def _clip(text: str, limit: int = 40) -> str:
    """Echo user text safely inside a code span: no backticks, no mentions, bounded length."""
    cleaned = text.replace("`", "'").replace("@", "@\u200b")
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
