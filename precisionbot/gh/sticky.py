"""The one sticky PR comment: found by a hidden marker AND the bot's own login, updated in place.

Checking the author as well as the marker means a marker pasted into someone else's comment (or a quote of
ours) is never edited or counted. ``GithubRetry`` may repeat a POST whose answer was lost, so creation
looks for the marker first, and a second copy found later is deleted: any number of runs and retries
converge on exactly one comment.
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionbot.errors import GitHubError
from precisionbot.gh.api import Comment, GitHubApi

COMMENT_LIMIT_CHARS = 65536
"""GitHub's limit on a comment body (422 "body is too long")."""

TRUNCATED_NOTE = (
    "\n\n---\n*This comment was cut to fit GitHub's 65,536-character limit; "
    "the full report is in the job summary and the results artifact.*\n"
)


DEFAULT_MARKER = "<!-- precisionbot:comment -->"
"""The renderer's marker (``precisionbot.report.comment_marker``); per-suite comments use another one."""


def _units(text: str) -> int:
    # Count UTF-16 code units: never fewer than characters, so the guard holds however GitHub counts.
    return len(text.encode("utf-16-le")) // 2


def fit_comment(body: str, limit: int = COMMENT_LIMIT_CHARS) -> str:
    """``body`` unchanged when it fits, else cut at a line boundary with a note pointing to the summary.
    The renderer trims details first; this is the last guard before a 422."""
    if _units(body) <= limit:
        return body
    room = limit - _units(TRUNCATED_NOTE)
    cut = body
    while _units(cut) > room:  # halve the overshoot each round: a few passes even for huge bodies
        over = _units(cut) - room
        cut = cut[: max(0, len(cut) - max(1, over))]
    newline = cut.rfind("\n")
    if newline > len(cut) // 2:
        cut = cut[:newline]
    return cut + TRUNCATED_NOTE


@dataclass(frozen=True)
class Upserted:
    comment: Comment
    created: bool
    removed_duplicates: int = 0


def find_ours(api: GitHubApi, pr: int, marker: str = DEFAULT_MARKER) -> list[Comment]:
    """Our comments on ``pr`` carrying ``marker``, oldest first (every page is read)."""
    login = api.bot_login()
    return [c for c in api.comments(pr) if c.user_login == login and marker in c.body]


def upsert_comment(api: GitHubApi, pr: int, body: str, marker: str = DEFAULT_MARKER) -> Upserted:
    """Create or update our comment on ``pr`` (``marker`` is added first when ``body`` lacks it);
    returns it. Raises ``GitHubError`` when GitHub refuses."""
    full = fit_comment(body if marker in body else f"{marker}\n{body}")
    ours = find_ours(api, pr, marker)
    if not ours:
        return Upserted(api.create_comment(pr, full), created=True)
    updated = api.update_comment(ours[0].id, full)
    return Upserted(updated, created=False, removed_duplicates=_remove_duplicates(api, ours))


def _remove_duplicates(api: GitHubApi, ours: list[Comment]) -> int:
    """Delete all but the oldest of ``ours`` (find_ours's order); how many went. Every writer keeps the
    oldest, so two jobs cleaning up at once agree on the survivor."""
    removed = 0
    for extra in ours[1:]:
        try:
            api.delete_comment(extra.id)
            removed += 1
        except GitHubError:
            pass  # a leftover duplicate is untidy, not wrong (or a racing job deleted it first): retried next run
    return removed


def post_once(api: GitHubApi, pr: int, body: str, marker: str) -> Comment | None:
    """Post ``body`` (with ``marker`` first) unless a comment of ours already carries ``marker``; returns the
    reply that stands, or None when there was one. For replies that must not repeat (one per refused head,
    however often the refused request is repeated): the marker names what the reply is about.

    Looking first is not enough: a retried POST, or two jobs answering the same head at once (the
    ``pull_request`` plan and the ``workflow_run`` consumer), can each post. So it looks again after posting
    (and any later call looks too) and keeps only the oldest copy, like :func:`upsert_comment`."""
    ours = find_ours(api, pr, marker)
    if ours:
        _remove_duplicates(api, ours)  # one an earlier call could not clean up
        return None
    posted = api.create_comment(pr, fit_comment(body if marker in body else f"{marker}\n{body}"))
    try:
        ours = find_ours(api, pr, marker)
    except GitHubError:
        return posted  # the reply is said; a duplicate, if any, goes at the next call
    _remove_duplicates(api, ours)
    return ours[0] if ours else posted
