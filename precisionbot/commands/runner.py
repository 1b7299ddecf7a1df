"""``precisionbot runner launch | terminate | reap | agent``: ephemeral GPU runners (docs/runners.md).

The composition root for runners: reads flags, config and environment, builds the real adapters (boto3 EC2,
Slurm's commands, PyGithub), and hands them to ``precisionbot.runners.lifecycle``; the host and Slurm kinds'
own launch paths are in ``runner_host`` and ``runner_slurm``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from precisionbot import envvars
from precisionbot.commands.github import ActionEnv
from precisionbot.errors import ConfigError

if TYPE_CHECKING:
    from precisionbot.config import RunnerConfig
    from precisionbot.runners.cloud import Fleet
    from precisionbot.runners.github_runners import GitHubRunnerRegistry
    from precisionbot.runners.lifecycle import Clock, Launched
    from precisionbot.runners.records import InstanceSpec, RunnerSpec


_RANDOM_LABEL = re.compile(r"[0-9a-f]{32}")
"""A label with 128 bits of randomness in it (``new_label``, or the matrix label from ``github plan``)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("runner", help="ephemeral GPU runners: launch, terminate, reap; the host agent")
    sub = parser.add_subparsers(dest="runner_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("launch", help="start one EC2 runner with a JIT config and wait until it is online")
    p.add_argument("--repo", help="owner/name (default: $GITHUB_REPOSITORY)")
    p.add_argument("--instance-type", help="EC2 instance type (default: runner.instance_type in the config)")
    p.add_argument("--ami", help="AMI id with the GPU driver (default: runner.ami in the config)")
    p.add_argument("--region", help="AWS region (default: runner.region, then boto3's chain)")
    p.add_argument("--subnet", help="subnet id")
    p.add_argument("--security-group", action="append", default=None, help="security group id (repeatable)")
    p.add_argument("--instance-profile", help="instance profile name or ARN (read-only baseline access)")
    p.add_argument("--ttl-minutes", type=int, help="hard TTL: the instance powers off after this long")
    p.add_argument("--label", help="the label the GPU job selects (default: a fresh random precisionbot-<128 bits>)")
    p.add_argument("--wait-timeout", type=float, help="seconds to wait for the runner to come online")
    p.add_argument("--run-id", help="tag that `runner terminate --run-id` finds (default: $GITHUB_RUN_ID)")
    p.add_argument("--pr", help="PR number for the precisionbot:pr tag")
    p.add_argument("--spot", action=argparse.BooleanOptionalAction, default=None, help="one-time spot instance")
    p.add_argument("--root-volume-gb", type=int, help="root EBS volume size in GiB")
    p.add_argument(
        "--runner-group-id",
        type=int,
        help="runner group id (1 = Default; an organisation's group restricted to this workflow is safer)",
    )
    p.add_argument(
        "--workflow-ref",
        help="the only workflow whose jobs the runner accepts (default: $GITHUB_WORKFLOW_REF)",
    )
    p.add_argument("--job", default="gpu", help="the only job id the runner accepts (default: gpu)")
    p.add_argument("--runner-version", help="actions/runner version to download if the AMI has none")
    p.add_argument("--runner-sha256", help="sha256 of that runner tarball, verified on the instance")
    p.add_argument("--config", help="precisionbot config (default: .github/precision.yml if present)")
    p.add_argument("--model", help="use this model's runner section from the config")
    p.add_argument("--poll-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(handler=_launch)

    t = sub.add_parser("terminate", help="end one runner by instance id or by its run-id tag (idempotent)")
    which = t.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--instance-id", help="the instance-id output of `runner launch` (an EC2 instance id or a Slurm job id)"
    )
    which.add_argument("--run-id", help="every runner tagged with this run id (works after a cancelled launch)")
    t.add_argument("--region", help="AWS region (default: every runner.region in the config, else boto3's chain)")
    t.add_argument(
        "--config", help="precisionbot config whose runner regions to search (default: .github/precision.yml)"
    )
    t.set_defaults(handler=_terminate)

    r = sub.add_parser("reap", help="end every tagged runner past its expiry; delete stale offline runners")
    r.add_argument("--region", help="AWS region (default: every runner.region in the config, else boto3's chain)")
    r.add_argument(
        "--config", help="precisionbot config whose runner regions to search (default: .github/precision.yml)"
    )
    r.add_argument(
        "--max-age-minutes",
        type=float,
        default=360.0,
        help="age after launch at which an instance whose expiry tag is missing or unreadable is ended",
    )
    r.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    r.add_argument("--repo", action="append", help="repo whose stale runners to delete (default: $GITHUB_REPOSITORY)")
    r.add_argument("--grace-minutes", type=float, default=30.0, help="leave offline runners younger than this")
    r.set_defaults(handler=_reap)

    from precisionbot.commands.runner_host import register_agent

    register_agent(sub)


def _log(message: str) -> None:
    print(f"precisionbot: {message}", file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    """A warning line; in Actions also an annotation, so a green terminate job still shows it."""
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from precisionbot.gh.workflow import command

        print(command("warning", f"precisionbot: {message}"), flush=True)
    _log(f"warning: {message}")


def _github_env() -> ActionEnv:
    """The token (``PRECISIONBOT_GITHUB_TOKEN`` wins over ``GITHUB_TOKEN``), API URL, repository and run id."""
    return ActionEnv.from_mapping(os.environ)


def _registry(env: ActionEnv) -> GitHubRunnerRegistry | None:
    from precisionbot.runners.github_runners import GitHubRunnerRegistry

    return GitHubRunnerRegistry.from_token(env.token, env.api_url) if env.token else None


def _load_runner_config(config_path: str | None, model_name: str | None) -> RunnerConfig:
    from precisionbot.config import load_config_or_default

    config = load_config_or_default(config_path)
    # The plan's matrix names "builtin" when no models are configured: that one uses the top-level runner.
    model = config.model(model_name) if model_name and config.models else None
    return config.runner_for(model)


def _config_runners(config_path: str | None) -> list[RunnerConfig]:
    """Every runner of the config: the top level's and each model's own (launch may use either)."""
    from precisionbot.config import load_config_or_default

    config = load_config_or_default(config_path)
    return [config.runner, *(m.runner for m in config.models if m.runner is not None)]


def _fleets(region: str | None, runners: list[RunnerConfig]) -> list[tuple[str, str, Callable[[], Fleet]]]:
    """What terminate and reap search, as (where, kind, how to reach it): the EC2 regions (``_regions``) when a
    runner of the config is ``kind: ec2`` (the default) or ``--region`` is given, and the Slurm cluster when one is
    ``kind: slurm`` (the cluster ``squeue`` reaches from here). Reached only when searched, so a Slurm job id
    needs no AWS region. (``kind: host`` jobs are the agents' to end: ``_cancel_host_jobs``.)"""
    kinds = {r.kind for r in runners}
    fleets: list[tuple[str, str, Callable[[], Fleet]]] = []
    if "ec2" in kinds or region:
        fleets += [(f"region {r or '(boto3 default)'}", "ec2", _ec2(r)) for r in _regions(region, runners)]
    if "slurm" in kinds:
        from precisionbot.runners.slurm_cli import SlurmCluster

        fleets.append(("the Slurm cluster (squeue --me)", "slurm", SlurmCluster))
    return fleets


def _ec2(region: str | None) -> Callable[[], Fleet]:
    from precisionbot.runners.cloud import Ec2Cloud

    return lambda: Ec2Cloud.from_env(region)


def _regions(region: str | None, runners: list[RunnerConfig]) -> list[str | None]:
    """Where terminate/reap look: ``--region``, else every region the config's runners (top level and per
    model) launch in, else boto3's own chain. Launch may use a model's region, so one region is not enough."""
    if region:
        return [region]
    regions = sorted({r.region for r in runners if r.kind == "ec2" and r.region})
    return list(regions) or [None]


@dataclass(frozen=True)
class _LaunchRequest:
    """What ``runner launch`` was asked for: each flag, else its runner-config key, else the Actions
    environment; plain values, not yet checked (``_plan`` checks them)."""

    repo: str | None
    ami: str | None
    token: str | None
    api_url: str
    run_id: str
    pr: str | None
    label: str | None
    workflow_ref: str | None
    job: str
    runner_group_id: int
    ttl_minutes: int
    runner_version: str | None
    runner_user: str | None
    runner_sha256: str | None
    instance_type: str
    subnet: str | None
    security_groups: tuple[str, ...]
    instance_profile: str | None
    root_volume_gb: int
    spot: bool
    wait_timeout_s: float
    poll_interval_s: float
    region: str | None


@dataclass(frozen=True)
class _LaunchPlan:
    """A checked request: the two specs and what ``lifecycle.launch`` needs besides them."""

    instance: InstanceSpec
    runner: RunnerSpec
    run_id: str
    pr: str | None
    token: str
    api_url: str
    region: str | None
    wait_timeout_s: float
    poll_interval_s: float


def _launch(args: argparse.Namespace) -> int:
    from precisionbot.runners.lifecycle import SYSTEM_CLOCK

    clock = SYSTEM_CLOCK
    rc = _load_runner_config(args.config, args.model)
    if rc.kind == "pool":
        return _use_pool(rc.labels)
    if rc.kind == "host":
        from precisionbot.commands.runner_host import queue_host_job

        gh_env = _github_env()
        run_id = args.run_id or gh_env.run_id or f"local{int(clock.now().timestamp())}"
        label = _runner_label(args.label)
        _emit(queue_host_job(rc, args.repo or gh_env.repository, run_id, args.pr, label, args.ttl_minutes, _log))
        return 0
    if rc.kind == "slurm":
        from precisionbot.commands.runner_slurm import launch_slurm_job

        gh_env = _github_env()
        outputs = launch_slurm_job(
            rc,
            repo=args.repo or gh_env.repository,
            token=gh_env.token,
            api_url=gh_env.api_url,
            run_id=args.run_id or gh_env.run_id or f"local{int(clock.now().timestamp())}",
            pr=args.pr,
            label=_runner_label(args.label),
            ttl_minutes=args.ttl_minutes,
            wait_timeout_s=args.wait_timeout,
            poll_interval_s=args.poll_interval,
            clock=clock,
            log=_log,
        )
        _emit(outputs)
        return 0
    gh = _github_env()
    request = _LaunchRequest(
        repo=args.repo or gh.repository,
        ami=args.ami or rc.ami,
        token=gh.token,
        api_url=gh.api_url,
        run_id=args.run_id or gh.run_id or f"local{int(clock.now().timestamp())}",
        pr=args.pr,
        label=args.label,
        workflow_ref=args.workflow_ref or os.environ.get("GITHUB_WORKFLOW_REF"),
        job=args.job,
        runner_group_id=args.runner_group_id or rc.runner_group_id,
        ttl_minutes=args.ttl_minutes if args.ttl_minutes is not None else rc.ttl_minutes,
        runner_version=args.runner_version or rc.runner_version,
        runner_user=rc.runner_user,
        runner_sha256=args.runner_sha256 or rc.runner_sha256,
        instance_type=args.instance_type or rc.instance_type,
        subnet=args.subnet or rc.subnet,
        security_groups=tuple(args.security_group or rc.security_groups),
        instance_profile=args.instance_profile or rc.instance_profile,
        root_volume_gb=args.root_volume_gb or rc.root_volume_gb,
        spot=rc.spot if args.spot is None else args.spot,
        wait_timeout_s=args.wait_timeout if args.wait_timeout is not None else rc.wait_timeout_s,
        poll_interval_s=args.poll_interval,
        region=args.region or rc.region,
    )
    plan = _plan(request, clock)
    launched = _start(plan, clock)
    _emit(
        {
            "label": launched.label,
            "labels": json.dumps(list(plan.runner.labels)),
            "instance-id": launched.instance_id,
            "run-id": plan.run_id,
            "region": plan.region or "",
        }
    )
    return 0


def _use_pool(labels: tuple[str, ...]) -> int:
    """``runner.kind: pool``: a preexisting self-hosted pool, nothing to start; the GPU job selects its labels."""
    _emit({"label": ",".join(labels), "labels": json.dumps(list(labels)), "instance-id": ""})
    _log(f"runner.kind is pool: the GPU job runs on {list(labels)}; nothing launched")
    _warn(
        "runner.kind is pool: its runners must be ephemeral and in a runner group restricted to this workflow "
        "on the default branch; never run fork code or a public repository's PRs on them (docs/runners.md)"
    )
    return 0


def _plan(request: _LaunchRequest, clock: Clock) -> _LaunchPlan:
    """What to launch: the request checked (a ConfigError for the first flag that fails) and turned into the
    instance and runner specs. The label is chosen, warned about and masked between the access checks and
    the spec checks, so what is printed before an error stays the same."""
    from precisionbot.runners.records import (
        InstanceSpec,
        RunnerSpec,
        new_runner_name,
        validate_job,
        validate_repo,
        validate_run_id,
        validate_workflow_ref,
    )

    repo = validate_repo(request.repo)
    if not request.ami:
        raise ConfigError(
            "--ami is required: runner launch needs --ami (or runner.ami in the config), an AMI with the GPU driver"
        )
    _refuse_misspelled_aws_names(request)
    if request.token is None:
        raise ConfigError(
            f"runner launch needs a token with repository administration: write in {envvars.GITHUB_TOKEN} "
            "(a GitHub App or fine-grained PAT; GITHUB_TOKEN cannot create just-in-time runners)"
        )
    run_id = validate_run_id(request.run_id)
    if request.pr and not request.pr.isdigit():
        raise ConfigError(f"--pr {request.pr!r} must be a pull request number")
    name = new_runner_name(run_id, clock.now())
    label = _runner_label(request.label)
    runner_kwargs: dict[str, Any] = {}
    if request.runner_version:
        runner_kwargs["runner_version"] = request.runner_version
    if request.runner_user:
        runner_kwargs["runner_user"] = request.runner_user
    runner = RunnerSpec(
        repo=repo,
        name=name,
        label=label,
        workflow_ref=validate_workflow_ref(request.workflow_ref),
        run_id=run_id,
        job=validate_job(request.job),
        runner_group_id=request.runner_group_id,
        ttl_minutes=request.ttl_minutes,
        runner_sha256=request.runner_sha256,
        **runner_kwargs,
    )
    instance = InstanceSpec(
        instance_type=request.instance_type,
        ami=request.ami,
        subnet=request.subnet,
        security_groups=request.security_groups,
        instance_profile=request.instance_profile,
        root_volume_gb=request.root_volume_gb,
        spot=request.spot,
    )
    if request.wait_timeout_s <= 0 or request.ttl_minutes < 1:
        raise ConfigError("--wait-timeout must be > 0 seconds and --ttl-minutes at least 1")
    return _LaunchPlan(
        instance=instance,
        runner=runner,
        run_id=run_id,
        pr=request.pr,
        token=request.token,
        api_url=request.api_url,
        region=request.region,
        wait_timeout_s=request.wait_timeout_s,
        poll_interval_s=request.poll_interval_s,
    )


def _refuse_misspelled_aws_names(request: _LaunchRequest) -> None:
    """``--ami``, ``--region`` and ``--instance-type`` checked by the rules ``config validate`` applies to the
    config's ``runner:`` (a flag overrides the config, so it gets the same check before any AWS call)."""
    from precisionbot.config.aws_names import ami_problem, instance_type_problem, region_problem

    for flag, value, rule in (
        ("--ami", request.ami, ami_problem),
        ("--region", request.region, region_problem),
        ("--instance-type", request.instance_type, instance_type_problem),
    ):
        problem = rule(value) if value else None
        if problem is not None:
            raise ConfigError(f"{flag} {problem[0]}; {problem[1]}")


def _runner_label(label: str | None) -> str:
    """``--label`` checked, else a fresh random one; a guessable one is warned about, and in Actions the
    label is masked before anything could print it: the label is how a job selects this runner."""
    from precisionbot.runners.records import new_label, validate_label

    chosen = validate_label(label) if label else new_label()
    if not _RANDOM_LABEL.search(chosen):
        _warn(
            f"runner label {chosen!r} has no 32 random hex digits: a job that guesses it can take this GPU "
            "runner; let launch generate one, or use the matrix label `github plan` writes"
        )
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::add-mask::{chosen}", flush=True)
    return chosen


def _start(plan: _LaunchPlan, clock: Clock) -> Launched:
    """The launch itself, with a cancelled job's SIGTERM unwinding through its cleanup."""
    from precisionbot.runners.cloud import Ec2Cloud
    from precisionbot.runners.github_runners import GitHubRunnerRegistry
    from precisionbot.runners.lifecycle import launch

    with _sigterm_as_interrupt():
        return launch(
            plan.instance,
            plan.runner,
            run_id=plan.run_id,
            pr=plan.pr,
            cloud=Ec2Cloud.from_env(plan.region),
            registry=GitHubRunnerRegistry.from_token(plan.token, plan.api_url),
            clock=clock,
            wait_timeout_s=plan.wait_timeout_s,
            poll_interval_s=plan.poll_interval_s,
            log=_log,
        )


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """A cancelled Actions job gets SIGINT, then SIGTERM: both must unwind through launch's cleanup (terminate
    the instance, delete the registration) instead of killing the process with an instance running."""
    import signal
    import threading

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _emit(values: dict[str, str]) -> None:
    """Outputs to ``$GITHUB_OUTPUT`` (heredoc-safe, shared with the github commands) or, outside Actions,
    as ``name=value`` lines on stdout for scripts."""
    from precisionbot.gh.workflow import write_outputs

    github_output = _github_env().output
    lines = write_outputs(values, github_output)
    if github_output:
        for line in lines.splitlines():
            if not line.startswith(("label=", "labels=")):  # the label stays out of the public log
                _log(f"output {line}")
    else:
        sys.stdout.write(lines)
        sys.stdout.flush()


def _terminate(args: argparse.Namespace) -> int:
    from precisionbot.runners.lifecycle import terminate
    from precisionbot.runners.records import validate_instance_id, validate_run_id
    from precisionbot.runners.slurm_jobs import validate_job_id

    run_id = validate_run_id(args.run_id) if args.run_id else None
    registry = _registry(_github_env())
    instances = runners = 0
    runners_config = _config_runners(args.config)
    fleets = _fleets(args.region, runners_config)
    slurm = False
    instance_id: str | None = None
    if args.instance_id:
        # An EC2 instance id (i-...) or a Slurm job id (digits): each fleet is asked only for its own kind.
        slurm = args.instance_id.isdigit()
        instance_id = validate_job_id(args.instance_id) if slurm else validate_instance_id(args.instance_id)
        fleets = [fleet for fleet in fleets if (fleet[1] == "slurm") == slurm]
        if not fleets:
            raise ConfigError(
                f"--instance-id {instance_id} is a Slurm job id, but no runner in the config is kind: slurm "
                "(pass --config, or the instance id i-... of an EC2 runner)"
            )
    if run_id is not None:
        instances += _cancel_host_jobs(run_id, runners_config)
    for where, _kind, reach in fleets:
        _log(f"looking in {where}")
        done = terminate(
            cloud=reach(),
            registry=registry,
            instance_id=instance_id,
            run_id=run_id,
            log=_log,
        )
        if done.warning:
            _warn(done.warning)
        instances += len(done.instance_ids)
        runners += len(done.runner_names)
    _log(f"terminated {instances} instance(s) or job(s), deleted {runners} runner registration(s)")
    return 0


def _cancel_host_jobs(run_id: str, runners: list[RunnerConfig]) -> int:
    """``kind: host``: the run's open jobs in every queue the config names, cancelled (the agents end them)."""
    from precisionbot.baselines.store import open_store
    from precisionbot.runners.host_queue import HostQueue

    cancelled = 0
    for queue in sorted({r.queue for r in runners if r.kind == "host" and r.queue}):
        asked = HostQueue(open_store(queue)).cancel(run_id)
        _log(
            f"cancelled {len(asked)} host job(s) of run {run_id} in {queue}"
            + (f": {', '.join(asked)}" if asked else "")
        )
        cancelled += len(asked)
    return cancelled


def _reap(args: argparse.Namespace) -> int:
    from precisionbot.runners.lifecycle import SYSTEM_CLOCK, reap
    from precisionbot.runners.records import validate_repo

    if args.grace_minutes < 0:
        raise ConfigError(f"--grace-minutes must be >= 0, got {args.grace_minutes:g}")
    gh = _github_env()
    repos = [validate_repo(r) for r in (args.repo or ([gh.repository] if gh.repository else []))]
    if gh.token is None or not repos:
        _log("no GitHub token or repo: reaping instances only, not runner registrations")
    if args.max_age_minutes <= 0:
        raise ConfigError(f"--max-age-minutes must be > 0, got {args.max_age_minutes:g}")
    registry = _registry(gh)
    instances = runners = 0
    for index, (where, _kind, reach) in enumerate(_fleets(args.region, _config_runners(args.config))):
        _log(f"looking in {where}")
        result = reap(
            cloud=reach(),
            # Runner registrations are per repository, not per region or cluster: clean them up once.
            registry=registry if index == 0 else None,
            repos=repos,
            now=SYSTEM_CLOCK.now(),
            dry_run=args.dry_run,
            runner_grace=timedelta(minutes=args.grace_minutes),
            max_age=timedelta(minutes=args.max_age_minutes),
            log=_log,
        )
        instances += len(result.instances)
        runners += len(result.runners)
    verb = "would remove" if args.dry_run else "removed"
    _log(f"{verb} {instances} expired instance(s) or job(s) and {runners} stale runner(s)")
    return 0
