"""The runner lifecycle's data: what to launch, what exists in EC2 and on GitHub, and the names we give them.

Pure: no I/O. Adapters (``cloud.py``, ``registry.py``) translate SDK objects into these dataclasses, and the
orchestration in ``lifecycle.py`` works only with them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from precisionbot.errors import ConfigError

TAG_REPO = "precisionbot:repo"
TAG_RUN_ID = "precisionbot:run-id"
TAG_PR = "precisionbot:pr"
TAG_LABEL = "precisionbot:label"
TAG_EXPIRES_AT = "precisionbot:expires-at"

LABEL_PREFIX = "precisionbot-"
"""Every runner name and label precisionbot generates starts with this; ``reap`` only deletes those."""

LIVE_STATES = ("pending", "running", "stopping", "stopped")
"""EC2 states that still cost money or can come back; everything else is gone or going."""

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,40}$")
_LABEL_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_INSTANCE_ID_RE = re.compile(r"^i-[0-9a-f]{8,17}$")


@dataclass(frozen=True)
class InstanceSpec:
    """The EC2 side of a launch; every field maps to one ``RunInstances`` parameter."""

    instance_type: str
    """e.g. ``g6.xlarge``, ``p5.48xlarge``."""
    ami: str
    """An AMI with the GPU driver (and ideally the runner under ``runner_dir``) installed."""
    subnet: str | None = None
    security_groups: tuple[str, ...] = ()
    instance_profile: str | None = None
    """Name or ARN of the instance profile (read-only baseline access; never write access)."""
    root_volume_gb: int | None = None
    root_device: str = "/dev/sda1"
    """Root device name of the AMI (Ubuntu and the Deep Learning AMIs use ``/dev/sda1``)."""
    spot: bool = False
    key_name: str | None = None


@dataclass(frozen=True)
class RunnerSpec:
    """The GitHub side of a launch and what the user-data does."""

    repo: str
    """``owner/name``."""
    label: str
    """Unique per launch: the runner's name and the label the GPU job selects with ``runs-on``."""
    extra_labels: tuple[str, ...] = ("self-hosted", "linux")
    runner_group_id: int = 1
    """1 is the repository's Default group."""
    ttl_minutes: int = 120
    runner_version: str = "2.328.0"
    runner_sha256: str | None = None
    """Checksum of the runner tarball for ``runner_version`` (x64); verified when given."""
    runner_dir: str = "/opt/actions-runner"
    runner_user: str = "ubuntu"

    @property
    def labels(self) -> tuple[str, ...]:
        return (*self.extra_labels, self.label)


@dataclass(frozen=True)
class Instance:
    """One EC2 instance as the lifecycle sees it."""

    id: str
    state: str
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def label(self) -> str | None:
        return self.tags.get(TAG_LABEL)

    @property
    def expires_at(self) -> datetime | None:
        """The ``precisionbot:expires-at`` tag; ``None`` if absent or unreadable (never reaped by time)."""
        raw = self.tags.get(TAG_EXPIRES_AT)
        if raw is None:
            return None
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Runner:
    """One self-hosted runner registration on GitHub."""

    id: int
    name: str
    labels: tuple[str, ...]
    status: str
    """``online`` or ``offline``."""
    busy: bool = False


@dataclass(frozen=True)
class JitConfig:
    """GitHub's answer to ``generate-jitconfig``: the registration and its single-use config blob."""

    runner: Runner
    encoded: str


def validate_run_id(run_id: str) -> str:
    if not _RUN_ID_RE.match(run_id):
        raise ConfigError(
            f"--run-id {run_id!r} must be 1-40 characters of letters, digits, '.', '_' or '-' "
            "(e.g. ${{ github.run_id }})"
        )
    return run_id


def validate_label(label: str) -> str:
    if not _LABEL_RE.match(label):
        raise ConfigError(f"--label {label!r} must be 1-64 characters of letters, digits, '.', '_' or '-'")
    return label


def validate_instance_id(instance_id: str) -> str:
    if not _INSTANCE_ID_RE.match(instance_id):
        raise ConfigError(
            f"--instance-id {instance_id!r} is not an EC2 instance id (like i-0123456789abcdef0): pass the "
            "instance-id output of `runner launch`, or use --run-id"
        )
    return instance_id


def new_label(run_id: str, created_at: datetime, token: str | None = None) -> str:
    """A unique runner name/label that also records when it was made, so ``reap`` can tell a runner that is
    still booting (offline for a few minutes, legitimately) from one that was left behind.

    >>> new_label("42", datetime(2026, 1, 1, tzinfo=timezone.utc), "ab12")
    'precisionbot-42-tt85s00-ab12'
    """
    stamp = _base36(int(created_at.timestamp()))
    return f"{LABEL_PREFIX}{run_id}-t{stamp}-{token or secrets.token_hex(2)}"


def label_created_at(label: str) -> datetime | None:
    """The creation time encoded by ``new_label``; ``None`` for labels we did not generate."""
    if not label.startswith(LABEL_PREFIX):
        return None
    parts = label.split("-")
    if len(parts) < 4 or not parts[-2].startswith("t"):
        return None
    try:
        seconds = int(parts[-2][1:], 36)
    except ValueError:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def iso_utc(moment: datetime) -> str:
    """``2026-01-01T12:00:00Z``: the format of the ``expires-at`` tag."""
    return moment.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
