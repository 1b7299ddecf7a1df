"""``github comment`` end to end: result directories -> renderer -> sticky comment over HTTP, summary, outputs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from precisionbot.cli import main
from precisionbot.commands.github import ActionEnv, comment_action
from precisionbot.config import Config
from precisionbot.report import COMMENT_MARKER
from precisionbot.results import CheckResult, EngineInfo, PositionRecord, RunResult, Verdict
from precisionbot.results.directory import write_result
from tests.gh.conftest import rest
from tests.gh.test_workflow import parse_outputs
from tests.support.fake_github import FakeGitHub


def result_dir(tmp_path: Path, name: str, verdict: Verdict, model: str = "tiny", records: bool = False) -> str:
    check = CheckResult(
        name="match",
        verdict=verdict,
        reasons=("mean k3 1.2e-3 is above 1e-3",) if verdict is Verdict.FAIL else (),
        stats={
            "positions": 100,
            "samples": 4,
            "mean_k3": 1e-6,
            "p50": 0.0,
            "p99": 1e-5,
            "p999": 1e-5,
            "max": 2e-5,
            "frac_over": {"1e-4": 0.0, "1e-3": 0.0, "1e-2": 0.0},
        },
    )
    run = RunResult.from_checks(
        [check],
        signature="abc",
        engine=EngineInfo(url="http://e", kind="builtin"),
        environment={"model": model, "tp": 1},
    )
    directory = tmp_path / name
    arrays = None
    if records:
        n = 64
        lp_test = [-1.0 - (0.5 if i > 40 else 0.0) for i in range(n)]
        arrays = {"match": PositionRecord.from_lists([0] * n, range(n), [5] * n, [-1.0] * n, lp_test)}
    write_result(directory, run, arrays)
    return str(directory)


def env_for(fake: FakeGitHub, tmp_path: Path) -> ActionEnv:
    (tmp_path / "out").write_text("")
    (tmp_path / "summary.md").write_text("")
    return ActionEnv(
        token=fake.token,
        api_url=fake.url,
        repository=fake.repo,
        output=str(tmp_path / "out"),
        step_summary=str(tmp_path / "summary.md"),
        run_id="42",
    )


def test_two_runs_one_comment_verdict_and_exit_code(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    env = env_for(fake_github, tmp_path)
    dirs = [
        result_dir(tmp_path, "a", Verdict.PASS),
        result_dir(tmp_path, "b", Verdict.FAIL, model="other", records=True),
    ]
    assert comment_action(env, Config.default(), rest(fake_github), dirs, pr=7, out=io.StringIO()) == 1
    assert comment_action(env, Config.default(), rest(fake_github), dirs[:1], pr=7, out=io.StringIO()) == 0
    (comment,) = fake_github.comments(7)
    assert str(comment["body"]).startswith(COMMENT_MARKER) and "tiny" in str(comment["body"])
    runs = (tmp_path / "out").read_text()
    assert runs.count("verdict<<") == 2  # each run appends its own outputs
    last = parse_outputs("verdict<<" + runs.rsplit("verdict<<", 1)[1])
    assert last["verdict"] == "pass" and last["comment-url"] == comment["html_url"]
    assert "precisionbot" in (tmp_path / "summary.md").read_text()


def test_refused_post_is_a_warning_and_the_verdict_still_counts(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.add_pull(7)
    fake_github.fail_next(
        "GET", r"/issues/7/comments$", 403, body={"message": "Resource not accessible by integration"}
    )
    env = env_for(fake_github, tmp_path)
    log = io.StringIO()
    code = comment_action(
        env, Config.default(), rest(fake_github, retries=0), [result_dir(tmp_path, "a", Verdict.FAIL)], pr=7, out=log
    )
    assert code == 1
    assert (
        "::warning::precisionbot: could not post the PR comment: GitHub GET issues/7/comments failed" in log.getvalue()
    )
    assert parse_outputs((tmp_path / "out").read_text()) == {"verdict": "fail", "comment-url": ""}


def test_cli_reads_the_pr_from_the_event_and_the_token_from_env(
    fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_github.add_pull(9)
    event = tmp_path / "event.json"
    event.write_text('{"action": "opened", "pull_request": {"number": 9}}')
    monkeypatch.chdir(tmp_path)  # no .github/precision.yml here: built-in defaults
    for key, value in {
        "GITHUB_TOKEN": "wrong",
        "PRECISIONBOT_GITHUB_TOKEN": fake_github.token or "",
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_REPOSITORY": fake_github.repo,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }.items():
        monkeypatch.setenv(key, value)
    assert main(["github", "comment", result_dir(tmp_path, "r", Verdict.INCONCLUSIVE)]) == 2
    assert len(fake_github.comments(9)) == 1
    assert parse_outputs((tmp_path / "out").read_text())["verdict"] == "inconclusive"


def test_cli_plan_without_event_is_a_setup_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for key in ("GITHUB_EVENT_NAME", "GITHUB_EVENT_PATH"):
        monkeypatch.delenv(key, raising=False)
    assert main(["github", "plan"]) == 3
    assert "GITHUB_EVENT_NAME, GITHUB_EVENT_PATH not set" in capsys.readouterr().err


def test_missing_result_dir_is_a_setup_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("PRECISIONBOT_GITHUB_TOKEN", raising=False)
    assert main(["github", "comment", str(tmp_path / "nope")]) == 3
    assert "nope" in capsys.readouterr().err


def test_cli_plan_reads_config_event_and_writes_outputs(
    fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_github.add_pull(7, head_sha="c" * 40, files=["README.md", "csrc/attn.cu"])
    config = tmp_path / "precision.yml"
    config.write_text("github:\n  paths: ['**/*.cu']\n")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "opened", "pull_request": fake_github.state.pulls[(fake_github.repo, 7)]}))
    for key, value in {
        "GITHUB_TOKEN": fake_github.token or "",
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_REPOSITORY": fake_github.repo,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "PRECISIONBOT_CONFIG": str(config),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PRECISIONBOT_GITHUB_TOKEN", raising=False)
    assert main(["github", "plan"]) == 0
    outputs = parse_outputs((tmp_path / "out").read_text())
    assert outputs["run"] == "true" and outputs["sha"] == "c" * 40 and outputs["pr"] == "7"
    assert "csrc/attn.cu matches" in outputs["reason"]
    assert "precisionbot: run: csrc/attn.cu" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({}, "no GITHUB_TOKEN (set GITHUB_TOKEN or PRECISIONBOT_GITHUB_TOKEN)"),
        ({"GITHUB_TOKEN": "t"}, "no GITHUB_REPOSITORY (set it to OWNER/NAME)"),
        ({"GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "o/r"}, "no PR number (pass --pr N"),
    ],
)
def test_comment_without_github_says_it_was_not_posted_and_keeps_the_verdict(
    env: dict[str, str],
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for key in (
        "GITHUB_TOKEN",
        "PRECISIONBOT_GITHUB_TOKEN",
        "GITHUB_REPOSITORY",
        "GITHUB_EVENT_PATH",
        "GITHUB_OUTPUT",
        "GITHUB_STEP_SUMMARY",
        "GITHUB_API_URL",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")  # never called: nothing to post to
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["github", "comment", result_dir(tmp_path, "r", Verdict.FAIL)]) == 1
    captured = capsys.readouterr()
    assert COMMENT_MARKER in captured.out  # the comment itself, for a human to read
    (line,) = captured.err.splitlines()
    assert line.startswith(f"precisionbot: the PR comment was not posted: {why}")


def test_results_judged_with_another_config_are_flagged(fake_github: FakeGitHub, tmp_path: Path) -> None:
    from dataclasses import replace

    from precisionbot.config import config_digest
    from precisionbot.results.directory import read_result

    base = tmp_path / "precision.yml"
    base.write_text("thresholds:\n  default:\n    kl_div: 0.0025\n")
    trusted = config_digest(str(base))
    loosened = tmp_path / "pr.yml"
    loosened.write_text("thresholds:\n  default:\n    kl_div: 1.0\n")
    dirs = []
    for name, digest in (("same", trusted), ("loose", config_digest(str(loosened)))):
        directory = result_dir(tmp_path, name, Verdict.PASS, model=name)
        run = read_result(directory)
        write_result(Path(directory), replace(run, extra={**run.extra, "config_sha256": digest}))
        dirs.append(directory)
    fake_github.add_pull(7)
    env = env_for(fake_github, tmp_path)
    assert (
        comment_action(env, Config.default(), rest(fake_github), dirs, pr=7, out=io.StringIO(), trusted_config=trusted)
        == 0
    )
    body = str(fake_github.comments(7)[0]["body"])
    assert body.startswith(COMMENT_MARKER + "\n> [!WARNING]")
    assert "`loose@tp1`: the checks ran with a config that is not the base branch's" in body
    assert "same@tp1`:" not in body
    assert (
        comment_action(
            env, Config.default(), rest(fake_github), dirs[:1], pr=7, out=io.StringIO(), trusted_config=trusted
        )
        == 0
    )
    assert "[!WARNING]" not in str(fake_github.comments(7)[0]["body"])
