"""Golden comparison, pure: a candidate's ``GoldenRecord`` against the baseline's, row by row.

Per row (kern's definition): KL over the union of both top-k lists plus a rest bucket (only top-k is known on
either side), top-1 flip, the baseline's margin (top-1 − top-2), rank of the baseline's top-1 in the
candidate, |Δ logprob| over the shared top-k ids (``test_logprobs.py``'s max/mean rule), and Δ of the scored
token's logprob (``lp_ref − lp_test``, its k3). Decode samples are compared step by step up to and including
the first step whose generated token differs: after it the contexts differ, and that step is itself a flip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot import metrics
from precisionbot.metrics.flips import PairComparison
from precisionbot.results.golden_record import GoldenRecord

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Divergence:
    """Where a decode sample's greedy generation first left the baseline's."""

    sample: int
    step: int
    position: int
    ref_token: int
    test_token: int


@dataclass(frozen=True)
class Comparison:
    """Per compared row (``M`` rows; ``ref_row`` indexes the baseline's rows)."""

    ref_row: npt.NDArray[np.int64]
    test_row: npt.NDArray[np.int64]
    """Rows of the candidate's record (they differ from ``ref_row`` once a decode sample diverged in length)."""
    sample: npt.NDArray[np.int32]
    position: npt.NDArray[np.int32]
    decode: npt.NDArray[np.bool_]
    token_id: npt.NDArray[np.int32]
    lp_ref: F64
    lp_test: F64
    kl: F64
    flip: npt.NDArray[np.bool_]
    margin: F64
    rank: npt.NDArray[np.int64]
    shared_max: F64
    shared_mean: F64
    top_ids_ref: npt.NDArray[np.int32]
    top_lp_ref: F64
    top_ids_test: npt.NDArray[np.int32]
    top_lp_test: F64
    divergences: tuple[Divergence, ...]

    @property
    def delta(self) -> F64:
        return self.lp_ref - self.lp_test

    def __len__(self) -> int:
        return len(self.ref_row)

    def pair(self) -> PairComparison:
        """This comparison as a noise-band pair (when both sides are known-good producers)."""
        return PairComparison(margins_nats=self.margin, flips=self.flip, kl=self.kl, delta_lp=self.delta)


class LayoutMismatch(ValueError):
    """The two records do not score the same samples (different corpus, options or a corrupt run)."""


def compare_records(ref: GoldenRecord, test: GoldenRecord) -> Comparison:
    """Align ``test`` with ``ref`` sample by sample and compute the per-row metrics."""
    _check_layout(ref, test)
    ref_rows: list[npt.NDArray[np.int64]] = []
    test_rows: list[npt.NDArray[np.int64]] = []
    divergences: list[Divergence] = []
    for index, ((r0, r1), (t0, t1), s) in enumerate(zip(ref.bounds(), test.bounds(), ref.samples, strict=True)):
        n = min(r1 - r0, t1 - t0)
        if s.phase == "decode":
            differs = np.flatnonzero(ref.token_id[r0 : r0 + n] != test.token_id[t0 : t0 + n])
            if differs.size:
                step = int(differs[0])
                divergences.append(
                    Divergence(
                        index,
                        step,
                        s.first_position + step,
                        int(ref.token_id[r0 + step]),
                        int(test.token_id[t0 + step]),
                    )
                )
                n = step + 1
        ref_rows.append(np.arange(r0, r0 + n, dtype=np.int64))
        test_rows.append(np.arange(t0, t0 + n, dtype=np.int64))
    ri = np.concatenate(ref_rows) if ref_rows else np.zeros(0, dtype=np.int64)
    ti = np.concatenate(test_rows) if test_rows else np.zeros(0, dtype=np.int64)

    rid, rlp = _rows(ref.top_ids, ri), _rows(ref.top_lp, ri).astype(np.float64)
    tid, tlp = _rows(test.top_ids, ti), _rows(test.top_lp, ti).astype(np.float64)
    token = ref.token_id[ri]
    lp_ref = ref.lp[ri].astype(np.float64)
    # The candidate's logprob of the baseline's token: its own scored logprob while the tokens agree; at a
    # decode divergence, look it up in its top-k, and if it is not listed bound it by the k-th logprob.
    lp_test = test.lp[ti].astype(np.float64)
    differs = np.flatnonzero(test.token_id[ti] != token)
    if differs.size:
        looked, found = metrics.lookup_topk(token[differs, None], tid[differs], tlp[differs])
        lp_test[differs] = np.where(found[:, 0], looked[:, 0], tlp[differs, -1])

    alignment = metrics.align_topk(rid, tid)  # one id match shared by the |Δ| over shared ids and the KL
    shared_max, shared_mean, _common = metrics.shared_topk_abs_delta(rid, rlp, tid, tlp, alignment=alignment)
    kl = metrics.topk_union_kl(rid, rlp, tid, tlp, alignment=alignment)
    return Comparison(
        ref_row=ri,
        test_row=ti,
        sample=ref.sample_index()[ri],
        position=ref.positions()[ri],
        decode=~ref.phase_mask("prefill")[ri],
        token_id=token,
        lp_ref=lp_ref,
        lp_test=lp_test,
        kl=kl,
        flip=metrics.top1_flip(rid, tid),
        margin=metrics.margin(rlp),
        rank=metrics.rank_of(rid[:, 0], tid),
        shared_max=shared_max,
        shared_mean=shared_mean,
        top_ids_ref=rid,
        top_lp_ref=rlp,
        top_ids_test=tid,
        top_lp_test=tlp,
        divergences=tuple(divergences),
    )


def _rows(a: npt.NDArray[Any], rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """``a[rows]``; ``a`` itself when ``rows`` is every row in order (no decode sample diverged: the usual
    case, and a copy of the top-k arrays saved)."""
    if len(rows) == len(a) and (len(rows) == 0 or (rows[0] == 0 and rows[-1] == len(a) - 1)):
        return a  # rows are strictly increasing, so the ends decide
    return a[rows]


def _check_layout(ref: GoldenRecord, test: GoldenRecord) -> None:
    if len(ref.samples) != len(test.samples):
        raise LayoutMismatch(f"the baseline has {len(ref.samples)} samples, the candidate {len(test.samples)}")
    if ref.top_k != test.top_k:
        raise LayoutMismatch(f"the baseline stores top-{ref.top_k}, the candidate top-{test.top_k}")
    for i, (a, b) in enumerate(zip(ref.samples, test.samples, strict=True)):
        if (a.phase, a.prompt_tokens, a.first_position) != (b.phase, b.prompt_tokens, b.first_position):
            raise LayoutMismatch(f"sample {i} differs: baseline {a}, candidate {b}")
        if a.phase == "prefill" and a.rows != b.rows:
            raise LayoutMismatch(f"sample {i} scores {a.rows} positions in the baseline, {b.rows} now")
    for (r0, r1), (t0, t1), s in zip(ref.bounds(), test.bounds(), ref.samples, strict=True):
        if s.phase == "prefill" and not np.array_equal(ref.token_id[r0:r1], test.token_id[t0:t1]):
            raise LayoutMismatch(f"prefill sample {s.doc!r} has different tokens in the baseline and now")


def depth_bucket_edges(context_depths: Sequence[int]) -> list[int]:
    """Bucket edges for prefill positions: ``[0, d1, d2, ..., ∞)`` from the configured depths."""
    return [0, *sorted(set(context_depths))]


def depth_label(lo: int, hi: int | None) -> str:
    return f"[{lo}, {'∞' if hi is None else hi})"
