"""Launch, terminate and reap ephemeral runners: orchestration over the ``Cloud`` and ``RunnerRegistry``.

No SDK and no environment here; time comes from an injected ``Clock`` so the waits are testable without
sleeping. The invariants (each one a lesson from ec2-github-runner and cml):

* launch never leaves something behind when it fails: a JIT registration whose instance did not start is
  deleted; an instance whose runner did not come online in time is terminated and its registration deleted;
* every instance is findable without its id (tags carry repo, run id, PR, label and expiry), because a
  cancelled launch job passes no id on to the terminate job;
* the hard TTL lives in the instance itself (user-data), and ``reap`` is only the backstop for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from precisionbot.errors import CloudError, ConfigError, PrecisionbotError
from precisionbot.runners.cloud import Cloud, Fleet
from precisionbot.runners.github_runners import RunnerRegistry
from precisionbot.runners.records import (
    NAME_PREFIX,
    TAG_EXPIRES_AT,
    TAG_LABEL,
    TAG_PR,
    TAG_REPO,
    TAG_RUN_ID,
    TAG_RUNNER,
    Instance,
    InstanceSpec,
    Runner,
    RunnerSpec,
    iso_utc,
    name_created_at,
)
from precisionbot.runners.userdata import render_user_data

Log = Callable[[str], None]


@dataclass(frozen=True)
class Clock:
    """Wall time (for tags and expiry), a monotonic clock (for deadlines) and sleep."""

    now: Callable[[], datetime]
    monotonic: Callable[[], float]
    sleep: Callable[[float], None]


SYSTEM_CLOCK = Clock(now=lambda: datetime.now(timezone.utc), monotonic=time.monotonic, sleep=time.sleep)


@dataclass(frozen=True)
class Launched:
    label: str
    instance_id: str
    runner_id: int


@dataclass(frozen=True)
class Terminated:
    instance_ids: tuple[str, ...]
    """Instances that were live and are now terminating."""
    runner_names: tuple[str, ...]
    """Runner registrations deleted."""
    warning: str | None = None
    """Why registrations may be left behind (no token, GitHub refused); the instances are gone regardless."""


@dataclass(frozen=True)
class Reaped:
    instances: tuple[Instance, ...]
    """Expired live instances (terminated unless ``dry_run``)."""
    runners: tuple[Runner, ...]
    """Stale offline runners precisionbot created (deleted unless ``dry_run``)."""
    dry_run: bool


def launch(
    instance: InstanceSpec,
    runner: RunnerSpec,
    *,
    run_id: str,
    pr: str | None,
    cloud: Cloud,
    registry: RunnerRegistry,
    clock: Clock = SYSTEM_CLOCK,
    wait_timeout_s: float = 600.0,
    poll_interval_s: float = 5.0,
    log: Log = lambda _: None,
) -> Launched:
    """Register a JIT runner, start one instance that runs it, wait until it is online.

    The label is never logged: a job elsewhere that learns it can queue for this runner (the job-started hook
    on the instance then fails that job, but the runner is spent)."""
    if runner.run_id is None:
        runner = replace(runner, run_id=run_id)
    render_user_data(runner, "")  # bad settings fail here, before anything exists that needs cleaning up
    jit = registry.create_jit_config(runner.repo, runner.name, runner.labels, runner.runner_group_id)
    log(f"registered just-in-time runner {runner.name} (id {jit.runner.id}) in {runner.repo}")
    try:
        user_data = render_user_data(runner, jit.encoded)
        expires_at = clock.now() + timedelta(minutes=runner.ttl_minutes)
        tags = {
            "Name": runner.name,
            TAG_REPO: runner.repo,
            TAG_RUN_ID: run_id,
            TAG_PR: pr or "",
            TAG_LABEL: runner.label,
            TAG_RUNNER: runner.name,
            TAG_EXPIRES_AT: iso_utc(expires_at),
        }
        started = cloud.run_instance(instance, user_data, tags)
    except BaseException:
        delete_quietly(registry, runner.repo, jit.runner, log)
        raise
    log(f"started {instance.instance_type} instance {started.id} (expires {tags[TAG_EXPIRES_AT]})")
    try:
        _wait_online(started.id, runner, jit.runner.id, cloud, registry, clock, wait_timeout_s, poll_interval_s)
    except BaseException as exc:
        cleanup = cleanup_after_failed_launch(started.id, runner.repo, jit.runner, cloud, registry, log)
        if isinstance(exc, PrecisionbotError):
            raise type(exc)(f"{exc}; {cleanup}") from exc
        raise
    log(f"runner {runner.name} is online on {started.id}")
    return Launched(label=runner.label, instance_id=started.id, runner_id=jit.runner.id)


def _wait_online(
    instance_id: str,
    runner: RunnerSpec,
    runner_id: int,
    cloud: Cloud,
    registry: RunnerRegistry,
    clock: Clock,
    timeout_s: float,
    poll_s: float,
) -> None:
    deadline = clock.monotonic() + timeout_s
    while True:
        found = cloud.find_instances(instance_ids=[instance_id])
        state = found[0].state if found else "gone"
        if state not in ("pending", "running"):
            raise CloudError(
                f"instance {instance_id} is {state} before runner {runner.name} came online (its user-data "
                f"failed or it was stopped: aws ec2 get-console-output --instance-id {instance_id})"
            )
        for item in registry.list_runners(runner.repo):
            if (item.id == runner_id or item.name == runner.name) and item.status == "online":
                return
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            raise CloudError(
                f"runner {runner.name} did not come online within {timeout_s:g} s (check the AMI, the "
                f"subnet's route to github.com, and aws ec2 get-console-output --instance-id {instance_id}; "
                "or raise --wait-timeout)"
            )
        clock.sleep(min(poll_s, remaining))


def cleanup_after_failed_launch(
    instance_id: str, repo: str, runner: Runner, cloud: Fleet, registry: RunnerRegistry, log: Log
) -> str:
    try:
        cloud.terminate([instance_id])
        done = f"terminated {instance_id}"
    except PrecisionbotError as exc:
        done = f"could NOT terminate {instance_id} ({exc}): run `precisionbot runner terminate`"
    log(done)
    delete_quietly(registry, repo, runner, log)
    return done


def delete_quietly(registry: RunnerRegistry, repo: str, runner: Runner, log: Log) -> None:
    """Best effort while already failing: the original error matters more; reap catches what is left."""
    try:
        registry.delete_runner(repo, runner.id)
        log(f"deleted runner registration {runner.name}")
    except PrecisionbotError as exc:
        log(f"could not delete runner registration {runner.name} ({exc}); `precisionbot runner reap` will")


def terminate(
    *,
    cloud: Fleet,
    registry: RunnerRegistry | None,
    instance_id: str | None = None,
    run_id: str | None = None,
    log: Log = lambda _: None,
) -> Terminated:
    """End the runner(s) of one instance id or one run id. Idempotent: what is already gone is skipped."""
    if (instance_id is None) == (run_id is None):
        raise ConfigError("runner terminate needs exactly one of --instance-id or --run-id")
    if instance_id is not None:
        found = cloud.find_instances(instance_ids=[instance_id])
        foreign = [i.id for i in found if TAG_RUNNER not in i.tags]
        if foreign:
            raise ConfigError(
                f"{foreign[0]} has no {TAG_RUNNER} tag: precisionbot did not start it, so it will "
                "not terminate it (check --instance-id)"
            )
    else:
        found = cloud.find_instances(tags={TAG_RUN_ID: str(run_id)})
    live = tuple(i.id for i in found if i.live)
    if live:
        cloud.terminate(live)
        log(f"terminating {', '.join(live)}")
    else:
        log(f"no live instance for {'instance ' + str(instance_id) if instance_id else 'run ' + str(run_id)}")
    deleted: list[str] = []
    targets = {(i.tags.get(TAG_REPO, ""), i.runner_name) for i in found if i.runner_name and i.tags.get(TAG_REPO)}
    warning = None
    if targets and registry is None:
        warning = "no GitHub token: runner registrations are left to `precisionbot runner reap`"
    elif registry is not None:
        # The instances are already gone: a GitHub refusal here is a warning, not a failed terminate job.
        # An ephemeral runner deregisters itself after its job, and reap catches the rest.
        try:
            for repo in sorted({repo for repo, _ in targets}):
                names = {name for r, name in targets if r == repo}
                for item in registry.list_runners(repo):
                    if item.name in names and registry.delete_runner(repo, item.id):
                        deleted.append(item.name)
                        log(f"deleted runner registration {item.name}")
        except PrecisionbotError as exc:
            warning = f"runner registrations not removed: {exc}"
    return Terminated(instance_ids=live, runner_names=tuple(deleted), warning=warning)


def reap(
    *,
    cloud: Fleet,
    registry: RunnerRegistry | None,
    repos: Sequence[str] = (),
    now: datetime,
    dry_run: bool = False,
    runner_grace: timedelta = timedelta(minutes=30),
    max_age: timedelta = timedelta(hours=6),
    log: Log = lambda _: None,
) -> Reaped:
    """Terminate tagged instances past ``expires-at``; delete offline runners precisionbot made in ``repos``.

    An instance whose ``expires-at`` tag is missing or unreadable (never written by us that way: someone
    edited it) is treated as expiring ``max_age`` after its launch, or now when EC2 gives no launch time.

    A runner is offline legitimately while its instance boots, so only runners older than ``runner_grace``
    (their age is encoded in the generated name) and not attached to a live, unexpired instance are deleted.
    """
    # Any of our tags finds an instance: one whose expiry tag is missing or garbled is dated by its launch time.
    tagged = cloud.find_instances(tag_keys=[TAG_EXPIRES_AT, TAG_LABEL, TAG_RUN_ID])
    expired = tuple(i for i in tagged if i.live and _expired(i, now, max_age))
    keep = {i.runner_name for i in tagged if i.live and i not in expired and i.runner_name}
    verb = "would terminate" if dry_run else "terminating"
    for item in expired:
        why = f"expired {iso_utc(item.expires_at)}" if item.expires_at else _no_expiry(item)
        log(f"{verb} {item.id} ({item.runner_name or 'no runner name'}, {why})")
    if expired and not dry_run:
        cloud.terminate([i.id for i in expired])

    stale: list[Runner] = []
    if registry is not None:
        for repo in repos:
            for runner in registry.list_runners(repo):
                created = name_created_at(runner.name)
                if (
                    runner.status == "offline"
                    and not runner.busy
                    and runner.name.startswith(NAME_PREFIX)
                    and created is not None
                    and now - created >= runner_grace
                    and runner.name not in keep
                ):
                    log(f"{'would delete' if dry_run else 'deleting'} offline runner {runner.name} in {repo}")
                    if dry_run or registry.delete_runner(repo, runner.id):
                        stale.append(runner)
    return Reaped(instances=expired, runners=tuple(stale), dry_run=dry_run)


def _expired(instance: Instance, now: datetime, max_age: timedelta) -> bool:
    if instance.expires_at is not None:
        return instance.expires_at <= now
    if instance.launched_at is None:
        return True
    return instance.launched_at + max_age <= now


def _no_expiry(instance: Instance) -> str:
    tag = instance.tags.get(TAG_EXPIRES_AT)
    problem = "no expiry tag" if tag is None else f"unreadable expiry tag {tag[:40]!r}"
    launched = f"launched {iso_utc(instance.launched_at)}" if instance.launched_at else "no launch time"
    return f"{problem}, {launched}"
