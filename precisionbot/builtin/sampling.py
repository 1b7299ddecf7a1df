"""Logprobs and sampling, as SGLang reports them.

Prompt (input) logprobs are raw ``log_softmax(logits)``; output logprobs too at temperature 0, and of
``logits / T`` otherwise (SGLang's default, without ``SGLANG_RETURN_ORIGINAL_LOGPROB``).
"""

from __future__ import annotations

import torch

from precisionbot.builtin.request import LogprobEntry, Request
from precisionbot.builtin.tokenizer import Vocab


def _extras(req: Request, lp: torch.Tensor) -> tuple[list[LogprobEntry], list[LogprobEntry]]:
    top: list[LogprobEntry] = []
    k = req.logprob.top_logprobs_num
    if k > 0:
        values, ids = torch.topk(lp, min(k, lp.shape[-1]))
        top = [(float(v), int(i)) for v, i in zip(values.tolist(), ids.tolist(), strict=True)]
    chosen: list[LogprobEntry] = [(float(lp[i]), i) for i in req.logprob.token_ids_logprob]
    return top, chosen


def record_input_logprobs(req: Request, start: int, logits: torch.Tensor) -> None:
    """Stores the prompt logprobs that rows ``start ..`` of a prefill chunk predict.

    Row ``p`` predicts token ``p + 1``; entries exist for positions after ``logprob_start_len`` (whose own
    entry is the null first one) up to the last prompt token.
    """
    if not req.logprob.return_logprob:
        return
    first = max(start, req.logprob.logprob_start_len)
    last = min(start + logits.shape[0], len(req.input_ids) - 1)  # rows [first, last) predict prompt tokens
    if last <= first:
        return
    lp = torch.log_softmax(logits[first - start : last - start], dim=-1)
    targets = torch.tensor(req.input_ids[first + 1 : last + 1], dtype=torch.int64)
    values = lp.gather(1, targets[:, None])[:, 0].tolist()
    req.input_logprobs.extend((float(v), int(t)) for v, t in zip(values, targets.tolist(), strict=True))
    if req.logprob.top_logprobs_num > 0 or req.logprob.token_ids_logprob:
        for row in lp:
            top, chosen = _extras(req, row)
            req.input_top.append(top)
            req.input_ids_lp.append(chosen)
    else:
        req.input_top.extend([] for _ in range(last - first))
        req.input_ids_lp.extend([] for _ in range(last - first))


def sample_next(req: Request, logits: torch.Tensor, vocab: Vocab) -> dict[str, object] | None:
    """Picks the next token from ``logits`` ([V] float32), records its logprobs; returns a finish reason or None."""
    sp = req.sampling
    greedy = sp.temperature <= 0.0 or sp.top_k == 1
    lp = torch.log_softmax(logits if greedy else logits / sp.temperature, dim=-1)
    if greedy:
        token = int(torch.argmax(lp))
    else:
        probs = lp.double().exp()
        if sp.top_k > 0:
            kth = torch.topk(probs, min(sp.top_k, probs.shape[0])).values[-1]
            probs = torch.where(probs >= kth, probs, 0.0)
        if sp.top_p < 1.0:
            order = torch.argsort(probs, descending=True)
            cum = torch.cumsum(probs[order], 0)
            drop = order[(cum - probs[order]) > sp.top_p * float(probs.sum())]
            probs[drop] = 0.0
        if sp.min_p > 0.0:
            probs = torch.where(probs >= sp.min_p * probs.max(), probs, 0.0)
        token = int(torch.multinomial(probs / probs.sum(), 1, generator=req.generator))
    req.output_ids.append(token)
    if req.logprob.return_logprob:
        req.output_logprobs.append((float(lp[token]), token))
        top, chosen = _extras(req, lp)
        req.output_top.append(top)
        req.output_ids_lp.append(chosen)
    if token in sp.stop_token_ids or (token == vocab.eos_id and not sp.ignore_eos):
        return {"type": "stop", "matched": token}
    if sp.stop:
        text = vocab.decode(req.output_ids)
        for stop in sp.stop:
            if stop in text:
                return {"type": "stop", "matched": stop}
    if len(req.output_ids) >= sp.max_new_tokens:
        return {"type": "length", "length": len(req.output_ids)}
    return None
