"""Speculative decoding: propose drafts, verify them in one extend of the target, keep the accepted prefix.

One step for a decoding request whose sequence has ``L`` tokens (options.py: ``speculative_algorithm``,
``speculative_num_draft_tokens`` = ``k + 1``):

1. *propose* up to ``k`` drafts ``d1..dk`` (never more than the tokens left to generate):
   ``NGRAM`` finds the latest earlier occurrence of the sequence's longest suffix (up to ``NGRAM_MAX_WINDOW``
   tokens) and proposes the tokens that followed it; ``STANDALONE`` runs a draft model (the target's first
   layer with the target's embeddings, unembedding and final norm, like an MTP head; its own KV pool at the
   request's slots) greedily for ``k`` tokens;
2. *verify*: one forward of the target over ``[t_{L-1}, d1..dk]`` at positions ``L-1..``: an extend, so its
   numerics are prefill-like (production numerics give decode rows other kernels, model.py), which is why
   a spec run's target logprobs differ from a plain decode's by about ``match``'s noise;
3. *accept*: row ``j`` of the verify is the target's distribution after ``d_j``. The engine draws from it
   with the request's sampler exactly as a plain decode would (argmax at temperature 0) and keeps the draft
   ``d_{j+1}`` when the draw equals it; the first draw that differs (or the draw after the last draft, the
   *bonus* token) ends the step. The proposals are point masses (the draft model proposes its argmax), for
   which this is the rejection sampler: a draft is accepted with the target's probability of it and a
   rejection leaves the target's distribution without it, so every emitted token is distributed as the
   target's own (the sampled path the ``spec_decode`` check tests with its frequency test);
4. *roll back* what the rejected drafts left: their KV sits at positions the next step overwrites (slots are
   per position), and the recurrent state (hybrid preset) has run through them, so it is restored from a copy
   taken before the verify and the accepted tokens are run again (the state after them is what a plain decode
   would have).

Counters (SGLang's names): ``spec_verify_ct`` verify steps, ``spec_draft_token_num`` drafts proposed,
``spec_accept_token_num`` drafts accepted; ``avg_spec_accept_length`` = tokens emitted per verify (the bonus
included, vLLM's ``1 + accepted / drafts``). ``/server_info`` ``internal_states`` shows them, and each
request's own in its ``meta_info`` (as SGLang's does), which lets a check compare acceptance sample by sample.

Faults (each one a bug class of the real spec paths):

* ``spec-verify-offbyone``: the verify extend's positions are one too far (``seq_lens`` for
  ``seq_lens - 1``): every verified token's RoPE, and the KV it writes, is off by one;
* ``spec-kv-rollback``: rejected drafts' KV is left in place: after the next step wrote the accepted tokens
  there, the rejected KV is back at those positions for every later token;
* ``spec-state-rollback``: the recurrent state is not restored after a rejection (it has consumed the
  rejected drafts): the hybrid models' bug class;
* ``spec-bonus-logprob``: the bonus token's reported logprob (and top-k) is the draft model's, not the
  target's (the token itself is the target's; STANDALONE only, and only where the draft scored it);
* ``spec-accept-loose``: at temperature 0 a draft in the target's top 2 is accepted, not only its top 1;
* ``spec-draft-degraded``: the draft buffer is read one slot late (each position gets the next one's draft):
  acceptance falls, the emitted tokens do not change (verification is still exact);
* ``spec-greedy-at-temperature``: at temperature > 0 a draft is accepted when it is the target's argmax,
  without a draw (sglang#31214): greedy parity and logprobs stay right, the sampled distribution does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from precisionbot.builtin.model import Model, Segment
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.recurrent import RecurrentState
from precisionbot.builtin.request import Request
from precisionbot.builtin.sampling import sample_next
from precisionbot.builtin.tokenizer import Vocab
from precisionbot.builtin.weights import ModelWeights

NGRAM_MAX_WINDOW = 8
"""Longest suffix the n-gram proposer matches (it tries shorter ones down to 1 token)."""
DRAFT_LAYERS = 1
"""Layers of the STANDALONE draft: the target's first (a full-attention layer in both presets)."""

SwaSlots = Callable[[Request, int], torch.Tensor | None]
"""The scheduler's SWA bookkeeping: makes room for positions ``[0, end)`` and returns the SWA slots (or None)."""


@dataclass
class _Progress:
    """Per-request state of the speculative path."""

    draft_valid: int = 0
    """Positions whose draft-model KV is right (STANDALONE)."""
    stale: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """``spec-kv-rollback``: position -> the rejected draft's K and V (every full-attention layer) to put back."""


@dataclass
class _Plan:
    req: Request
    drafts: list[int]
    draft_lp: list[torch.Tensor]
    """The draft model's log-softmax row for each draft position (STANDALONE; empty for NGRAM)."""
    saved: RecurrentState | None = None
    """The recurrent state before the verify (hybrid preset), restored after a rejection."""
    stale: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """``spec-kv-rollback``: the rejected drafts' KV of this step, put back after the next one."""


def ngram_drafts(seq: list[int], k: int, max_window: int = NGRAM_MAX_WINDOW) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of ``seq``'s longest matching suffix.

    >>> ngram_drafts([5, 6, 7, 1, 5, 6], 2)
    [7, 1]
    """
    n = len(seq)
    for w in range(min(max_window, n - 1), 0, -1):
        suffix = seq[n - w :]
        # Latest start first: recent text predicts the continuation best (and repeats are what n-gram wins on).
        for start in range(n - w - 1, -1, -1):
            if seq[start : start + w] == suffix:
                return seq[start + w : start + w + k]
    return []


def _copy_state(s: RecurrentState) -> RecurrentState:
    return RecurrentState(
        {k: v.clone() for k, v in s.ssm.items()},
        {k: v.clone() for k, v in s.conv.items()},
        dict(s.checkpoints),
        {k: (m.clone(), u.clone()) for k, (m, u) in s.pending.items()},
    )


def _rewrite_last(req: Request, lp: torch.Tensor) -> None:
    """Replace the logprob entries ``sample_next`` recorded for the last token with those of ``lp``."""
    if not req.logprob.return_logprob:
        return
    token = req.output_ids[-1]
    req.output_logprobs[-1] = (float(lp[token]), token)
    k = req.logprob.top_logprobs_num
    if k > 0:
        values, ids = torch.topk(lp, min(k, lp.shape[-1]))
        req.output_top[-1] = [(float(v), int(i)) for v, i in zip(values.tolist(), ids.tolist(), strict=True)]
    req.output_ids_lp[-1] = [(float(lp[i]), i) for i in req.logprob.token_ids_logprob]


class SpecDecoder:
    """The decode step of a speculative engine (the scheduler calls ``step`` in place of a plain decode)."""

    def __init__(self, options: EngineOptions, model: Model, vocab: Vocab, weights: ModelWeights) -> None:
        algorithm = options.spec_algorithm
        assert algorithm is not None, "SpecDecoder needs a speculative algorithm"
        self.options = options
        self.model = model
        self.vocab = vocab
        self.k = options.speculative_num_draft_tokens - 1
        self.algorithm = algorithm
        self.draft: Model | None = None
        if algorithm == "STANDALONE":
            draft_options = dataclasses.replace(
                options,
                preset="tiny",
                n_layers=DRAFT_LAYERS,
                vocab=options.vocab_name,
                faults=(),
                speculative_algorithm=None,
            )
            draft_weights = dataclasses.replace(weights, layers=weights.layers[:DRAFT_LAYERS])
            self.draft = Model(draft_options, draft_weights, options.kv_pool_tokens, model.device)
        self.progress: dict[Request, _Progress] = {}
        self.stats = {"spec_verify_ct": 0, "spec_draft_token_num": 0, "spec_accept_token_num": 0}

    def internal_state(self) -> dict[str, float | str]:
        """The counters ``/server_info`` shows, and ``avg_spec_accept_length`` (1.0 before any verify)."""
        steps = self.stats["spec_verify_ct"]
        avg = 1.0 + self.stats["spec_accept_token_num"] / steps if steps else 1.0
        return {**self.stats, "avg_spec_accept_length": round(avg, 6), "speculative_algorithm": self.algorithm}

    # ---- one step ------------------------------------------------------------------------------------------
    def step(self, batch: list[Request], swa_slots: SwaSlots) -> list[dict[str, object] | None]:
        """Propose, verify and accept for every request of ``batch``; returns each one's finish reason."""
        # Requests the scheduler failed (an engine error) never finish here: forget them.
        self.progress = {r: p for r, p in self.progress.items() if r.error is None}
        plans = self._propose(batch)
        segments = []
        for plan in plans:
            req = plan.req
            assert req.slots is not None
            start = len(req.seq) - 1
            tokens = [req.output_ids[-1], *plan.drafts]
            if req.rstate is not None:
                plan.saved = _copy_state(req.rstate)
            segments.append(
                Segment(
                    tokens,
                    start,
                    req.slots,
                    1 if self.options.has_fault("spec-verify-offbyone") else 0,
                    req.noise,
                    state=req.rstate,
                    swa_slots=swa_slots(req, start + len(tokens)),
                    generated=len(req.output_ids),
                    rid=req.rid,
                )
            )
        self.model.forward(segments)
        reasons: list[dict[str, object] | None] = []
        rerun: list[Segment] = []
        for plan, seg in zip(plans, segments, strict=True):
            assert seg.out_logits is not None
            kept, reason = self._accept(plan, seg.out_logits)
            reasons.append(reason)
            if plan.drafts and self.draft is not None:
                # Draft KV is right up to the last accepted draft it wrote (it never wrote the last draft's).
                self.progress[plan.req].draft_valid = seg.start + min(kept, len(plan.drafts))
            if kept < len(seg.tokens) and reason is None:
                self._after_rejection(plan, seg, kept, rerun)
            plan.req.computed = len(plan.req.seq) - 1
        if rerun:
            self.model.forward(rerun)
        for plan in plans:
            progress = self.progress[plan.req]
            self._put_back(plan.req, progress.stale)
            progress.stale = plan.stale
        for req, reason in zip(batch, reasons, strict=True):
            if reason is not None:
                self.progress.pop(req, None)
        return reasons

    def _propose(self, batch: list[Request]) -> list[_Plan]:
        """Each request's drafts: at most ``k`` and at most the tokens it has left after this step's first."""
        room = [max(0, min(self.k, r.sampling.max_new_tokens - len(r.output_ids) - 1)) for r in batch]
        # The bug of ``spec-draft-degraded``: the draft buffer is read one slot late (each position gets the
        # next one's draft; the draft model's last slot repeats).
        late = int(self.options.has_fault("spec-draft-degraded"))
        if self.draft is None:
            plans = [
                _Plan(r, ngram_drafts(r.seq, n + late)[late:] if n else [], [])
                for r, n in zip(batch, room, strict=True)
            ]
        else:
            plans = self._draft_model(batch, room)
            for plan in plans if late else []:
                plan.drafts = [*plan.drafts[1:], *plan.drafts[-1:]]
        for plan in plans:
            self.progress.setdefault(plan.req, _Progress())
        return plans

    def _draft_model(self, batch: list[Request], room: list[int]) -> list[_Plan]:
        """Greedy drafts of the draft model, batched: one catch-up extend, then one token per forward."""
        assert self.draft is not None
        plans = [_Plan(r, [], []) for r in batch]
        active = [(p, n) for p, n in zip(plans, room, strict=True) if n > 0]
        segments = []
        for plan, _ in active:
            req = plan.req
            assert req.slots is not None
            state = self.progress.setdefault(req, _Progress())
            seq = req.seq
            segments.append(Segment(seq[state.draft_valid :], state.draft_valid, req.slots, rid=req.rid))
        for step in range(max((n for _, n in active), default=0)):
            if step:
                active = [(p, n) for p, n in active if n > step]
                segments = []
                for p, _ in active:
                    assert p.req.slots is not None
                    position = len(p.req.seq) + step - 1
                    segments.append(Segment([p.drafts[-1]], position, p.req.slots, decode=True, rid=p.req.rid))
            self.draft.forward(segments)
            for (plan, _), seg in zip(active, segments, strict=True):
                assert seg.out_logits is not None
                lp = torch.log_softmax(seg.out_logits[-1], dim=-1)
                plan.drafts.append(int(torch.argmax(lp)))
                plan.draft_lp.append(lp)
        return plans

    def _accept(self, plan: _Plan, logits: torch.Tensor) -> tuple[int, dict[str, object] | None]:
        """Emits the accepted drafts and the bonus token; returns (verified tokens kept, finish reason)."""
        req, drafts = plan.req, plan.drafts
        sp = req.sampling
        greedy = sp.temperature <= 0.0 or sp.top_k == 1
        loose = greedy and self.options.has_fault("spec-accept-loose")
        argmax_accept = not greedy and self.options.has_fault("spec-greedy-at-temperature")
        accepted, reason = 0, None
        for j in range(len(drafts) + 1):
            row = logits[j]
            draft = drafts[j] if j < len(drafts) else None
            if draft is not None and (
                (loose and draft in torch.topk(row, 2).indices.tolist())
                or (argmax_accept and draft == int(torch.argmax(row)))
            ):
                reason = self._emit(req, row, draft, greedy)
                ok = True
            else:
                reason = sample_next(req, row, self.vocab)
                ok = draft is not None and req.output_ids[-1] == draft
                if not ok and j < len(plan.draft_lp) and self.options.has_fault("spec-bonus-logprob"):
                    _rewrite_last(req, plan.draft_lp[j])  # the bug: the draft's logprob for the target's token
            accepted += ok
            if reason is not None or not ok:
                break
        self.stats["spec_verify_ct"] += 1
        self.stats["spec_draft_token_num"] += len(drafts)
        self.stats["spec_accept_token_num"] += accepted
        if req.spec_counts is not None:
            req.spec_counts = [req.spec_counts[0] + 1, req.spec_counts[1] + len(drafts), req.spec_counts[2] + accepted]
        return accepted + 1, reason

    def _emit(self, req: Request, row: torch.Tensor, token: int, greedy: bool) -> dict[str, object] | None:
        """Appends ``token`` (a fault's acceptance, not a draw) with the target's logprobs of it."""
        only = torch.full_like(row, float("-inf"))
        only[token] = row[token]
        reason = sample_next(req, only, self.vocab)
        _rewrite_last(req, torch.log_softmax(row if greedy else row / req.sampling.temperature, dim=-1))
        return reason

    def _after_rejection(self, plan: _Plan, seg: Segment, kept: int, rerun: list[Segment]) -> None:
        """Undo what the rejected drafts (``seg.tokens[kept:]``) left, or, under a fault, leave it."""
        req = plan.req
        if self.options.has_fault("spec-kv-rollback") and self.model.k_pool.shape[0]:
            for pos in range(seg.start + kept, seg.start + len(seg.tokens)):
                slot = int(seg.slots[pos])
                plan.stale[pos] = (self.model.k_pool[:, slot].clone(), self.model.v_pool[:, slot].clone())
        if plan.saved is None or self.options.has_fault("spec-state-rollback"):
            return
        req.rstate = plan.saved
        rerun.append(
            Segment(
                seg.tokens[:kept],
                seg.start,
                seg.slots,
                seg.rope_offset,
                req.noise,
                state=req.rstate,
                swa_slots=seg.swa_slots,
                generated=seg.generated,
                rid=req.rid,
            )
        )

    def _put_back(self, req: Request, stale: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """``spec-kv-rollback``: the rejected KV saved a step before returns at its positions, which this step
        wrote with the accepted tokens' KV: every later token reads the rejected one there."""
        assert req.slots is not None
        for pos, (k, v) in stale.items():
            slot = int(req.slots[pos])
            self.model.k_pool[:, slot] = k
            self.model.v_pool[:, slot] = v
