"""The ``runner.kind: host`` job queue: create-only objects under a store prefix (docs/runners.md, *kind: host*).

A job's state is which of its three objects exist, and none is ever rewritten:

* ``jobs/<id>/request.json``: written by ``runner launch`` (repo, label, GPUs, TTL, the run it serves);
* ``jobs/<id>/claim.json``: written by the agent that takes it. The store's writes are create-only (S3
  ``If-None-Match: *``, ``os.link`` locally), so when two agents race for one job exactly one claim lands;
* ``jobs/<id>/done.json``: written by the agent when the container is gone and the runner deregistered.

Why a store prefix and not GitHub's API: the agents dial out to the store (no inbound port on a GPU host), the
claim is atomic without a lock service, the launch job already has a role that writes to the store, and it
runs against moto or MinIO in tests. The request holds no secret: the agent makes the just-in-time runner
config itself, so a reader of the prefix (PR code with read access to the baseline bucket) learns nothing it
could take a runner with.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from precisionbot.errors import ConfigError, StoreError
from precisionbot.runners.records import iso_utc

_JOB_ID_RE = re.compile(r"^[a-z0-9-]{8,80}$")


class QueueStore(Protocol):
    """The part of the baseline ``Store`` the queue needs (create-only ``put_bytes``)."""

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_bytes(self, key: str) -> bytes: ...

    def list_keys(self, prefix: str) -> list[str]: ...


@dataclass(frozen=True)
class HostJob:
    """One queued GPU job: what the agent needs to register a runner and start a container for it."""

    id: str
    repo: str
    label: str
    """The only label the just-in-time runner registers (unguessable, as on EC2)."""
    run_id: str
    gpus: int = 1
    ttl_minutes: int = 120
    pr: str = ""
    created_at: str = ""
    """ISO-8601 UTC; ``reap`` on the agent ends a container at ``created_at``'s claim time + TTL."""


@dataclass(frozen=True)
class Claim:
    """Which agent took a job, the container it started, and when that container must be gone."""

    job_id: str
    agent: str
    repo: str
    container: str
    gpus: tuple[int, ...]
    runner_name: str
    """The registration is found by this name at the end (as ``terminate`` does on EC2), so a claim can be
    written before GitHub is asked for the runner."""
    expires_at: str


def new_job_id(run_id: str) -> str:
    return f"{re.sub(r'[^a-z0-9-]', '-', run_id.lower())[:40]}-{secrets.token_hex(6)}"


def validate_job_id(job_id: str) -> str:
    if not _JOB_ID_RE.match(job_id):
        raise ConfigError(f"host job id {job_id[:90]!r} must be 8-80 lowercase letters, digits or '-'")
    return job_id


def expiry(now: datetime, ttl_minutes: int) -> str:
    return iso_utc(now + timedelta(minutes=ttl_minutes))


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class HostQueue:
    """The queue under one store (the store's own prefix is the queue's, e.g. ``s3://bucket/host-queue``)."""

    def __init__(self, store: QueueStore) -> None:
        self.store = store

    def submit(self, job: HostJob) -> None:
        validate_job_id(job.id)
        self.store.put_bytes(f"jobs/{job.id}/request.json", _dump(asdict(job)))

    def _ids(self, name: str) -> set[str]:
        return {k.split("/")[1] for k in self.store.list_keys("jobs/") if k.endswith(f"/{name}")}

    def pending(self) -> list[HostJob]:
        """Requests no agent has claimed yet, oldest first (ids sort by nothing useful: use created_at)."""
        open_ids = (
            self._ids("request.json") - self._ids("claim.json") - self._ids("done.json") - self._ids("cancel.json")
        )
        jobs = [self.request(i) for i in open_ids]
        return sorted(jobs, key=lambda j: (j.created_at, j.id))

    def request(self, job_id: str) -> HostJob:
        raw = _load(self.store.get_bytes(f"jobs/{job_id}/request.json"))
        return HostJob(**{k: raw[k] for k in HostJob.__dataclass_fields__ if k in raw})

    def claim(self, claim: Claim) -> bool:
        """Take the job; ``False`` when another agent's claim landed first (create-only write)."""
        key = f"jobs/{claim.job_id}/claim.json"
        try:
            self.store.put_bytes(key, _dump(asdict(claim)))
        except StoreError:
            if key in self.store.list_keys(f"jobs/{claim.job_id}/"):
                return False
            raise
        return True

    def open_claims(self, agent: str) -> list[Claim]:
        """This agent's claims without a ``done``: what it must finish or reap after a restart."""
        claims = []
        for job_id in sorted(self._ids("claim.json") - self._ids("done.json")):
            raw = _load(self.store.get_bytes(f"jobs/{job_id}/claim.json"))
            if raw.get("agent") == agent:
                claims.append(Claim(**{**raw, "gpus": tuple(raw["gpus"])}))
        return claims

    def finish(self, job_id: str, outcome: str, detail: Mapping[str, Any] | None = None) -> None:
        """Mark the job done; a second ``finish`` (a restarted agent's) is a no-op."""
        key = f"jobs/{job_id}/done.json"
        if key in self.store.list_keys(f"jobs/{job_id}/"):
            return
        self.store.put_bytes(key, _dump({"outcome": outcome, **(detail or {})}))

    def cancel(self, run_id: str) -> list[str]:
        """``runner terminate --run-id``: ask for the end of every open job of the run; the ids asked for.

        An unclaimed job is done at once (``cancelled``: no agent will take it); a claimed one gets a
        ``cancel.json`` that its agent reads on its next step, and ends the container as at the TTL."""
        done = self._ids("done.json")
        asked = []
        for job_id in sorted(self._ids("request.json") - done):
            if self.request(job_id).run_id != run_id:
                continue
            self.store.put_bytes(f"jobs/{job_id}/cancel.json", _dump({"run_id": run_id}))
            if job_id not in self._ids("claim.json"):
                self.finish(job_id, "cancelled")
            asked.append(job_id)
        return asked

    def cancelled(self, job_id: str) -> bool:
        return f"jobs/{job_id}/cancel.json" in self.store.list_keys(f"jobs/{job_id}/")

    def outcome(self, job_id: str) -> str | None:
        keys = self.store.list_keys(f"jobs/{job_id}/")
        if f"jobs/{job_id}/done.json" not in keys:
            return None
        return str(_load(self.store.get_bytes(f"jobs/{job_id}/done.json"))["outcome"])


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def _load(data: bytes) -> dict[str, Any]:
    raw = json.loads(data)
    if not isinstance(raw, dict):
        raise StoreError("a host queue object is not a JSON object")
    return raw
