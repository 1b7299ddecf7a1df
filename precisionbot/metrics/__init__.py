"""The precision math: pure numpy, natural logs (nats), no I/O.

Stable API: ``k3``, ``kl_divergence``, ``flip_probability``, ``tail_stats`` (and the rest of what is
re-exported here)::

    core.py           k3, tail statistics, SGLang's mean k3, rel_diff, thresholds' keys
    distributions.py  log-softmax, KL (full, top-k plus rest, union), margins, ranks, flips
    onset.py          where a divergence starts in each sample, and how concentrated it is
    flips.py          flips judged by margin: buckets, the noise band, flips Gaussian noise explains
    rerun_stats.py    reruns as a distribution: t and tolerance factors, PR-vs-main, threshold suggestions

Each module imports only numpy, the standard library and the modules above it in this list.
"""

from __future__ import annotations

from precisionbot.metrics.core import (
    DEFAULT_THRESHOLDS,
    F64,
    PERCENTILES,
    ArrayLike,
    accuracy_bound,
    delta_p_stats,
    flip_probability,
    k3,
    logprob_errors,
    mean_block_se,
    percentile_key,
    rel_diff,
    same_top,
    sglang_mean_k3,
    tail_stats,
    threshold_key,
)
from precisionbot.metrics.distributions import (
    TopkAlignment,
    align_topk,
    kl_divergence,
    kl_from_logits,
    log_softmax,
    lookup_topk,
    margin,
    rank_of,
    shared_topk_abs_delta,
    top1_flip,
    topk_rest_kl,
    topk_union_kl,
)

__all__ = [
    "DEFAULT_THRESHOLDS",
    "F64",
    "PERCENTILES",
    "ArrayLike",
    "TopkAlignment",
    "accuracy_bound",
    "align_topk",
    "delta_p_stats",
    "flip_probability",
    "k3",
    "kl_divergence",
    "kl_from_logits",
    "log_softmax",
    "logprob_errors",
    "lookup_topk",
    "margin",
    "mean_block_se",
    "percentile_key",
    "rank_of",
    "rel_diff",
    "same_top",
    "sglang_mean_k3",
    "shared_topk_abs_delta",
    "tail_stats",
    "threshold_key",
    "top1_flip",
    "topk_rest_kl",
    "topk_union_kl",
]
