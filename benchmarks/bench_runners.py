"""Runner lifecycle benchmark: what launch / terminate / reap cost in API calls and wall time, against moto's
EC2 server and the fake GitHub API on 127.0.0.1 (real boto3 and PyGithub over HTTP; PyGithub's pauses off).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_runners.py [--instances 200] [--runners 500]

On AWS the wall time is dominated by what this cannot measure: instance boot and runner start (1-3 min).
The numbers here are precisionbot's own cost: requests and local processing.
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from precisionbot.runners.cloud import Ec2Cloud
from precisionbot.runners.github_runners import GitHubRunnerRegistry
from precisionbot.runners.lifecycle import Clock, launch, reap, terminate
from precisionbot.runners.records import InstanceSpec, RunnerSpec, iso_utc, new_runner_name
from precisionbot.runners.userdata import render_user_data
from tests.support.fake_github import FakeGitHub
from tests.support.moto_server import moto_server

REPO = "acme/engine"
NOW = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=200, help="tagged instances for reap (half expired)")
    parser.add_argument("--runners", type=int, default=500, help="runner registrations for reap (half stale)")
    args = parser.parse_args()
    rows: list[tuple[str, float, str]] = []
    spec = RunnerSpec(repo=REPO, name=new_runner_name("1", NOW), label="precisionbot-1-1-0")
    script = render_user_data(spec, "x" * 1200)  # real JIT configs are ~1 KB of base64
    rows.append(("user-data size (bytes, limit 16,384)", 0.0, str(len(script.encode()))))

    with moto_server(pytest.MonkeyPatch()), FakeGitHub(token="t", repo=REPO) as gh:
        cloud = Ec2Cloud.from_env()
        cloud.find_instances(instance_ids=["i-0123456789abcdef0"])  # moto's one-time backend setup
        registry = GitHubRunnerRegistry.from_token("t", gh.url, throttle=False)
        ec2 = boto3.client("ec2")

        def online(_: int) -> None:
            for runner in gh.runners():
                gh.set_runner_status(runner["id"], "online")

        clock = Clock(now=lambda: NOW, monotonic=time.monotonic, sleep=online)
        before = len(gh.requests)
        start = time.perf_counter()
        done = launch(
            InstanceSpec(instance_type="g6e.xlarge", ami="ami-12c6146b"),
            spec,
            run_id="1",
            pr="7",
            cloud=cloud,
            registry=registry,
            clock=clock,
            poll_interval_s=0.0,
        )
        rows.append(("launch (online at 2nd poll)", time.perf_counter() - start, f"{len(gh.requests) - before} GitHub"))

        start = time.perf_counter()
        terminate(cloud=cloud, registry=registry, instance_id=done.instance_id)
        rows.append(("terminate by instance id", time.perf_counter() - start, "-"))

        for i in range(args.instances):
            expires = NOW - timedelta(minutes=1) if i % 2 == 0 else NOW + timedelta(hours=1)
            tags = [{"Key": "precisionbot:expires-at", "Value": iso_utc(expires)}]
            ec2.run_instances(
                ImageId="ami-12c6146b",
                MinCount=1,
                MaxCount=1,
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )
        for i in range(args.runners):
            name = new_runner_name(str(i), NOW - (timedelta(hours=2) if i % 2 == 0 else timedelta(minutes=1)))
            rid = gh._new_id()
            gh.state.runners[rid] = {"id": rid, "name": name, "status": "offline", "busy": False, "labels": []}
            gh.state.runners[rid]["_repo"] = REPO
        before = len(gh.requests)
        start = time.perf_counter()
        result = reap(cloud=cloud, registry=registry, repos=[REPO], now=NOW, dry_run=True)
        rows.append(
            (
                f"reap --dry-run: {args.instances} instances, {args.runners} runners",
                time.perf_counter() - start,
                f"{len(gh.requests) - before} GitHub; {len(result.instances)}+{len(result.runners)} found",
            )
        )
        before = len(gh.requests)
        start = time.perf_counter()
        result = reap(cloud=cloud, registry=registry, repos=[REPO], now=NOW)
        rows.append(
            (
                "reap (terminate + delete)",
                time.perf_counter() - start,
                f"{len(gh.requests) - before} GitHub; {len(result.instances)}+{len(result.runners)} removed",
            )
        )

    print(f"runner lifecycle on {platform.machine()}, Python {platform.python_version()}")
    print(f"| {'case':<52} | {'seconds':>8} | requests / result |")
    print(f"| {'-' * 52} | {'-' * 8} | --- |")
    for name, seconds, extra in rows:
        print(f"| {name:<52} | {seconds:8.3f} | {extra} |")


if __name__ == "__main__":
    main()
