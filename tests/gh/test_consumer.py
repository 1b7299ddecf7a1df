"""The ``workflow_run`` consumer as a table: run payload + GitHub's facts -> decision. Pure, no GitHub."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from precisionbot.config import Config, GitHubConfig, from_mapping
from precisionbot.errors import DataError
from precisionbot.gh.api import IssueEvent, PullInfo, Review
from precisionbot.gh.event import Event, parse_event
from precisionbot.gh.gate import Facts, decide, needs

REPO, FORK = "acme/engine", "mallory/engine"
HEAD = "1234567890abcdef1234567890abcdef12345678"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
CONFIG = Config(github=GitHubConfig(paths=("**/layers/**",)))
SAFE = "precision-safe-to-test"


def run_event(fork: bool = False, actor: str = "carol", at: datetime = T0, **kw: Any) -> Event:
    fields: dict[str, Any] = dict(
        name="workflow_run",
        action="completed",
        default_branch="main",
        head_sha=HEAD,
        head_repo=FORK if fork else REPO,
        base_repo=REPO,
        run_event="pull_request",
        run_actor=actor,
        run_created_at=at,
        run_head_branch="feature",
        run_pulls=() if fork else (7,),
        run_id=42,
    )
    fields.update(kw)
    return Event(**fields)


def pull(fork: bool = False, sha: str = HEAD, labels: tuple[str, ...] = (), number: int = 7, **kw: Any) -> PullInfo:
    return PullInfo(number, sha, FORK if fork else REPO, REPO, "mallory" if fork else "bob", labels, **kw)


def labeled(label: str, actor: str = "carol", ago: float = 5) -> IssueEvent:
    return IssueEvent("labeled", actor, T0 - timedelta(seconds=ago), label)


APPROVED = dict(reviews=(Review("dave", "APPROVED", HEAD),), reviewer_permissions=(("dave", "write"),))
"""dave (write) approved HEAD in a review: what a fork's label run needs besides the label."""


def facts(*pulls: PullInfo, events: tuple[IssueEvent, ...] = (), **kw: Any) -> Facts:
    return Facts(run_pulls=pulls or (pull(),), run_events=events, **{**APPROVED, **kw})


FORK_LABELED = facts(pull(fork=True, labels=(SAFE,)), events=(labeled(SAFE),), permission="write")

CASES: list[tuple[str, Event, Facts, dict[str, Any]]] = [
    ("same repo, push, kernel path", run_event(), facts(matched_path="a/layers/x.py"), dict(run=True, sha=HEAD, pr=7)),
    ("same repo, push, no kernel path", run_event(), facts(), dict(run=False, reason="no changed file")),
    ("same repo, run label carried", run_event(), facts(pull(labels=("precision",))), dict(run=True)),
    (
        "run label added by a writer",
        run_event(),
        facts(pull(labels=("precision",)), events=(labeled("precision"),), permission="write"),
        {},
    ),
    (
        "run label added by triage",
        run_event(),
        facts(pull(labels=("precision",)), events=(labeled("precision"),), permission="triage"),
        {},
    ),
    (
        "another label added",
        run_event(),
        facts(pull(labels=("bug",)), matched_path="layers/x", events=(labeled("bug"),)),
        dict(reason="does not request a run"),
    ),
    ("head moved since the run", run_event(), facts(pull(sha="9" * 40)), dict(run=False, reason="head moved")),
    ("PR closed", run_event(), facts(pull(state="closed")), dict(run=False, reason="no open PR")),
    ("head in another repo", run_event(), facts(pull(fork=True)), dict(run=False, reason="no open PR")),
    ("two PRs, one head", run_event(), facts(pull(), pull(number=8)), dict(run=False, reason="several open PRs")),
    ("run not completed", run_event(action="requested"), facts(), dict(run=False, reason="only completed")),
    ("run from a push", run_event(run_event="push"), facts(), dict(run=False, reason="only pull_request")),
    ("short head", run_event(head_sha=HEAD[:12]), facts(), dict(run=False, reason="not a full commit")),
    ("fork, labelled by a writer", run_event(fork=True), FORK_LABELED, dict(run=True, sha=HEAD, pr=7)),
    ("fork, labeller reads only", run_event(fork=True), facts(*FORK_LABELED.run_pulls, events=(labeled(SAFE),)), {}),
    (
        "fork, label removed since",
        run_event(fork=True),
        facts(pull(fork=True), events=(labeled(SAFE),), permission="write"),
        dict(run=False, reason="was removed since"),
    ),
    ("fork, push after the label", run_event(fork=True, actor="mallory"), FORK_LABELED, dict(run=False)),
    (
        "fork, labelled then another label",
        run_event(fork=True),
        facts(
            pull(fork=True, labels=(SAFE, "bug")),
            events=(labeled(SAFE, ago=20), labeled("bug", ago=2)),
            permission="write",
        ),
        dict(run=False, reason="does not request a run"),
    ),
    (
        "fork, label long before the run",
        run_event(fork=True),
        facts(*FORK_LABELED.run_pulls, events=(labeled(SAFE, ago=3600),), permission="admin"),
        dict(run=False, reason="not run automatically"),
    ),
    (
        "fork, labeller force-pushed since",
        run_event(fork=True),
        facts(
            *FORK_LABELED.run_pulls,
            events=(labeled(SAFE, ago=20), IssueEvent("head_ref_force_pushed", "carol", T0 - timedelta(seconds=2))),
            permission="admin",
        ),
        dict(run=False),
    ),
    (
        "fork, labelled then renamed",
        run_event(fork=True),
        facts(
            *FORK_LABELED.run_pulls,
            events=(labeled(SAFE, ago=20), IssueEvent("renamed", "carol", T0 - timedelta(seconds=2))),
            permission="admin",
        ),
        dict(run=False),
    ),
    (
        "fork, labelled, fork force-pushed",
        run_event(fork=True),
        facts(
            *FORK_LABELED.run_pulls,
            events=(labeled(SAFE, ago=20), IssueEvent("head_ref_force_pushed", "mallory", T0 - timedelta(seconds=9))),
            permission="admin",
        ),
        dict(run=False),
    ),
    (
        "fork, labelled, carol mentioned",
        run_event(fork=True),
        facts(
            *FORK_LABELED.run_pulls,
            events=(labeled(SAFE, ago=20), IssueEvent("mentioned", "carol", T0 - timedelta(seconds=2))),
            permission="admin",
        ),
        dict(run=True),
    ),
    (
        "fork, fast-forward after the review",  # dave approved an older commit; the head moved by a plain push
        run_event(fork=True),
        replace(FORK_LABELED, reviews=(Review("dave", "APPROVED", "0" * 40),)),
        dict(run=False, reason=f"approved its head {HEAD}"),
    ),
    (
        "fork, approval withdrawn",
        run_event(fork=True),
        replace(FORK_LABELED, reviews=(Review("dave", "APPROVED", HEAD), Review("dave", "CHANGES_REQUESTED", HEAD))),
        dict(run=False, reason="approved its head"),
    ),
    (
        "fork, approval by a reader",
        run_event(fork=True),
        replace(FORK_LABELED, reviewer_permissions=(("dave", "read"),)),
        dict(run=False, reason="approved its head"),
    ),
    (
        "fork, approval then a comment-only review",
        run_event(fork=True),
        replace(FORK_LABELED, reviews=(Review("dave", "APPROVED", HEAD), Review("dave", "COMMENTED", HEAD))),
        dict(run=True, reason="head approved by dave"),
    ),
    (
        "fork, label after the run",
        run_event(fork=True),
        facts(*FORK_LABELED.run_pulls, events=(labeled(SAFE, ago=-5),)),
        {},
    ),
]
EXPECTED_RUN = {
    "run label added by a writer": True,
    "run label added by triage": False,
    "another label added": False,
    "fork, labeller reads only": False,
    "fork, label after the run": False,
}


@pytest.mark.parametrize(("event", "fact", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_consumer(event: Event, fact: Facts, expected: dict[str, Any], request: pytest.FixtureRequest) -> None:
    expected = dict(expected)
    case = request.node.callspec.id
    expected.setdefault("run", EXPECTED_RUN.get(case))
    decision = decide(event, fact, CONFIG)
    assert decision.run is expected.pop("run"), decision.reason
    assert expected.pop("reason", "") in decision.reason
    for key, value in expected.items():
        assert getattr(decision, key) == value, key
    assert decision.reactions == ()  # nothing to react to: no comment started it
    # A fork's run answers the person who labelled it with the commit it runs, and a fork label refused for
    # want of an approving review tells them which head needs one (once per head); automatic runs say nothing.
    pinned = f"🚀 Running suite `pr` (check) on commit `{HEAD}`."
    if decision.reply_marker:
        assert not decision.run and "approved its head" in decision.reason and decision.pr == 7
        assert decision.reply and decision.reply.startswith("😕 @carol: ") and f"`{HEAD}`" in decision.reply
    else:
        assert decision.reply == (pinned if decision.run and event.is_fork else None)
    if decision.run:
        assert decision.reason.startswith("PR #7 run 42 (") and decision.mode == "check"


def test_fork_label_never_puts_fork_code_on_a_pool() -> None:
    pool = from_mapping({"runner": {"kind": "pool"}, "github": {"paths": ["**"]}})
    decision = decide(run_event(fork=True), FORK_LABELED, pool)
    assert not decision.run and "persistent pool" in decision.reason
    assert decide(run_event(), facts(matched_path="x"), pool).run  # same-repository code may use the pool


def test_needs_look_up_the_pr_only_for_consumable_runs() -> None:
    assert needs(run_event(), CONFIG, "bot").workflow_run
    assert not needs(run_event(run_event="workflow_dispatch"), CONFIG, "bot").workflow_run
    assert not needs(run_event(head_sha=None), CONFIG, "bot").workflow_run


def test_parse_workflow_run_payload() -> None:
    payload = {
        "action": "completed",
        "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "carol"},
        "workflow_run": {
            "id": 42,
            "event": "pull_request",
            "head_sha": HEAD,
            "head_branch": "feature",
            "head_repository": {"full_name": FORK},
            "pull_requests": [  # another repository's PR from the same branch: its number means nothing here
                {"number": 3, "base": {"repo": {"url": "https://api.github.com/repos/other/engine"}}}
            ],
            "actor": {"login": "carol"},
            "created_at": "2026-01-01T12:00:00Z",
            "conclusion": "success",
        },
    }
    event = parse_event("workflow_run", payload, sha="f" * 40)
    assert (event.head_sha, event.head_repo, event.base_repo, event.run_actor) == (HEAD, FORK, REPO, "carol")
    assert event.run_created_at == T0 and event.run_pulls == () and event.run_id == 42 and event.is_fork
    del payload["workflow_run"]["head_sha"]  # type: ignore[attr-defined]
    with pytest.raises(DataError, match="head_sha"):
        parse_event("workflow_run", payload)
