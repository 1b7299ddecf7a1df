"""``precisionbot runner ...`` end to end through ``precisionbot.cli.main``: real boto3 to moto's EC2 server,
real PyGithub to the fake GitHub API, outputs to a real GITHUB_OUTPUT file, errors as one line and exit 3."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest

from precisionbot.cli import main
from precisionbot.runners.cloud import Ec2Cloud
from tests.runners.conftest import AMI, REPO, WORKFLOW_REF
from tests.support.fake_github import FakeGitHub

LAUNCH = [
    *("runner", "launch", "--repo", REPO, "--instance-type", "g6.xlarge", "--ami", AMI, "--run-id", "4242"),
    *("--workflow-ref", WORKFLOW_REF),
]


@contextmanager
def runners_come_online(fake: FakeGitHub) -> Iterator[None]:
    """Plays the instance's part: every registration the fake holds comes online shortly after it appears."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.02):
            for runner in fake.runners():
                if runner["status"] == "offline":
                    fake.set_runner_status(runner["id"], "online")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def instances() -> list[dict[str, Any]]:
    reply = boto3.client("ec2").describe_instances()
    return [i for r in reply["Reservations"] for i in r["Instances"]]


def read_outputs(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    values: dict[str, str] = {}
    i = 0
    while i < len(lines):
        name, delim = lines[i].split("<<")
        end = lines.index(delim, i + 1)
        values[name] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return values


def one_line_error(err: str) -> str:
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("precisionbot: error:")]
    assert len(errors) == 1, err
    return errors[0]


def test_launch_then_terminate_by_run_id(
    cloud: Ec2Cloud, github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "github_output"
    out.touch()
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    with runners_come_online(github):
        assert main([*LAUNCH, "--pr", "3", "--ttl-minutes", "45", "--poll-interval", "0.05"]) == 0
    outputs = read_outputs(out)
    (instance,) = instances()
    assert outputs["instance-id"] == instance["InstanceId"]
    # One unguessable label, and nothing generic that another job's runs-on could ask for.
    assert re.fullmatch(r"precisionbot-[0-9a-f]{32}", outputs["label"])
    assert outputs["labels"] == f'["{outputs["label"]}"]'
    (registered,) = github.runners()
    assert registered["name"].startswith("precisionbot-4242-")
    assert [item["name"] for item in registered["labels"]] == [outputs["label"]]

    assert main(["runner", "terminate", "--run-id", "4242"]) == 0
    assert boto3.client("ec2").describe_instances()["Reservations"][0]["Instances"][0]["State"]["Name"] in (
        "shutting-down",
        "terminated",
    )
    assert github.runners() == []
    assert main(["runner", "terminate", "--instance-id", instance["InstanceId"]]) == 0  # idempotent


def test_the_label_never_reaches_the_launch_log(
    cloud: Ec2Cloud,
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The label scrape: launch's log is public, and whoever reads the label there can queue a job for the
    runner. The label is masked before anything is printed and no log line of ours names it."""
    out = tmp_path / "github_output"
    out.touch()
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    label = "precisionbot-" + "ab" * 16 + "-0"
    with runners_come_online(github):
        assert main([*LAUNCH, "--label", label, "--poll-interval", "0.05"]) == 0
    captured = capsys.readouterr()
    first, *rest = captured.out.splitlines()
    assert first == f"::add-mask::{label}"
    assert label not in "\n".join(rest) and label not in captured.err
    assert read_outputs(out)["label"] == label  # the GPU job still gets it, through the outputs file
    (instance,) = instances()
    user_data = boto3.client("ec2").describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )["UserData"]["Value"]
    import base64

    script = base64.b64decode(user_data).decode()
    assert label not in script  # nor in the instance's boot log
    assert f"want_ref={WORKFLOW_REF}" in script and "want_run=4242" in script and "want_job=gpu" in script


def test_launch_without_a_workflow_ref_is_refused(
    cloud: Ec2Cloud, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GITHUB_WORKFLOW_REF", raising=False)
    assert main(LAUNCH[: LAUNCH.index("--workflow-ref")]) == 3
    assert "--workflow-ref is required" in one_line_error(capsys.readouterr().err)
    assert instances() == [] and github.runners() == []


def test_launch_timeout_terminates_and_exits_3(
    cloud: Ec2Cloud, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*LAUNCH, "--wait-timeout", "0.3", "--poll-interval", "0.05"]) == 3
    line = one_line_error(capsys.readouterr().err)
    assert "did not come online within 0.3 s" in line and "terminated i-" in line
    assert [i["State"]["Name"] for i in instances()] in (["shutting-down"], ["terminated"])
    assert github.runners() == []


def test_reap_dry_run_then_for_real(cloud: Ec2Cloud, github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    tags = [{"Key": "precisionbot:expires-at", "Value": "2020-01-01T00:00:00Z"}]
    boto3.client("ec2").run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": tags}]
    )
    assert main(["runner", "reap", "--dry-run"]) == 0
    assert "would terminate i-" in capsys.readouterr().err
    assert instances()[0]["State"]["Name"] == "running"
    assert main(["runner", "reap"]) == 0
    assert instances()[0]["State"]["Name"] in ("shutting-down", "terminated")


def test_pool_config_launches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "precision.yml"
    config.write_text("runner:\n  kind: pool\n  labels: [self-hosted, h100]\n")
    assert main(["runner", "launch", "--repo", REPO, "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "label=self-hosted,h100\n" in printed
    assert 'labels=["self-hosted", "h100"]\n' in printed


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("bad-token", [], r"GitHub refused to create a just-in-time runner config for acme/engine: HTTP 401"),
        ("forbidden", [], r"HTTP 403 .*administration: write"),
        ("no-token", [], r"PRECISIONBOT_GITHUB_TOKEN .*GITHUB_TOKEN cannot"),
        ("unknown-repo", ["--repo", "acme/nope"], r"HTTP 404 .*acme/nope exists"),
        ("none", ["--subnet", "subnet-00000000"], r"AWS refused to start .*InvalidSubnetID.NotFound"),
        ("none", ["--ami", "ami-0123456789abcdef0"], r"AWS refused to read AMI .*InvalidAMIID.NotFound.*--ami"),
        ("no-aws-credentials", [], r"no AWS credentials found"),
        ("aws-unreachable", [], r"cannot read AMI .*AWS_ENDPOINT_URL"),
        ("none", ["--ami", ""], r"needs --ami"),
        # The config's runner: rules, on the flags that override it, before any AWS call.
        ("none", ["--ami", "ubuntu-22.04"], r"--ami is not an AMI id .*describe-images"),
        ("none", ["--region", "us-west2"], r"--region is not an AWS region .*did you mean 'us-west-2'"),
        ("none", ["--instance-type", "g6e.xlarg"], r"--instance-type is not an EC2 instance type .*'g6e.xlarge'"),
    ],
)
def test_launch_errors_are_one_line_and_exit_3(
    cloud: Ec2Cloud,
    github: FakeGitHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    setup: str,
    args: list[str],
    message: str,
) -> None:
    if setup == "bad-token":
        monkeypatch.setenv("PRECISIONBOT_GITHUB_TOKEN", "wrong")
    elif setup == "forbidden":
        github.fail_next("POST", r"/generate-jitconfig$", status=403, body={"message": "Resource not accessible"})
    elif setup == "no-token":
        monkeypatch.delenv("PRECISIONBOT_GITHUB_TOKEN")
    elif setup == "no-aws-credentials":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    elif setup == "aws-unreachable":
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert main([*LAUNCH, *args]) == 3
    assert re.search(message, one_line_error(capsys.readouterr().err))
    if setup != "aws-unreachable":
        assert instances() == []
    assert github.runners() == []  # a registration made before the AWS failure was deleted again


def test_terminate_still_ends_the_instance_when_github_refuses(
    cloud: Ec2Cloud, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with runners_come_online(github):
        assert main([*LAUNCH, "--poll-interval", "0.05"]) == 0
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    github.fail_next("GET", r"/actions/runners$", status=403, body={"message": "Resource not accessible"})
    assert main(["runner", "terminate", "--run-id", "4242"]) == 0
    captured = capsys.readouterr()
    assert "::warning::precisionbot: runner registrations not removed: GitHub refused" in captured.out
    assert "administration: write" in captured.err
    assert instances()[0]["State"]["Name"] in ("shutting-down", "terminated")


def test_terminate_and_reap_errors_exit_3(
    cloud: Ec2Cloud, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runner", "terminate", "--instance-id", "not-an-id"]) == 3
    assert "is not an EC2 instance id" in one_line_error(capsys.readouterr().err)
    assert main(["runner", "terminate", "--run-id", "$(reboot)"]) == 3
    assert "--run-id" in one_line_error(capsys.readouterr().err)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert main(["runner", "terminate", "--run-id", "5"]) == 3
    assert "cannot list instances" in one_line_error(capsys.readouterr().err)
    assert main(["runner", "reap"]) == 3
    assert "cannot list instances" in one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--repo is required (or set GITHUB_REPOSITORY)"),
        (["--repo", "o/r"], "--ami is required"),
        (["--repo", "o/r", "--ami", AMI], "needs a token with repository administration"),
        (["--repo", "not a repo"], "--repo 'not a repo' must be OWNER/NAME"),
    ],
)
def test_launch_names_the_missing_flag(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # no .github/precision.yml: built-in defaults
    for name in ("GITHUB_REPOSITORY", "GITHUB_TOKEN", "PRECISIONBOT_GITHUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["runner", "launch", *argv]) == 3
    line = one_line_error(capsys.readouterr().err)
    assert message in line and "None" not in line


def test_launch_in_a_models_region_is_terminated_there(
    cloud: Ec2Cloud, github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model's runner lives in another region than the top level's and boto3's default (us-east-1):
    # terminate must look where launch started it.
    config = tmp_path / "precision.yml"
    config.write_text(
        "runner:\n  region: us-west-2\n"
        "models:\n  - name: big\n    path: org/big\n    runner:\n      region: eu-west-1\n"
    )
    out = tmp_path / "github_output"
    out.touch()
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    with runners_come_online(github):
        args = [*LAUNCH, "--config", str(config), "--model", "big", "--poll-interval", "0.05"]
        assert main(args) == 0
    assert read_outputs(out)["region"] == "eu-west-1"
    europe = boto3.client("ec2", region_name="eu-west-1")
    (instance,) = [i for r in europe.describe_instances()["Reservations"] for i in r["Instances"]]
    assert instances() == []  # nothing in the default region

    assert main(["runner", "terminate", "--run-id", "4242", "--config", str(config)]) == 0
    state = europe.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] in ("shutting-down", "terminated")
    assert github.runners() == []
