"""The ``routing`` check: do MoE tokens still go to the same experts, and which layer's router moved first?

A router picks experts by comparing logits, so a small numeric change (a kernel's rounding, fp8 weights or
logits) sends some tokens to other experts, and those tokens then run a different MLP. TRT-LLM#14464 flipped
about 3 % of FP8 elements, sent 12-15 % of tokens to other experts and cost 9.5 GSM8K points; golden's logprobs
saw it only diluted through the rest of the model. The routed expert ids per token per layer (SGLang's
``--enable-return-routed-experts``, vLLM's ``enable_return_routed_experts``) see it directly. Two comparisons,
each per MoE layer (``metrics.routing``: exact top-k set agreement and Jaccard):

* **decode vs prefill** — the suite's prompts are decoded greedily for ``max_new_tokens``, asking for routed
  experts, and the same tokens (prompt + output) prefilled again; the generated positions' routing from the
  decode steps is compared with the prefill's. Like ``match``, but for routers. Judged against an absolute floor
  (``PATH_FLOOR``): a clean engine's two paths differ only where two router logits tie within the paths' own
  rounding.
* **PR vs baseline** — the golden baseline of the run's signature stores the routing of its golden samples
  (``baselines.routing_record``); the PR's build prefills the same sequences and is compared with it. With
  routing from two or more of the baseline's producers (main's reruns, ``--producer``), a layer is judged
  against main's own disagreement there (``metrics.routing.noise_floor``); otherwise against
  ``BASELINE_FLOOR``.

The first layer below its floor is named: a router fault moves its own layer first and every later layer
after it (their inputs changed), so the first moved layer is where to look. An engine that does not return
routed experts makes the check INCONCLUSIVE with the reason, never a fail; so does a run where neither
comparison could be made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from precisionbot.baselines import select_golden
from precisionbot.baselines.routing_record import golden_sequences, load_routing, prefill_routing, routing_top_k
from precisionbot.checks.context import CheckContext
from precisionbot.checks.golden import target_from_context
from precisionbot.engines.base import GenerateRequest
from precisionbot.errors import StoreError
from precisionbot.metrics.routing import (
    BASELINE_FLOOR,
    PATH_FLOOR,
    LayerAgreement,
    agreement,
    noise_floor,
    pool,
    share,
)
from precisionbot.results import CheckOutput, CheckResult, Verdict

NAME = "routing"


@dataclass(frozen=True)
class Arm:
    """One comparison: its per-layer agreement, each layer's floor, and what the floors came from."""

    name: str
    layers: tuple[LayerAgreement, ...]
    floors: dict[int, float]
    judged_by: str

    @property
    def moved(self) -> list[LayerAgreement]:
        return [la for la in self.layers if la.exact < self.floors[la.layer]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "judged_by": self.judged_by,
            "layers": [{**la.to_dict(), "floor": self.floors[la.layer]} for la in self.layers],
            "first_moved_layer": self.moved[0].layer if self.moved else None,
        }


def path_arm(ctx: CheckContext, top_k: int) -> Arm | str:
    """Decode vs prefill on the suite's prompts; a string says why it could not be compared."""
    n_new = ctx.suite.max_new_tokens
    if n_new < 2:
        return f"decode vs prefill needs max_new_tokens >= 2 (the suite has {n_new}): no decode step is routed"
    prompts = ctx.prompts()
    decoded = ctx.engine.generate([GenerateRequest(tuple(p), n_new, return_routed_experts=True) for p in prompts])
    sequences = [(*p, *g.output_ids) for p, g in zip(prompts, decoded, strict=True)]
    prefilled = prefill_routing(ctx.engine, sequences)
    if prefilled is None or any(g.routed_experts is None for g in decoded):
        return "the engine answered without meta_info.routed_experts although it was asked"
    parts = []
    for p, g, pre in zip(prompts, decoded, prefilled, strict=True):
        assert g.routed_experts is not None
        # Rows len(p) .. seqlen - 2 were computed by decode steps (the last output token is never forwarded).
        rows = slice(len(p), len(p) + len(g.output_ids) - 1)
        parts.append(agreement(g.routed_experts[rows], pre[rows], top_k))
    layers = tuple(pool(parts))
    return Arm("decode vs prefill", layers, {la.layer: PATH_FLOOR for la in layers}, "absolute floor")


def baseline_arm(ctx: CheckContext, top_k: int) -> Arm | str:
    """PR vs the golden baseline's recorded routing; a string says why it could not be compared."""
    if ctx.store is None:
        return "no baseline store was given (--store or baselines.store)"
    try:
        target = target_from_context(ctx)
        digest = target.signature().digest
        found = select_golden(ctx.store, target.model, digest)
        if found is None:
            return f"no golden baseline of model {target.model!r} with signature {digest}"
        producers, records = found
        stored = [load_routing(ctx.store, m) for m in producers]
    except StoreError as exc:
        return f"the baseline store failed: {exc}"
    base, why = stored[0]
    if base is None:
        return why
    if base.top_k != top_k:
        return f"the baseline's routing is top-{base.top_k}, this engine routes top-{top_k}: re-record the baseline"
    candidate = prefill_routing(ctx.engine, golden_sequences(records[0]))
    if candidate is None:
        return "the engine answered without meta_info.routed_experts although it was asked"
    try:
        layers = tuple(pool([agreement(b, c, top_k) for b, c in zip(base.samples, candidate, strict=True)]))
        others = [r for r, _ in stored[1:] if r is not None and r.top_k == top_k]
        mains = [pool([agreement(b, o, top_k) for b, o in zip(base.samples, r.samples, strict=True)]) for r in others]
    except ValueError as exc:  # another layer count or sample layout: not the same model's routing
        return f"the baseline {producers[0].run_id}'s routing does not line up with this run ({exc}); re-record it"
    if not mains:
        floors = {la.layer: BASELINE_FLOOR for la in layers}
        return Arm("PR vs baseline", layers, floors, "absolute floor: no other producer's routing gives main's noise")
    floors = {}
    for la in layers:
        seen = [m.exact for run in mains for m in run if m.layer == la.layer]
        floors[la.layer] = noise_floor(min(seen), la.tokens) if seen else BASELINE_FLOOR
    return Arm("PR vs baseline", layers, floors, f"main's noise over {len(mains) + 1} producers")


def describe(arm: Arm) -> str:
    """One reason line for an arm: the first moved layer and the layers after it, or the lowest agreement."""
    moved = arm.moved
    if not moved:
        low = min(arm.layers, key=lambda la: la.exact)
        return (
            f"routing agrees in every MoE layer ({arm.name}; layers {', '.join(str(la.layer) for la in arm.layers)}): "
            f"lowest layer {low.layer}: {share(low.exact)} of {low.tokens} tokens keep their experts "
            f"(Jaccard {low.jaccard:.3f}), at or above {share(arm.floors[low.layer])} ({arm.judged_by})"
        )
    first, rest = moved[0], moved[1:]
    line = (
        f"routing moved first at layer {first.layer} ({arm.name}): {share(first.exact)} of {first.tokens} tokens "
        f"keep their top-k experts (Jaccard {first.jaccard:.3f}; {first.moved} moved), below "
        f"{share(arm.floors[first.layer])} ({arm.judged_by})"
    )
    if rest:
        line += "; also below at " + ", ".join(f"layer {la.layer} ({share(la.exact)})" for la in rest)
    return line


def judge(arms: Sequence[Arm], skipped: Sequence[str]) -> CheckResult:
    """FAIL when a layer of any arm is below its floor; PASS when every compared layer is at or above it;
    INCONCLUSIVE when nothing was compared. Skipped comparisons are listed with their reason."""
    compared = [a for a in arms if a.layers]
    notes = [f"not compared: {why}" for why in skipped]
    if not compared:
        why = "; ".join(skipped) or "no MoE layer returned routing"
        return CheckResult.inconclusive(NAME, f"no routing comparison could be made: {why}")
    failing = [a for a in compared if a.moved]
    reasons = [describe(a) for a in failing or compared]
    if failing:
        reasons += [describe(a) for a in compared if not a.moved]
    first = min((a.moved[0].layer for a in failing), default=None)
    stats: dict[str, Any] = {
        "first_moved_layer": first,
        "min_exact": min(la.exact for a in compared for la in a.layers),
        **{_key(a.name): a.to_dict() for a in compared},
    }
    return CheckResult(
        name=NAME,
        verdict=Verdict.FAIL if failing else Verdict.PASS,
        reasons=(*reasons, *notes),
        stats=stats,
    )


def _key(arm_name: str) -> str:
    return {"decode vs prefill": "path", "PR vs baseline": "baseline"}[arm_name]


def check_routing(ctx: CheckContext) -> CheckOutput:
    """The registry entry (module docstring)."""
    ctx.progress.phase(NAME)
    top_k, why = routing_top_k(ctx.engine.server_info())
    if top_k is None:
        return CheckOutput(CheckResult.inconclusive(NAME, f"routing not applicable: {why}"))
    arms: list[Arm] = []
    skipped: list[str] = []
    for found in (path_arm(ctx, top_k), baseline_arm(ctx, top_k)):
        if isinstance(found, str):
            skipped.append(found)
        else:
            arms.append(found)
    return CheckOutput(judge(arms, skipped))
