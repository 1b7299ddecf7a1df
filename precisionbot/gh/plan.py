"""``run_plan``: gather the facts the gate needs from GitHub, decide, then react and reply.

Reactions and replies are courtesy: when GitHub refuses one (a read-only token on a fork's event, say) the
decision stands and the failure comes back as a warning for the log.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from precisionbot.config import Config
from precisionbot.errors import GitHubError
from precisionbot.gh import consumer
from precisionbot.gh.api import PERMISSION_RANK, GitHubApi, Review
from precisionbot.gh.approval import approvers
from precisionbot.gh.event import Event
from precisionbot.gh.gate import Decision, Facts, Needs, decide, needs
from precisionbot.gh.paths import first_match
from precisionbot.gh.sticky import post_once


@dataclass(frozen=True)
class PlanOutcome:
    decision: Decision
    warnings: tuple[str, ...] = ()


MAX_REVIEWERS = 10
"""Roles looked up per plan at most (one API call each): the approvers of one head, most recent last."""


def gather(event: Event, api: GitHubApi, config: Config, bot_login: str, need: Needs) -> Facts:
    if need.workflow_run:
        return _gather_run(event, api, config, bot_login)
    pr = event.pr or 0
    permission = api.permission(need.permission_of) if need.permission_of else None
    if need.command is not None and not _allowed(permission, config.github.permissions.rerun):
        # The gate ignores this commenter: read nothing more (and so write nothing) on their behalf.
        return Facts(bot_login=bot_login, permission=permission)
    pull = api.pull(pr) if need.pull else None
    # Fork PRs only: the label event's head (pinned by GitHub when it happened) or the PR's head now.
    fork_head = (pull.head_sha if pull.is_fork else None) if pull else (event.head_sha if event.is_fork else None)
    reviews: tuple[Review, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()
    if need.reviews and fork_head:
        reviews = tuple(api.reviews(pr))
        wanted = approvers(reviews, fork_head)[-MAX_REVIEWERS:]
        roles = tuple((user, api.permission(user)) for user in wanted)
    default_head = api.branch_head(event.default_branch or "main") if need.default_head else None
    merge_status = None
    # Only for a merge into the default branch: the gate refuses any other on its base alone.
    merged = pull is not None and pull.merged and pull.base_ref == event.default_branch
    if need.merge_in_default and merged and pull and pull.merge_commit_sha and default_head:
        merge_status = api.compare(default_head, pull.merge_commit_sha)
    return Facts(
        bot_login=bot_login,
        matched_path=first_match(api.changed_files(pr), config.github.paths) if need.files else None,
        pull=pull,
        permission=permission,
        head_committed_at=api.commit_date(pull.head_sha) if need.commit_date and pull else None,
        default_head=default_head,
        merge_status=merge_status,
        reviews=reviews,
        reviewer_permissions=roles,
    )


def _allowed(permission: str | None, required: str) -> bool:
    return PERMISSION_RANK.get(permission or "none", 0) >= PERMISSION_RANK[required]


def _gather_run(event: Event, api: GitHubApi, config: Config, bot_login: str) -> Facts:
    """A consumed run's PR (fresh from GitHub), its issue events, then the facts of its ``pull_request``
    rules: the same pure steps :func:`decide` repeats."""
    head = consumer.head_of(event)
    if event.run_pulls:
        candidates = [api.pull(number) for number in event.run_pulls]
    else:  # fork PRs: GitHub leaves pull_requests empty
        candidates = api.open_pulls(head) if head else []
    pull = consumer.pick_pull(event, candidates)
    if isinstance(pull, str):
        return Facts(bot_login=bot_login, run_pulls=tuple(candidates))
    events = tuple(api.issue_events(pull.number))
    inner = consumer.as_pull_request(event, pull, events)
    facts = gather(inner, api, config, bot_login, needs(inner, config, bot_login))
    return replace(facts, run_pulls=tuple(candidates), run_events=events)


def run_plan(
    event: Event, api: GitHubApi, config: Config, dispatch: Callable[[Decision], Decision] | None = None
) -> PlanOutcome:
    """``dispatch``: called with the gate's decision before any reaction or reply, and its answer is what the
    bot says and returns: a CI that starts the run itself (``buildkite trigger`` creates the build there) may
    refuse it, or name the build in the reply."""
    warnings: list[str] = []

    def courtesy(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except GitHubError as exc:
            warnings.append(f"could not {what}: {exc}")

    bot_login = api.bot_login() if event.name == "issue_comment" else ""
    need = needs(event, config, bot_login)
    # Reactions only once the decision stands: the gate answers nobody without the rerun role (it reads their
    # role first), so an early 👀 would already be an answer.
    decision = decide(event, gather(event, api, config, bot_login, need), config)
    if dispatch is not None:
        decision = dispatch(decision)
    for content in decision.reactions:
        if event.comment_id is not None:
            courtesy(f"react {content}", functools.partial(api.react, event.comment_id, content))
    where = event.pr if event.pr is not None else decision.pr  # workflow_run: the PR the consumer found
    if decision.reply and where is not None:
        if decision.reply_marker:  # said once: not again for the same head, however often it is asked
            courtesy("reply", lambda: post_once(api, where, decision.reply or "", decision.reply_marker))
        else:
            courtesy("reply", lambda: api.create_comment(where, decision.reply or ""))
    return PlanOutcome(decision, tuple(warnings))
