"""The ``batch_invariance`` check: the same prompts solo and inside batches of several sizes (and optionally
under other engine launch arguments): the top-k logprobs must agree within the deterministic tolerance.

SGLang's ``test_logprobs.py`` rule: per position, the top-k lists are matched by token id and a sample fails
when the max or mean |Δ logprob| over the shared ids exceeds 1e-5 (``thresholds.batch_abs_delta``). Each
configuration is compared with the solo run (batch size 1, cache flushed before every request, so the prefix
cache cannot stand in for a batch effect). Scored: the last ``SCORED_TAIL`` prompt positions (prefill) and
``DECODE_STEPS`` greedy steps (decode), up to a decode divergence (which is itself a flip).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot import metrics
from precisionbot.checks.context import CheckContext
from precisionbot.engines.base import Engine, GenerateRequest, Generation
from precisionbot.errors import EngineError
from precisionbot.results import CheckOutput, CheckResult, PositionRecord, Verdict, WorstPosition

NAME = "batch_invariance"
TOP_K = 20
SCORED_TAIL = 32
DECODE_STEPS = 8
MAX_PROMPTS = 16


@dataclass(frozen=True)
class Rows:
    """Scored rows of one run over all prompts, in a fixed order."""

    sample: npt.NDArray[np.int32]
    position: npt.NDArray[np.int32]
    token_id: npt.NDArray[np.int32]
    lp: npt.NDArray[np.float64]
    top_ids: npt.NDArray[np.int32]
    top_lp: npt.NDArray[np.float64]


def _requests(prompts: Sequence[tuple[int, ...]]) -> list[GenerateRequest]:
    return [
        GenerateRequest(
            p, max_new_tokens=DECODE_STEPS, logprob_start_len=max(0, len(p) - SCORED_TAIL - 1), top_logprobs_num=TOP_K
        )
        for p in prompts
    ]


def _rows(requests: Sequence[GenerateRequest], answers: Sequence[Generation]) -> Rows:
    parts: list[tuple[Any, ...]] = []
    for i, (r, g) in enumerate(zip(requests, answers, strict=True)):
        if g.input_top is None or g.output_top is None:
            raise EngineError(f"request {i} returned no top-k logprobs")
        # Entry 0 of the input logprobs is null in SGLang's answers (whatever logprob_start_len is): skip it.
        start = r.logprob_start_len + 1
        n_in, n_out = len(g.input_logprobs) - 1, len(g.output_ids)
        parts.append(
            (
                np.full(n_in + n_out, i, dtype=np.int32),
                np.arange(start, start + n_in + n_out, dtype=np.int32),
                np.concatenate([g.input_token_ids[1:], np.asarray(g.output_ids, dtype=np.int32)]),
                np.concatenate([g.input_logprobs[1:], g.output_logprobs]),
                np.concatenate([g.input_top.ids[1:], g.output_top.ids]),
                np.concatenate([g.input_top.logprobs[1:], g.output_top.logprobs]),
            )
        )
    cols = [np.concatenate([p[j] for p in parts]) for j in range(6)]
    return Rows(*cols)


def run_solo(engine: Engine, prompts: Sequence[tuple[int, ...]]) -> Rows:
    requests = _requests(prompts)
    answers = []
    for r in requests:
        engine.flush_cache()
        answers.extend(engine.generate([r]))
    return _rows(requests, answers)


def run_batched(engine: Engine, prompts: Sequence[tuple[int, ...]], batch_size: int) -> Rows:
    requests = _requests(prompts)
    engine.flush_cache()
    answers: list[Generation] = []
    for start in range(0, len(requests), batch_size):
        answers.extend(engine.generate(requests[start : start + batch_size]))
    return _rows(requests, answers)


@dataclass(frozen=True)
class ConfigDiff:
    label: str
    max_abs_delta: float
    mean_abs_delta: float
    flips: int
    positions: int
    worst_index: int
    """Row (in the solo run) with the largest |Δ|, or -1."""


def _align(ref: Rows, test: Rows) -> npt.NDArray[np.int64]:
    """Rows of ``ref`` that ``test`` also scored with the same context (decode stops after a divergence)."""
    keep = np.ones(len(ref.sample), dtype=bool)
    if len(ref.sample) != len(test.sample) or not np.array_equal(ref.position, test.position):
        raise ValueError("batch_invariance: runs scored different positions")
    for s in np.unique(ref.sample):
        rows = np.flatnonzero(ref.sample == s)
        differs = rows[ref.token_id[rows] != test.token_id[rows]]
        if differs.size:
            keep[rows[rows > differs[0]]] = False
    return np.flatnonzero(keep)


def diff_runs(label: str, ref: Rows, test: Rows) -> tuple[ConfigDiff, npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    idx = _align(ref, test)
    mx, mean, _ = metrics.shared_topk_abs_delta(ref.top_ids[idx], ref.top_lp[idx], test.top_ids[idx], test.top_lp[idx])
    mx = np.nan_to_num(mx, nan=np.inf)
    flips = int(np.count_nonzero(metrics.top1_flip(ref.top_ids[idx], test.top_ids[idx])))
    worst = int(idx[np.argmax(mx)]) if idx.size else -1
    finite_mean = mean[np.isfinite(mean)]
    return (
        ConfigDiff(
            label,
            float(np.max(mx)) if idx.size else 0.0,
            float(np.mean(finite_mean)) if finite_mean.size else 0.0,
            flips,
            int(idx.size),
            worst,
        ),
        mx,
        idx,
    )


EngineVariant = tuple[str, Callable[[], AbstractContextManager[Engine]]]
"""A labelled way to get an engine under other launch arguments (e.g. through the launcher)."""


def batch_invariance(
    engine: Engine,
    prompts: Sequence[tuple[int, ...]],
    batch_sizes: Sequence[int],
    tolerance: float,
    variants: Sequence[EngineVariant] = (),
) -> CheckOutput:
    prompts = list(prompts)[:MAX_PROMPTS]
    solo = run_solo(engine, prompts)
    runs: list[tuple[str, Rows]] = [(f"batch size {b}", run_batched(engine, prompts, b)) for b in batch_sizes if b > 1]
    for label, opener in variants:
        with opener() as other:
            for b in batch_sizes:
                runs.append((f"{label}, batch size {b}", run_batched(other, prompts, b)))
    diffs: list[ConfigDiff] = []
    worst_delta = np.zeros(len(solo.sample))
    worst_test_lp = solo.lp.copy()
    for label, rows in runs:
        d, mx, idx = diff_runs(label, solo, rows)
        diffs.append(d)
        better = mx > worst_delta[idx]
        worst_delta[idx[better]] = mx[better]
        worst_test_lp[idx[better]] = rows.lp[idx[better]]
    delta = solo.lp - worst_test_lp
    k3 = metrics.k3(delta)
    stats: dict[str, Any] = metrics.tail_stats(k3)
    stats.update(
        samples=len(prompts),
        mean_k3=metrics.sglang_mean_k3(k3, solo.sample),
        max_abs_delta=max((d.max_abs_delta for d in diffs), default=0.0),
        flips=sum(d.flips for d in diffs),
        configurations=[d.__dict__ for d in diffs],
        tolerance=tolerance,
    )
    bad = [d for d in diffs if not d.max_abs_delta <= tolerance or d.flips]
    if not diffs:
        reasons = ["no batch size other than 1 (or engine variant) configured: nothing to compare"]
        verdict = Verdict.INCONCLUSIVE
    elif bad:
        verdict = Verdict.FAIL
        reasons = [
            f"{d.label} differs from solo: max |Δ logprob| {d.max_abs_delta:.3g} > {tolerance:g} "
            f"over shared top-{TOP_K}, {d.flips} top-1 flips (worst at sample {solo.sample[d.worst_index]}, position "
            f"{solo.position[d.worst_index]})"
            for d in bad
        ]
    else:
        verdict = Verdict.PASS
        reasons = [
            f"{len(diffs)} configurations agree with solo within {tolerance:g} (max {stats['max_abs_delta']:.3g})"
        ]
    order = np.argsort(-worst_delta, kind="stable")[:10]
    worst = tuple(
        WorstPosition(
            int(solo.sample[i]),
            int(solo.position[i]),
            int(solo.token_id[i]),
            "",
            float(solo.lp[i]),
            float(worst_test_lp[i]),
            float(delta[i]),
            float(k3[i]),
            float(solo.top_lp[i, 0] - solo.top_lp[i, 1]),
            None,
        )
        for i in order
        if worst_delta[i] > 0
    )
    record = PositionRecord(solo.sample, solo.position, solo.token_id, solo.lp, worst_test_lp)
    return CheckOutput(CheckResult(NAME, verdict, tuple(reasons), stats, worst=worst), record)


def check_batch_invariance(ctx: CheckContext) -> CheckOutput:
    ctx.progress.phase(NAME)
    return batch_invariance(
        ctx.engine, ctx.prompts(), ctx.suite.batch_invariance.batch_sizes, ctx.thresholds.batch_abs_delta
    )
