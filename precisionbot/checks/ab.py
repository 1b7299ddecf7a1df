"""The same-runner A/B (``baselines.mode: merge-base``): the PR's merge base is the producer of a live baseline.

A golden baseline recorded on another machine, driver or torch build differs from today's run for reasons
that are not the PR. So the PR's own runner first builds and runs the merge base (the commit the PR branches
from) and records its golden corpus, and the helpers' reruns when the config asks for main's noise, into a
store of its own; the PR's run is then judged against that, with nothing between the two but the PR.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from precisionbot.baselines.catalog import select_baseline
from precisionbot.baselines.fingerprint import fingerprint_diff, gpu_minutes
from precisionbot.baselines.golden_recording import ModuleCapture, golden_target, record_golden
from precisionbot.baselines.record import RunMeta
from precisionbot.baselines.store import Store
from precisionbot.checks.rerun import rerun_helpers
from precisionbot.config import Config, ModelConfig, SuiteConfig
from precisionbot.corpus import Document
from precisionbot.engines.base import Engine

PRODUCER = "merge-base"


def record_merge_base(
    engine: Engine,
    config: Config,
    suite: SuiteConfig,
    model: ModelConfig | None,
    documents: Sequence[Document],
    live: Store,
    *,
    commit: str,
    modules: ModuleCapture | None = None,
) -> tuple[RunMeta, float]:
    """Record the merge-base engine's golden corpus (and helper reruns when main's noise is judged) into the
    live store; returns the run and the seconds it took. ``modules``: the capture of its module tensors
    (``localize:`` on), kept as a stored baseline's are, so a golden failure is localized against them."""
    t0 = time.perf_counter()
    reruns = config.baselines.helper_reruns if config.baselines.vs_main else 0
    helpers = rerun_helpers(engine, config, suite, model, reruns) if reruns else None
    target = golden_target(engine, config, suite.golden, model, documents)
    meta = record_golden(target, live, producer=PRODUCER, engine_commit=commit, helpers=helpers, modules=modules)
    return meta, time.perf_counter() - t0


def ab_summary(
    live: RunMeta,
    *,
    base_ref: str,
    wall_s: float,
    fingerprint: Mapping[str, Any],
    stored: Store | None,
) -> dict[str, Any]:
    """What result.json says of the A/B: the merge base, its cost in GPU minutes, and how this runner differs
    from the stored baseline of the same signature (which the A/B made unnecessary to trust)."""
    out: dict[str, Any] = {
        "merge_base": live.engine_commit,
        "base_ref": base_ref,
        "wall_s": wall_s,
        "gpu_minutes": gpu_minutes(wall_s, fingerprint.get("gpu_count")),
    }
    other = select_baseline(stored, live.model, live.signature) if stored is not None else None
    if other is not None:
        out["stored_baseline"] = other.run_id
        out["stored_fingerprint_diff"] = fingerprint_diff(other.fingerprint, fingerprint)
    return out
