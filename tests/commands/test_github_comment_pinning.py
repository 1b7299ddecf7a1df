"""The comment job is pinned to the plan's commit (precisionbot.gh.pinning), end to end over HTTP.

Repros from the security review: a dispatch of ``suite=pr pr=7`` ran the default branch and posted that
verdict on PR 7; two runs that finished out of order left the older head's verdict on the PR; the commit
shown came from the PR-written ``result.json``."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from precisionbot.commands.github import comment_action
from precisionbot.config import Config, GitHubConfig
from precisionbot.gh.pinning import check_pinned_sha
from precisionbot.results import Verdict
from precisionbot.results.directory import read_result, write_result
from tests.commands.test_github_comment import env_for, result_dir
from tests.commands.test_github_plan import run as plan
from tests.gh.conftest import rest
from tests.support.fake_github import FakeGitHub

OLD, NEW = "1" * 40, "2" * 40


def cell(tmp_path: Path, name: str, verdict: Verdict, commit: str | None = None) -> str:
    """A result directory whose ``result.json`` claims ``commit`` (it is PR-written: it may claim anything)."""
    directory = result_dir(tmp_path, name, verdict)
    run = read_result(directory)
    write_result(Path(directory), replace(run, engine=replace(run.engine, commit=commit)))
    return directory


def post(fake: FakeGitHub, tmp_path: Path, directory: str, sha: str, pr: int = 7) -> str:
    log = io.StringIO()
    comment_action(env_for(fake, tmp_path), Config.default(), rest(fake), [directory], pr=pr, out=log, sha=sha)
    return log.getvalue()


def test_an_older_head_finishing_last_never_overwrites_the_newer_verdict(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=OLD)
    fake_github.set_head(7, NEW)  # pushed while the run for OLD was still on the GPU
    post(fake_github, tmp_path, cell(tmp_path, "new", Verdict.PASS, NEW), NEW)  # NEW's run finishes first
    (first,) = fake_github.comments(7)
    assert "PASS" in str(first["body"]) and NEW[:7] in str(first["body"])
    log = post(fake_github, tmp_path, cell(tmp_path, "old", Verdict.FAIL, OLD), OLD)  # OLD's run, last
    (after,) = fake_github.comments(7)
    assert after["body"] == first["body"]  # untouched
    assert f"these results are for commit {OLD}, but PR #7's head is now {NEW}" in log
    assert not fake_github.calls("PATCH", ".") and len(fake_github.calls("POST", r"/comments$")) == 1


def test_a_dispatch_of_the_pr_suite_never_comments_on_the_pr(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """``workflow_dispatch`` with ``suite=pr pr=7`` runs the commit the workflow was dispatched on (main's),
    not PR 7's head: the plan pins that commit and the comment job refuses to post it on PR 7."""
    main_sha = "f" * 40  # the plan helper's GITHUB_SHA
    fake_github.add_pull(7, head_sha=OLD)
    fake_github.set_permission("dave", "write")
    payload = {
        "inputs": {"suite": "pr", "pr": "7", "models": ""},
        "ref": "refs/heads/main",
        "repository": {"default_branch": "main"},
        "sender": {"login": "dave"},
    }
    outputs, _ = plan(fake_github, tmp_path, "workflow_dispatch", payload, Config(github=GitHubConfig()))
    assert outputs["run"] == "true" and outputs["sha"] == main_sha and outputs["pr"] == "7"
    log = post(
        fake_github, tmp_path, cell(tmp_path, "main", Verdict.PASS, main_sha), outputs["sha"], int(outputs["pr"])
    )
    assert fake_github.comments(7) == [] and "PR comment skipped" in log


def test_the_comment_shows_the_pinned_commit_not_the_one_the_results_claim(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=NEW)
    post(fake_github, tmp_path, cell(tmp_path, "forged", Verdict.PASS, "9" * 40), NEW)
    body = str(fake_github.comments(7)[0]["body"])
    assert f"engine builtin {NEW[:7]}" in body and "9" * 7 not in body
    assert "the results name another engine commit than the one this workflow checked out" in body
    # An honest result (or one that names no commit) gets no warning.
    post(fake_github, tmp_path, cell(tmp_path, "honest", Verdict.PASS, None), NEW)
    assert "[!WARNING]" not in str(fake_github.comments(7)[0]["body"])


@pytest.mark.parametrize("bad", ["", "HEAD", "2222222", "2" * 39, "2" * 40 + "\n", "G" * 40])
def test_the_pinned_sha_must_be_a_full_commit_id(bad: str) -> None:
    with pytest.raises(ValueError, match="full 40-hex commit id"):
        check_pinned_sha(bad)


def test_the_cli_refuses_a_short_sha(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from precisionbot import cli

    assert cli.main(["github", "comment", cell(tmp_path, "a", Verdict.PASS), "--sha", "2222222"]) == 3  # usage error
    assert "'2222222' is not a full 40-hex commit id" in capsys.readouterr().err
