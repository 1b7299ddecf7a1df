"""The ``workflow_run`` consumer: a completed run of the PR gate workflow, re-judged as a ``pull_request``. Pure.

A ``pull_request`` run cannot enter the default-branch-only environment that holds the runner token and the
AWS roles. The consumer workflow (``on: workflow_run``) runs the default branch's workflow file and config and
may enter it, so it must trust nothing the PR's run produced: that run executed the PR's copy of the workflow,
and its outputs, artifacts and conclusion are the PR author's to choose. What it reads instead:

* the ``workflow_run`` payload fields GitHub itself sets: ``event``, ``head_sha``, ``head_repository``,
  ``head_branch``, ``pull_requests``, ``actor`` (who caused the run) and ``created_at``;
* the PR as GitHub reports it *now*, found by ``pull_requests`` (same-repository PRs) or by
  ``owner:branch`` (forks, for which GitHub leaves ``pull_requests`` empty). Its head must still be the run's
  head SHA, else the run is refused (time of check vs time of use: the run for the newer head decides);
* the PR's issue-event log, to tell which ``pull_request`` action started the run (the payload does not say):
  when the actor's latest event before the run (passive ones such as ``mentioned`` aside) is a ``labeled``
  within :data:`TRIGGER_WINDOW`, and GitHub logged no head change (force push, ...) since, the run was that
  label being added; otherwise it was opened / pushed / reopened. The actor and times are GitHub's, so a fork
  cannot make its push pass for a maintainer's label.

:func:`as_pull_request` then builds the equivalent ``pull_request`` event, and the gate applies its ordinary
``pull_request`` rules to it with the base branch's config (paths, ``run_label``, ``fork_label`` added by the
``rerun`` role, no fork code on pools).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from precisionbot.gh.api import IssueEvent, PullInfo
from precisionbot.gh.event import Event
from precisionbot.untrusted import FULL_SHA

TRIGGER_WINDOW = timedelta(seconds=30)
"""How long after a ``labeled`` event a run still counts as started by it (GitHub creates the run within
seconds). Shorter refuses slow fork-label runs; longer takes a push right after a label for a label run."""
PASSIVE_EVENTS = frozenset({"mentioned", "subscribed", "unsubscribed", "referenced"})
"""Issue events that happen *to* their actor: they say nothing about what the actor did. Every other kind
(``renamed``, ``review_requested``, ...) is something the actor did after the label, and a PR's copy of the
gate workflow may run on it, so it hides the label."""
HEAD_EVENTS = frozenset({"head_ref_force_pushed", "head_ref_restored", "head_ref_deleted"})
"""Head changes GitHub logs (plain pushes it does not): any of these between the label and the run, by anyone,
means the head may not be the one labelled."""


def precheck(event: Event) -> str | None:
    """Why this ``workflow_run`` event can never run the checks (None: look up its PR)."""
    if event.action != "completed":
        return f"workflow_run {event.action!r}: only completed runs are read"
    if event.run_event != "pull_request":
        return f"the watched run was started by {event.run_event!r}; only pull_request runs are consumed"
    if not FULL_SHA.fullmatch(event.head_sha or ""):
        return f"the run's head_sha {event.head_sha!r} is not a full commit id"
    if not event.base_repo:
        return "the workflow_run payload names no repository"
    return None


def head_of(event: Event) -> str | None:
    """``owner:branch`` of the run's head, the filter that finds fork PRs (None: not known)."""
    if not event.head_repo or not event.run_head_branch:
        return None
    return f"{event.head_repo.split('/', 1)[0]}:{event.run_head_branch}"


def pick_pull(event: Event, candidates: Sequence[PullInfo]) -> PullInfo | str:
    """The one open PR of this repository whose head is still the run's head; else why none is."""
    ours = [
        pull
        for pull in candidates
        if pull.state == "open" and pull.base_repo == event.base_repo and pull.head_repo == event.head_repo
    ]
    if not ours:
        return f"no open PR of {event.base_repo} has its head in {event.head_repo} ({head_of(event) or 'unknown'})"
    current = [pull for pull in ours if pull.head_sha == event.head_sha]
    if not current:
        now = ", ".join(f"#{pull.number} is at {pull.head_sha}" for pull in ours)
        return f"head moved since the gate's run ({now}, not {event.head_sha}): the run for the new head decides"
    if len({pull.number for pull in current}) > 1:
        numbers = ", ".join(f"#{pull.number}" for pull in current)
        return f"several open PRs ({numbers}) have head {event.head_sha}: use /precision rerun on the one to check"
    return current[0]


def trigger(event: Event, events: Sequence[IssueEvent]) -> tuple[str, str | None]:
    """The ``pull_request`` action that started the watched run, and the label for ``labeled``."""
    at, actor = event.run_created_at, event.run_actor
    if at is None or not actor:
        return "synchronize", None
    mine = sorted(
        (e for e in events if e.actor == actor and e.event not in PASSIVE_EVENTS and e.created_at <= at),
        key=lambda e: e.created_at,  # stable: the log order breaks ties in the same second
    )
    if not mine or mine[-1].event != "labeled" or at - mine[-1].created_at > TRIGGER_WINDOW:
        return "synchronize", None
    label = mine[-1]
    if any(e.event in HEAD_EVENTS and label.created_at <= e.created_at <= at for e in events):
        return "synchronize", None
    return "labeled", label.label


def as_pull_request(event: Event, pull: PullInfo, events: Sequence[IssueEvent]) -> Event:
    """The ``pull_request`` event the watched run stood for, built from GitHub's facts (labels: the PR's now)."""
    action, label = trigger(event, events)
    return Event(
        name="pull_request",
        action=action,
        sender=event.run_actor,
        default_branch=event.default_branch,
        pr=pull.number,
        head_sha=pull.head_sha,
        head_repo=pull.head_repo,
        base_repo=pull.base_repo,
        labels=pull.labels,
        label=label,
    )
