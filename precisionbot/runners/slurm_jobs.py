"""``runner.kind: slurm``'s data: the batch job that runs one just-in-time runner, and Slurm's answers read back.

Pure: no I/O. ``slurm_cli.py`` runs ``sbatch``, ``squeue`` and ``scancel`` with what is built here, and turns
their output into ``records.Instance`` values, so that terminate and reap (``lifecycle.py``) treat a Slurm job
exactly like an EC2 instance: found by its tags, ended when its expiry has passed.

Why the tags live in the job's comment: ``squeue`` shows the comment of one's own jobs, so a cancelled launch
that passed no job id on can still be found by its run id, as EC2 tags allow. The comment is visible to every
user of the cluster, so it never holds the runner's label (the label is how a job selects the runner).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from precisionbot.errors import ConfigError
from precisionbot.runners.records import Instance

JIT_ENV = "ACTIONS_RUNNER_INPUT_JITCONFIG"
"""The actions runner reads its just-in-time config from this variable: the config never enters an argv (which
``ps`` shows every user of the node) or the batch script (which ``scontrol write batch_script`` prints)."""
EXPORTED = ("PATH", "HOME", JIT_ENV)
"""The only variables ``sbatch --export`` passes on from the launching process: the launch job's GitHub token
and cloud credentials stay behind, since the batch job runs PR code."""
SQUEUE_FORMAT = "%i|%T|%r|%V|%j|%k"
"""Job id, state, pending reason, submit time, name, comment (last, as the only field a user writes)."""
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "SIGNALING", "RESIZING", "STOPPED", "STAGE_OUT"})
COMMENT_PREFIX = "precisionbot"

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_SLURM_WORD_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+-]+$")
_TAG_VALUE_RE = re.compile(r"^[A-Za-z0-9._:/+-]*$")
_JOB_ID_RE = re.compile(r"^\d+(_\d+)?(\+\d+)?$")


@dataclass(frozen=True)
class SlurmJobSpec:
    """One batch job: ``nodes`` nodes with ``gpus_per_node`` GPUs each for at most ``ttl_minutes``."""

    name: str
    """The job name: the runner's registration name, so ``squeue --name`` and GitHub show the same word."""
    runner_dir: str
    """The unpacked actions/runner folder on the shared filesystem; the job runs a private copy of it."""
    ttl_minutes: int
    """``--time``: Slurm itself ends the job at this limit, whatever the job or precisionbot do."""
    nodes: int = 1
    gpus_per_node: int = 1
    partition: str | None = None
    account: str | None = None


def validate_spec(spec: SlurmJobSpec) -> SlurmJobSpec:
    """The spec, or a ``ConfigError`` naming the first key Slurm or the shell would misread."""
    if not _NAME_RE.match(spec.name):
        raise ConfigError(f"Slurm job name {spec.name[:80]!r} must be letters, digits, '.', '_' or '-'")
    if not _PATH_RE.match(spec.runner_dir) or ".." in spec.runner_dir.split("/"):
        raise ConfigError(
            f"runner.runner_dir {spec.runner_dir[:80]!r} must be an absolute path of letters, digits, '.', '_', '+', "
            "'-', '/': the unpacked actions/runner folder on the cluster's shared filesystem"
        )
    for key, value in (("partition", spec.partition), ("account", spec.account)):
        if value is not None and not _SLURM_WORD_RE.match(value):
            raise ConfigError(f"runner.{key} {value[:80]!r} must be one Slurm name (letters, digits, '.', '_', '-')")
    if spec.nodes < 1 or spec.gpus_per_node < 0 or spec.ttl_minutes < 1:
        raise ConfigError(
            f"runner.nodes ({spec.nodes}) must be >= 1, runner.gpus ({spec.gpus_per_node}) >= 0 and "
            f"runner.ttl_minutes ({spec.ttl_minutes}) >= 1"
        )
    return spec


def sbatch_argv(spec: SlurmJobSpec, tags: Mapping[str, str]) -> list[str]:
    """``sbatch`` for the spec; the script comes on stdin (``batch_script``), the JIT config in the environment."""
    validate_spec(spec)
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.name}",
        f"--comment={job_comment(tags)}",
        f"--time={spec.ttl_minutes}",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",
        f"--export={','.join(EXPORTED)}",
        "--output=%x.out",
        # Never requeued: a requeued job would start a second runner with a JIT config that is already spent.
        "--no-requeue",
    ]
    if spec.gpus_per_node:
        argv.append(f"--gres=gpu:{spec.gpus_per_node}")
    if spec.partition:
        argv.append(f"--partition={spec.partition}")
    if spec.account:
        argv.append(f"--account={spec.account}")
    return argv


def batch_script(spec: SlurmJobSpec) -> str:
    """The batch script: copy the runner folder into a private scratch folder on the first node, run it there
    once (``run.sh`` reads the JIT config from its environment), remove the copy.

    The runner runs in the background so that the ``TERM`` Slurm sends at the time limit reaches it at once
    (bash runs a trap only after its foreground child returns); Slurm's ``KillWait`` later ends what is left."""
    validate_spec(spec)
    runner_dir = shlex.quote(spec.runner_dir)
    name = shlex.quote(spec.name)
    return f"""#!/bin/bash
# precisionbot: one GitHub Actions job on this allocation (runner.kind: slurm); Slurm ends it at --time.
set -euo pipefail
umask 077
work="$(mktemp -d "${{TMPDIR:-/tmp}}/precisionbot-runner-$SLURM_JOB_ID.XXXXXX")"
runner=""
cleanup() {{
  if [ -n "$runner" ]; then kill -TERM "$runner" 2>/dev/null || true; wait "$runner" 2>/dev/null || true; fi
  rm -rf "$work"
}}
trap cleanup EXIT
trap 'exit 143' TERM INT
if [ ! -x {runner_dir}/run.sh ]; then
  echo "precisionbot: {runner_dir}/run.sh is missing or not executable:" \
    "unpack actions/runner there (runner.runner_dir)" >&2
  exit 2
fi
cp -a {runner_dir}/. "$work/"
cd "$work"
echo "precisionbot: runner "{name}" on $(hostname) (Slurm job $SLURM_JOB_ID, ${{SLURM_JOB_NUM_NODES:-1}} node(s))"
./run.sh &
runner=$!
set +e
wait "$runner"
rc=$?
runner=""
exit "$rc"
"""


def job_comment(tags: Mapping[str, str]) -> str:
    """``precisionbot precisionbot:repo=acme/engine precisionbot:run-id=42 ...``: the tags in one line."""
    for key, value in tags.items():
        if not _TAG_VALUE_RE.match(key) or not _TAG_VALUE_RE.match(value):
            raise ConfigError(f"Slurm comment tag {key}={value[:60]!r} has characters a comment cannot carry")
    return " ".join([COMMENT_PREFIX, *(f"{key}={value}" for key, value in tags.items())])


def comment_tags(comment: str) -> dict[str, str]:
    """The tags of a comment ``job_comment`` wrote; ``{}`` for any other comment (not our job)."""
    words = comment.split(" ")
    if not words or words[0] != COMMENT_PREFIX:
        return {}
    tags = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep and key.startswith(f"{COMMENT_PREFIX}:"):
            tags[key] = value
    return tags


def instance_state(slurm_state: str) -> str:
    """Slurm's job state in the lifecycle's words: ``pending`` and ``running`` are live, anything else is the
    lower-cased Slurm state (``completed``, ``cancelled``, ``timeout``, ``failed``, ...), not live."""
    state = slurm_state.upper().split("+")[0].strip()
    if state in PENDING_STATES:
        return "pending"
    if state in RUNNING_STATES:
        return "running"
    return state.lower() or "unknown"


@dataclass(frozen=True)
class SlurmJob:
    """One row of ``squeue``."""

    id: str
    state: str
    """Slurm's own state word (``PENDING``, ``RUNNING``, ...)."""
    reason: str
    """Why a pending job waits (``Resources``, ``Priority``, ``PartitionDown``...), ``None`` when it does not."""
    submitted: datetime | None
    name: str
    comment: str

    def instance(self) -> Instance:
        return Instance(
            id=self.id, state=instance_state(self.state), tags=comment_tags(self.comment), launched_at=self.submitted
        )


def parse_squeue(text: str) -> list[SlurmJob]:
    """Rows of ``squeue --noheader --format=SQUEUE_FORMAT``; a row that does not parse is an error that shows it
    (a wrapper script or a site's ``squeue`` alias printing something else must not read as "no jobs")."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", 5)
        if len(fields) != 6 or not _JOB_ID_RE.match(fields[0].strip()):
            raise ConfigError(
                f"squeue printed {line[:120]!r}, not a row of --format={SQUEUE_FORMAT}: check that squeue on PATH "
                "is Slurm's own"
            )
        job_id, state, reason, submitted, name, comment = (f.strip() for f in fields)
        jobs.append(
            SlurmJob(
                id=job_id,
                state=state,
                reason="" if reason in ("None", "(null)") else reason,
                submitted=_slurm_time(submitted),
                name=name,
                comment="" if comment == "(null)" else comment,
            )
        )
    return jobs


def _slurm_time(text: str) -> datetime | None:
    """Slurm prints the cluster's local time without a zone (``2026-12-02T17:01:55``)."""
    try:
        return datetime.fromisoformat(text).astimezone()
    except ValueError:
        return None


def parse_job_id(text: str) -> str:
    """``sbatch --parsable`` prints ``ID`` or ``ID;CLUSTER``."""
    job_id = text.strip().split(";")[0]
    if not _JOB_ID_RE.match(job_id):
        raise ConfigError(f"sbatch printed {text.strip()[:120]!r} instead of a job id")
    return job_id


def validate_job_id(job_id: str) -> str:
    if not _JOB_ID_RE.match(job_id):
        raise ConfigError(
            f"--instance-id {job_id[:40]!r} is not a Slurm job id: use the job-id output of runner launch"
        )
    return job_id
