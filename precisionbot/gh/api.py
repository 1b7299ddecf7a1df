"""The narrow interface to GitHub that ``github plan`` and ``github comment`` need (STYLE: PyGithub stays
behind it, so the logic is tested against plain dataclasses and the adapter against a real HTTP fake)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

PERMISSION_RANK = {"none": 0, "read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}
"""GitHub's repository roles, weakest first."""

REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")


@dataclass(frozen=True)
class PullInfo:
    number: int
    head_sha: str
    """The PR head as GitHub reports it now; the GPU job checks out exactly this commit."""
    head_repo: str | None
    """``owner/name`` of the head repository; None when the fork was deleted."""
    base_repo: str
    author: str
    labels: tuple[str, ...] = ()
    state: str = "open"
    merged: bool = False
    """Merged into its base (``state`` is then ``closed``): what ``/precision accept`` waits for."""
    merge_commit_sha: str | None = None
    base_ref: str | None = None
    """The branch the PR targets (``base.ref``): ``/precision accept`` takes only merges into the default
    branch."""
    head_ref: str | None = None
    """The PR's branch in ``head_repo`` (``head.ref``): the branch a Buildkite build of the PR is named by."""

    @property
    def is_fork(self) -> bool:
        """A PR whose head lives in another repository (or in a deleted one): its code is untrusted."""
        return self.head_repo != self.base_repo


@dataclass(frozen=True)
class Comment:
    id: int
    body: str
    user_login: str
    user_type: str
    url: str
    """The comment's web address (``html_url``), for the ``comment-url`` output."""


@dataclass(frozen=True)
class IssueEvent:
    """One entry of a PR's issue-event log (``labeled``, ``unlabeled``, ``reopened``, ...): GitHub writes the
    actor and the time, so a PR cannot forge them."""

    event: str
    actor: str
    created_at: datetime
    label: str | None = None


@dataclass(frozen=True)
class Review:
    """One submitted PR review: GitHub writes the reviewer, the state and the commit it was given on, so the
    PR author cannot forge an approval of a commit nobody looked at."""

    user: str
    state: str
    """``APPROVED``, ``CHANGES_REQUESTED``, ``COMMENTED``, ``DISMISSED`` (GitHub's words, upper case)."""
    commit_id: str
    """The commit the reviewer saw: the PR head when the review was submitted."""


class GitHubApi(Protocol):
    """What precisionbot asks of GitHub for one repository. Every method raises ``GitHubError`` on failure."""

    def bot_login(self) -> str:
        """The login our token acts as (comments by it are ours)."""
        ...

    def pull(self, number: int) -> PullInfo: ...

    def changed_files(self, number: int) -> Iterator[str]:
        """Paths changed by the PR, page by page (callers may stop early)."""
        ...

    def commit_date(self, sha: str) -> datetime:
        """The committer date of ``sha`` (timezone-aware)."""
        ...

    def branch_head(self, branch: str) -> str: ...

    def compare(self, base: str, head: str) -> str:
        """GitHub's comparison of two commits (``GET compare/{base}...{head}``): ``identical``, ``ahead`` (head
        has commits base lacks, none the other way), ``behind`` (head is an ancestor of base) or
        ``diverged``."""
        ...

    def open_pulls(self, head: str) -> list[PullInfo]:
        """This repository's open PRs whose head is ``owner:branch`` (fork heads included, unlike the
        commit-to-PR lookup, which only knows commits of this repository's own tree)."""
        ...

    def issue_events(self, number: int) -> Iterator[IssueEvent]:
        """The PR's issue events, oldest first, paginated."""
        ...

    def reviews(self, number: int) -> Iterator[Review]:
        """The PR's submitted reviews, oldest first, paginated."""
        ...

    def permission(self, user: str) -> str:
        """The user's role on the repository: a key of ``PERMISSION_RANK`` (``role_name`` when GitHub
        reports a finer standard role such as ``maintain``/``triage``, else the coarse ``permission``)."""
        ...

    def react(self, comment_id: int, content: str) -> None: ...

    def comments(self, number: int) -> Iterator[Comment]:
        """Every comment on the issue/PR, oldest first, paginated."""
        ...

    def create_comment(self, number: int, body: str) -> Comment: ...

    def update_comment(self, comment_id: int, body: str) -> Comment: ...

    def delete_comment(self, comment_id: int) -> None: ...


class CommitStatuses(Protocol):
    """Commit statuses (``POST statuses/{sha}``), for CI outside Actions (Buildkite) that reports a verdict on
    the commit it judged. Raises ``GitHubError`` on failure."""

    def create_status(self, sha: str, state: str, description: str, context: str, target_url: str | None) -> None:
        """``state``: ``success``, ``failure``, ``error`` or ``pending`` (GitHub's words)."""
        ...


class StatusReportingApi(GitHubApi, CommitStatuses, Protocol):
    """What ``buildkite post`` needs of GitHub: the comment calls of ``GitHubApi`` and a commit status."""


def effective_permission(permission: str, role_name: str | None) -> str:
    """Combine the API's two fields: ``permission`` only says admin/write/read/none, ``role_name`` also
    says maintain/triage (or a custom role's name, which we cannot rank, so the coarse field decides)."""
    coarse = permission if permission in PERMISSION_RANK else "none"
    if role_name in PERMISSION_RANK and PERMISSION_RANK[role_name] > PERMISSION_RANK[coarse]:
        return role_name
    # GitHub reports maintain as permission "write" and triage as "read": the maximum of the two fields
    # is exactly the role, never more.
    return coarse
