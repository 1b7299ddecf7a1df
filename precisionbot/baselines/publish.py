"""Copy recorded runs from a staging store (the GPU job's artifact) into the real store, checking each one.

The GPU job that records baselines runs the engine's code; what it hands over is data to verify, not to copy
blindly (``aws s3 cp --recursive`` would overwrite any key the artifact names). Every run must be complete and
self-consistent (its key prefix is the one its meta implies, every file's sha256 matches, nothing extra), its
run id canonical and dated no later than now: the newest run by that date is selected, so a run dated in the
future would stay the baseline for good.

And every run must be one the plan dispatched (:class:`Plan`, :func:`check_plan`): of a model the plan ran, at
the commit it pinned, with the label the GPU job records, an acceptance record exactly when the plan accepts
a PR (that PR, that commit), and one run per matrix cell. The staging stores are written by the engine's code
(the GPU job runs it), so without this a PR could hand over runs of other models, commits or cells that the
job's verification would pass as well formed. A refusal names the run and the mismatch and writes nothing.

Writes go through the store's create-only ``put_bytes``, files first and ``meta.json`` last, so a
half-published run is never listed. Pure over the ``Store`` protocol.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from precisionbot.baselines.accept import accepted
from precisionbot.baselines.preflight import PROBE_DIR
from precisionbot.baselines.record import META_NAME, RunMeta, decode_meta, run_id_time, sha256_hex
from precisionbot.baselines.store import Store
from precisionbot.errors import StoreError

CLOCK_SKEW = timedelta(minutes=10)
"""How far in the future a run may be dated (the GPU host's clock may run a little ahead)."""


@dataclass(frozen=True)
class Checked:
    meta: RunMeta
    files: dict[str, bytes]
    """``meta.json`` and every file it lists, by name, as they will be written."""
    where: str = ""
    """``run <key prefix> in <staging uri>``: how refusals name it."""


@dataclass(frozen=True)
class Plan:
    """What the plan dispatched (its ``sha``, ``mode``, ``pr`` and matrix outputs): the only runs a publish
    may write."""

    commit: str
    """The commit the GPU job checked out: every run's ``engine_commit``."""
    models: tuple[str, ...]
    """The ``model`` of each matrix cell, one entry per cell: exactly one run each."""
    label: str = "baseline_established"
    """The label ``baseline record`` gives in both modes (accept refuses any other)."""
    accepted_pr: int | None = None
    """Mode ``accept``: every run carries the acceptance record of this PR at ``commit``; otherwise none may
    (a baseline run posing as an accepted change would forge the audit trail)."""


def check_staged(staging: Store, now: datetime) -> list[Checked]:
    """Every run in ``staging``, verified; a ``StoreError`` naming the first problem otherwise."""
    # `baseline record`'s write probes (baselines/preflight.py) are no run's: neither checked nor copied.
    keys = [k for k in staging.list_keys("") if not k.startswith(PROBE_DIR + "/")]
    metas = [k for k in keys if k.endswith("/" + META_NAME) and k.count("/") == 4]
    if not metas:
        raise StoreError(f"no recorded run in {staging.uri}: nothing to publish (did `baseline record` run?)")
    claimed: set[str] = set()
    checked = []
    for key in metas:
        meta = decode_meta(staging.get_bytes(key), key)
        where = f"run {key[: -len(META_NAME) - 1]} in {staging.uri}"
        if key != meta.prefix + META_NAME:
            raise StoreError(f"{where}: its meta.json describes {meta.prefix!r}, not this key")
        try:
            stamp = run_id_time(meta.run_id)
        except StoreError as exc:
            raise StoreError(f"{where}: {exc}") from exc
        if stamp > now + CLOCK_SKEW or meta.created[:10] != stamp.strftime("%Y-%m-%d"):
            raise StoreError(
                f"{where}: run id {meta.run_id!r} is dated {stamp:%Y-%m-%dT%H:%M:%SZ}, later than now "
                f"({now:%Y-%m-%dT%H:%M:%SZ}) or not on its recorded date: a run from the future would stay the "
                "selected baseline"
            )
        files = {META_NAME: staging.get_bytes(key)}
        for name, info in meta.files.items():
            data = staging.get_bytes(meta.prefix + name)
            if sha256_hex(data) != info.get("sha256"):
                raise StoreError(f"{where}: {name} does not match the sha256 in its meta.json")
            files[name] = data
        claimed.update(meta.prefix + name for name in files)
        checked.append(Checked(meta, files, where))
    stray = sorted(set(keys) - claimed)
    if stray:
        raise StoreError(f"{staging.uri} holds {stray[0]!r}, which no run's meta.json lists: refusing to publish it")
    return checked


def check_plan(runs: Sequence[Checked], plan: Plan) -> None:
    """``StoreError`` naming the first run (across every staging store) that the plan did not dispatch, or the
    cell whose run count is not one."""
    cells = Counter(plan.models)
    for run in runs:
        meta, where = run.meta, run.where
        if meta.model not in cells:
            ran = ", ".join(sorted(cells)) or "none"
            raise StoreError(f"{where} is of model {meta.model!r}, which the plan did not run (its cells: {ran})")
        if meta.engine_commit != plan.commit:
            raise StoreError(
                f"{where} was recorded at engine commit {meta.engine_commit or 'none'}, not the plan's {plan.commit}"
            )
        if meta.label != plan.label:
            raise StoreError(f"{where} is labelled {meta.label!r}, not {plan.label!r} as the plan records")
        record = accepted(meta)
        if plan.accepted_pr is None and record is not None:
            raise StoreError(
                f"{where} carries an acceptance record (PR #{record.get('pr')}), but the plan records a baseline, "
                "not an accepted change"
            )
        if plan.accepted_pr is not None:
            if record is None:
                raise StoreError(f"{where} carries no acceptance record, but the plan accepts PR #{plan.accepted_pr}")
            if record.get("pr") != plan.accepted_pr or record.get("commit") != plan.commit:
                raise StoreError(
                    f"{where} accepts PR #{record.get('pr')} at {record.get('commit')}, not the plan's PR "
                    f"#{plan.accepted_pr} at {plan.commit}"
                )
    found = Counter(run.meta.model for run in runs)
    for model, count in sorted(cells.items()):
        if found[model] != count:
            named = ", ".join(run.where for run in runs if run.meta.model == model) or "none"
            raise StoreError(
                f"the plan ran {count} cell(s) of model {model!r} but the staging stores hold {found[model]} "
                f"run(s) of it ({named}): one run per cell, or nothing is published"
            )


def publish(staging: Store, target: Store, now: datetime, *, plan: Plan) -> list[RunMeta]:
    """Verify everything first, against ``plan`` too (one staging store holding every cell), then write run by
    run (create-only; meta.json last). ``plan`` is required: a publish that skips it writes whatever the
    engine's code staged, which is the hole :func:`check_plan` closes."""
    runs = check_staged(staging, now)
    check_plan(runs, plan)
    return write_checked(runs, target)


def write_checked(runs: Sequence[Checked], target: Store) -> list[RunMeta]:
    """Write runs that :func:`check_staged` (and :func:`check_plan`) passed, files first, meta.json last."""
    for run in runs:
        for name, data in run.files.items():
            if name != META_NAME:
                target.put_bytes(run.meta.prefix + name, data)
        target.put_bytes(run.meta.prefix + META_NAME, run.files[META_NAME])
    return [run.meta for run in runs]
