"""``runner.kind: slurm``: ``runner launch`` submits one batch job that runs a just-in-time runner.

The composition root for the Slurm kind (docs/runners.md, *kind: slurm*): the cluster's command-line tools and
the GitHub registry are built here and handed to ``precisionbot.runners.slurm_launch``; terminate and reap use
the same ``SlurmCluster`` through the lifecycle's ``Fleet`` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from precisionbot import envvars
from precisionbot.errors import ConfigError

if TYPE_CHECKING:
    from precisionbot.config import RunnerConfig
    from precisionbot.runners.lifecycle import Clock


def launch_slurm_job(
    rc: RunnerConfig,
    *,
    repo: str | None,
    token: str | None,
    api_url: str,
    run_id: str,
    pr: str | None,
    label: str,
    ttl_minutes: int | None,
    wait_timeout_s: float | None,
    poll_interval_s: float,
    clock: Clock,
    log: Callable[[str], None],
) -> dict[str, str]:
    """Submit the job, wait until its runner is online; the outputs ``runner launch`` prints for it."""
    import json

    from precisionbot.runners.github_runners import GitHubRunnerRegistry
    from precisionbot.runners.records import new_runner_name, validate_repo, validate_run_id
    from precisionbot.runners.slurm_cli import SlurmCluster
    from precisionbot.runners.slurm_jobs import SlurmJobSpec
    from precisionbot.runners.slurm_launch import SlurmRunner, launch_job

    if not rc.runner_dir:
        raise ConfigError(
            "runner.kind: slurm needs runner.runner_dir: the unpacked actions/runner folder on the cluster's shared "
            "filesystem (each job runs a private copy of it)"
        )
    if token is None:
        raise ConfigError(
            f"runner launch needs a token with repository administration: write in {envvars.GITHUB_TOKEN} "
            "(a GitHub App or fine-grained PAT; GITHUB_TOKEN cannot create just-in-time runners)"
        )
    if pr and not pr.isdigit():
        raise ConfigError(f"--pr {pr!r} must be a pull request number")
    run_id = validate_run_id(run_id)
    spec = SlurmJobSpec(
        name=new_runner_name(run_id, clock.now()),
        runner_dir=rc.runner_dir,
        ttl_minutes=ttl_minutes if ttl_minutes is not None else rc.ttl_minutes,
        nodes=rc.nodes,
        gpus_per_node=rc.gpus,
        partition=rc.partition,
        account=rc.account,
    )
    launched = launch_job(
        spec,
        SlurmRunner(repo=validate_repo(repo), label=label, runner_group_id=rc.runner_group_id),
        run_id=run_id,
        pr=pr,
        cluster=SlurmCluster(),
        registry=GitHubRunnerRegistry.from_token(token, api_url),
        clock=clock,
        wait_timeout_s=wait_timeout_s if wait_timeout_s is not None else rc.wait_timeout_s,
        poll_interval_s=poll_interval_s,
        log=log,
    )
    return {
        "label": launched.label,
        "labels": json.dumps([launched.label]),
        "instance-id": launched.instance_id,
        "job-id": launched.instance_id,
        "run-id": run_id,
    }
