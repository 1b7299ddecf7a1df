"""``runner.kind: host``: ``runner launch`` queues the job, ``precisionbot runner agent`` runs it on a GPU host.

The composition root for the host kind (docs/runners.md, *kind: host*): the queue's store, the container
runtime and the GitHub registry are built here and handed to ``precisionbot.runners.host_agent``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precisionbot import envvars
from precisionbot.errors import ConfigError

if TYPE_CHECKING:
    from precisionbot.config import RunnerConfig
    from precisionbot.runners.host_containers import ContainerRuntime


def queue_host_job(
    rc: RunnerConfig,
    repo: str | None,
    run_id: str,
    pr: str | None,
    label: str,
    ttl_minutes: int | None,
    log: Callable[[str], None],
) -> dict[str, str]:
    """Write one job request to ``runner.queue``; the outputs ``runner launch`` prints for it."""
    from precisionbot.baselines.store import open_store
    from precisionbot.runners.host_queue import HostJob, HostQueue, new_job_id
    from precisionbot.runners.records import iso_utc, validate_repo, validate_run_id

    if not rc.queue:
        raise ConfigError(
            "runner.kind: host needs runner.queue: the store URI the GPU hosts' agents read (s3://bucket/host-queue)"
        )
    if pr and not pr.isdigit():
        raise ConfigError(f"--pr {pr!r} must be a pull request number")
    job = HostJob(
        id=new_job_id(validate_run_id(run_id)),
        repo=validate_repo(repo),
        label=label,
        run_id=run_id,
        gpus=rc.gpus,
        ttl_minutes=ttl_minutes if ttl_minutes is not None else rc.ttl_minutes,
        pr=pr or "",
        created_at=iso_utc(datetime.now(timezone.utc)),
    )
    HostQueue(open_store(rc.queue)).submit(job)
    log(f"queued host job {job.id} ({job.gpus} GPU(s), TTL {job.ttl_minutes} min) in {rc.queue}")
    return {"label": label, "labels": json.dumps([label]), "instance-id": "", "job-id": job.id, "run-id": run_id}


def register_agent(sub: Any) -> None:
    a = sub.add_parser("agent", help="run on a GPU host: take queued host jobs, one fresh container each")
    a.add_argument("--queue", required=True, help="the queue's store URI (runner.queue), e.g. s3://bucket/host-queue")
    a.add_argument("--image", required=True, help="runner image (docker/podman) or image folder (bwrap)")
    a.add_argument("--command", default="./run.sh", help="what the container runs (default: ./run.sh)")
    a.add_argument("--gpus", default="0", help="this host's GPU indices the agent may lease, e.g. 0,1,2,3")
    a.add_argument("--name", help="agent id in claims and container labels (default: the host name)")
    a.add_argument("--runtime", choices=("docker", "podman", "bwrap"), default="docker")
    a.add_argument("--state-dir", default="/var/lib/precisionbot-host", help="GPU leases and bwrap sandboxes")
    a.add_argument("--grace-seconds", type=float, default=30.0, help="SIGTERM to SIGKILL")
    a.add_argument("--poll-seconds", type=float, default=5.0)
    a.add_argument("--network", default="bridge", help="docker/podman network for job containers")
    a.add_argument("--bind", action="append", default=[], help="HOST:INSIDE read-only mount (repeatable)")
    a.add_argument("--runner-group-id", type=int, default=1)
    a.set_defaults(handler=_agent)


def _runtime(kind: str, state_dir: Path) -> ContainerRuntime:
    if kind == "bwrap":
        from precisionbot.runners.host_sandbox import BwrapRuntime

        return BwrapRuntime(state_dir / "sandboxes")
    from precisionbot.runners.host_containers import CliRuntime

    return CliRuntime(kind)


def _gpus(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(g) for g in text.split(",") if g.strip())
    except ValueError:
        gpus = ()
    if not gpus or any(g < 0 for g in gpus):
        raise ConfigError(f"--gpus {text!r} must be GPU indices separated by commas, e.g. 0,1")
    return gpus


def _binds(items: list[str]) -> tuple[tuple[str, str], ...]:
    binds = []
    for item in items:
        host, _, inside = item.partition(":")
        if not host.startswith("/") or not inside.startswith("/"):
            raise ConfigError(f"--bind {item!r} must be HOST_PATH:CONTAINER_PATH, both absolute")
        binds.append((host, inside))
    return tuple(binds)


def _agent(args: argparse.Namespace) -> int:
    import shlex

    from precisionbot.baselines.store import open_store
    from precisionbot.commands.github import ActionEnv
    from precisionbot.runners.github_runners import GitHubRunnerRegistry
    from precisionbot.runners.host_agent import Agent, AgentSettings
    from precisionbot.runners.host_gpus import GpuLeases
    from precisionbot.runners.host_queue import HostQueue

    env = ActionEnv.from_mapping(os.environ)
    if env.token is None:
        raise ConfigError(
            f"runner agent needs {envvars.GITHUB_TOKEN}: a token with repository administration: write "
            "for the repositories whose jobs it runs (a GitHub App installation token)"
        )
    if "://" not in args.queue and not Path(args.queue).is_dir():
        raise ConfigError(
            f"--queue {args.queue!r} is neither a store URI (s3://bucket/host-queue, runner.queue in the config) "
            "nor an existing folder: the agent would wait on a queue no launch writes to"
        )
    state_dir = Path(args.state_dir)
    settings = AgentSettings(
        name=args.name or socket.gethostname(),
        image=args.image,
        command=tuple(shlex.split(args.command)),
        runner_group_id=args.runner_group_id,
        stop_grace_s=args.grace_seconds,
        binds=_binds(args.bind),
        network=args.network,
    )
    agent = Agent(
        settings,
        HostQueue(open_store(args.queue)),
        _runtime(args.runtime, state_dir),
        GitHubRunnerRegistry.from_token(env.token, env.api_url),
        GpuLeases(state_dir / "gpus", _gpus(args.gpus)),
        log=lambda message: print(f"precisionbot: {message}", flush=True),
    )
    stopping = []
    # systemd stops the service with SIGTERM: leave the running container alone (the restart adopts it).
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(
        f"precisionbot: agent {settings.name} waiting for jobs in {args.queue} (GPUs {args.gpus}, {args.runtime})",
        flush=True,
    )
    agent.run(poll_s=args.poll_seconds, should_stop=lambda: bool(stopping))
    return 0
