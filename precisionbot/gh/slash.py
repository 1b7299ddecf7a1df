"""``/precision <verb> [key=value ...]`` on the first line of a PR comment. Pure.

``parse_command(body)`` returns None when the comment is not addressed to us (ignored quietly), a
``SlashCommand`` when it is well formed, or a ``Malformed`` (answered with 😕 and the usage text).
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
_QUOTED = re.compile(r'(\S+?)="([^"]*)"')
"""``key="several words"`` (the accept reason): one value with spaces, no quote inside."""
MAX_SAMPLES = 4096
MAX_REASON = 500
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@/-]*$")
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
    """Parse the first line of ``body``; None when it does not start with ``/precision``."""
    first = body.lstrip("\ufeff").strip().splitlines()[0].strip() if body.strip() else ""
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
    quoted = {m.group(1).lower(): m.group(2) for m in _QUOTED.finditer(rest)}
    if quoted:
        if verb != "accept" or set(quoted) != {"reason"}:
            return Malformed('only `reason` takes a quoted value (`/precision accept reason="..."`)')
        values["reason"] = quoted["reason"]
        words = words[:2] + _QUOTED.sub(" ", rest).split()
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
    names = tuple(n for n in raw.split(",") if n)
    bad = [n for n in names if not _NAME.match(n)]
    if bad or not names:
        return Malformed(f"`{_clip(raw)}` is not a comma-separated list of names")
    return tuple(dict.fromkeys(names))


def _clip(text: str, limit: int = 40) -> str:
    """Echo user text safely inside a code span: no backticks, no mentions, bounded length."""
    cleaned = text.replace("`", "'").replace("@", "@\u200b")
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
