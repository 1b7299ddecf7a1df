"""``buildkite trigger``: a ``/precision rerun`` comment, gated as on GitHub Actions, becomes one Buildkite build.

Both sides are real HTTP: the fake GitHub through PyGithub, the fake Buildkite through httpx.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from precisionbot import envvars
from precisionbot.buildkite.api import BuildkiteError, RestBuildkite
from precisionbot.cli import main
from precisionbot.commands.buildkite import trigger_action
from precisionbot.commands.github import ActionEnv
from precisionbot.config import Config
from precisionbot.config.settings import BuildkiteConfig
from tests.buildkite.fake_buildkite import FakeBuildkite
from tests.gh.conftest import rest
from tests.gh.test_workflow import parse_outputs
from tests.support.fake_github import FakeGitHub

HEAD = "1234567890abcdef1234567890abcdef12345678"


def comment_event(fake: FakeGitHub, tmp_path: Path, body: str, user: str, pr: int = 7) -> ActionEnv:
    comment = fake.add_comment(pr, body, user=user)
    payload = {
        "action": "created",
        "issue": {"number": pr, "pull_request": {"url": f"{fake.url}/repos/{fake.repo}/pulls/{pr}"}},
        "comment": comment,
        "repository": {"default_branch": "main"},
        "sender": comment["user"],
    }
    event_path, output = tmp_path / "event.json", tmp_path / "output"
    event_path.write_text(json.dumps(payload))
    output.write_text("")
    return ActionEnv(
        token=fake.token,
        api_url=fake.url,
        repository=fake.repo,
        event_name="issue_comment",
        event_path=str(event_path),
        sha="f" * 40,
        output=str(output),
    )


def trigger(fake: FakeGitHub, bk: FakeBuildkite, env: ActionEnv, token: str = "bk-token") -> tuple[int, str]:
    log = io.StringIO()
    config = Config(buildkite=BuildkiteConfig(organization="vllm", pipeline="ci", api_url=bk.url))
    buildkite = RestBuildkite(token, "vllm", "ci", bk.url)
    return trigger_action(env, config, rest(fake), buildkite, out=log), log.getvalue()


def bot_replies(fake: FakeGitHub) -> list[str]:
    return [str(c["body"]) for c in fake.comments(7) if c["user"]["login"] == fake.bot_login]  # type: ignore[index]


def test_an_allowed_rerun_creates_exactly_one_build_of_the_head(
    fake_github: FakeGitHub, fake_buildkite: FakeBuildkite, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=HEAD, head_ref="fix-attn")
    fake_github.set_permission("carol", "write")
    env = comment_event(fake_github, tmp_path, "/precision rerun models=builtin samples=4", "carol")
    code, log = trigger(fake_github, fake_buildkite, env)
    assert code == 0
    assert len(fake_buildkite.builds) == 1
    build = fake_buildkite.builds[0]
    assert build["commit"] == HEAD
    assert build["branch"] == "fix-attn"
    assert build["pull_request_id"] == 7
    assert build["pull_request_base_branch"] == "main"
    assert build["pull_request_repository"] == "https://github.com/acme/engine.git"
    assert build["env"][envvars.RERUN_MODELS] == "builtin"
    assert build["env"][envvars.RERUN_SAMPLES] == "4"
    assert build["env"][envvars.RERUN_SUITE] == "pr"
    outputs = parse_outputs(Path(env.output or "").read_text())
    assert outputs["run"] == "true" and outputs["sha"] == HEAD
    assert outputs["build-url"] == "https://buildkite.com/vllm/ci/builds/1"
    (reply,) = bot_replies(fake_github)
    assert HEAD in reply and "[#1](https://buildkite.com/vllm/ci/builds/1)" in reply
    comment_id = fake_github.calls("POST", r"/reactions$")[0].path.split("/")[-2]
    assert fake_github.reactions(int(comment_id)) == ["eyes", "rocket"]
    assert "Buildkite build #1" in log


def test_a_rerun_from_someone_without_the_role_creates_no_build(
    fake_github: FakeGitHub, fake_buildkite: FakeBuildkite, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("mallory", "read")
    env = comment_event(fake_github, tmp_path, "/precision rerun", "mallory")
    code, log = trigger(fake_github, fake_buildkite, env)
    assert code == 0
    assert fake_buildkite.builds == [] and fake_buildkite.requests == []
    assert bot_replies(fake_github) == []  # a 😕 reaction, no reply
    assert "lacks the write role" in log


def test_a_fork_head_needs_its_full_sha_and_an_approval_and_runs_as_owner_branch(
    fake_github: FakeGitHub, fake_buildkite: FakeBuildkite, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=HEAD, fork=True, author="eve", head_ref="main")
    fake_github.set_permission("carol", "write")
    env = comment_event(fake_github, tmp_path, f"/precision rerun sha={HEAD}", "carol")
    trigger(fake_github, fake_buildkite, env)
    assert fake_buildkite.builds == []  # nobody approved the head in a review
    assert "Nobody with the **write** role approved" in bot_replies(fake_github)[-1]
    fake_github.add_review(7, "carol", commit_id=HEAD)
    env = comment_event(fake_github, tmp_path, f"/precision rerun sha={HEAD}", "carol")
    trigger(fake_github, fake_buildkite, env)
    (build,) = fake_buildkite.builds
    assert build["commit"] == HEAD and build["branch"] == "eve:main"
    assert build["pull_request_repository"] == "https://github.com/eve/engine.git"


def test_baseline_and_bisect_are_not_sent_to_buildkite(
    fake_github: FakeGitHub, fake_buildkite: FakeBuildkite, tmp_path: Path
) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("carol", "write", role_name="maintain")
    env = comment_event(fake_github, tmp_path, "/precision bisect", "carol")
    code, _ = trigger(fake_github, fake_buildkite, env)
    assert code == 0 and fake_buildkite.builds == []
    assert "only `/precision rerun` starts a build" in bot_replies(fake_github)[-1]


@pytest.mark.parametrize(
    ("status", "token", "expected"),
    [
        (401, "wrong-token", "set PRECISIONBOT_BUILDKITE_TOKEN to a Buildkite API access token"),
        (403, "bk-token", "give it the write_builds scope and access to the organization 'vllm'"),
        (404, "bk-token", "check buildkite.organization and buildkite.pipeline"),
        (422, "bk-token", "HTTP 422 Validation failed: commit is not in the repository"),
    ],
)
def test_a_refused_build_is_a_clear_error_and_a_confused_reply(
    fake_github: FakeGitHub, fake_buildkite: FakeBuildkite, tmp_path: Path, status: int, token: str, expected: str
) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("carol", "write")
    if status in (403, 404, 422):
        messages = {
            403: "Forbidden",
            404: "No pipeline found",
            422: "Validation failed: commit is not in the repository",
        }
        fake_buildkite.fail_next(status, {"message": messages[status]})
    env = comment_event(fake_github, tmp_path, "/precision rerun", "carol")
    with pytest.raises(BuildkiteError) as info:
        trigger(fake_github, fake_buildkite, env, token=token)
    message = str(info.value)
    assert message.startswith("Buildkite refused creating a build of vllm/ci: HTTP ")
    assert expected in message
    assert fake_buildkite.builds == []
    assert "Buildkite did not create the build" in bot_replies(fake_github)[-1]
    assert parse_outputs(Path(env.output or "").read_text())["run"] == "false"


def test_the_cli_reads_tokens_and_config_from_the_environment(
    fake_github: FakeGitHub,
    fake_buildkite: FakeBuildkite,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_github.add_pull(7, head_sha=HEAD)
    fake_github.set_permission("carol", "admin")
    env = comment_event(fake_github, tmp_path, "/precision rerun", "carol")
    config = tmp_path / "precision.yml"
    config.write_text(f"buildkite:\n  organization: vllm\n  pipeline: ci\n  api_url: {fake_buildkite.url}\n")
    values: dict[str, Any] = {
        "GITHUB_TOKEN": env.token,
        "GITHUB_API_URL": env.api_url,
        "GITHUB_REPOSITORY": env.repository,
        "GITHUB_EVENT_NAME": env.event_name,
        "GITHUB_EVENT_PATH": env.event_path,
        "GITHUB_OUTPUT": env.output,
        "GITHUB_SHA": env.sha,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv(envvars.BUILDKITE_TOKEN, raising=False)
    assert main(["buildkite", "trigger", "--config", str(config)]) == 3
    assert "PRECISIONBOT_BUILDKITE_TOKEN is not set" in capsys.readouterr().err
    assert fake_buildkite.builds == []
    monkeypatch.setenv(envvars.BUILDKITE_TOKEN, "bk-token")
    assert main(["buildkite", "trigger", "--config", str(config)]) == 0
    assert [b["commit"] for b in fake_buildkite.builds] == [HEAD]
    (config.parent / "bare.yml").write_text("github: {}\n")
    assert main(["buildkite", "trigger", "--config", str(config.parent / "bare.yml")]) == 3
    assert "buildkite.organization and buildkite.pipeline are not set" in capsys.readouterr().err
