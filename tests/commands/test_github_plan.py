"""``github plan`` end to end: event payload file -> real PyGithub over HTTP -> reactions, replies, outputs."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from precisionbot.commands.github import ActionEnv, plan_action
from precisionbot.config import Config, GitHubConfig
from tests.gh.conftest import rest
from tests.gh.test_workflow import parse_outputs
from tests.support.fake_github import FakeGitHub

HEAD = "1234567890abcdef1234567890abcdef12345678"
CONFIG = Config(github=GitHubConfig(paths=("**/layers/**",)))


def comment_payload(
    fake: FakeGitHub, comment: dict[str, Any], pr: int = 7, action: str = "created", is_pull: bool = True
) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": pr}
    if is_pull:
        issue["pull_request"] = {"url": f"{fake.url}/repos/{fake.repo}/pulls/{pr}"}
    return {
        "action": action,
        "issue": issue,
        "comment": comment,
        "repository": {"default_branch": "main"},
        "sender": comment["user"],
    }


def pr_payload(
    fake: FakeGitHub, pr: int = 7, action: str = "opened", label: str | None = None, sender: str = "alice"
) -> dict[str, Any]:
    pull = copy.deepcopy(fake.state.pulls[(fake.repo, pr)])
    payload = {
        "action": action,
        "pull_request": pull,
        "sender": {"login": sender},
        "repository": {"default_branch": "main"},
    }
    if label:
        payload["label"] = {"name": label}
    return payload


def run(
    fake: FakeGitHub, tmp_path: Path, name: str, payload: dict[str, Any], config: Config = CONFIG
) -> tuple[dict[str, str], str]:
    event_path, output = tmp_path / "event.json", tmp_path / "output"
    event_path.write_text(json.dumps(payload))
    output.write_text("")
    env = ActionEnv(
        token=fake.token,
        api_url=fake.url,
        repository=fake.repo,
        event_name=name,
        event_path=str(event_path),
        sha="f" * 40,
        output=str(output),
    )
    log = io.StringIO()
    assert plan_action(env, config, rest(fake), out=log) == 0
    return parse_outputs(output.read_text()), log.getvalue()


def replies(fake: FakeGitHub, pr: int = 7) -> list[str]:
    return [str(c["body"]) for c in fake.comments(pr) if c["user"]["login"] == fake.bot_login]  # type: ignore[index]


@pytest.mark.parametrize(
    ("permission", "role", "verb", "runs"),
    [
        (p, r, verb, runs)
        for (p, r), allowed in {
            ("admin", "admin"): {"rerun", "baseline"},
            ("write", "maintain"): {"rerun", "baseline"},
            ("write", "write"): {"rerun"},
            ("read", "triage"): set(),
            ("read", "read"): set(),
            ("none", "none"): set(),
        }.items()
        for verb, runs in (("rerun", "rerun" in allowed), ("baseline", "baseline" in allowed), ("help", False))
    ],
)
def test_permission_matrix(
    fake_github: FakeGitHub, tmp_path: Path, permission: str, role: str, verb: str, runs: bool
) -> None:
    fake_github.add_pull(7, head_sha=HEAD, committed_at="2026-01-01T00:00:00Z")
    fake_github.set_permission("alice", permission, role_name=role)
    comment = fake_github.add_comment(7, f"/precision {verb}", created_at="2026-01-01T00:01:00Z")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == ("true" if runs else "false")
    reactions = fake_github.reactions(comment["id"])
    if runs:
        assert reactions == ["eyes", "rocket"] and replies(fake_github)[0].startswith("🚀 Running suite")
        assert outputs["sha"] == (HEAD if verb == "rerun" else "d" * 40)
        assert outputs["mode"] == ("check" if verb == "rerun" else "baseline")
        assert json.loads(outputs["matrix"])["include"][0]["suite"] == ("pr" if verb == "rerun" else "baseline")
    elif verb == "help" and role not in ("triage", "read", "none"):
        assert reactions == ["eyes"] and "/precision rerun" in replies(fake_github)[0]
    elif role in ("admin", "maintain", "write"):  # may rerun, not record baselines: told why
        assert reactions == ["eyes", "confused"]
        (reply,) = replies(fake_github)
        assert f"`alice` has **{role}**" in reply
    else:  # no role that may run anything: one 😕 (a refusal, not a bot that is down) and no reply, help included
        assert reactions == ["confused"] and replies(fake_github) == []
        assert not fake_github.calls("GET", r"/pulls/")
        (post,) = fake_github.calls("POST", ".")  # the reaction is the only write
        assert post.path.endswith(f"/issues/comments/{comment['id']}/reactions")


def test_fork_pr_is_not_run_automatically(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, files=["python/layers/attn.py"], author="mallory")
    outputs, _ = run(fake_github, tmp_path, "pull_request", pr_payload(fake_github))
    assert outputs["run"] == "false" and "fork" in outputs["reason"]
    assert not fake_github.calls("GET", r"/files$")
    assert not fake_github.calls("POST", ".")  # nothing written with the PR's token


def test_fork_rerun_needs_the_reviewed_sha(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("alice", "write")
    bare = fake_github.add_comment(7, "/precision rerun", created_at="2026-01-01T00:01:00Z")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, bare))
    assert outputs["run"] == "false" and f"sha={HEAD}`" in replies(fake_github)[0]
    short = fake_github.add_comment(7, f"/precision rerun sha={HEAD[:12]}", created_at="2026-01-01T00:02:00Z")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, short))
    assert outputs["run"] == "false" and "short" in replies(fake_github)[1]
    pinned = fake_github.add_comment(7, f"/precision rerun sha={HEAD}", created_at="2026-01-01T00:03:00Z")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, pinned))
    assert outputs["run"] == "false" and "approved `" + HEAD in replies(fake_github)[2]  # no review yet
    fake_github.add_review(7, "alice", commit_id=HEAD)
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, pinned))
    assert outputs["run"] == "true" and outputs["sha"] == HEAD
    assert replies(fake_github)[3] == f"🚀 Running suite `pr` (check) on commit `{HEAD}`."


def test_fork_rerun_after_a_fast_forward_past_the_review_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """The repro: carol approves the head she read, mallory fast-forwards (GitHub logs no event for a plain
    push), and a maintainer who did not look names the new head. Nobody approved it: no run."""
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("carol", "write")
    fake_github.set_permission("alice", "write")
    fake_github.add_review(7, "carol", commit_id=HEAD)
    fake_github.set_head(7, "9" * 40)
    fake_github.add_review(7, "mallory", commit_id="9" * 40)  # the author's own approval: no role, no weight
    comment = fake_github.add_comment(7, f"/precision rerun sha={'9' * 40}")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == "false" and "not approved" in outputs["reason"]
    assert fake_github.reactions(comment["id"]) == ["eyes", "confused"]
    assert [c.path for c in fake_github.calls("GET", "/permission$")][-1].endswith("/mallory/permission")


def test_fork_label_by_maintainer_runs_the_labelled_head(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="mallory")
    fake_github.set_permission("carol", "write", role_name="maintain")
    fake_github.add_review(7, "carol", commit_id=HEAD)
    payload = pr_payload(fake_github, action="labeled", label="precision-safe-to-test", sender="carol")
    fake_github.set_head(7, "9" * 40)  # a push after the label: the payload's head still wins
    outputs, _ = run(fake_github, tmp_path, "pull_request", payload)
    assert outputs["run"] == "true" and outputs["sha"] == HEAD and "approved by carol" in outputs["reason"]


def test_edited_comment_is_ignored(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    fake_github.set_permission("alice", "admin")
    comment = fake_github.add_comment(7, "/precision rerun")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment, action="edited"))
    assert outputs["run"] == "false" and fake_github.reactions(comment["id"]) == []
    assert not fake_github.calls("GET", "/permission")


def test_non_pr_issue_comment_is_ignored_quietly(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_issue(8)
    fake_github.set_permission("alice", "admin")
    comment = fake_github.add_comment(8, "/precision rerun")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment, pr=8, is_pull=False))
    assert outputs["run"] == "false" and fake_github.reactions(comment["id"]) == [] and replies(fake_github, 8) == []


def test_bot_comments_are_ignored(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    comment = fake_github.add_comment(7, "/precision help", user=fake_github.bot_login, user_type="User")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == "false" and replies(fake_github) == [comment["body"]]


def test_moved_head_is_refused(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, committed_at="2026-01-01T00:00:00Z")
    fake_github.set_permission("alice", "write")
    comment = fake_github.add_comment(7, "/precision rerun", created_at="2026-01-01T00:01:00Z")
    fake_github.set_head(7, "9" * 40, committed_at="2026-01-01T00:02:00Z")  # pushed after the comment
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == "false" and "head moved" in outputs["reason"]
    assert fake_github.reactions(comment["id"]) == ["eyes", "confused"]
    assert "committed after your comment" in replies(fake_github)[0]


def test_path_filter_reads_files_page_by_page(fake_github: FakeGitHub, tmp_path: Path) -> None:
    files = [f"docs/page{i}.md" for i in range(150)] + ["python/sglang/srt/layers/attention.py"]
    fake_github.add_pull(7, head_sha=HEAD, files=files)
    outputs, _ = run(fake_github, tmp_path, "pull_request", pr_payload(fake_github))
    assert outputs["run"] == "true" and "layers/attention.py" in outputs["reason"]
    assert len(fake_github.calls("GET", r"/pulls/7/files$")) == 2
    fake_github.set_files(7, [f"docs/page{i}.md" for i in range(150)])
    outputs, _ = run(fake_github, tmp_path, "pull_request", pr_payload(fake_github, action="synchronize"))
    assert outputs["run"] == "false"


def test_rate_limited_plan_is_retried(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("alice", "write")
    comment = fake_github.add_comment(7, "/precision rerun", created_at="2099-01-01T00:00:00Z")
    fake_github.rate_limit_next("GET", r"/permission$", kind="primary")
    fake_github.rate_limit_next("GET", r"/pulls/7$", kind="429")
    fake_github.rate_limit_next("POST", r"/reactions$", kind="secondary")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == "true"
    assert fake_github.reactions(comment["id"]) == ["eyes", "rocket"]
    assert len(fake_github.calls("GET", r"/permission$")) == 2


def test_failed_reaction_is_a_warning_not_a_failure(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("alice", "write")
    comment = fake_github.add_comment(7, "/precision rerun", created_at="2099-01-01T00:00:00Z")
    fake_github.fail_next(
        "POST", r"/reactions$", 403, body={"message": "Resource not accessible by integration"}, times=2
    )
    outputs, log = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == "true"
    assert log.count("::warning::could not react") == 2


def test_actions_token_without_user_endpoint_falls_back_to_github_actions_login(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.user_endpoint_forbidden = True
    fake_github.add_pull(7)
    comment = fake_github.add_comment(7, "/precision help", user="github-actions[bot]", user_type="User")
    outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
    assert outputs["run"] == "false" and "bot" in outputs["reason"]


def test_each_plan_gives_its_cells_fresh_unguessable_runner_labels(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD, committed_at="2026-01-01T00:00:00Z")
    fake_github.set_permission("alice", "write")
    comment = fake_github.add_comment(7, "/precision rerun", created_at="2026-01-01T00:01:00Z")
    labels = []
    for _ in range(2):
        outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
        (cell,) = json.loads(outputs["matrix"])["include"]
        assert re.fullmatch(r"precisionbot-[0-9a-f]{32}-0", cell["label"])
        labels.append(cell["label"])
    assert labels[0] != labels[1]


def test_a_lone_surrogate_in_the_commenter_login_is_a_clean_refusal(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """The fuzzer's last internal error: ``"\\ud800"`` as ``comment.user.login`` reached the permission URL's
    UTF-8 encoder. Now the payload is refused as a whole, naming the field, before anything is asked."""
    from precisionbot.errors import DataError

    fake_github.add_pull(7)
    comment = fake_github.add_comment(7, "/precision rerun")
    payload = comment_payload(fake_github, comment)
    payload["sender"] = {"login": "alice"}  # only the commenter's login is hostile
    payload["comment"]["user"] = {"login": "\ud800", "type": "User"}
    (tmp_path / "event.json").write_text(json.dumps(payload))  # ensure_ascii: the file holds "\\ud800"
    assert '"\\ud800"' in (tmp_path / "event.json").read_text()
    env = ActionEnv(
        token=fake_github.token,
        api_url=fake_github.url,
        repository=fake_github.repo,
        event_name="issue_comment",
        event_path=str(tmp_path / "event.json"),
        sha="f" * 40,
    )
    with pytest.raises(DataError, match=r"comment\.user\.login .*lone UTF-16 surrogate"):
        plan_action(env, CONFIG, rest(fake_github), out=io.StringIO())
    assert fake_github.requests == []


def test_an_outsider_s_refused_command_gets_one_reaction_however_often_it_is_replayed(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """The refusal is visible (😕) but cannot be amplified: GitHub keeps one reaction of a kind per user and
    comment, and no comment is ever written for someone without the rerun role."""
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("mallory", "read")
    comment = fake_github.add_comment(7, "/precision rerun @org/team", user="mallory")
    for _ in range(3):  # the workflow re-run, or the event redelivered
        outputs, _ = run(fake_github, tmp_path, "issue_comment", comment_payload(fake_github, comment))
        assert outputs["run"] == "false" and "no reply" in outputs["reason"]
    assert fake_github.reactions(comment["id"]) == ["confused"] and replies(fake_github) == []
    assert not fake_github.calls("POST", r"/issues/\d+/comments$")
