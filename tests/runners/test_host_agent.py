"""``runner.kind: host`` end to end: the queue on moto's S3, real PyGithub against the fake GitHub for the
just-in-time runner, and each job in a real bubblewrap sandbox (fresh mount/pid/net namespaces, a private
root) running a tiny stand-in for the actions runner. Then the chaos cases: the agent killed mid-job, a job
past its TTL, a container that ignores SIGTERM, two jobs racing for one GPU."""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from precisionbot.baselines.store.s3 import S3Store
from precisionbot.config import from_mapping
from precisionbot.gh.gate import decide
from precisionbot.runners.github_runners import GitHubRunnerRegistry
from precisionbot.runners.host_agent import Agent, AgentSettings
from precisionbot.runners.host_containers import ContainerSpec, run_argv
from precisionbot.runners.host_gpus import GpuLeases
from precisionbot.runners.host_queue import Claim, HostJob, HostQueue, new_job_id
from precisionbot.runners.host_sandbox import BwrapRuntime
from tests.gh.test_gate import HEAD, comment_event, facts, pull
from tests.runners.conftest import REPO, FakeClock
from tests.support.fake_github import FakeGitHub

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("PRECISIONBOT_REQUIRE_BWRAP"),
    reason="needs bubblewrap (apt-get install bubblewrap)",
)

# The stand-in runner: decodes its JIT config (the fake GitHub's is base64 JSON), reports what it sees from
# inside, and holds the job until the test lets it end. "stubborn" ignores SIGTERM, as a wedged job may.
FAKE_RUNNER = r"""
import base64, json, os, signal, socket, sys, time
jit = json.loads(base64.b64decode(os.environ.pop("ACTIONS_RUNNER_INPUT_JITCONFIG")))
control = "/control"
if os.path.exists(f"{control}/stubborn"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
port = int(open(f"{control}/port").read())
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    reach = "reached"
except OSError as exc:
    reach = type(exc).__name__
report = {
    "jit": jit,
    "gpus": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "host_github": reach,
    "home_writable": os.access("/home/runner", os.W_OK),
    "usr_writable": os.access("/usr", os.W_OK),
    "sees_host_tmp": os.path.exists("/control/../tmp/pytest-of-root"),
}
open("/home/runner/report.json.tmp", "w").write(json.dumps(report))
os.rename("/home/runner/report.json.tmp", "/home/runner/report.json")
while not os.path.exists(f"{control}/go-{jit['name']}"):
    time.sleep(0.02)
sys.exit(0)
"""


@pytest.fixture
def queue(aws: str) -> HostQueue:
    boto3.client("s3").create_bucket(Bucket="pb-host-queue")
    return HostQueue(S3Store.from_uri("s3://pb-host-queue/host-queue"))


@pytest.fixture
def host(tmp_path: Path, github: FakeGitHub) -> Iterator[dict[str, Any]]:
    image = tmp_path / "image"
    (image / "runner").mkdir(parents=True)
    (image / "runner" / "run.py").write_text(FAKE_RUNNER)
    control = tmp_path / "control"
    control.mkdir()
    (control / "port").write_text(github.url.rsplit(":", 1)[1].strip("/"))
    runtime = BwrapRuntime(tmp_path / "sandboxes")
    yield {"image": image, "control": control, "runtime": runtime, "leases": tmp_path / "gpus"}
    for state in runtime.list():  # a failed test must not leave sandboxes running
        runtime.stop(state.name, 0)


def agent(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, name: str = "gpu-host-1", **kw: Any
) -> Agent:
    settings = AgentSettings(
        name=name,
        image=str(host["image"]),
        command=("/usr/bin/python3", "/runner/run.py"),
        binds=((str(host["control"]), "/control"),),
        stop_grace_s=kw.pop("grace", 5.0),
    )
    leases = GpuLeases(host["leases"], kw.pop("gpus", (0, 1)))
    return Agent(settings, queue, host["runtime"], registry, leases, **kw)


def submit(queue: HostQueue, gpus: int = 1, ttl: int = 60, created: str = "2026-03-01T12:00:00Z") -> HostJob:
    job = HostJob(
        id=new_job_id("4242"), repo=REPO, label="precisionbot-" + "ab" * 16, run_id="4242", gpus=gpus,
        ttl_minutes=ttl, pr="7", created_at=created,
    )  # fmt: skip
    queue.submit(job)
    return job


def report(host: dict[str, Any], claim: Claim) -> dict[str, Any]:
    path = host["runtime"].root / claim.container / "home" / "report.json"
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, (host["runtime"].root / claim.container / "log").read_text()
        time.sleep(0.02)
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def release(host: dict[str, Any], claim: Claim) -> None:
    (host["control"] / f"go-{claim.runner_name}").touch()


def until_ended(a: Agent) -> str:
    deadline = time.monotonic() + 30
    while (said := a.step()) == "running":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return said


def pid_of(host: dict[str, Any], claim: Claim) -> int:
    return int(json.loads((host["runtime"].root / claim.container / "info.json").read_text())["child-pid"])


def assert_nothing_left(host: dict[str, Any], github: FakeGitHub, queue: HostQueue, job: HostJob, pid: int) -> None:
    assert not Path(f"/proc/{pid}").exists()  # no process of the sandbox (pid 1 of its namespace is gone)
    assert host["runtime"].list() == [] and list(host["runtime"].root.iterdir()) == []  # no folder
    assert github.runners() == []  # no runner registration
    assert GpuLeases(host["leases"], (0, 1)).holders() == {}
    assert queue.pending() == [] and queue.open_claims("gpu-host-1") == []


def test_docker_and_podman_argv_hold_the_gpus_and_no_secret() -> None:
    spec = ContainerSpec(
        name="precisionbot-host-x", image="ghcr.io/acme/runner:1", command=("./run.sh",),
        env={"ACTIONS_RUNNER_INPUT_JITCONFIG": "c2VjcmV0"}, gpus=(2, 3), labels={"precisionbot.job": "x"},
        binds=(("/models", "/models"),),
    )  # fmt: skip
    docker = run_argv(spec, "docker")
    assert docker[:2] == ["docker", "run"] and docker[-2:] == ["ghcr.io/acme/runner:1", "./run.sh"]
    assert docker[docker.index("--gpus") + 1] == '"device=2,3"'
    assert "NVIDIA_VISIBLE_DEVICES=2,3" in docker and "--rm" not in docker
    assert docker[docker.index("--cap-drop") : docker.index("--cap-drop") + 2] == ["--cap-drop", "ALL"]
    assert "ACTIONS_RUNNER_INPUT_JITCONFIG" in docker and not any("c2VjcmV0" in a for a in docker)
    assert "/models:/models:ro" in docker
    podman = run_argv(spec, "podman")
    assert "--gpus" not in podman and "nvidia.com/gpu=2" in podman and "nvidia.com/gpu=3" in podman
    assert run_argv(ContainerSpec(name="n", image="i", command=()))[-1] == "i"


@needs_bwrap
def test_a_fork_prs_approved_head_runs_in_a_fresh_sandbox_and_leaves_nothing_behind(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, github: FakeGitHub
) -> None:
    config = from_mapping({"runner": {"kind": "host", "queue": "s3://pb-host-queue/host-queue"}})
    decision = decide(comment_event(f"/precision rerun sha={HEAD}"), facts(pull=pull(fork=True)), config)
    assert decision.run and decision.sha == HEAD  # host, unlike pool, takes fork code: a fresh container
    job = submit(queue)
    a = agent(host, queue, registry)
    a.recover()
    assert a.step() == f"started {job.id}"
    claim = a.current
    assert claim is not None and claim.gpus == (0,)
    seen = report(host, claim)
    (registered,) = github.runners()
    assert [label["name"] for label in registered["labels"]] == [job.label]  # the one unguessable label
    assert seen["jit"]["runner_id"] == registered["id"] and seen["gpus"] == "0"
    assert seen["host_github"] == "ConnectionRefusedError"  # a fresh network namespace: not the host's loopback
    assert max(seen["pids"]) < 10 and seen["home_writable"] and not seen["usr_writable"]
    assert not seen["sees_host_tmp"]
    assert queue.pending() == [] and queue.outcome(job.id) is None
    pid = pid_of(host, claim)
    release(host, claim)
    assert until_ended(a) == "ended: finished"
    assert queue.outcome(job.id) == "finished"
    assert_nothing_left(host, github, queue, job, pid)


@needs_bwrap
@pytest.mark.parametrize("stubborn", [False, True], ids=["stops", "ignores-sigterm"])
def test_a_job_past_its_ttl_is_killed_and_its_runner_deregistered(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, github: FakeGitHub, stubborn: bool
) -> None:
    if stubborn:
        (host["control"] / "stubborn").touch()
    clock = FakeClock()
    job = submit(queue, ttl=30)
    a = agent(host, queue, registry, clock=clock.clock, grace=0.5)
    assert a.step().startswith("started") and a.current is not None
    claim = a.current
    report(host, claim)  # the job is running (and, when stubborn, ignores SIGTERM from here on)
    pid = pid_of(host, claim)
    assert a.step() == "running" and len(github.runners()) == 1
    clock.elapsed_s += 31 * 60
    assert a.step() == "ended: expired"
    assert queue.outcome(job.id) == "expired"
    assert_nothing_left(host, github, queue, job, pid)


@needs_bwrap
@pytest.mark.parametrize("expired", [False, True], ids=["adopted", "expired-meanwhile"])
def test_a_restarted_agent_finishes_or_reaps_what_its_killed_predecessor_left(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, github: FakeGitHub, expired: bool
) -> None:
    """The sandbox runs in a session of its own, as a container outlives a killed docker client: the first
    agent is dropped mid-job without any cleanup (what SIGKILL leaves), and a new one with its name starts."""
    clock = FakeClock()
    job = submit(queue, ttl=30)
    first = agent(host, queue, registry, clock=clock.clock)
    assert first.step().startswith("started") and first.current is not None
    claim = first.current
    report(host, claim)
    pid = pid_of(host, claim)
    del first
    if expired:
        clock.elapsed_s += 31 * 60
    restarted = agent(host, queue, registry, clock=clock.clock)
    restarted.recover()
    if expired:
        assert restarted.current is None and queue.outcome(job.id) == "orphaned"
    else:
        assert restarted.current == claim  # adopted: the job runs to its end
        assert restarted.step() == "running"
        release(host, claim)
        assert until_ended(restarted) == "ended: finished"
    assert_nothing_left(host, github, queue, job, pid)


@needs_bwrap
def test_an_agent_process_killed_with_sigkill_mid_job_is_followed_by_one_that_finishes_the_job(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, github: FakeGitHub, tmp_path: Path
) -> None:
    """The same case with a real process: `precisionbot runner agent` (the service's own command line) starts
    the job, is SIGKILLed (no handler runs), and an agent with its name and state folder takes over."""
    import signal
    import subprocess
    import sys

    job = submit(queue, ttl=30)
    argv = [
        sys.executable, "-m", "precisionbot", "runner", "agent", "--queue", "s3://pb-host-queue/host-queue",
        "--image", str(host["image"]), "--runtime", "bwrap", "--state-dir", str(tmp_path), "--gpus", "0,1",
        "--name", "gpu-host-1", "--command", "/usr/bin/python3 /runner/run.py", "--grace-seconds", "5",
        "--bind", f"{host['control']}:/control", "--poll-seconds", "0.1",
    ]  # fmt: skip
    log = (tmp_path / "agent.log").open("wb")
    first = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (claims := host["runtime"].list()):
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    assert "waiting for jobs in s3://pb-host-queue/host-queue" in (tmp_path / "agent.log").read_text()
    restarted = agent(host, queue, registry)
    restarted.recover()
    claim = restarted.current
    assert claim is not None and claim.container == claims[0].name  # adopted: the killed agent's sandbox lives on
    report(host, claim)
    pid = pid_of(host, claim)
    release(host, claim)
    assert until_ended(restarted) == "ended: finished"
    assert_nothing_left(host, github, queue, job, pid)


@needs_bwrap
def test_two_jobs_racing_for_one_gpu_never_share_it(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, github: FakeGitHub
) -> None:
    """Two agents on one host with one GPU (SGLang runs one runner per GPU): the second job waits, queued,
    until the first one's container is gone; and a job claimed twice lands once."""
    first_job = submit(queue, created="2026-03-01T12:00:00Z")
    second_job = submit(queue, created="2026-03-01T12:00:01Z")
    a = agent(host, queue, registry, name="gpu-host-1", gpus=(0,))
    b = agent(host, queue, registry, name="gpu-host-1b", gpus=(0,))
    assert a.step() == f"started {first_job.id}" and a.current is not None
    assert b.step() == "waiting for GPUs" and b.current is None
    assert [j.id for j in queue.pending()] == [second_job.id]
    twin = Claim(second_job.id, "elsewhere", REPO, "c", (0,), "n", "2026-03-01T13:00:00Z")
    claim = a.current
    report(host, claim)
    pid = pid_of(host, claim)
    release(host, claim)
    assert until_ended(a) == "ended: finished"
    assert not Path(f"/proc/{pid}").exists()
    assert b.step() == f"started {second_job.id}" and b.current is not None
    assert b.current.gpus == (0,) and not queue.claim(twin)  # create-only: the first claim stands
    release(host, b.current)
    report(host, b.current)
    assert until_ended(b) == "ended: finished"
    assert queue.outcome(first_job.id) == queue.outcome(second_job.id) == "finished"
    assert host["runtime"].list() == [] and github.runners() == []


def test_the_queue_holds_no_runner_credential(queue: HostQueue) -> None:
    job = submit(queue)
    stored = queue.store.get_bytes(f"jobs/{job.id}/request.json")
    assert base64.b64encode(b"runner_id") not in stored and "jit" not in stored.decode().lower()
    assert queue.request(job.id) == job


def test_runner_launch_with_kind_host_queues_one_job_for_the_agents(
    queue: HostQueue, github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from precisionbot.cli import main

    config = tmp_path / "precision.yml"
    config.write_text("runner:\n  kind: host\n  queue: s3://pb-host-queue/host-queue\n  gpus: 2\n  ttl_minutes: 45\n")
    assert main(["runner", "launch", "--config", str(config), "--run-id", "4242", "--pr", "7"]) == 0
    outputs = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    (job,) = queue.pending()
    assert outputs["job-id"] == job.id and outputs["label"] == job.label and job.label.startswith("precisionbot-")
    assert (job.repo, job.gpus, job.ttl_minutes, job.pr) == (REPO, 2, 45, "7")
    assert github.runners() == []  # the agent registers the runner, not the launch job
    config.write_text("runner:\n  kind: host\n")
    assert main(["runner", "launch", "--config", str(config), "--run-id", "4242"]) == 3
    assert "runner.queue" in capsys.readouterr().err


def test_agent_refuses_a_queue_no_launch_writes_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from precisionbot.cli import main

    monkeypatch.setenv("PRECISIONBOT_GITHUB_TOKEN", "t")
    assert main(["runner", "agent", "--queue", "nonsense", "--image", "img"]) == 3
    assert "neither a store URI" in capsys.readouterr().err


@needs_bwrap
def test_runner_terminate_cancels_the_runs_host_jobs_pending_and_running(
    host: dict[str, Any], queue: HostQueue, registry: GitHubRunnerRegistry, github: FakeGitHub, tmp_path: Path
) -> None:
    from precisionbot.cli import main

    running = submit(queue)
    a = agent(host, queue, registry)
    assert a.step() == f"started {running.id}" and a.current is not None
    claim = a.current
    report(host, claim)
    pid = pid_of(host, claim)
    pending = submit(queue)
    other = HostJob(**{**running.__dict__, "id": new_job_id("999"), "run_id": "999"})
    queue.submit(other)
    config = tmp_path / "precision.yml"
    config.write_text("runner:\n  kind: host\n  queue: s3://pb-host-queue/host-queue\n")
    assert main(["runner", "terminate", "--run-id", "4242", "--config", str(config)]) == 0
    assert queue.outcome(pending.id) == "cancelled"  # never taken by an agent
    assert [j.id for j in queue.pending()] == [other.id]  # another run's job is untouched
    assert a.step() == "ended: cancelled"  # the running one: its agent ends it on its next step
    assert queue.outcome(running.id) == "cancelled"
    queue.finish(other.id, "cancelled")
    assert_nothing_left(host, github, queue, running, pid)
