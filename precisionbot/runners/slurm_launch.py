"""``runner launch`` for ``runner.kind: slurm``: register a just-in-time runner, submit the batch job that runs
it, wait until Slurm starts the job and the runner is online.

The same invariants as the EC2 launch (``lifecycle.py``): nothing is left behind when launch fails (the job is
cancelled, the registration deleted), and the job is findable by its run id without its job id. The hard TTL is
Slurm's own ``--time``, which slurmctld enforces whatever happens to the job, the runner or precisionbot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from precisionbot.errors import CloudError, PrecisionbotError
from precisionbot.runners.cloud import Fleet
from precisionbot.runners.github_runners import RunnerRegistry
from precisionbot.runners.lifecycle import Clock, Launched, Log, cleanup_after_failed_launch, delete_quietly
from precisionbot.runners.records import (
    TAG_EXPIRES_AT,
    TAG_PR,
    TAG_REPO,
    TAG_RUN_ID,
    TAG_RUNNER,
    Instance,
    iso_utc,
)
from precisionbot.runners.slurm_jobs import SlurmJob, SlurmJobSpec, validate_spec


class Cluster(Fleet, Protocol):
    """What launch needs from Slurm: its commands present, submit a job, read one job back."""

    def preflight(self) -> None: ...

    def submit(self, spec: SlurmJobSpec, tags: Mapping[str, str], jit_config: str) -> Instance: ...

    def job(self, job_id: str) -> SlurmJob | None: ...


@dataclass(frozen=True)
class SlurmRunner:
    """The GitHub side of one Slurm job: where the runner registers and the label the GPU job selects."""

    repo: str
    label: str
    runner_group_id: int = 1


def launch_job(
    spec: SlurmJobSpec,
    runner: SlurmRunner,
    *,
    run_id: str,
    pr: str | None,
    cluster: Cluster,
    registry: RunnerRegistry,
    clock: Clock,
    wait_timeout_s: float = 600.0,
    poll_interval_s: float = 5.0,
    log: Log = lambda _: None,
) -> Launched:
    """Submit one runner's job and wait for it; a job still pending at the deadline is cancelled, with Slurm's
    reason for the wait (``Resources``, ``Priority``, ``ReqNodeNotAvail``...) in the error."""
    validate_spec(spec)  # bad settings and a missing sbatch fail here, before anything needs cleaning up
    cluster.preflight()
    jit = registry.create_jit_config(runner.repo, spec.name, [runner.label], runner.runner_group_id)
    log(f"registered just-in-time runner {spec.name} (id {jit.runner.id}) in {runner.repo}")
    tags = {
        TAG_REPO: runner.repo,
        TAG_RUN_ID: run_id,
        TAG_PR: pr or "",
        TAG_RUNNER: spec.name,
        TAG_EXPIRES_AT: iso_utc(clock.now() + timedelta(minutes=spec.ttl_minutes)),
    }
    try:
        job = cluster.submit(spec, tags, jit.encoded)
    except BaseException:
        delete_quietly(registry, runner.repo, jit.runner, log)
        raise
    where = f"partition {spec.partition}" if spec.partition else "the default partition"
    log(
        f"submitted Slurm job {job.id} to {where}: {spec.nodes} node(s), {spec.gpus_per_node} GPU(s) each, "
        f"--time {spec.ttl_minutes} min (expires {tags[TAG_EXPIRES_AT]})"
    )
    try:
        _wait_online(job.id, spec.name, runner.repo, jit.runner.id, cluster, registry, clock, wait_timeout_s,
                     poll_interval_s, log)  # fmt: skip
    except BaseException as exc:
        cleanup = cleanup_after_failed_launch(job.id, runner.repo, jit.runner, cluster, registry, log)
        if isinstance(exc, PrecisionbotError):
            raise type(exc)(f"{exc}; {cleanup}") from exc
        raise
    log(f"runner {spec.name} is online in Slurm job {job.id}")
    return Launched(label=runner.label, instance_id=job.id, runner_id=jit.runner.id)


def _wait_online(
    job_id: str,
    name: str,
    repo: str,
    runner_id: int,
    cluster: Cluster,
    registry: RunnerRegistry,
    clock: Clock,
    timeout_s: float,
    poll_s: float,
    log: Log,
) -> None:
    deadline = clock.monotonic() + timeout_s
    said = ""
    while True:
        job = cluster.job(job_id)
        state = None if job is None else job.instance().state
        if job is None or state not in ("pending", "running"):
            state = "gone" if job is None else job.state
            raise CloudError(
                f"Slurm job {job_id} is {state} before runner {name} came online (read its log {name}.out in the "
                f"folder launch ran in; scontrol show job {job_id})"
            )
        status = f"{job.state} ({job.reason})" if job.reason else job.state
        if status != said:
            log(f"Slurm job {job_id}: {status}")
            said = status
        if state == "running":
            for item in registry.list_runners(repo):
                if (item.id == runner_id or item.name == name) and item.status == "online":
                    return
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            waiting = (
                f"still pending ({job.reason or 'no reason given'})"
                if state == "pending"
                else "running, but its runner never came online (check runner.runner_dir and the node's route "
                "to github.com)"
            )
            raise CloudError(
                f"Slurm job {job_id} was {waiting} after {timeout_s:g} s; raise runner.wait_timeout_s for a busy "
                "partition, or pick another with runner.partition"
            )
        clock.sleep(min(poll_s, remaining))
