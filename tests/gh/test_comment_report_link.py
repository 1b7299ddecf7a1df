"""``github comment`` links the uploaded HTML report ("full report") in the sticky comment and the job summary."""

from __future__ import annotations

from pathlib import Path

from precisionbot.commands.github import ActionEnv, comment_action
from precisionbot.config import Config
from precisionbot.results import Verdict
from tests.gh.conftest import rest
from tests.gh.test_comment_cli import env_for, result_dir
from tests.support.fake_github import FakeGitHub


def test_the_comment_and_the_summary_link_the_full_report(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    url = "https://github.com/o/r/actions/runs/42/artifacts/1234"
    env = ActionEnv.from_mapping({"PRECISIONBOT_REPORT_URL": url})
    assert env.report_url == url
    env = ActionEnv(**{**env_for(fake_github, tmp_path).__dict__, "report_url": url})
    comment_action(env, Config.default(), rest(fake_github), [result_dir(tmp_path, "a", Verdict.FAIL)], pr=7)
    link = f"[full report (HTML, with charts)]({url})"
    (comment,) = fake_github.comments(7)
    assert link in str(comment["body"])
    assert link in (tmp_path / "summary.md").read_text()
