"""``github comment`` links the uploaded HTML report ("full report") in the sticky comment and the job summary."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from precisionbot.commands.github import ActionEnv, comment_action
from precisionbot.config import Config
from precisionbot.results import Verdict
from tests.commands.test_github_comment import env_for, result_dir
from tests.gh.conftest import rest
from tests.support.fake_github import FakeGitHub


def test_the_comment_and_the_summary_link_the_full_report(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    url = f"https://github.com/{fake_github.repo}/actions/runs/42/artifacts/1234"  # env_for's run 42
    env = ActionEnv.from_mapping({"PRECISIONBOT_REPORT_URL": url})
    assert env.report_url == url
    env = ActionEnv(**{**env_for(fake_github, tmp_path).__dict__, "report_url": url})
    comment_action(env, Config.default(), rest(fake_github), [result_dir(tmp_path, "a", Verdict.FAIL)], pr=7)
    link = f"[full report (HTML, with charts)]({url})"
    (comment,) = fake_github.comments(7)
    assert link in str(comment["body"])
    assert link in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/mallory/engine/actions/runs/42/artifacts/1234",  # another repository's run
        "https://github.com/acme/engine/actions/runs/41/artifacts/1234",  # another run
        "https://github.com/acme/engine/actions/runs/42/artifacts/1234/../../../../../../mallory",
        "https://github.com/acme/engine/actions/runs/42/artifacts/1234@evil.example",
        "https://github.com.evil.example/acme/engine/actions/runs/42/artifacts/1234",
        "https://evil.example/report.html",
    ],
)
def test_only_an_artifact_of_this_run_is_linked(fake_github: FakeGitHub, tmp_path: Path, url: str) -> None:
    """``report-url`` reaches the comment job from another job's output: only this repository's own run's
    artifact address is linked; anything else is left out with a warning."""
    fake_github.add_pull(7)
    env = ActionEnv(**{**env_for(fake_github, tmp_path).__dict__, "report_url": url})
    log = io.StringIO()
    comment_action(env, Config.default(), rest(fake_github), [result_dir(tmp_path, "a", Verdict.PASS)], pr=7, out=log)
    (comment,) = fake_github.comments(7)
    assert "full report" not in str(comment["body"]) and "evil" not in str(comment["body"])
    assert "is not an artifact of this run" in log.getvalue()
