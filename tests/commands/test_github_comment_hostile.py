"""``github comment`` on hostile result directories: forged verdicts, damaged cells (issue #17)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from precisionbot.commands.github import ActionEnv, comment_action
from precisionbot.config import Config
from tests.gh.conftest import rest
from tests.report.test_verify import forged_dir
from tests.support.fake_github import FakeGitHub


def _env(fake: FakeGitHub, tmp_path: Path) -> ActionEnv:
    (tmp_path / "out").write_text("")
    env = ActionEnv(token=fake.token, api_url=fake.url, repository=fake.repo)
    return replace(env, output=str(tmp_path / "out"))


def test_github_comment_exits_inconclusive_on_a_forged_pass(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    env = _env(fake_github, tmp_path)
    code = comment_action(
        env, Config.default(), rest(fake_github), [str(forged_dir(tmp_path))], pr=7, out=io.StringIO()
    )
    assert code == 2
    body = str(fake_github.comments(7)[0]["body"])  # type: ignore[index]
    assert "INCONCLUSIVE" in body and "PASS" not in body.split("\n")[1]
    assert json.loads((tmp_path / "forged" / "result.json").read_text())["verdict"] == "pass"


def test_one_damaged_cell_does_not_hide_the_others(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    good = forged_dir(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "result.json").write_bytes(b'{"schema": 1}\xff')
    (bad / "match.npz").write_bytes(b"")
    code = comment_action(_env(fake_github, tmp_path), Config.default(), rest(fake_github), [str(good), str(bad)], pr=7)
    assert code == 2
    body = str(fake_github.comments(7)[0]["body"])  # type: ignore[index]
    assert "damaged result directory" in body and "not UTF-8" in body and "forged" in body


def test_plan_prints_a_hostile_push_ref_escaped(fake_github: FakeGitHub, tmp_path: Path) -> None:
    from precisionbot.commands.github import plan_action

    payload = {"ref": "refs/heads/x\n::error::pwned", "after": "a" * 40, "repository": {"default_branch": "main"}}
    (tmp_path / "event.json").write_text(json.dumps(payload))
    env = replace(_env(fake_github, tmp_path), event_name="push", event_path=str(tmp_path / "event.json"))
    log = io.StringIO()
    assert plan_action(env, Config.default(), rest(fake_github), out=log) == 0
    lines = log.getvalue().splitlines()
    assert not any(line.lstrip().startswith("::error") for line in lines), lines
    assert "run=false" in lines and any("%0A::error::pwned" in line for line in lines)


@pytest.mark.parametrize("value", ["٧", "²", "0", "-7", " 7", "7.0"])
def test_comment_pr_flag_takes_ascii_digits_only(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from precisionbot.cli import main

    assert main(["github", "comment", "somewhere", "--pr", value]) == 3
    assert "is not a PR number" in capsys.readouterr().err
