"""Check functions by name. Adding a check is one line here: ``"name": CheckSpec(fn, units)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from precisionbot.checks.batch_invariance import check_batch_invariance
from precisionbot.checks.consistency import check_decode_cache_hit, check_match, check_prefill_cache_hit
from precisionbot.checks.context import CheckContext, CheckFn
from precisionbot.checks.golden import check_golden
from precisionbot.checks.layers import check_layers


def _per_sample(n: int) -> Callable[[CheckContext], int]:
    return lambda ctx: n * ctx.suite.samples


@dataclass(frozen=True)
class CheckSpec:
    run: CheckFn
    units: Callable[[CheckContext], int] | None = None
    """Progress units the check reports through ``ctx.progress.advance`` (for the ETA); None = one per sample."""

    def planned_units(self, ctx: CheckContext) -> int:
        return ctx.suite.samples if self.units is None else self.units(ctx)


CHECKS: Mapping[str, CheckSpec] = {
    "match": CheckSpec(check_match, _per_sample(2)),
    "prefill_cache_hit": CheckSpec(check_prefill_cache_hit, _per_sample(3)),
    "decode_cache_hit": CheckSpec(check_decode_cache_hit, _per_sample(3)),
    "golden": CheckSpec(check_golden, _per_sample(0)),
    "batch_invariance": CheckSpec(check_batch_invariance, _per_sample(0)),
    "layers": CheckSpec(check_layers, _per_sample(0)),
}
"""Registered checks. A configured check with no entry is INCONCLUSIVE, never skipped silently."""
