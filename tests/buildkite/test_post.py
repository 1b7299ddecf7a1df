"""``buildkite post``: the Buildkite step's sticky comment and commit status, through the fake GitHub (real
PyGithub over HTTP), with the repository, PR and commit read from Buildkite's environment."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from precisionbot.buildkite.env import parse_env
from precisionbot.cli import main
from precisionbot.commands.buildkite import post_action
from precisionbot.commands.github import ActionEnv
from precisionbot.config import Config
from precisionbot.report import COMMENT_MARKER
from precisionbot.results import Verdict
from tests.buildkite import fake_buildkite  # noqa: F401  (registers the fake GitHub's statuses endpoint)
from tests.commands.test_github_comment import result_dir
from tests.gh.conftest import rest
from tests.support.fake_github import FakeGitHub

HEAD = "1234567890abcdef1234567890abcdef12345678"
BUILD_URL = "https://buildkite.com/vllm/ci/builds/42"


def buildkite_env(pr: str = "7", commit: str = HEAD) -> dict[str, str]:
    return {
        "BUILDKITE": "true",
        "BUILDKITE_REPO": "git@github.com:acme/engine.git",
        "BUILDKITE_PULL_REQUEST": pr,
        "BUILDKITE_PULL_REQUEST_REPO": "https://github.com/acme/engine.git" if pr != "false" else "",
        "BUILDKITE_COMMIT": commit,
        "BUILDKITE_BRANCH": "fix-attn" if pr != "false" else "main",
        "BUILDKITE_BUILD_URL": BUILD_URL,
        "BUILDKITE_ORGANIZATION_SLUG": "vllm",
        "BUILDKITE_PIPELINE_SLUG": "ci",
        "BUILDKITE_AGENT_META_DATA_QUEUE": "small-cpu",
    }


def post(fake: FakeGitHub, dirs: list[str], pr: str = "7") -> tuple[int, str]:
    bk = parse_env(buildkite_env(pr))
    env = ActionEnv(token=fake.token, api_url=fake.url, repository=bk.repository)
    log = io.StringIO()
    return post_action(env, bk, Config.default(), rest(fake), dirs, out=log), log.getvalue()


def statuses(fake: FakeGitHub) -> list[tuple[str, object]]:
    return [(r.path.rsplit("/", 1)[-1], r.body) for r in fake.calls("POST", r"/statuses/")]


def test_a_pr_build_posts_one_sticky_comment_and_the_commit_status(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    dirs = [result_dir(tmp_path, "0", Verdict.FAIL, model="qwen3-8b"), result_dir(tmp_path, "1", Verdict.PASS)]
    code, log = post(fake_github, dirs)
    assert code == 1
    (comment,) = fake_github.comments(7)
    body = str(comment["body"])
    assert body.startswith(COMMENT_MARKER) and "qwen3-8b" in body
    assert BUILD_URL in body  # the build's page, not an Actions run
    assert HEAD[:7] in body
    assert statuses(fake_github) == [
        (HEAD, {"state": "failure", "description": "fail", "context": "precisionbot", "target_url": BUILD_URL})
    ]
    assert "commit status precisionbot=failure" in log
    # The next build of the same PR updates that comment in place.
    assert post(fake_github, dirs[1:])[0] == 0
    assert [c["id"] for c in fake_github.comments(7)] == [comment["id"]]
    assert statuses(fake_github)[-1][1]["state"] == "success"  # type: ignore[index]


def test_a_build_of_a_branch_sets_the_status_only_and_says_why(fake_github: FakeGitHub, tmp_path: Path) -> None:
    code, log = post(fake_github, [result_dir(tmp_path, "0", Verdict.INCONCLUSIVE)], pr="false")
    assert code == 2
    assert fake_github.calls("POST", r"/issues/\d+/comments$") == []
    assert "BUILDKITE_PULL_REQUEST=false: this is a build of branch main, not of a pull request" in log
    assert f"only the commit status of {HEAD} is set" in log
    assert [s[1]["state"] for s in statuses(fake_github)] == ["error"]  # type: ignore[index]


def test_a_stale_build_leaves_the_comment_alone_but_still_sets_its_commits_status(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha="e" * 40)  # pushed since this build started
    code, log = post(fake_github, [result_dir(tmp_path, "0", Verdict.PASS)])
    assert code == 0
    assert fake_github.comments(7) == []
    assert "PR comment skipped" in log
    assert [s[0] for s in statuses(fake_github)] == [HEAD]


def test_a_refused_status_is_a_warning_and_the_verdict_stands(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.fail_next("POST", r"/statuses/", 403, body={"message": "Resource not accessible by personal token"})
    bk = parse_env(buildkite_env())
    env = ActionEnv(token=fake_github.token, api_url=fake_github.url, repository=bk.repository)
    log = io.StringIO()
    dirs = [result_dir(tmp_path, "0", Verdict.PASS)]
    assert post_action(env, bk, Config.default(), rest(fake_github, retries=0), dirs, out=log) == 0
    assert "could not set the commit status: GitHub POST statuses/" in log.getvalue()
    assert len(fake_github.comments(7)) == 1


def test_the_cli_reads_buildkites_environment(
    fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    monkeypatch.chdir(tmp_path)  # no .github/precision.yml: the defaults
    for name in ("GITHUB_TOKEN", "PRECISIONBOT_GITHUB_TOKEN", "PRECISIONBOT_CONFIG", "GITHUB_API_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in buildkite_env().items():
        monkeypatch.setenv(name, value)
    dirs = [result_dir(tmp_path, "0", Verdict.PASS)]
    assert main(["buildkite", "post", *dirs]) == 3
    assert "no GitHub token: give the post step PRECISIONBOT_GITHUB_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("PRECISIONBOT_GITHUB_TOKEN", fake_github.token or "")
    monkeypatch.setenv("GITHUB_API_URL", fake_github.url)
    assert main(["buildkite", "post", *dirs]) == 0
    assert len(fake_github.comments(7)) == 1
    assert [s[0] for s in statuses(fake_github)] == [HEAD]
    monkeypatch.setenv("BUILDKITE_COMMIT", "HEAD")
    assert main(["buildkite", "post", *dirs]) == 3
    assert "BUILDKITE_COMMIT='HEAD' is not a full commit id" in capsys.readouterr().err
