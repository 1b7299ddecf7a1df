"""``precisionbot doctor``: a repository's set-up checked before a GPU minute is spent.

Offline against what ``init`` writes (clean) and the mistakes a newcomer made; online against moto's server
(a real HTTP endpoint: the ``aws`` fixture points boto3 at it) for the bucket, the AMI and the instance type.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from precisionbot.cli import main
from precisionbot.commands.setup_files import CALLER_PATH, CONFIG_PATH
from tests.config.test_six_mistakes import MISTAKES

STORE = "s3://acme-precision/engine"
AMI = "ami-12c6146b"  # one of moto's stock images


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository as ``init`` leaves it, with a real store URI."""
    assert main(["init", "--dir", str(tmp_path), "--engine-kind", "sglang", "--store", STORE]) == 0
    return tmp_path


def _doctor(repo: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["doctor", "--dir", str(repo), *flags])
    return code, capsys.readouterr().out


def _edit_config(repo: Path, change: dict[str, Any]) -> None:
    path = repo / CONFIG_PATH
    data = yaml.safe_load(path.read_text())
    for section, values in change.items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
        else:
            data[section] = values
    path.write_text(yaml.safe_dump(data))


def _workflow(repo: Path, name: str, text: str) -> None:
    (repo / ".github" / "workflows" / name).write_text(text)


def test_what_init_writes_is_clean(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _doctor(repo, capsys)
    assert code == 0, out
    assert "no findings" in out


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_doctor_finds_each_of_the_six_config_mistakes(
    case: str, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, problem, fix = MISTAKES[case]
    _edit_config(repo, data)
    code, out = _doctor(repo, capsys)
    assert code == 1
    line = next(line for line in out.splitlines() if problem in line)
    assert line.startswith("✗ ") and fix in line


def test_pins_must_be_a_sha_or_a_tag(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    caller = repo / CALLER_PATH
    text = caller.read_text()
    for ref, clean in (
        ("0123456789abcdef0123456789abcdef01234567", True),
        ("v1.2.3", True),
        ("main", False),
        ("0" * 40, False),
    ):
        caller.write_text(text.replace("precision.yml@v", f"precision.yml@{ref} # was @v"))
        code, out = _doctor(repo, capsys)
        assert (code == 0) == clean, out
        if not clean:
            assert f"{CALLER_PATH}:23: precisionbot's ref '{ref}'" in out and "pin a release tag" in out


def test_a_checkout_of_precisionbot_on_a_branch_is_found(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _workflow(
        repo,
        "extra.yml",
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    permissions: {}\n    steps:\n"
        "      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683\n"
        "        with: {repository: precisionbot/precisionbot, ref: main}\n",
    )
    code, out = _doctor(repo, capsys)
    assert code == 1 and "job a: checks out precisionbot at a ref that is a branch" in out


def test_secret_names_are_the_documented_ones(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _workflow(
        repo,
        "extra.yml",
        "on: push\n# precisionbot\njobs:\n  a:\n    runs-on: ubuntu-latest\n    permissions: {}\n"
        "    environment: precisionbot\n    steps:\n"
        "      - run: echo\n        env:\n"
        "          KEY: ${{ secrets.PRECISIONBOT_APP_KEY }}\n"
        "          ROLE: ${{ secrets.PRECISIONBOT_LAUNCH_ROLE_ARN }}\n"
        "          MINE: ${{ secrets.MY_OWN_TOKEN }}\n",
    )
    code, out = _doctor(repo, capsys)
    assert code == 1
    assert "reads secrets.PRECISIONBOT_APP_KEY, a name the docs do not define; did you mean" in out
    assert "'PRECISIONBOT_APP_PRIVATE_KEY'" in out
    assert "reads secrets.PRECISIONBOT_LAUNCH_ROLE_ARN, which the docs define as a variable" in out
    assert "MY_OWN_TOKEN" not in out  # the repository's own names are its business
    assert "runs PR code" not in out  # this job checks out nothing


PR_JOB = """\
on: {trigger}
jobs:
  test:
    runs-on: [self-hosted, gpu]
{permissions}    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683
        with:
          ref: ${{{{ github.event.pull_request.head.sha }}}}
      - run: precisionbot check --engine-url http://127.0.0.1:30000
        env:
          TOKEN: ${{{{ secrets.PRECISIONBOT_RUNNER_TOKEN }}}}
"""


def test_the_job_that_runs_pr_code_gets_no_write_token_and_no_secret(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    permissions = "    environment: precisionbot\n    permissions: {contents: write, pull-requests: read}\n"
    _workflow(repo, "pr.yml", PR_JOB.format(trigger="pull_request_target", permissions=permissions))
    code, out = _doctor(repo, capsys)
    assert code == 1
    for expected in (
        "job test: checks out PR code on pull_request_target",
        "job test: runs PR code with contents: write; give this job contents: read only",
        "job test: runs PR code inside an environment",
        "job test: runs PR code with secrets.PRECISIONBOT_RUNNER_TOKEN",
    ):
        assert expected in out
    _workflow(repo, "pr.yml", PR_JOB.format(trigger="pull_request", permissions=""))
    code, out = _doctor(repo, capsys)
    assert "job test: runs PR code with the default token; give it permissions: {contents: read}" in out


def test_passing_every_secret_to_the_reusable_workflow_is_found(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    caller = repo / CALLER_PATH
    caller.write_text(caller.read_text() + "    secrets: inherit\n")
    code, out = _doctor(repo, capsys)
    assert code == 1 and "job precision: passes every secret (secrets: inherit)" in out


def test_a_missing_config_and_workflow_are_findings_and_a_missing_dir_a_setup_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _doctor(tmp_path, capsys)
    assert code == 1
    assert ".github/precision.yml: does not exist; write one: precisionbot init" in out
    assert ".github/workflows: has no workflow that uses precisionbot" in out
    assert main(["doctor", "--dir", str(tmp_path / "nope")]) == 3
    assert "is not a directory" in capsys.readouterr().err


def test_online_finds_a_wrong_bucket(repo: Path, aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="some-other-bucket")
    code, out = _doctor(repo, capsys, "--online")
    assert code == 1
    assert "✗ baselines.store: s3://acme-precision/engine is not reachable" in out
    assert "does not exist" in out and "create the bucket or fix baselines.store" in out


def test_online_writes_one_probe_under_the_prefix(repo: Path, aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="acme-precision")
    code, out = _doctor(repo, capsys, "--online")
    assert code == 0, out
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="acme-precision").get("Contents", [])]
    assert len(keys) == 1 and keys[0].startswith("engine/doctor-probes/")
    assert f"wrote the probe {keys[0].removeprefix('engine/')}" in out and "create-only" in out
    assert main(["baseline", "list", "--store", STORE]) == 0  # the probe is no run: listing ignores it


def _ec2_config(repo: Path, **runner: object) -> None:
    _edit_config(repo, {"runner": {"kind": "ec2", "region": "us-east-1", **runner}})
    caller = repo / CALLER_PATH
    caller.write_text(caller.read_text().replace("runner: pool", "runner: ec2"))


def test_online_checks_the_ami_and_the_instance_type(repo: Path, aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="acme-precision")
    _ec2_config(repo, ami=AMI, instance_type="g6e.xlarge")
    code, out = _doctor(repo, capsys, "--online")
    assert code == 0, out
    _ec2_config(repo, ami="ami-0fffffffffffffff0", instance_type="g6e.xlarge")
    code, out = _doctor(repo, capsys, "--online")
    assert code == 1 and "✗ runner.ami: ami-0fffffffffffffff0 does not exist in us-east-1" in out


def test_online_without_credentials_skips_with_a_note(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out = _doctor(repo, capsys, "--online")
    assert code == 0
    assert "- AWS checks skipped: no AWS credentials" in out


class _RunnerGroups(BaseHTTPRequestHandler):
    """GitHub's ``GET /orgs/{org}/actions/runner-groups/{id}``: group 7 of acme exists, nothing else."""

    def do_GET(self) -> None:
        found = self.path == "/orgs/acme/actions/runner-groups/7"
        body = json.dumps({"id": 7, "name": "gpu"} if found else {"message": "Not Found"}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def github_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RunnerGroups)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("GITHUB_API_URL", url)
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/engine")
    monkeypatch.setenv("PRECISIONBOT_GITHUB_TOKEN", "ghs_test")
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def test_online_reads_the_runner_group(
    repo: Path, aws: str, github_api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("s3").create_bucket(Bucket="acme-precision")
    _ec2_config(repo, ami=AMI, instance_type="g6e.xlarge", runner_group_id=7)
    code, out = _doctor(repo, capsys, "--online")
    assert code == 0, out
    _ec2_config(repo, ami=AMI, instance_type="g6e.xlarge", runner_group_id=8)
    code, out = _doctor(repo, capsys, "--online")
    assert code == 1 and "✗ runner.runner_group_id: runner group 8 of acme cannot be read (HTTP 404)" in out
