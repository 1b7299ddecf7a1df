"""The sticky comment through real PyGithub over HTTP to the fake."""

from __future__ import annotations

import pytest

from precisionbot.errors import GitHubError
from precisionbot.gh.rest import RestGitHub
from precisionbot.gh.sticky import (
    COMMENT_LIMIT_CHARS,
    DEFAULT_MARKER,
    TRUNCATED_NOTE,
    fit_comment,
    post_once,
    upsert_comment,
)
from tests.gh.conftest import rest
from tests.support.fake_github import FakeGitHub

SUITE_MARKER = "<!-- precisionbot:comment suite=nightly -->"


def ours(fake: FakeGitHub, pr: int = 7) -> list[dict[str, object]]:
    return [c for c in fake.comments(pr) if c["user"]["login"] == fake.bot_login]  # type: ignore[index]


def test_two_runs_leave_one_comment(fake_github: FakeGitHub, api: RestGitHub) -> None:
    fake_github.add_pull(7)
    first = upsert_comment(api, 7, f"{DEFAULT_MARKER}\nrun 1")
    second = upsert_comment(api, 7, f"{DEFAULT_MARKER}\nrun 2")
    assert first.created and not second.created
    assert first.comment.id == second.comment.id
    (comment,) = ours(fake_github)
    assert comment["body"] == f"{DEFAULT_MARKER}\nrun 2"
    assert second.comment.url.endswith(f"#issuecomment-{first.comment.id}")


def test_per_suite_comments_are_separate(fake_github: FakeGitHub, api: RestGitHub) -> None:
    fake_github.add_pull(7)
    upsert_comment(api, 7, "pr suite")
    upsert_comment(api, 7, "nightly", marker=SUITE_MARKER)
    upsert_comment(api, 7, "nightly again", marker=SUITE_MARKER)
    assert sorted(str(c["body"]).split("\n")[1] for c in ours(fake_github)) == ["nightly again", "pr suite"]


def test_pasted_marker_cannot_hijack(fake_github: FakeGitHub, api: RestGitHub) -> None:
    fake_github.add_pull(7)
    fake_github.add_comment(7, f"{DEFAULT_MARKER}\nPASS (trust me)", user="mallory")
    fake_github.add_comment(7, f"{DEFAULT_MARKER}\nfake bot", user="other[bot]", user_type="Bot")
    result = upsert_comment(api, 7, "real report")
    assert result.created
    bodies = {str(c["user"]["login"]): c["body"] for c in fake_github.comments(7)}  # type: ignore[index]
    assert bodies["mallory"] == f"{DEFAULT_MARKER}\nPASS (trust me)"
    assert bodies[fake_github.bot_login] == f"{DEFAULT_MARKER}\nreal report"
    assert not fake_github.calls("PATCH", r"/issues/comments/")


def test_search_reads_every_page(fake_github: FakeGitHub) -> None:
    fake_github.add_pull(7)
    for i in range(130):  # PyGithub asks for 100 per page: ours is on page 2
        fake_github.add_comment(7, f"chatter {i}")
    ours_id = fake_github.add_comment(7, f"{DEFAULT_MARKER}\nold", user=fake_github.bot_login, user_type="Bot")["id"]
    fake_github.add_comment(7, "more chatter")
    result = upsert_comment(rest(fake_github), 7, "new")
    assert not result.created and result.comment.id == ours_id
    assert {r.query.get("page", "1") for r in fake_github.calls("GET", r"/issues/7/comments$")} == {"1", "2"}


def test_duplicates_from_a_retried_post_converge_to_one(fake_github: FakeGitHub, api: RestGitHub) -> None:
    fake_github.add_pull(7)
    for _ in range(2):
        fake_github.add_comment(7, f"{DEFAULT_MARKER}\ndup", user=fake_github.bot_login, user_type="Bot")
    result = upsert_comment(api, 7, "fresh")
    assert result.removed_duplicates == 1
    assert [c["body"] for c in ours(fake_github)] == [f"{DEFAULT_MARKER}\nfresh"]


REPLY_MARKER = "<!-- precisionbot:reply head=abc -->"


def test_post_once_after_a_retried_post_leaves_one_reply(fake_github: FakeGitHub, api: RestGitHub) -> None:
    # The POST happens but its answer is lost: GithubRetry posts again, and two replies stand for a moment.
    fake_github.add_pull(7)
    fake_github.lose_answer_next("POST", r"/issues/7/comments$", status=502)
    reply = post_once(api, 7, "refused", REPLY_MARKER)
    assert len(fake_github.calls("POST", r"/issues/7/comments$")) == 2
    (comment,) = ours(fake_github)
    assert reply is not None and reply.id == comment["id"] and comment["body"] == f"{REPLY_MARKER}\nrefused"
    assert post_once(api, 7, "refused", REPLY_MARKER) is None and len(ours(fake_github)) == 1


def test_post_once_removes_a_racing_jobs_duplicate_keeping_the_oldest(fake_github: FakeGitHub, api: RestGitHub) -> None:
    # The pull_request plan and the workflow_run consumer each posted the reply before either looked again.
    fake_github.add_pull(7)
    first, _ = (
        fake_github.add_comment(7, f"{REPLY_MARKER}\nrefused", user=fake_github.bot_login, user_type="Bot")
        for _ in range(2)
    )
    assert post_once(api, 7, "refused", REPLY_MARKER) is None
    assert [c["id"] for c in ours(fake_github)] == [first["id"]]
    assert not fake_github.calls("POST", r"/issues/7/comments$")


def test_rate_limited_answers_are_retried(fake_github: FakeGitHub, api: RestGitHub) -> None:
    fake_github.add_pull(7)
    fake_github.rate_limit_next("GET", r"/issues/7/comments$", kind="primary")
    fake_github.rate_limit_next("POST", r"/issues/7/comments$", kind="429")
    fake_github.rate_limit_next("POST", r"/issues/7/comments$", kind="secondary")
    upsert_comment(api, 7, "report")
    assert len(ours(fake_github)) == 1
    assert len(fake_github.calls("POST", r"/issues/7/comments$")) == 3


def test_refusal_is_a_github_error_naming_the_call(fake_github: FakeGitHub) -> None:
    fake_github.add_pull(7)
    fake_github.fail_next(
        "POST", r"/issues/7/comments$", 403, body={"message": "Resource not accessible by integration"}
    )
    with pytest.raises(GitHubError, match=r"POST issues/7/comments failed: HTTP 403 Resource not accessible"):
        upsert_comment(rest(fake_github, retries=0), 7, "report")


def test_server_errors_after_retries_are_a_github_error(fake_github: FakeGitHub) -> None:
    fake_github.add_pull(7)
    fake_github.fail_next("GET", r"/issues/7/comments$", 502, times=10)
    with pytest.raises(GitHubError, match="GET issues/7/comments failed after retries"):
        upsert_comment(rest(fake_github, retries=2), 7, "report")


def test_65536_guard_keeps_a_posted_comment_under_the_limit(fake_github: FakeGitHub, api: RestGitHub) -> None:
    fake_github.add_pull(7)
    huge = "| row |\n" * 20_000  # 160,000 characters
    result = upsert_comment(api, 7, huge)
    (comment,) = ours(fake_github)
    body = str(comment["body"])
    assert len(body) <= COMMENT_LIMIT_CHARS and body.startswith(DEFAULT_MARKER) and body.endswith(TRUNCATED_NOTE)
    assert result.created


@pytest.mark.parametrize("size", [COMMENT_LIMIT_CHARS - 1, COMMENT_LIMIT_CHARS, COMMENT_LIMIT_CHARS + 1, 10**6])
def test_fit_comment_boundary(size: int) -> None:
    body = ("x" * 99 + "\n") * (size // 100) + "y" * (size % 100)
    fitted = fit_comment(body)
    assert len(fitted) <= COMMENT_LIMIT_CHARS
    assert (fitted == body) is (size <= COMMENT_LIMIT_CHARS)


def test_fit_comment_counts_astral_characters_conservatively() -> None:
    body = "🙂" * 40_000  # 40,000 code points but 80,000 UTF-16 units
    fitted = fit_comment(body)
    assert len(fitted.encode("utf-16-le")) // 2 <= COMMENT_LIMIT_CHARS and fitted.endswith(TRUNCATED_NOTE)


def test_default_marker_is_the_renderers() -> None:
    # Two constants for one marker (gh stays importable without jinja2): they must not drift apart.
    from precisionbot.report import COMMENT_MARKER

    assert DEFAULT_MARKER == COMMENT_MARKER
