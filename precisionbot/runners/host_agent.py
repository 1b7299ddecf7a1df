"""The GPU host's agent (``runner.kind: host``): one job at a time, each in a fresh container that it destroys.

One ``step`` does one thing: while a job runs, it checks the container (gone or exited → end the job; past
the claim's TTL → kill it); otherwise it takes the oldest pending job whose GPUs are free. Ending a job is
always the same five steps, whoever asks (exit, TTL, a restart's recovery): stop (SIGTERM, SIGKILL after the
grace), remove the container and its files, delete the runner registration, release the GPU lease, and
write ``done`` to the queue. Each step is idempotent, so an agent killed half-way through an end simply
ends the job again after its restart (``recover``).

The agent holds the GitHub token that registers runners; the container gets only the one-job JIT config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from precisionbot.errors import PrecisionbotError
from precisionbot.runners.github_runners import RunnerRegistry
from precisionbot.runners.host_containers import (
    LABEL_AGENT,
    LABEL_EXPIRES_AT,
    LABEL_JOB,
    ContainerRuntime,
    ContainerSpec,
)
from precisionbot.runners.host_gpus import GpuLeases
from precisionbot.runners.host_queue import Claim, HostJob, HostQueue, expiry, parse_time
from precisionbot.runners.lifecycle import SYSTEM_CLOCK, Clock
from precisionbot.runners.records import new_runner_name

JIT_ENV = "ACTIONS_RUNNER_INPUT_JITCONFIG"
"""The runner reads its JIT config from here and removes it before a job starts (as on EC2)."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class AgentSettings:
    name: str
    """This agent's id in claims and container labels (the host name, plus the GPU it serves if several)."""
    image: str
    """The runner image (docker/podman), or the image folder (bubblewrap)."""
    command: tuple[str, ...]
    """What the container runs: the runner's ``run.sh`` in the image."""
    runner_group_id: int = 1
    stop_grace_s: float = 30.0
    binds: tuple[tuple[str, str], ...] = ()
    network: str = "bridge"


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        queue: HostQueue,
        runtime: ContainerRuntime,
        registry: RunnerRegistry,
        leases: GpuLeases,
        clock: Clock = SYSTEM_CLOCK,
        log: Log = lambda _: None,
    ) -> None:
        self.settings, self.queue, self.runtime, self.registry = settings, queue, runtime, registry
        self.leases, self.clock, self.log = leases, clock, log
        self.current: Claim | None = None

    def _exists(self, container: str) -> bool:
        return self.runtime.inspect(container) is not None

    def recover(self) -> None:
        """After a (re)start: adopt this agent's live container that is within its TTL, end every other open
        claim of ours, and remove our containers that no open claim names."""
        claims = self.queue.open_claims(self.settings.name)
        for claim in claims:
            state = self.runtime.inspect(claim.container)
            if self.current is None and state is not None and state.running and not self._expired(claim):
                self.log(f"adopting {claim.container} (job {claim.job_id}) after a restart")
                self.current = claim
            else:
                self.end(claim, "orphaned" if state is None or state.running else "finished")
        named = {c.container for c in claims}
        for state in self.runtime.list():
            if state.labels.get(LABEL_AGENT) == self.settings.name and state.name not in named:
                self.log(f"removing {state.name}: no open claim names it")
                self.runtime.stop(state.name, self.settings.stop_grace_s)
                self.runtime.remove(state.name)
                self.leases.release(state.name)

    def _expired(self, claim: Claim) -> bool:
        return parse_time(claim.expires_at) <= self.clock.now()

    def step(self) -> str:
        """Do one thing and say what: ``running``, ``ended: <outcome>``, ``started <job>``, ``waiting for
        GPUs``, ``idle``."""
        if self.current is not None:
            claim = self.current
            if self.queue.cancelled(claim.job_id):
                return "ended: " + self.end(claim, "cancelled")
            state = self.runtime.inspect(claim.container)
            if state is None or not state.running:
                code = None if state is None else state.exit_code
                return "ended: " + self.end(claim, "finished" if code == 0 else f"failed (exit {code})")
            if self._expired(claim):
                return "ended: " + self.end(claim, "expired")
            return "running"
        waiting = False
        for job in self.queue.pending():
            started = self._take(job)
            if started == "started":
                return f"started {job.id}"
            waiting = waiting or started == "waiting"
        return "waiting for GPUs" if waiting else "idle"

    def _take(self, job: HostJob) -> str:
        container = f"precisionbot-host-{job.id}"
        gpus = self.leases.acquire(job.gpus, container, self._exists)
        if gpus is None:
            return "waiting"
        now = self.clock.now()
        claim = Claim(
            job_id=job.id,
            agent=self.settings.name,
            repo=job.repo,
            container=container,
            gpus=gpus,
            runner_name=new_runner_name(job.run_id, now),
            expires_at=expiry(now, job.ttl_minutes),
        )
        if not self.queue.claim(claim):
            self.leases.release(container)
            return "lost"
        self.current = claim
        try:
            jit = self.registry.create_jit_config(job.repo, claim.runner_name, [job.label], self._group())
            self.runtime.start(self._spec(claim, jit.encoded))
        except PrecisionbotError as exc:
            self.end(claim, f"failed to start: {exc}")
            return "failed"
        self.log(f"started {container} on GPUs {list(gpus)} for {job.repo} run {job.run_id}")
        return "started"

    def _group(self) -> int:
        return self.settings.runner_group_id

    def _spec(self, claim: Claim, jit: str) -> ContainerSpec:
        labels = {LABEL_JOB: claim.job_id, LABEL_AGENT: self.settings.name, LABEL_EXPIRES_AT: claim.expires_at}
        return ContainerSpec(
            name=claim.container,
            image=self.settings.image,
            command=self.settings.command,
            env={JIT_ENV: jit},
            gpus=claim.gpus,
            labels=labels,
            binds=self.settings.binds,
            network=self.settings.network,
        )

    def end(self, claim: Claim, outcome: str) -> str:
        """Stop and remove the container, deregister the runner, free the GPUs, mark the job done."""
        self.runtime.stop(claim.container, self.settings.stop_grace_s)
        self.runtime.remove(claim.container)
        deleted = self._deregister(claim)
        self.leases.release(claim.container)
        self.queue.finish(claim.job_id, outcome, {"agent": self.settings.name, "deregistered": deleted})
        if self.current is not None and self.current.job_id == claim.job_id:
            self.current = None
        self.log(f"job {claim.job_id}: {outcome}; {claim.container} removed")
        return outcome

    def _deregister(self, claim: Claim) -> Sequence[str]:
        """An ephemeral runner deregisters itself after its job; one killed first (TTL, crash) does not."""
        deleted = []
        for runner in self.registry.list_runners(claim.repo):
            if runner.name == claim.runner_name and self.registry.delete_runner(claim.repo, runner.id):
                deleted.append(runner.name)
        return deleted

    def run(self, poll_s: float = 5.0, should_stop: Callable[[], bool] = lambda: False) -> None:
        """The service loop: ``recover`` once, then ``step`` until ``should_stop``."""
        self.recover()
        while not should_stop():
            if self.step() in ("idle", "waiting for GPUs", "running"):
                self.clock.sleep(poll_s)
