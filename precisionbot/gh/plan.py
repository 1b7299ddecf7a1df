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
from precisionbot.gh.api import GitHubApi
from precisionbot.gh.event import Event
from precisionbot.gh.gate import EYES, Decision, Facts, Needs, decide, needs
from precisionbot.gh.paths import first_match


@dataclass(frozen=True)
class PlanOutcome:
    decision: Decision
    warnings: tuple[str, ...] = ()


def gather(event: Event, api: GitHubApi, config: Config, bot_login: str, need: Needs) -> Facts:
    if need.workflow_run:
        return _gather_run(event, api, config, bot_login)
    pr = event.pr or 0
    pull = api.pull(pr) if need.pull else None
    return Facts(
        bot_login=bot_login,
        matched_path=first_match(api.changed_files(pr), config.github.paths) if need.files else None,
        pull=pull,
        permission=api.permission(need.permission_of) if need.permission_of else None,
        head_committed_at=api.commit_date(pull.head_sha) if need.commit_date and pull else None,
        default_head=api.branch_head(event.default_branch or "main") if need.default_head else None,
    )


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


def run_plan(event: Event, api: GitHubApi, config: Config) -> PlanOutcome:
    warnings: list[str] = []

    def courtesy(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except GitHubError as exc:
            warnings.append(f"could not {what}: {exc}")

    bot_login = api.bot_login() if event.name == "issue_comment" else ""
    need = needs(event, config, bot_login)
    reacted: set[str] = set()
    if need.acknowledged and event.comment_id is not None:
        courtesy("react 👀", lambda: api.react(event.comment_id or 0, EYES))
        reacted.add(EYES)
    decision = decide(event, gather(event, api, config, bot_login, need), config)
    for content in decision.reactions:
        if content not in reacted and event.comment_id is not None:
            courtesy(f"react {content}", functools.partial(api.react, event.comment_id, content))
    if decision.reply and event.pr is not None:
        courtesy("reply", lambda: api.create_comment(event.pr or 0, decision.reply or ""))
    return PlanOutcome(decision, tuple(warnings))
