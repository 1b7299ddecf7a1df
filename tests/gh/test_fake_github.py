"""The fake itself, driven through real PyGithub: if these fail, every other GitHub test is meaningless."""

from __future__ import annotations

import github
import pytest
import requests
from github import Auth, Github

from tests.support.fake_github import FakeGitHub


def client(fake: FakeGitHub, token: str = "test-token", per_page: int = 30) -> Github:
    retry = github.GithubRetry(total=3, backoff_factor=0.001)
    return Github(
        auth=Auth.Token(token),
        base_url=fake.url,
        per_page=per_page,
        retry=retry,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )


def test_pull_files_paginate_through_link_headers(fake_github: FakeGitHub) -> None:
    fake_github.add_pull(7, files=[f"f{i}.py" for i in range(25)])
    pull = client(fake_github, per_page=10).get_repo("acme/engine").get_pull(7)
    names = [f.filename for f in pull.get_files()]
    assert names == [f"f{i}.py" for i in range(25)]
    pages = [r.query.get("page", "1") for r in fake_github.calls("GET", r"/pulls/7/files$")]
    assert pages == ["1", "2", "3"]


def test_wrong_token_is_401(fake_github: FakeGitHub) -> None:
    with pytest.raises(github.BadCredentialsException):
        client(fake_github, token="nope").get_repo("acme/engine")


def test_comments_reactions_and_permission(fake_github: FakeGitHub) -> None:
    fake_github.add_pull(3)
    fake_github.set_permission("carol", "write", role_name="maintain")
    repo = client(fake_github).get_repo("acme/engine")
    issue = repo.get_issue(3)
    comment = issue.create_comment("hello")
    comment.create_reaction("eyes")
    comment.create_reaction("eyes")  # 200 the second time, still one reaction
    comment.edit("edited")
    assert [c["body"] for c in fake_github.comments(3)] == ["edited"]
    assert fake_github.reactions(comment.id) == ["eyes"]
    assert repo.get_collaborator_permission("carol") == "write"
    assert repo.get_collaborator_role_name("carol") == "maintain"
    assert repo.get_collaborator_permission("mallory") == "none"


def test_rate_limit_and_injected_failures_are_answered(fake_github: FakeGitHub) -> None:
    fake_github.add_pull(3)
    fake_github.rate_limit_next("GET", r"/pulls/3$", kind="429")
    fake_github.rate_limit_next("GET", r"/pulls/3$", kind="primary")
    assert client(fake_github).get_repo("acme/engine").get_pull(3).number == 3
    assert len(fake_github.calls("GET", r"/pulls/3$")) == 3
    fake_github.fail_next("GET", r"/issues/3$", 500, times=5)
    # Once urllib3's retries are spent, requests raises its own RetryError (not a GithubException).
    with pytest.raises((github.GithubException, requests.exceptions.RetryError)):
        client(fake_github).get_repo("acme/engine").get_issue(3)
    assert len(fake_github.calls("GET", r"/issues/3$")) == 4


def test_jit_runner_lifecycle(fake_github: FakeGitHub) -> None:
    import httpx

    headers = {"Authorization": "token test-token"}
    base = f"{fake_github.url}/repos/acme/engine/actions/runners"
    body = {"name": "r1", "runner_group_id": 1, "labels": ["precisionbot-1"], "work_folder": "_work"}
    created = httpx.post(f"{base}/generate-jitconfig", json=body, headers=headers)
    assert created.status_code == 201
    runner = created.json()["runner"]
    assert runner["status"] == "offline" and created.json()["encoded_jit_config"]
    assert httpx.post(f"{base}/generate-jitconfig", json=body, headers=headers).status_code == 409
    fake_github.set_runner_status(runner["id"], "online")
    listed = httpx.get(base, params={"per_page": 1}, headers=headers).json()
    assert listed["total_count"] == 1 and listed["runners"][0]["status"] == "online"
    assert httpx.delete(f"{base}/{runner['id']}", headers=headers).status_code == 204
    assert fake_github.runners() == []


def test_check_runs(fake_github: FakeGitHub) -> None:
    repo = client(fake_github).get_repo("acme/engine")
    run = repo.create_check_run(name="precision", head_sha="a" * 40, status="in_progress")
    run.edit(status="completed", conclusion="success", output={"title": "ok", "summary": "fine"})
    (stored,) = fake_github.check_runs()
    assert stored["conclusion"] == "success" and stored["head_sha"] == "a" * 40


def test_compare_answers_as_github_does_through_pygithub(fake_github: FakeGitHub) -> None:
    """``compare/{base}...{head}``: ahead = head has commits base lacks; behind = head is an ancestor of base."""
    fake_github.add_pull(7, head_sha="1" * 40)
    fake_github.add_commit("1" * 40, parents=["d" * 40])
    fake_github.merge_pull(7, "2" * 40)  # main: d -> merge(d, 1)
    fake_github.add_commit("3" * 40, parents=["d" * 40])  # a branch off main's old head
    repo = client(fake_github).get_repo("acme/engine")
    assert repo.get_branch("main").commit.sha == "2" * 40
    assert repo.get_pull(7).merged and repo.get_pull(7).merge_commit_sha == "2" * 40
    cases = {
        ("main", "2" * 40): ("identical", 0, 0),
        ("main", "1" * 40): ("behind", 0, 1),
        ("1" * 40, "main"): ("ahead", 1, 0),
        ("main", "3" * 40): ("diverged", 1, 2),
    }
    for (base, head), (status, ahead_by, behind_by) in cases.items():
        comparison = repo.compare(base, head)
        assert (comparison.status, comparison.ahead_by, comparison.behind_by) == (status, ahead_by, behind_by)
    assert repo.compare("main", "3" * 40).merge_base_commit.sha == "d" * 40
    with pytest.raises(github.UnknownObjectException):
        repo.compare("main", "9" * 40)
