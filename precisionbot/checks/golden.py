"""The ``golden`` check: the engine's teacher-forced top-k against a stored baseline of the same signature
(recorded by ``precisionbot.baselines.golden_recording``, with the same target).

No baseline for the signature is INCONCLUSIVE (naming the signature, which parts differ from the newest other
baseline, and the command that records one), never a comparison of unlike things. Several producers of a
baseline (``--producer NAME``: a rerun, another backend) give the noise band the candidate is judged by.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionbot.baselines import (
    RunMeta,
    Signature,
    Store,
    describe_mismatch,
    nearest_other_signature,
    newest_run,
    select_golden,
)
from precisionbot.baselines.fingerprint import fingerprint_diff
from precisionbot.baselines.golden_recording import GoldenTarget, golden_target
from precisionbot.baselines.produce import plan_from_record, produce
from precisionbot.checks.context import CheckContext
from precisionbot.config import GoldenThresholds
from precisionbot.errors import StoreError
from precisionbot.metrics.flips import NoiseBand, noise_band
from precisionbot.results import CheckOutput, CheckResult, PositionRecord, SampleTokens, Verdict
from precisionbot.results.golden_record import GoldenRecord
from precisionbot.scoring.golden_compare import Comparison, LayoutMismatch, compare_records, depth_bucket_edges
from precisionbot.scoring.golden_judge import golden_stats, judge_golden, worst_positions

NAME = "golden"


def band_of(records: Sequence[GoldenRecord]) -> tuple[NoiseBand | None, float]:
    """The noise band from every pair of known-good producers (None with fewer than two), and the largest
    |Δ logprob| the producers showed on a shared top-k id."""
    comparisons = [compare_records(a, b) for a, b in itertools.combinations(records, 2)]
    if not comparisons:
        return None, 0.0
    deltas = np.concatenate([c.shared_max for c in comparisons])
    finite = deltas[np.isfinite(deltas)]
    return noise_band([c.pair() for c in comparisons]), float(np.max(finite)) if finite.size else 0.0


def _no_baseline(target: GoldenTarget, store: Store, signature: Signature, record_hint: str | None) -> CheckOutput:
    # The engine's URL only when nothing better is known: a launched or builtin engine's port is dead by the
    # time anyone reads this, and a command without the run's --config/--suite records another signature.
    flags = record_hint or f"--engine-url {target.engine.url}"
    how = (
        f"record one with `precisionbot baseline record {flags} --store {store.uri}` "
        "(or `/precision baseline` on the default branch)"
    )
    reason = f"no golden baseline for model {target.model!r} with signature {signature.digest} in {store.uri}; {how}"
    other = nearest_other_signature(store, target.model, signature.digest)
    reasons = [reason]
    if other is not None:
        diff = describe_mismatch(signature.parts, other.signature_parts) or ["(parts equal: a format change)"]
        reasons.append(
            f"the newest baseline of {target.model!r} ({other.run_id}) has signature {other.signature}; "
            f"differs in {'; '.join(diff)}"
        )
    else:
        newest = newest_run(store)
        if newest is None:
            reasons.append(f"the store {store.uri} holds no baseline yet")
        else:
            diff = describe_mismatch(signature.parts, newest.signature_parts)
            reasons.append(
                f"the store's baselines are of other models; the newest ({newest.run_id}) is of model "
                f"{newest.model!r} and differs in {'; '.join(diff) or 'the model name only'} (without a "
                "`models:` entry a run is filed under the server's model path: name the model in the config "
                "to file its variants together)"
            )
    stats: dict[str, Any] = {"signature_parts": dict(signature.parts)}
    result = CheckResult(
        name=NAME,
        verdict=Verdict.INCONCLUSIVE,
        reasons=tuple(reasons),
        stats=stats,
        extra={"signature": signature.digest},
    )
    return CheckOutput(result)


def compare_golden(
    target: GoldenTarget, store: Store, thresholds: GoldenThresholds, record_hint: str | None = None
) -> CheckOutput:
    """Run the candidate on the baseline's exact prompts and judge it against the baseline and its band.
    ``record_hint``: the ``baseline record`` flags that reach this engine, config and suite again."""
    signature = target.signature()
    found = select_golden(store, target.model, signature.digest)  # a corrupt run skipped, with its warning
    if found is None:
        return _no_baseline(target, store, signature, record_hint)
    producers, records = found
    baseline, ref = producers[0], records[0]
    if len(ref) == 0:
        # A comparison over nothing must never read as a pass (nor crash on empty arrays downstream).
        return CheckOutput(
            CheckResult.inconclusive(NAME, f"the baseline {baseline.run_id} has no scored positions; re-record it")
        )
    try:
        band, band_abs_delta = band_of(records)
        texts: list[str] = []
        candidate = produce(target.engine, plan_from_record(ref, target.options.decode_steps), texts)
        comparison = compare_records(ref, candidate)
    except LayoutMismatch as exc:
        return CheckOutput(
            CheckResult.inconclusive(
                NAME, f"the baseline {baseline.run_id} does not line up with this run ({exc}); re-record it"
            )
        )
    stats = golden_stats(
        comparison,
        depth_edges=depth_bucket_edges(target.options.context_depths),
        kinds=[s.kind for s in ref.samples],
        band=band,
    )
    verdict, reasons = judge_golden(comparison, stats, band, thresholds, band_abs_delta)
    fingerprint = target.fingerprint()
    changed = fingerprint_diff(baseline.fingerprint, fingerprint)
    if verdict is Verdict.FAIL and changed:
        reasons = [*reasons, environment_note(baseline, changed)]
    stats["band_max_abs_delta"] = band_abs_delta
    stats["producers"] = [m.producer for m in producers]
    info = {
        "run_id": baseline.run_id,
        "engine_commit": baseline.engine_commit,
        "created": baseline.created,
        "producer": baseline.producer,
        "signature": baseline.signature,
        "label": baseline.label,
    }
    result = CheckResult(
        name=NAME,
        verdict=verdict,
        reasons=tuple(reasons),
        stats=stats,
        worst=worst_positions(comparison, texts=_row_texts(texts, comparison, candidate)),
        # Per sample index: prose or code, so the HTML report can split its KL distribution by kind.
        extra={
            "baseline": {**info, "fingerprint": dict(baseline.fingerprint)},
            "signature": signature.digest,
            "sample_kinds": [s.kind for s in ref.samples],
            "fingerprint_diff": changed,
        },
    )
    record = PositionRecord(
        sample=comparison.sample,
        position=comparison.position,
        token_id=comparison.token_id,
        lp_ref=comparison.lp_ref,
        lp_test=comparison.lp_test,
        top_ids_ref=comparison.top_ids_ref,
        top_lp_ref=comparison.top_lp_ref,
        top_ids_test=comparison.top_ids_test,
        top_lp_test=comparison.top_lp_test,
    )
    return CheckOutput(result, record, golden_samples(ref))


def golden_samples(ref: GoldenRecord) -> dict[int, SampleTokens]:
    """Each baseline sample's full token sequence, as both builds prefill it (a decode sample: its prompt and the
    baseline's generated tokens), for localizing a golden failure on the sample that failed."""
    out = {}
    for i, ((start, stop), s) in enumerate(zip(ref.bounds(), ref.samples, strict=True)):
        prompt = ref.prompt_ids(i)
        tokens = prompt if s.phase == "prefill" else (*prompt, *ref.token_id[start:stop].tolist())
        out[i] = SampleTokens(tuple(int(t) for t in tokens), s.first_position)
    return out


def environment_note(baseline: RunMeta, changed: Sequence[str]) -> str:
    """The failure's second reading: the baseline was made in another environment, which may be the cause."""
    return (
        f"the baseline {baseline.run_id} was recorded in another environment ({'; '.join(changed)}): the "
        "difference may be the runner's, not the PR's; run an A/B on one runner against the merge base "
        "(`baselines.mode: merge-base`) to tell them apart"
    )


def _row_texts(texts: Sequence[str], c: Comparison, candidate: GoldenRecord) -> list[str] | None:
    """Token text per compared row; blank where the candidate generated another token (a decode divergence)."""
    if not texts:
        return None
    rows = np.asarray(c.test_row, dtype=np.int64)
    ok = (candidate.token_id[rows] == c.token_id) & (rows < len(texts))
    out = np.full(rows.size, "", dtype=object)
    out[ok] = np.asarray(texts, dtype=object)[rows[ok]]
    result: list[str] = out.tolist()
    return result


def target_from_context(ctx: CheckContext) -> GoldenTarget:
    return golden_target(ctx.engine, ctx.config, ctx.suite.golden, ctx.model, ctx.documents())


def check_golden(ctx: CheckContext) -> CheckOutput:
    """The registry entry: compares with the newest good baseline in the store the command opened."""
    ctx.progress.phase(NAME)
    if ctx.store is None:
        return CheckOutput(
            CheckResult(
                name=NAME,
                verdict=Verdict.INCONCLUSIVE,
                reasons=("no baseline store was given: pass --store URI or set baselines.store in the config",),
            )
        )
    try:
        return compare_golden(target_from_context(ctx), ctx.store, ctx.thresholds.golden, ctx.record_hint)
    except StoreError as exc:
        # The store failed after the command's preflight: this check cannot judge, the others' results stand.
        return CheckOutput(CheckResult.inconclusive(NAME, f"the baseline store failed: {exc}"))
