"""What the comment job may trust about the results it posts: the commit and the report link. Pure.

The result directories were written by the GPU job, that is by PR code: ``result.json``'s engine commit and
any address it names are the PR author's to choose. The comment job therefore takes the commit from the
trusted plan (the SHA the gate pinned and the GPU job checked out), posts only while that commit is still
the PR's head (a run for an older head never overwrites the newer head's verdict, and a dispatch that ran
the default branch never lands on a PR whose head is something else), and links only an artifact of this
repository's own workflow run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from precisionbot.results import RunResult
from precisionbot.untrusted import FULL_SHA


def check_pinned_sha(sha: str) -> str:
    """``--sha``: the plan's ``sha`` output, a full 40-hex commit id (a prefix pins nothing)."""
    if not FULL_SHA.fullmatch(sha):
        raise ValueError(f"{sha[:48]!r} is not a full 40-hex commit id (pass the plan's sha output)")
    return sha


def stale_reason(pinned: str, head: str, pr: int) -> str | None:
    """Why results for ``pinned`` must not be posted on ``pr`` whose head is ``head`` (None: post them)."""
    if pinned == head:
        return None
    return (
        f"these results are for commit {pinned}, but PR #{pr}'s head is now {head}: the run for that head "
        "posts its own verdict (a dispatch that ran another commit never comments on a PR)"
    )


def pin_run(run: RunResult, pinned: str) -> tuple[RunResult, bool]:
    """``run`` shown with the pinned commit as its engine commit, and whether its ``result.json`` named another."""
    claimed = run.engine.commit
    return replace(run, engine=replace(run.engine, commit=pinned)), claimed not in (None, "", pinned)


def foreign_commit_note(labels: Sequence[str], pinned: str) -> str | None:
    """A warning for sections whose results claimed a commit other than the pinned one (None if none did)."""
    if not labels:
        return None
    names = ", ".join(f"`{label.replace('`', '')}`" for label in labels[:8]) + (" ..." if len(labels) > 8 else "")
    return (
        f"> [!WARNING]\n> {names}: the results name another engine commit than the one this workflow checked "
        f"out (`{pinned[:12]}`); the commit shown is the checked-out one.\n"
    )


def trusted_artifact_url(url: str | None, server_url: str, repository: str | None, run_id: str | None) -> str | None:
    """``url`` when it is an artifact of this repository's run ``run_id`` (upload-artifact's ``artifact-url``:
    ``{server}/{owner}/{repo}/actions/runs/{run}/artifacts/{id}``), else None."""
    if not url or not repository or not run_id:
        return None
    prefix = f"{server_url.rstrip('/')}/{repository}/actions/runs/{run_id}/artifacts/"
    rest = url[len(prefix) :] if url.startswith(prefix) else ""
    return url if rest.isascii() and rest.isdigit() else None
