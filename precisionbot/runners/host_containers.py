"""One container per job on a GPU host: the ``ContainerRuntime`` protocol and its Docker/Podman adapter.

The agent (``host_agent``) only starts, inspects, stops and removes containers through this protocol. The
production adapter drives the ``docker`` or ``podman`` CLI; ``host_sandbox`` is a bubblewrap sandbox with
the same contract (the tests' real runtime, where no container daemon runs).

Secrets never reach argv: ``docker run -e NAME`` (no value) takes the value from the CLI's own environment,
which only root and the agent's user can read (``/proc/PID/cmdline`` is readable by every user).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from precisionbot.errors import CloudError

LABEL_JOB = "precisionbot.job"
LABEL_AGENT = "precisionbot.agent"
LABEL_EXPIRES_AT = "precisionbot.expires-at"


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """Given through the runtime's environment, never argv (the JIT config is one of them)."""
    gpus: tuple[int, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    binds: tuple[tuple[str, str], ...] = ()
    """Read-only ``(host path, container path)`` mounts, e.g. a model cache."""
    network: str = "bridge"
    pids_limit: int = 4096


@dataclass(frozen=True)
class ContainerState:
    name: str
    running: bool
    exit_code: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


class ContainerRuntime(Protocol):
    def start(self, spec: ContainerSpec) -> None: ...

    def inspect(self, name: str) -> ContainerState | None:
        """``None`` when the container does not exist (any more)."""
        ...

    def list(self) -> list[ContainerState]:
        """Every container precisionbot started on this host (by the ``precisionbot.job`` label)."""
        ...

    def stop(self, name: str, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``; returns once nothing of it runs. Idempotent."""
        ...

    def remove(self, name: str) -> None:
        """Destroy the stopped container and its files. Idempotent."""
        ...


def run_argv(spec: ContainerSpec, flavour: str = "docker") -> list[str]:
    """The ``docker run`` (or ``podman run``) command line for one job's container.

    Docker takes GPUs as ``--gpus '"device=0,1"'`` (the NVIDIA container toolkit); Podman as CDI devices
    (``--device nvidia.com/gpu=0``). Both also get ``NVIDIA_VISIBLE_DEVICES``, which is what the NVIDIA
    runtime reads when ``--gpus`` is not wired up. No capabilities, no privilege escalation (setuid binaries
    in the image cannot become root), a pid limit against fork bombs, and no ``--rm``: the agent reads the
    exit code before it removes the container."""
    argv = [flavour, "run", "--detach", "--name", spec.name, "--init"]
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--pids-limit", str(spec.pids_limit)]
    argv += ["--network", spec.network]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    if spec.gpus:
        devices = ",".join(str(g) for g in spec.gpus)
        if flavour == "podman":
            for gpu in spec.gpus:
                argv += ["--device", f"nvidia.com/gpu={gpu}"]
        else:
            argv += ["--gpus", f'"device={devices}"']
        argv += ["--env", f"NVIDIA_VISIBLE_DEVICES={devices}"]
    else:
        argv += ["--env", "NVIDIA_VISIBLE_DEVICES=void"]
    for name in sorted(spec.env):
        argv += ["--env", name]
    for host, inside in spec.binds:
        argv += ["--volume", f"{host}:{inside}:ro"]
    return [*argv, spec.image, *spec.command]


def stop_argv(name: str, grace_s: float, flavour: str = "docker") -> list[str]:
    return [flavour, "stop", "--time", str(max(0, int(grace_s))), name]


def remove_argv(name: str, flavour: str = "docker") -> list[str]:
    return [flavour, "rm", "--force", "--volumes", name]


class CliRuntime:
    """``ContainerRuntime`` over the ``docker`` or ``podman`` command line."""

    def __init__(self, flavour: str = "docker") -> None:
        if flavour not in ("docker", "podman"):
            raise CloudError(f"container runtime {flavour!r} is not docker or podman (--runtime)")
        self.flavour = flavour

    def _call(self, argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CloudError(f"cannot run {argv[0]} {argv[1]}: {exc} (is {self.flavour} installed?)") from exc

    def start(self, spec: ContainerSpec) -> None:
        done = self._call(run_argv(spec, self.flavour), spec.env)
        if done.returncode != 0:
            raise CloudError(f"{self.flavour} run {spec.name} failed: {done.stderr.strip()[:300]}")

    def inspect(self, name: str) -> ContainerState | None:
        done = self._call([self.flavour, "inspect", "--type", "container", name])
        if done.returncode != 0:
            return None
        (raw,) = json.loads(done.stdout)
        state = raw.get("State", {})
        running = bool(state.get("Running"))
        return ContainerState(
            name=name,
            running=running,
            exit_code=None if running else int(state.get("ExitCode", -1)),
            labels=dict(raw.get("Config", {}).get("Labels") or {}),
        )

    def list(self) -> list[ContainerState]:
        done = self._call([self.flavour, "ps", "--all", "--filter", f"label={LABEL_JOB}", "--format", "{{.Names}}"])
        if done.returncode != 0:
            raise CloudError(f"{self.flavour} ps failed: {done.stderr.strip()[:300]}")
        found = (self.inspect(n) for n in done.stdout.split())
        return [s for s in found if s is not None]

    def stop(self, name: str, grace_s: float) -> None:
        self._call(stop_argv(name, grace_s, self.flavour))

    def remove(self, name: str) -> None:
        self._call(remove_argv(name, self.flavour))
