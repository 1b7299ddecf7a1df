"""A suite's conversation keys (SGLang's multi-turn helpers) and ``cache_consistency`` options (pure).

Kept apart from ``parse`` so the helpers' shape (turns, branches, groups, sampling) is validated in
one place: ``samples`` = ``groups`` x ``branches``, and every bound names the key and the fix.
"""

from __future__ import annotations

from typing import Any

from precisionbot.config.fields import Reader
from precisionbot.config.settings import SEPARATORS, CacheConsistencyOptions, SuiteConfig

MAX_TURNS = 16
MAX_BRANCHES = 64


def _opt_positive_int(r: Reader, key: str, default: int | None) -> int | None:
    if key in r.data and r.data[key] is None:
        return None
    if key not in r.data:
        return default
    return r.positive_int(key, 1)


def _samples(r: Reader, d: SuiteConfig, branches: int) -> int:
    samples = r.positive_int("samples", d.samples)
    if "groups" in r.data:
        groups = r.positive_int("groups", 1)
        if "samples" in r.data and samples != groups * branches:
            raise r.error(
                "samples",
                f"is {samples} but groups x branches is {groups} x {branches} = {groups * branches}",
                "drop 'samples' (it follows from groups and branches) or make them agree",
            )
        return groups * branches
    if "samples" not in r.data and "branches" in r.data:
        samples = max(branches, samples // branches * branches)
    if samples % branches:
        raise r.error(
            "samples",
            f"({samples}) is not a multiple of branches ({branches})",
            f"set samples to a multiple of {branches}, or give 'groups' instead",
        )
    return samples


def parse_conversation(r: Reader, d: SuiteConfig) -> dict[str, Any]:
    """The ``SuiteConfig`` keyword arguments for samples, the multi-turn keys and ``cache_consistency``."""
    turns = r.positive_int("turns", d.turns)
    if turns > MAX_TURNS:
        raise r.error("turns", f"must be at most {MAX_TURNS} (got {turns})", "use fewer turns")
    branches = r.positive_int("branches", d.branches)
    if branches > MAX_BRANCHES:
        raise r.error("branches", f"must be at most {MAX_BRANCHES} (got {branches})", "use fewer branches")
    temperature = r.nonneg_float("temperature", d.temperature)
    if temperature > 2.0:
        raise r.error("temperature", f"must be between 0 and 2 (got {temperature})", "use 0 (greedy) or 1 (sampled)")
    seed = r.data.get("sampling_seed", d.sampling_seed) if "sampling_seed" in r.data else d.sampling_seed
    sampling_seed = None if seed is None else r.nonneg_int("sampling_seed", d.sampling_seed or 0)
    kl_div = r.opt_positive_float("kl_div", d.kl_div)
    delay = r.nonneg_float("request_delay_s", d.request_delay_s)
    if delay > 60.0:
        raise r.error("request_delay_s", f"must be at most 60 seconds (got {delay})", "use a short pause")
    c = r.section("cache_consistency")
    c.only({"prefixes", "cuts", "new_tokens", "top_k"})
    cd = d.cache_consistency
    top_k = c.positive_int("top_k", cd.top_k)
    if top_k > 64:
        raise c.error("top_k", f"must be at most 64 (got {top_k})", "compare fewer top-k entries")
    return {
        "samples": _samples(r, d, branches),
        "turns": turns,
        "branches": branches,
        "interleave": r.boolean("interleave", d.interleave),
        "suffix_tokens": r.int_range("suffix_tokens", d.suffix_tokens),
        "request_batch_size": _opt_positive_int(r, "request_batch_size", d.request_batch_size),
        "request_delay_s": delay,
        "replay_batch_size": _opt_positive_int(r, "replay_batch_size", d.replay_batch_size),
        "temperature": temperature,
        "sampling_seed": sampling_seed,
        "separator": r.choice("separator", d.separator, SEPARATORS),
        "cache_asserts": r.boolean("cache_asserts", d.cache_asserts),
        "mamba_checkpoint_lag": r.nonneg_int("mamba_checkpoint_lag", d.mamba_checkpoint_lag),
        "kl_div": kl_div,
        "cache_consistency": CacheConsistencyOptions(
            prefixes=c.positive_int("prefixes", cd.prefixes),
            cuts=c.positive_int("cuts", cd.cuts),
            new_tokens=_opt_positive_int(c, "new_tokens", cd.new_tokens),
            top_k=top_k,
        ),
    }
