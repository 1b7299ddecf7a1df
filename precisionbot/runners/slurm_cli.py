"""The Slurm side of ``runner.kind: slurm``: ``sbatch``, ``squeue`` and ``scancel`` behind the lifecycle's
``Fleet`` protocol, so that terminate and reap find and end a Slurm job as they do an EC2 instance.

The commands are Slurm's own, found on ``PATH`` (a login node, or any host with the cluster's ``slurm.conf``
and munge key; ``SLURM_CONF`` is honoured as Slurm honours it). Every failure becomes one ``CloudError`` that
quotes what the command said.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from precisionbot.errors import CloudError
from precisionbot.runners.records import Instance
from precisionbot.runners.slurm_jobs import (
    JIT_ENV,
    SQUEUE_FORMAT,
    SlurmJob,
    SlurmJobSpec,
    batch_script,
    parse_job_id,
    parse_squeue,
    sbatch_argv,
)

_TIMEOUT_S = 60.0
"""slurmctld answers in well under a second; a minute means it is down or unreachable."""


class SlurmCluster:
    """One cluster, reached through its command-line tools."""

    def __init__(self, env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        self._cwd = cwd
        """Where ``sbatch`` runs, so where the job's ``%x.out`` log lands (its submit folder)."""

    def preflight(self) -> None:
        """Slurm's commands are here: checked before launch registers anything that would need cleaning up."""
        for tool in ("sbatch", "squeue", "scancel"):
            self._which(tool, "submit the runner's job")

    def submit(self, spec: SlurmJobSpec, tags: Mapping[str, str], jit_config: str) -> Instance:
        """Submit the job; the JIT config reaches it through ``--export``, never the argv or the script."""
        env: dict[str, str] = {k: self._env[k] for k in ("PATH", "HOME", "SLURM_CONF", "TMPDIR") if k in self._env}
        env[JIT_ENV] = jit_config
        out = self._run(sbatch_argv(spec, tags), "submit the runner's job", stdin=batch_script(spec), env=env)
        return Instance(id=parse_job_id(out), state="pending", tags=dict(tags))

    def job(self, job_id: str) -> SlurmJob | None:
        """The job, also once it has ended (for as long as slurmctld keeps it, ``MinJobAge``); None when gone."""
        found = self._squeue(["--jobs", job_id, "--states=all"], allow_invalid_id=True)
        return next((j for j in found if j.id == job_id), None)

    def find_instances(
        self,
        *,
        instance_ids: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
        tag_keys: Sequence[str] = (),
    ) -> list[Instance]:
        """This account's jobs whose comment carries all ``tags`` and any of ``tag_keys`` (our comment, not a
        name: anyone may name a job ``precisionbot-...``, and only our own jobs are listed)."""
        args = ["--me"]
        if instance_ids:
            args += ["--jobs", ",".join(instance_ids)]
        found = [j.instance() for j in self._squeue(args, allow_invalid_id=bool(instance_ids))]
        if tags:
            found = [i for i in found if all(i.tags.get(k) == v for k, v in tags.items())]
        if tag_keys:
            found = [i for i in found if any(k in i.tags for k in tag_keys)]
        return found

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """``scancel``: Slurm sends TERM to the job, then KILL after its ``KillWait``; ended jobs are no error."""
        if instance_ids:
            self._run(["scancel", *instance_ids], "cancel jobs " + ", ".join(instance_ids))

    def _squeue(self, args: list[str], *, allow_invalid_id: bool) -> list[SlurmJob]:
        argv = ["squeue", "--noheader", f"--format={SQUEUE_FORMAT}", *args]
        try:
            out = self._run(argv, "list jobs")
        except CloudError as exc:
            # squeue --jobs with an id slurmctld has already forgotten says "Invalid job id specified".
            if allow_invalid_id and "Invalid job id" in str(exc):
                return []
            raise
        return parse_squeue(out)

    def _which(self, tool: str, action: str) -> None:
        if shutil.which(tool, path=self._env.get("PATH")) is None:
            raise CloudError(
                f"cannot {action}: {tool} is not on PATH; run this where Slurm's client commands and the "
                "cluster's slurm.conf are (a login node), or set SLURM_CONF"
            )

    def _run(self, argv: list[str], action: str, stdin: str | None = None, env: Mapping[str, str] | None = None) -> str:
        self._which(argv[0], action)
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                env=dict(self._env if env is None else env),
                cwd=self._cwd,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise CloudError(
                f"cannot {action}: {argv[0]} did not answer in {_TIMEOUT_S:g} s (is slurmctld up?)"
            ) from exc
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise CloudError(
                f"cannot {action}: {argv[0]} exited {done.returncode}: {said[-1] if said else '(no output)'}"
            )
        return done.stdout
