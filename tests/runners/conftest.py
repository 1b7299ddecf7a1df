"""Fixtures for the runner tests: moto's EC2 (``aws``, from tests/conftest.py), the fake GitHub, a fake clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

from precisionbot.runners.cloud import Ec2Cloud
from precisionbot.runners.github_runners import GitHubRunnerRegistry
from precisionbot.runners.lifecycle import Clock
from precisionbot.runners.records import InstanceSpec, RunnerSpec
from tests.support.fake_github import FakeGitHub

TOKEN = "ghp_precisionbotTESTtoken0123456789"
REPO = "acme/engine"
AMI = "ami-12c6146b"  # one of moto's stock images
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class FakeClock:
    """Deterministic time: ``sleep`` advances both clocks instantly and calls ``on_sleep`` (to act as the
    outside world, e.g. the runner coming online, between two polls)."""

    def __init__(self, start: datetime = START) -> None:
        self.elapsed_s = 0.0
        self.start = start
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] | None = None

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed_s)

    def monotonic(self) -> float:
        return self.elapsed_s

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.elapsed_s += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))

    @property
    def clock(self) -> Clock:
        return Clock(now=self.now, monotonic=self.monotonic, sleep=self.sleep)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """The fake GitHub API with GITHUB_API_URL and PRECISIONBOT_GITHUB_TOKEN pointing at it."""
    with FakeGitHub(token=TOKEN, repo=REPO) as fake:
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        monkeypatch.setenv("PRECISIONBOT_GITHUB_TOKEN", TOKEN)
        monkeypatch.delenv("GITHUB_TOKEN", raising=False)
        monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
        monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
        yield fake


@pytest.fixture
def cloud(aws: str) -> Ec2Cloud:
    return Ec2Cloud.from_env()


@pytest.fixture
def registry(github: FakeGitHub) -> GitHubRunnerRegistry:
    return GitHubRunnerRegistry.from_token(TOKEN, github.url, throttle=False)


def instance_spec(**overrides: object) -> InstanceSpec:
    fields: dict[str, object] = {"instance_type": "g6.xlarge", "ami": AMI, "root_volume_gb": 150}
    fields.update(overrides)
    return InstanceSpec(**fields)  # type: ignore[arg-type]


WORKFLOW_REF = f"{REPO}/.github/workflows/precision.yml@refs/heads/main"
"""``GITHUB_WORKFLOW_REF`` of the run that launches the runner: the only workflow its hook accepts."""


def runner_spec(name: str = "precisionbot-77-tabc-0001", **overrides: object) -> RunnerSpec:
    fields: dict[str, object] = {
        "repo": REPO,
        "name": name,
        "label": name,
        "ttl_minutes": 90,
        "workflow_ref": WORKFLOW_REF,
        "run_id": "4242",
    }
    fields.update(overrides)
    return RunnerSpec(**fields)  # type: ignore[arg-type]


def seed_runner(fake: FakeGitHub, name: str, status: str = "offline", busy: bool = False) -> int:
    """A runner registration that exists before the test (as left behind by an earlier run)."""
    rid = fake._new_id()
    with fake._lock:
        fake.state.runners[rid] = {
            "id": rid,
            "name": name,
            "os": "linux",
            "status": status,
            "busy": busy,
            "ephemeral": True,
            "labels": [{"id": 1, "name": "self-hosted", "type": "read-only"}, {"id": 2, "name": name}],
            "runner_group_id": 1,
            "_repo": fake.repo,
        }
    return rid
