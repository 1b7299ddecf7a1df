"""``github plan`` on ``workflow_run`` end to end: run payload file -> real PyGithub over HTTP -> outputs.

The consumer trusts only GitHub: the PR found by ``pull_requests`` or by ``owner:branch`` (forks), its head now,
its labels now and its issue-event log, the labeller's role from the collaborator API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.commands.test_github_plan import HEAD, replies, run
from tests.support.fake_github import FakeGitHub

SAFE = "precision-safe-to-test"
T_LABEL, T_RUN = "2026-01-01T12:00:00Z", "2026-01-01T12:00:04Z"


def run_payload(fake: FakeGitHub, pr: int = 7, actor: str = "carol", created_at: str = T_RUN) -> dict[str, Any]:
    """What GitHub sends the consumer when the PR gate workflow's run for PR ``pr``'s current head completes."""
    pull = fake.state.pulls[(fake.repo, pr)]
    fork = pull["head"]["repo"]["full_name"] != fake.repo
    return {
        "action": "completed",
        "repository": {"full_name": fake.repo, "default_branch": "main"},
        "sender": {"login": actor},
        "workflow_run": {
            "id": 4242,
            "event": "pull_request",
            "conclusion": "success",  # the PR's own copy of the workflow decides this: never read
            "head_sha": pull["head"]["sha"],
            "head_branch": pull["head"]["ref"],
            "head_repository": {"full_name": pull["head"]["repo"]["full_name"]},
            # GitHub leaves this empty for fork PRs.
            "pull_requests": []
            if fork
            else [
                {
                    "number": pr,
                    "head": {"sha": pull["head"]["sha"]},
                    "base": {"repo": {"url": f"{fake.url}/repos/{fake.repo}"}},
                }
            ],
            "actor": {"login": actor},
            "created_at": created_at,
        },
    }


def test_fork_pr_labelled_by_a_maintainer_is_found_by_head_and_runs(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.add_pull(8, head_sha="8" * 40, fork=True, author="mallory", head_ref="other")
    fake_github.set_permission("carol", "write", role_name="maintain")
    for _ in range(120):  # two pages of events that say nothing about what started the run
        fake_github.add_issue_event(7, "mentioned", "carol", created_at="2026-01-01T11:00:00Z")
    fake_github.add_issue_event(7, "subscribed", "carol", created_at="2026-01-01T12:00:01Z")
    fake_github.add_review(7, "carol", commit_id=HEAD)
    fake_github.add_label(7, SAFE, actor="carol", created_at=T_LABEL)
    outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github))
    assert outputs["run"] == "true" and outputs["sha"] == HEAD and outputs["pr"] == "7"
    assert f"label '{SAFE}' added by carol" in outputs["reason"] and "approved by carol" in outputs["reason"]
    (lookup,) = fake_github.calls("GET", r"/pulls$")
    assert lookup.query["head"] == "mallory:feature"
    assert len(fake_github.calls("GET", r"/issues/7/events$")) == 2
    assert not fake_github.calls("GET", r"/files$")
    # The one write: the reply on the PR that names the commit this run checks out.
    (post,) = fake_github.calls("POST", ".")
    assert post.path.endswith("/issues/7/comments")
    assert replies(fake_github) == [f"🚀 Running suite `pr` (check) on commit `{HEAD}`."]


def test_fast_forward_between_the_review_and_the_label_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """The repro: carol approves the head she read; mallory fast-forwards it (a plain push: GitHub logs no
    event); carol adds the label without looking again. The run's head is one nobody approved."""
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("carol", "write", role_name="maintain")
    fake_github.add_review(7, "carol", commit_id=HEAD)
    fake_github.set_head(7, "9" * 40)
    fake_github.add_label(7, SAFE, actor="carol", created_at=T_LABEL)
    outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github))
    assert outputs["run"] == "false" and outputs["sha"] == ""
    assert f"approved its head {'9' * 40}" in outputs["reason"]
    # The labeller is told, once: the one write is a reply mentioning only them and naming the head.
    (post,) = fake_github.calls("POST", ".")
    assert post.path.endswith("/issues/7/comments")
    (reply,) = replies(fake_github)
    assert reply.startswith(f"<!-- precisionbot:unreviewed head={'9' * 40} -->\n😕 @carol: ")
    assert f"`{'9' * 40}`" in reply and re.findall(r"@\S+", reply) == ["@carol:"]


def test_the_unreviewed_head_reply_is_said_once_per_head(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """The label removed and added again (or the consumer re-run) on the same unapproved head: no second
    reply. A new head that is not approved either: one new reply, for it."""
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("carol", "write", role_name="maintain")
    fake_github.add_label(7, SAFE, actor="carol", created_at=T_LABEL)
    for _ in range(3):
        outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github))
        assert outputs["run"] == "false"
    assert [r.split("\n", 1)[0] for r in replies(fake_github)] == [f"<!-- precisionbot:unreviewed head={HEAD} -->"]
    fake_github.set_head(7, "9" * 40)
    fake_github.add_label(7, SAFE, actor="carol", created_at="2026-01-01T12:10:00Z")
    outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github, created_at="2026-01-01T12:10:03Z"))
    assert outputs["run"] == "false" and len(replies(fake_github)) == 2 and "9" * 40 in replies(fake_github)[1]
    assert len(fake_github.calls("POST", r"/issues/7/comments$")) == 2


def test_fork_push_after_the_label_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("carol", "admin")
    fake_github.add_label(7, SAFE, actor="carol", created_at=T_LABEL)
    fake_github.set_head(7, "9" * 40)  # the label stays on; the fork pushes
    outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github, actor="mallory"))
    assert outputs["run"] == "false" and "not run automatically" in outputs["reason"]
    assert not fake_github.calls("GET", r"/permission$")


def test_head_moved_since_the_gate_run_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("carol", "admin")
    fake_github.add_label(7, SAFE, actor="carol", created_at=T_LABEL)
    payload = run_payload(fake_github)  # the run for the labelled head ...
    fake_github.set_head(7, "9" * 40)  # ... but the fork pushed before the consumer started
    outputs, _ = run(fake_github, tmp_path, "workflow_run", payload)
    assert outputs["run"] == "false" and "head moved" in outputs["reason"] and "9" * 40 in outputs["reason"]
    assert not fake_github.calls("GET", r"/events$")


def test_same_repo_kernel_push_runs_and_another_label_does_not(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, files=["python/layers/attn.py"])
    outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github, actor="bob"))
    assert outputs["run"] == "true" and outputs["sha"] == HEAD and "(a push)" in outputs["reason"]
    assert not fake_github.calls("GET", r"/pulls$")  # pull_requests named the PR
    fake_github.add_label(7, "documentation", actor="bob", created_at=T_LABEL)
    outputs, _ = run(fake_github, tmp_path, "workflow_run", run_payload(fake_github, actor="bob"))
    assert outputs["run"] == "false" and "does not request a run" in outputs["reason"]
