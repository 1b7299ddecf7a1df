"""Main's stored acceptance for a ``spec_decode`` run: the reruns ``baseline record`` kept with the golden
baseline of the run's signature, recorded with the same suite sizes and speculation
(``baselines.spec_acceptance``), or why there are none to judge against."""

from __future__ import annotations

from precisionbot.baselines.spec_acceptance import SIZES_DIFFER, UNUSABLE, acceptance_params, select_acceptance
from precisionbot.checks.context import CheckContext
from precisionbot.checks.golden import target_from_context
from precisionbot.engines.base import Engine
from precisionbot.errors import DataError, EngineError, StoreError
from precisionbot.scoring.spec_rules import MainAcceptance

STORE_FAILED = "the baseline store failed"
SKIPPED_SHOWN = (SIZES_DIFFER, UNUSABLE, STORE_FAILED)
"""How a reason starts when main's stored acceptance was set up and still not used (shown beyond result.json)."""


def stored_main(ctx: CheckContext, spec_arm: Engine) -> MainAcceptance | str:
    """Main's stored acceptance for this run (its signature, its suite's sizes, ``spec_arm``'s speculation);
    else why not, in words. An engine or corpus problem, or a store that fails, is a reason too: the check's
    other parts stand, and acceptance falls back to what the check does without a stored figure."""
    if not ctx.config.baselines.vs_main:
        return "baselines.vs_main is off"
    if ctx.store is None:
        return "no baseline store was given (--baseline-store or baselines.store)"
    try:
        params = acceptance_params(ctx.suite, spec_arm.server_info().raw)
        target = target_from_context(ctx)
        found, why = select_acceptance(ctx.store, target.model, target.signature().digest, params)
    except (EngineError, DataError) as exc:
        return f"could not find the run's signature: {exc}"
    except StoreError as exc:
        return f"{STORE_FAILED}: {exc}"
    if found is None:
        return str(why)
    assert not isinstance(why, str)
    return why.main(found.run_id)
