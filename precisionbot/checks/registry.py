"""Check functions by name. Adding a check is one line here: ``"name": CheckSpec(fn, units)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from precisionbot.checks import multiturn
from precisionbot.checks.batch_invariance import check_batch_invariance
from precisionbot.checks.cache_consistency import cache_consistency_units, check_cache_consistency
from precisionbot.checks.consistency import check_decode_cache_hit, check_match, check_prefill_cache_hit
from precisionbot.checks.context import CheckContext, CheckFn
from precisionbot.checks.golden import check_golden
from precisionbot.checks.layers import check_layers
from precisionbot.checks.routing import check_routing
from precisionbot.checks.spec_decode import check_spec_decode


def _per_sample(n: int) -> Callable[[CheckContext], int]:
    return lambda ctx: n * ctx.suite.samples


def _shaped(single: CheckFn, multi: CheckFn, single_units: int, name: str) -> CheckSpec:
    """A helper in its single-turn shape (kl_test_utils) or, with turns/branches, its multi-turn shape."""
    multi_units = multiturn.planned_units(name)
    return CheckSpec(
        lambda ctx: multi(ctx) if ctx.suite.multi_turn else single(ctx),
        lambda ctx: multi_units(ctx) if ctx.suite.multi_turn else single_units * ctx.suite.samples,
    )


@dataclass(frozen=True)
class CheckSpec:
    run: CheckFn
    units: Callable[[CheckContext], int] | None = None
    """Progress units the check reports through ``ctx.progress.advance`` (for the ETA); None = one per sample."""

    def planned_units(self, ctx: CheckContext) -> int:
        return ctx.suite.samples if self.units is None else self.units(ctx)


CHECKS: Mapping[str, CheckSpec] = {
    "match": _shaped(check_match, multiturn.check_match_multiturn, 2, "match"),
    "prefill_cache_hit": _shaped(
        check_prefill_cache_hit, multiturn.check_prefill_cache_hit_multiturn, 3, "prefill_cache_hit"
    ),
    "decode_cache_hit": _shaped(
        check_decode_cache_hit, multiturn.check_decode_cache_hit_multiturn, 3, "decode_cache_hit"
    ),
    "cache_consistency": CheckSpec(check_cache_consistency, cache_consistency_units),
    "golden": CheckSpec(check_golden, _per_sample(0)),
    "batch_invariance": CheckSpec(check_batch_invariance, _per_sample(0)),
    "layers": CheckSpec(check_layers, _per_sample(0)),
    "routing": CheckSpec(check_routing, _per_sample(0)),
    "spec_decode": CheckSpec(check_spec_decode),
}
"""Registered checks. A configured check with no entry is INCONCLUSIVE, never skipped silently."""
