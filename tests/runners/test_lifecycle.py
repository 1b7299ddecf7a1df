"""launch / terminate / reap through real boto3 against moto's EC2 server and real PyGithub against the fake
GitHub API, with a fake clock so the online wait costs no real time."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from typing import Any

import boto3
import pytest

from precisionbot.errors import CloudError
from precisionbot.runners.cloud import Ec2Cloud
from precisionbot.runners.github_runners import GitHubRunnerRegistry
from precisionbot.runners.lifecycle import launch, reap, terminate
from precisionbot.runners.records import new_runner_name
from tests.runners.conftest import REPO, START, TOKEN, FakeClock, instance_spec, runner_spec, seed_runner
from tests.support.fake_github import FakeGitHub


def ec2() -> Any:
    return boto3.client("ec2")


def all_instances() -> list[dict[str, Any]]:
    reply = ec2().describe_instances()
    return [i for r in reply["Reservations"] for i in r["Instances"]]


def state_of(instance_id: str) -> str:
    reply = ec2().describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


def come_online_after(github: FakeGitHub, polls: int) -> Any:
    def on_sleep(n: int) -> None:
        if n == polls:
            for runner in github.runners():
                github.set_runner_status(runner["id"], "online")

    return on_sleep


def test_launch_starts_one_tagged_self_terminating_instance_and_waits_until_online(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, fake_clock: FakeClock
) -> None:
    fake_clock.on_sleep = come_online_after(github, polls=3)
    done = launch(
        instance_spec(spot=True),
        runner_spec(),
        run_id="77",
        pr="12",
        cloud=cloud,
        registry=registry,
        clock=fake_clock.clock,
        wait_timeout_s=600,
        poll_interval_s=5,
    )
    instances = all_instances()
    assert [i["InstanceId"] for i in instances] == [done.instance_id]
    raw = instances[0]
    assert raw["InstanceType"] == "g6.xlarge" and raw["ImageId"] == "ami-12c6146b"
    assert raw.get("InstanceLifecycle") == "spot"
    # IMDSv2 only, hop limit 1: the profile's credentials never reach a container or a further hop.
    assert raw["MetadataOptions"]["HttpTokens"] == "required"
    assert raw["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    root_device = ec2().describe_images(ImageIds=["ami-12c6146b"])["Images"][0]["RootDeviceName"]
    (volume,) = ec2().describe_volumes()["Volumes"]
    assert (volume["Size"], volume["Attachments"][0]["Device"]) == (150, root_device)
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags["precisionbot:repo"] == REPO
    assert tags["precisionbot:run-id"] == "77"
    assert tags["precisionbot:pr"] == "12"
    assert tags["precisionbot:label"] == done.label == "precisionbot-77-tabc-0001"
    assert tags["precisionbot:runner"] == "precisionbot-77-tabc-0001"
    assert tags["precisionbot:expires-at"] == "2026-03-01T13:30:00Z"  # START + 90 min TTL
    behaviour = ec2().describe_instance_attribute(
        InstanceId=done.instance_id, Attribute="instanceInitiatedShutdownBehavior"
    )
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"

    user_data = base64.b64decode(
        ec2().describe_instance_attribute(InstanceId=done.instance_id, Attribute="userData")["UserData"]["Value"]
    ).decode()
    jit = github.calls("POST", r"/actions/runners/generate-jitconfig$")
    assert len(jit) == 1
    assert jit[0].body["name"] == done.label
    assert done.label in jit[0].body["labels"] and jit[0].body["runner_group_id"] == 1
    runner_id = github.runners()[0]["id"]
    assert done.runner_id == runner_id
    assert "shutdown -h +90" in user_data
    assert user_data.index("shutdown -h +90") < user_data.index("./run.sh")
    # The JIT config reaches the runner in its environment, not its argv (docs/runners.md).
    assert re.search(r"^export ACTIONS_RUNNER_INPUT_JITCONFIG=[A-Za-z0-9+/=]{20,}$", user_data, flags=re.MULTILINE)
    assert "--jitconfig" not in user_data
    for secret in (TOKEN, "testing", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "ghp_", "Authorization"):
        assert secret not in user_data

    # Three polls offline, then online: exactly three sleeps of the poll interval, no more.
    assert fake_clock.sleeps == [5, 5, 5]


def test_launch_times_out_terminates_its_instance_and_deletes_the_registration(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, fake_clock: FakeClock
) -> None:
    with pytest.raises(CloudError, match=r"did not come online within 60 s.*terminated i-"):
        launch(
            instance_spec(),
            runner_spec(),
            run_id="77",
            pr=None,
            cloud=cloud,
            registry=registry,
            clock=fake_clock.clock,
            wait_timeout_s=60,
            poll_interval_s=7,
        )
    (instance,) = all_instances()
    assert state_of(instance["InstanceId"]) in ("shutting-down", "terminated")
    assert github.runners() == []
    assert sum(fake_clock.sleeps) == pytest.approx(60)


def test_launch_fails_fast_when_the_instance_dies_before_the_runner_is_online(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, fake_clock: FakeClock
) -> None:
    def kill_it(n: int) -> None:
        ec2().terminate_instances(InstanceIds=[all_instances()[0]["InstanceId"]])

    fake_clock.on_sleep = kill_it
    with pytest.raises(CloudError, match=r"is (shutting-down|terminated) before runner"):
        launch(
            instance_spec(),
            runner_spec(),
            run_id="77",
            pr=None,
            cloud=cloud,
            registry=registry,
            clock=fake_clock.clock,
            wait_timeout_s=600,
        )
    assert len(fake_clock.sleeps) == 1
    assert github.runners() == []


def test_launch_deletes_the_registration_when_the_instance_cannot_start(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, fake_clock: FakeClock
) -> None:
    with pytest.raises(CloudError, match=r"AWS refused to start a g6.xlarge instance.*InvalidSubnetID"):
        launch(
            instance_spec(subnet="subnet-00000000"),
            runner_spec(),
            run_id="77",
            pr=None,
            cloud=cloud,
            registry=registry,
            clock=fake_clock.clock,
        )
    assert github.runners() == []
    assert all_instances() == []


def _launch_plain(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, run_id: str, label: str | None = None
) -> str:
    clock = FakeClock()
    clock.on_sleep = come_online_after(github, polls=1)
    name = new_runner_name(run_id, clock.now())
    return launch(
        instance_spec(),
        runner_spec(name, label=label or name),
        run_id=run_id,
        pr=None,
        cloud=cloud,
        registry=registry,
        clock=clock.clock,
    ).instance_id


def test_terminate_by_instance_id_is_idempotent_and_removes_the_registration(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub
) -> None:
    first = _launch_plain(cloud, registry, github, "5")
    second = _launch_plain(cloud, registry, github, "6")
    done = terminate(cloud=cloud, registry=registry, instance_id=first)
    assert done.instance_ids == (first,)
    assert len(done.runner_names) == 1 and done.runner_names[0].startswith("precisionbot-5-")
    assert state_of(first) in ("shutting-down", "terminated")
    assert state_of(second) == "running"
    assert [r["name"].split("-")[1] for r in github.runners()] == ["6"]

    again = terminate(cloud=cloud, registry=registry, instance_id=first)
    assert again.instance_ids == () and again.runner_names == ()
    unknown = terminate(cloud=cloud, registry=registry, instance_id="i-0123456789abcdef0")
    assert unknown.instance_ids == ()


def test_a_predictable_label_selects_the_runner_and_terminate_still_finds_it(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub
) -> None:
    # A matrix workflow cannot pass one output per leg, so the GPU job's runs-on is a label both jobs compute.
    instance_id = _launch_plain(cloud, registry, github, "900", label="precisionbot-900-1-0")
    (runner,) = github.runners()
    assert runner["name"].startswith("precisionbot-900-t")
    assert "precisionbot-900-1-0" in [item["name"] for item in runner["labels"]]
    tags = cloud.find_instances(instance_ids=[instance_id])[0].tags
    assert tags["precisionbot:label"] == "precisionbot-900-1-0"
    assert tags["precisionbot:runner"] == tags["Name"] == runner["name"]
    assert terminate(cloud=cloud, registry=registry, instance_id=instance_id).runner_names == (runner["name"],)
    assert github.runners() == []


def test_terminate_by_run_id_finds_instances_by_tag(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub
) -> None:
    a = _launch_plain(cloud, registry, github, "900")
    b = _launch_plain(cloud, registry, github, "900")
    other = _launch_plain(cloud, registry, github, "901")
    done = terminate(cloud=cloud, registry=registry, run_id="900")
    assert sorted(done.instance_ids) == sorted([a, b])
    assert state_of(other) == "running"
    assert [r["name"].split("-")[1] for r in github.runners()] == ["901"]
    assert terminate(cloud=cloud, registry=registry, run_id="900").instance_ids == ()


def test_terminate_without_a_token_still_ends_the_instance(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub
) -> None:
    a = _launch_plain(cloud, registry, github, "31")
    done = terminate(cloud=cloud, registry=None, run_id="31")
    assert done.instance_ids == (a,) and done.warning is not None and "no GitHub token" in done.warning
    assert state_of(a) in ("shutting-down", "terminated")
    assert len(github.runners()) == 1  # left for reap


def test_terminate_refuses_an_instance_precisionbot_did_not_start(cloud: Ec2Cloud) -> None:
    from precisionbot.errors import ConfigError

    foreign = ec2().run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    with pytest.raises(ConfigError, match="did not start it"):
        terminate(cloud=cloud, registry=None, instance_id=foreign)
    assert state_of(foreign) == "running"


def _tagged_instance(expires_at: str, runner: str) -> str:
    tags = [
        {"Key": "precisionbot:expires-at", "Value": expires_at},
        {"Key": "precisionbot:label", "Value": runner},
        {"Key": "precisionbot:runner", "Value": runner},
        {"Key": "precisionbot:repo", "Value": REPO},
    ]
    reply = ec2().run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(reply["Instances"][0]["InstanceId"])


@pytest.mark.parametrize("dry_run", [False, True])
def test_reap_removes_only_expired_instances_and_stale_offline_runners(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, dry_run: bool
) -> None:
    now = START
    expired = _tagged_instance("2026-03-01T11:59:59Z", "precisionbot-1-tx-0001")
    fresh = _tagged_instance("2026-03-01T12:30:00Z", "precisionbot-2-tx-0002")
    untagged = ec2().run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]

    old = new_runner_name("3", now - timedelta(hours=2))
    stale = seed_runner(github, old)
    seed_runner(github, new_runner_name("4", now - timedelta(minutes=5)))  # still booting: too young
    seed_runner(github, new_runner_name("5", now - timedelta(hours=2)), status="online")
    seed_runner(github, "gpu-pool-1")  # not ours
    attached = new_runner_name("6", now - timedelta(hours=2))
    seed_runner(github, attached)
    _tagged_instance("2026-03-01T14:00:00Z", attached)  # its live, unexpired instance keeps it
    before = {r["id"] for r in github.runners()}

    result = reap(cloud=cloud, registry=registry, repos=[REPO], now=now, dry_run=dry_run)

    assert [i.id for i in result.instances] == [expired]
    assert [r.name for r in result.runners] == [old]
    assert state_of(fresh) == "running" and state_of(untagged) == "running"
    if dry_run:
        assert state_of(expired) == "running"
        assert {r["id"] for r in github.runners()} == before
        assert github.calls("DELETE", r"/actions/runners/") == []
    else:
        assert state_of(expired) in ("shutting-down", "terminated")
        assert {r["id"] for r in github.runners()} == before - {stale}


def test_one_vanished_id_does_not_keep_the_others_alive(cloud: Ec2Cloud) -> None:
    ids = [
        ec2().run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
        for _ in range(2)
    ]
    cloud.terminate([ids[0], "i-0123456789abcdef0", ids[1]])
    assert [state_of(i) for i in ids] in (
        [a, b] for a in ("shutting-down", "terminated") for b in ("shutting-down", "terminated")
    )


def test_a_cancelled_launch_cleans_up_before_it_unwinds(
    cloud: Ec2Cloud, registry: GitHubRunnerRegistry, github: FakeGitHub, fake_clock: FakeClock
) -> None:
    def cancel(n: int) -> None:
        raise KeyboardInterrupt  # what SIGINT (and, through the CLI, SIGTERM) does mid-wait

    fake_clock.on_sleep = cancel
    with pytest.raises(KeyboardInterrupt):
        launch(
            instance_spec(),
            runner_spec(),
            run_id="77",
            pr=None,
            cloud=cloud,
            registry=registry,
            clock=fake_clock.clock,
        )
    assert [state_of(i["InstanceId"]) for i in all_instances()] in (["shutting-down"], ["terminated"])
    assert github.runners() == []


def _instance_with_tags(tags: list[dict[str, str]]) -> str:
    reply = ec2().run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": tags}]
    )
    return str(reply["Instances"][0]["InstanceId"])


def test_reap_dates_instances_with_a_missing_or_garbled_expiry_tag_by_their_launch(cloud: Ec2Cloud) -> None:
    # Someone deleted or edited the expiry tag: the instance must not live forever because of it.
    missing = _instance_with_tags([{"Key": "precisionbot:label", "Value": "precisionbot-x"}])
    garbled = _instance_with_tags(
        [{"Key": "precisionbot:run-id", "Value": "9"}, {"Key": "precisionbot:expires-at", "Value": "never"}]
    )
    untagged = ec2().run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    launched = cloud.find_instances(instance_ids=[missing])[0].launched_at
    assert launched is not None
    young = reap(cloud=cloud, registry=None, now=launched + timedelta(minutes=59), max_age=timedelta(hours=1))
    assert young.instances == ()
    old = reap(cloud=cloud, registry=None, now=launched + timedelta(hours=2), max_age=timedelta(hours=1))
    assert sorted(i.id for i in old.instances) == sorted([missing, garbled])
    assert state_of(missing) in ("shutting-down", "terminated") and state_of(untagged) == "running"
