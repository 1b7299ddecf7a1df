"""The gate as a parameter table: event + facts -> decision. Pure, no GitHub."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from precisionbot.config import Config, GitHubConfig, from_mapping
from precisionbot.errors import ConfigError
from precisionbot.gh.api import PullInfo, Review
from precisionbot.gh.event import Event, parse_event
from precisionbot.gh.gate import UNREVIEWED_MARKER, Facts, Needs, decide, needs

REPO = "acme/engine"
HEAD = "1234567890abcdef1234567890abcdef12345678"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
BOT = "precisionbot[bot]"
CONFIG = Config(github=GitHubConfig(paths=("**/layers/**",)))


def pr_event(action: str = "opened", fork: bool = False, labels: tuple[str, ...] = (), **kw: Any) -> Event:
    head_repo = "mallory/engine" if fork else REPO
    return Event(
        name="pull_request",
        action=action,
        pr=7,
        head_sha=HEAD,
        head_repo=head_repo,
        base_repo=REPO,
        labels=labels,
        sender="carol",
        **kw,
    )


def comment_event(body: str = "/precision rerun", **kw: Any) -> Event:
    fields: dict[str, Any] = dict(
        name="issue_comment",
        action="created",
        pr=7,
        is_pull=True,
        comment_id=99,
        comment_body=body,
        comment_user="alice",
        comment_user_type="User",
        comment_created_at=T0,
        default_branch="main",
    )
    fields.update(kw)
    return Event(**fields)


def pull(fork: bool = False, sha: str = HEAD, state: str = "open") -> PullInfo:
    return PullInfo(7, sha, "mallory/engine" if fork else REPO, REPO, "bob", state=state)


def dispatch(inputs: dict[str, str], ref: str = "refs/heads/main") -> Event:
    return Event(name="workflow_dispatch", sha="f" * 40, ref=ref, default_branch="main", sender="dave", inputs=inputs)


APPROVED: dict[str, Any] = dict(reviews=(Review("dave", "APPROVED", HEAD),), reviewer_permissions=(("dave", "write"),))
"""dave (write) approved HEAD in a review: what a fork's run needs besides the label or the command."""


def facts(**kw: Any) -> Facts:
    base: dict[str, Any] = dict(bot_login=BOT, pull=pull(), permission="write", head_committed_at=T0, **APPROVED)
    base.update(kw)
    return Facts(**base)


CASES: list[tuple[str, Event, Facts, dict[str, Any]]] = [
    # pull_request
    (
        "opened, kernel path",
        pr_event(),
        Facts(matched_path="a/layers/x.py"),
        dict(run=True, sha=HEAD, pr=7, suite="pr"),
    ),
    ("synchronize, no kernel path", pr_event("synchronize"), Facts(), dict(run=False, reason="no changed file")),
    ("reopened, kernel path", pr_event("reopened"), Facts(matched_path="layers/a"), dict(run=True)),
    ("closed", pr_event("closed"), Facts(), dict(run=False)),
    ("run label present", pr_event("synchronize", labels=("precision",)), Facts(), dict(run=True)),
    ("labeled: ours, by writer", pr_event("labeled", label="precision"), Facts(permission="write"), dict(run=True)),
    ("labeled: ours, by triager", pr_event("labeled", label="precision"), Facts(permission="triage"), dict(run=False)),
    ("labeled: other label", pr_event("labeled", label="bug"), Facts(permission="admin"), dict(run=False)),
    ("fork opened", pr_event(fork=True), Facts(matched_path="layers/a"), dict(run=False, reason="fork")),
    (
        "fork synchronize with labels",
        pr_event("synchronize", fork=True, labels=("precision", "precision-safe-to-test")),
        Facts(),
        dict(run=False),
    ),
    (
        "fork labeled safe-to-test by maintainer",
        pr_event("labeled", fork=True, label="precision-safe-to-test"),
        Facts(permission="maintain", **APPROVED),
        dict(run=True, sha=HEAD, reason="head approved by dave"),
    ),
    (
        "fork labeled safe-to-test, no review of the head",
        pr_event("labeled", fork=True, label="precision-safe-to-test"),
        Facts(permission="maintain", reviews=(Review("dave", "APPROVED", "0" * 40),)),
        # Told to the labeller once per head (the marker is keyed by the SHA): see test_unreviewed_fork_label_reply.
        dict(run=False, reason=f"approved its head {HEAD}", pr=7, reply_marker=UNREVIEWED_MARKER.format(sha=HEAD)),
    ),
    (
        "fork labeled run label",
        pr_event("labeled", fork=True, label="precision"),
        Facts(permission="admin"),
        dict(run=False),
    ),
    ("pull_request_target refused", Event(name="pull_request_target", action="opened", pr=7), Facts(), dict(run=False)),
    # issue_comment
    (
        "rerun by writer",
        comment_event(),
        facts(),
        dict(
            run=True,
            sha=HEAD,
            pr=7,
            suite="pr",
            mode="check",
            reactions=("eyes", "rocket"),
            reply=f"🚀 Running suite `pr` (check) on commit `{HEAD}`.",
        ),
    ),
    # People without the rerun role: one 😕 reaction (a refusal, not a bot that is down), never a reply.
    (
        "rerun by reader",
        comment_event(),
        facts(permission="read"),
        dict(run=False, reactions=("confused",), reply=None),
    ),
    (
        "malformed by an outsider",
        comment_event("/precision rerun samples=lots"),
        facts(permission="none"),
        dict(run=False, reactions=("confused",), reply=None, reason="a 😕 reaction and no reply"),
    ),
    ("edited comment", comment_event(action="edited"), facts(), dict(run=False, reactions=())),
    ("deleted comment", comment_event(action="deleted"), facts(), dict(run=False, reactions=())),
    ("comment on an issue", comment_event(is_pull=False), facts(), dict(run=False, reactions=(), reply=None)),
    (
        "our own comment",
        comment_event(comment_user=BOT, comment_user_type="Bot"),
        facts(),
        dict(run=False, reactions=()),
    ),
    (
        "another bot",
        comment_event(comment_user="ci[bot]", comment_user_type="Bot"),
        facts(),
        dict(run=False, reactions=()),
    ),
    ("other text", comment_event("looks good /precision rerun"), facts(), dict(run=False, reactions=(), reply=None)),
    (
        "malformed",
        comment_event("/precision rerun samples=lots"),
        facts(),
        dict(run=False, reactions=("eyes", "confused")),
    ),
    ("help", comment_event("/precision help"), facts(), dict(run=False, reactions=("eyes",))),
    (
        "help by an outsider",
        comment_event("/precision help"),
        facts(permission="none"),
        dict(reactions=("confused",), reply=None),
    ),
    (
        "unknown model",
        comment_event("/precision rerun models=nope"),
        facts(),
        dict(run=False, reactions=("eyes", "confused")),
    ),
    (
        "moved head (committed after the comment)",
        comment_event(),
        facts(head_committed_at=datetime(2026, 1, 1, 12, 0, 1, tzinfo=timezone.utc)),
        dict(run=False, reason="head moved"),
    ),
    (
        "committed before the comment",
        comment_event(),
        facts(head_committed_at=datetime(2026, 1, 1, 11, 59, tzinfo=timezone.utc)),
        dict(run=True),
    ),
    ("sha= matches", comment_event("/precision rerun sha=1234567"), facts(), dict(run=True, sha=HEAD)),
    (
        "sha= does not match",
        comment_event("/precision rerun sha=7654321"),
        facts(),
        dict(run=False, reason="head moved"),
    ),
    ("fork without sha=", comment_event(), facts(pull=pull(fork=True)), dict(run=False, reason="fork")),
    ("fork with sha=", comment_event(f"/precision rerun sha={HEAD}"), facts(pull=pull(fork=True)), dict(run=True)),
    (
        "fork with sha=, approval of an older commit",  # a fast-forward push after dave's review
        comment_event(f"/precision rerun sha={HEAD}"),
        facts(pull=pull(fork=True), reviews=(Review("dave", "APPROVED", "0" * 40),)),
        dict(run=False, reason="not approved", reactions=("eyes", "confused")),
    ),
    (
        "fork with sha=, approved by a triager",
        comment_event(f"/precision rerun sha={HEAD}"),
        facts(pull=pull(fork=True), reviewer_permissions=(("dave", "triage"),)),
        dict(run=False, reason="not approved"),
    ),
    # A 7-hex prefix (28 bits) is ground in minutes: a fork's head must be named in full, even when it matches.
    (
        "fork with a short sha=",
        comment_event("/precision rerun sha=1234567"),
        facts(pull=pull(fork=True)),
        dict(run=False, reason="fork"),
    ),
    (
        "fork with a 39-hex sha=",
        comment_event(f"/precision rerun sha={HEAD[:39]}"),
        facts(pull=pull(fork=True)),
        dict(run=False, reason="fork"),
    ),
    (
        "fork with a full sha= that moved",
        comment_event(f"/precision rerun sha={'a' * 40}"),
        facts(pull=pull(fork=True)),
        dict(run=False, reason="head moved"),
    ),
    ("closed PR", comment_event(), facts(pull=pull(state="closed")), dict(run=False)),
    ("rerun options", comment_event("/precision rerun checks=match samples=8"), facts(), dict(run=True)),
    (
        "baseline by maintainer",
        comment_event("/precision baseline"),
        facts(permission="maintain", default_head="d" * 40),
        dict(run=True, sha="d" * 40, suite="baseline", mode="baseline", reactions=("eyes", "rocket")),
    ),
    (
        "baseline by writer",
        comment_event("/precision baseline"),
        facts(permission="write", default_head="d" * 40),
        dict(run=False, reactions=("eyes", "confused")),
    ),
    # default branch and manual events
    (
        "push to default",
        Event(name="push", ref="refs/heads/main", after="e" * 40, default_branch="main"),
        Facts(),
        dict(run=True, sha="e" * 40, suite="baseline", mode="baseline", pr=None),
    ),
    (
        "push elsewhere",
        Event(name="push", ref="refs/heads/dev", after="e" * 40, default_branch="main"),
        Facts(),
        dict(run=False),
    ),
    (
        "branch deleted",
        Event(name="push", ref="refs/heads/main", after="0" * 40, default_branch="main"),
        Facts(),
        dict(run=False),
    ),
    ("schedule", Event(name="schedule", sha="f" * 40), Facts(), dict(run=True, sha="f" * 40, mode="baseline")),
    (
        "dispatch",
        dispatch({"suite": "consistency"}),
        Facts(permission="write"),
        dict(run=True, suite="consistency", mode="check"),
    ),
    ("dispatch with pr", dispatch({"pr": "12"}), Facts(permission="write"), dict(run=True, suite="pr", pr=12)),
    ("dispatch by a reader", dispatch({}), Facts(permission="read"), dict(run=False, reason="may not dispatch")),
    # Baseline mode by dispatch: the same role and branch rules as /precision baseline.
    (
        "dispatch baseline by maintainer on main",
        dispatch({"suite": "baseline"}),
        Facts(permission="maintain"),
        dict(run=True, suite="baseline", mode="baseline"),
    ),
    (
        "dispatch baseline by writer",
        dispatch({"suite": "baseline"}),
        Facts(permission="write"),
        dict(run=False, reason="needs the maintain role"),
    ),
    (
        "dispatch baseline from a branch",
        dispatch({"suite": "baseline"}, ref="refs/heads/evil"),
        Facts(permission="admin"),
        dict(run=False, reason="from the default branch"),
    ),
    (
        "dispatch baseline from a tag",
        dispatch({"suite": "baseline"}, ref="refs/tags/main"),
        Facts(permission="admin"),
        dict(run=False, reason="from the default branch"),
    ),
    ("other event", Event(name="release"), Facts(), dict(run=False)),
]


@pytest.mark.parametrize(("event", "fact", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gate(event: Event, fact: Facts, expected: dict[str, Any]) -> None:
    decision = decide(event, fact, CONFIG)
    for key, value in expected.items():
        if key == "reason":
            assert value in decision.reason
        else:
            assert getattr(decision, key) == value, key
    assert decision.run == bool(decision.matrix["include"])
    if not decision.run:
        assert decision.sha == "" and decision.mode == ""
    if "confused" in decision.reactions and "eyes" in decision.reactions:
        assert decision.reply and decision.reply.startswith("😕")
    elif "confused" in decision.reactions:  # an outsider's command: the reaction alone, nothing to amplify
        assert decision.reactions == ("confused",) and decision.reply is None


@pytest.mark.parametrize(
    ("role", "rerun", "baseline"),
    [
        ("admin", True, True),
        ("maintain", True, True),
        ("write", True, False),
        ("triage", False, False),
        ("read", False, False),
        ("none", False, False),
        (None, False, False),
    ],
)
def test_permission_matrix(role: str | None, rerun: bool, baseline: bool) -> None:
    f = facts(permission=role, default_head="d" * 40)
    assert decide(comment_event("/precision rerun"), f, CONFIG).run is rerun
    assert decide(comment_event("/precision baseline"), f, CONFIG).run is baseline
    helped = decide(comment_event("/precision help"), f, CONFIG)
    assert helped.run is False
    # Only people who may run something get a reply (the usage text included); the others a bare 😕.
    assert bool(helped.reply and "/precision rerun" in helped.reply) is rerun
    assert helped.reactions == (("eyes",) if rerun else ("confused",))


def test_rerun_options_reach_the_matrix() -> None:
    d = decide(comment_event("/precision rerun checks=match,golden samples=8"), facts(), CONFIG)
    (cell,) = d.matrix["include"]
    assert cell["checks"] == "match,golden" and cell["samples"] == 8 and cell["runner"]["kind"] == "ec2"


def test_needs_fetch_only_what_decides() -> None:
    assert needs(pr_event(), CONFIG, BOT).files
    assert not needs(pr_event(fork=True), CONFIG, BOT).files
    assert not needs(pr_event(labels=("precision",)), CONFIG, BOT).files
    assert needs(pr_event("labeled", label="precision"), CONFIG, BOT).permission_of == "carol"
    n = needs(comment_event(), CONFIG, BOT)
    assert n.pull and n.commit_date and n.permission_of == "alice" and n.reviews and n.command
    assert needs(comment_event("/precision baseline"), CONFIG, BOT).default_head
    assert needs(comment_event("/precision help"), CONFIG, BOT).permission_of == "alice"  # silent for outsiders
    assert needs(comment_event("hi"), CONFIG, BOT) == needs(comment_event(action="edited"), CONFIG, BOT) == Needs()
    assert needs(comment_event(comment_user=BOT), CONFIG, BOT) == Needs()
    assert needs(pr_event("labeled", fork=True, label="precision-safe-to-test"), CONFIG, BOT).reviews
    assert needs(dispatch({}), CONFIG, BOT).permission_of == "dave"


def test_fork_refusal_quotes_the_full_head() -> None:
    d = decide(comment_event("/precision rerun sha=1234567"), facts(pull=pull(fork=True)), CONFIG)
    assert d.reply and f"sha={HEAD}`" in d.reply and "short" in d.reply


def test_baseline_reply_echoes_the_pinned_commit() -> None:
    d = decide(comment_event("/precision baseline"), facts(permission="admin", default_head="d" * 40), CONFIG)
    assert d.reply == f"🚀 Running suite `baseline` (baseline) on commit `{'d' * 40}`."


def test_dispatch_event_keeps_its_ref() -> None:
    event = parse_event("workflow_dispatch", {"ref": "refs/heads/dev", "inputs": {"suite": "baseline"}}, "f" * 40)
    assert event.ref == "refs/heads/dev"


def test_unknown_dispatch_suite_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no suite 'nope'"):
        event = Event(name="workflow_dispatch", sha="f" * 40, inputs={"suite": "nope"})
        decide(event, Facts(permission="write"), CONFIG)


def test_parse_event_from_payloads() -> None:
    payload = {
        "action": "created",
        "issue": {"number": 5, "pull_request": {"url": "x"}},
        "comment": {
            "id": 9,
            "body": "/precision help",
            "user": {"login": "a", "type": "User"},
            "created_at": "2026-01-01T12:00:00Z",
        },
        "repository": {"default_branch": "main"},
        "sender": {"login": "a"},
    }
    event = parse_event("issue_comment", payload)
    assert (event.pr, event.is_pull, event.comment_id, event.comment_created_at) == (5, True, 9, T0)
    fork = parse_event(
        "pull_request",
        {
            "action": "opened",
            "pull_request": {"number": 3, "head": {"sha": HEAD, "repo": None}, "base": {"repo": {"full_name": REPO}}},
        },
    )
    assert fork.is_fork  # a deleted fork is still a fork


def test_garbled_payload_is_a_data_error_naming_the_field() -> None:
    from precisionbot.errors import DataError

    with pytest.raises(DataError, match="'comment'"):
        parse_event("issue_comment", {"action": "created", "issue": {"number": 1}})


def test_schedule_without_github_sha_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="GITHUB_SHA"):
        decide(Event(name="schedule"), Facts(), CONFIG)


def test_fork_code_never_runs_on_a_persistent_pool() -> None:
    pool = from_mapping({"runner": {"kind": "pool"}, "github": {"paths": ["**"]}})
    fork_rerun = decide(comment_event(f"/precision rerun sha={HEAD}"), facts(pull=pull(fork=True)), pool)
    assert not fork_rerun.run and fork_rerun.reply and "persistent pool" in fork_rerun.reply
    label = pr_event("labeled", fork=True, label="precision-safe-to-test")
    assert decide(label, Facts(permission="admin", **APPROVED), CONFIG).run
    assert not decide(label, Facts(permission="admin", **APPROVED), pool).run
    assert decide(comment_event(), facts(), pool).run  # same-repository code may use the pool


@pytest.mark.parametrize(
    ("sender", "mention"),
    [("carol", "@carol"), ("dependabot[bot]", None), ("@org/team", None), ("a--b", None), (None, None)],
)
def test_unreviewed_fork_label_reply(sender: str | None, mention: str | None) -> None:
    """A maintainer's fork label on a head nobody approved: one reply naming the head, mentioning only the
    labeller (and only when the login is a valid user login), keyed by the head's SHA."""
    event = replace(pr_event("labeled", fork=True, label="precision-safe-to-test"), sender=sender)
    decision = decide(event, Facts(permission="maintain"), CONFIG)
    assert not decision.run and decision.reactions == () and decision.reply
    assert decision.reply_marker == f"<!-- precisionbot:unreviewed head={HEAD} -->"
    assert f"`{HEAD}`" in decision.reply and "precision-safe-to-test" in decision.reply
    mentions = re.findall(r"@[\w\[\]/-]+", decision.reply)
    assert mentions == ([mention] if mention else [])
    approved = decide(
        pr_event("labeled", fork=True, label="precision-safe-to-test"), facts(permission="maintain"), CONFIG
    )
    assert approved.run and approved.reply_marker == ""  # a run is announced as ever (the 🚀 reply, per run)
