"""Golden's worst positions read with golden's own measure: the KL at the position and both sides' top-k. Pure.

Golden judges a position by the KL of the two next-token distributions (over the baseline's top-k plus a rest
bucket), and names its largest ("largest KL 0.0147 at golden row 3, position 111"). A worst-positions row that
showed only the scored token's Δ and k3 could then call the same spot a tail token that "weighs ≈ 0 in KL": both
true, of different measures. The row therefore carries the position's KL, recomputed from golden's arrays
(``golden.npz``: both sides' top-k ids and logprobs), and the top-k of both sides, which say where the mass went.

Token text is stored for the scored tokens only (the worst positions' ``token_text``); a top-k id whose text the
run never showed prints as ``id N``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from precisionbot import metrics
from precisionbot.fmt import logprob
from precisionbot.report.escape import token_cell
from precisionbot.results import PositionRecord, WorstPosition

TOPK_SHOWN = 5
"""Top-k entries shown per side (the arrays keep 20; five say where the mass went)."""


@dataclass(frozen=True)
class GoldenPosition:
    kl: float
    topk_ref: str
    """``·types −0.55, ·is −1.1, id 17 −2.3``: the baseline's top entries (text escaped like a token cell)."""
    topk_test: str


def golden_positions(
    record: PositionRecord | None, worst: tuple[WorstPosition, ...], texts: Mapping[int, str]
) -> dict[tuple[int, int], GoldenPosition]:
    """Per ``(row, position)`` of ``worst``: the KL there and both sides' top entries; empty when the arrays
    hold no top-k (an old result directory, or none at all)."""
    if record is None or record.top_ids_ref is None or record.top_ids_test is None or not worst:
        return {}
    assert record.top_lp_ref is not None and record.top_lp_test is not None
    index = {(int(s), int(p)): i for i, (s, p) in enumerate(zip(record.sample, record.position, strict=True))}
    rows = [index[(w.sample, w.position)] for w in worst if (w.sample, w.position) in index]
    if not rows:
        return {}
    at = np.asarray(rows, dtype=np.int64)
    ids_ref, lp_ref = record.top_ids_ref[at], record.top_lp_ref[at].astype(np.float64)
    ids_test, lp_test = record.top_ids_test[at], record.top_lp_test[at].astype(np.float64)
    kl = metrics.topk_union_kl(ids_ref, lp_ref, ids_test, lp_test)
    out = {}
    for j, i in enumerate(rows):
        key = (int(record.sample[i]), int(record.position[i]))
        out[key] = GoldenPosition(
            kl=float(kl[j]),
            topk_ref=_topk(ids_ref[j], lp_ref[j], texts),
            topk_test=_topk(ids_test[j], lp_test[j], texts),
        )
    return out


def _topk(ids: np.ndarray, lps: np.ndarray, texts: Mapping[int, str]) -> str:
    parts = []
    for token, lp in list(zip(ids.tolist(), lps.tolist(), strict=True))[:TOPK_SHOWN]:
        if token < 0 or not np.isfinite(lp):
            continue  # padding of a shorter top-k list
        text = texts.get(int(token))
        parts.append(f"{token_cell(text) if text else f'id {token}'} {logprob(lp)}")
    return ", ".join(parts)
