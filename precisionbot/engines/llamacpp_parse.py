"""Validation of llama-server ``/completion`` answers (pure): token ids, per-token logprobs, top-k, cache use.

Facts (llama.cpp vendored in llama-cpp-python 0.3.36): with ``n_probs`` the answer carries
``completion_probabilities = [{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}]``, the
logprobs computed from the raw logits (before samplers); ``return_tokens`` adds ``tokens`` (every generated id);
``timings.cache_n`` is the number of prompt tokens reused from the cache (``tokens_cached`` is something else:
prompt + generated tokens in the slot). A token that leaves an incomplete UTF-8 character at the end of the text
gets no entry (its entry is dropped, and the entry of the token that completes the character carries the
joined text), so entries are lined up with ``tokens`` by id, from the end; a token without an entry is
reported in ``missing`` for the client to score otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionbot.engines.logprobs import logprob
from precisionbot.errors import EngineError


def _fail(what: str, problem: str) -> EngineError:
    return EngineError(f"llama-server answer to {what}: {problem}")


def _int(value: Any, what: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 2**31 - 1:
        raise _fail(what, f"{field} must be a non-negative integer (got {str(value)[:40]!r})")
    return value


@dataclass(frozen=True)
class Entry:
    """One ``completion_probabilities`` item: the sampled token, its logprob and the top-k (descending)."""

    token_id: int
    logprob: float
    top_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]

    def logprob_of(self, token_id: int) -> float | None:
        """The logprob of ``token_id`` in this position's distribution, when the answer lists it."""
        if token_id == self.token_id:
            return self.logprob
        for tid, lp in zip(self.top_ids, self.top_logprobs, strict=True):
            if tid == token_id:
                return lp
        return None


@dataclass(frozen=True)
class Completion:
    """A validated ``/completion`` answer. ``entries[j]`` scores ``tokens[j]``; None where the server gave none."""

    tokens: tuple[int, ...]
    entries: tuple[Entry | None, ...]
    cached_tokens: int
    prompt_tokens: int

    @property
    def missing(self) -> tuple[int, ...]:
        return tuple(j for j, e in enumerate(self.entries) if e is None)


def _top_fast(top: list[Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """``(ids, logprobs)`` of well-formed top-k items; None = let the slow path name the bad item."""
    try:
        ids = [item["id"] for item in top]
        lps = [item["logprob"] for item in top]
    except (TypeError, KeyError):
        return None
    if {type(x) for x in ids} - {int} or {type(x) for x in lps} - {int, float}:
        return None
    id_arr = np.array(ids, dtype=np.int64)
    lp_arr = np.array(lps, dtype=np.float64)
    if (id_arr < 0).any() or (id_arr > 2**31 - 1).any() or np.isnan(lp_arr).any() or (lp_arr > 1e-3).any():
        return None
    return id_arr, lp_arr


def parse_entry(raw: Any, what: str, field: str) -> Entry:
    if not isinstance(raw, Mapping):
        raise _fail(what, f"{field} is not an object (got {type(raw).__name__})")
    token_id = _int(raw.get("id"), what, f"{field}.id")
    lp = logprob(raw.get("logprob"), 0, f"{field}.logprob")
    top = raw.get("top_logprobs")
    if not isinstance(top, list):
        raise _fail(what, f"{field}.top_logprobs is missing (was n_probs sent, and post_sampling_probs false?)")
    fast = _top_fast(top)
    if fast is not None:  # a whole-vocabulary answer has ~10^5 items: validate them vectorised
        order = np.argsort(-fast[1], kind="stable")
        return Entry(token_id, lp, tuple(fast[0][order].tolist()), tuple(fast[1][order].tolist()))
    ids: list[int] = []
    lps: list[float] = []
    for k, item in enumerate(top):
        if not isinstance(item, Mapping):
            raise _fail(what, f"{field}.top_logprobs[{k}] is not an object")
        ids.append(_int(item.get("id"), what, f"{field}.top_logprobs[{k}].id"))
        lps.append(logprob(item.get("logprob"), 0, f"{field}.top_logprobs[{k}].logprob"))
    order = np.argsort(-np.asarray(lps, dtype=np.float64), kind="stable")
    return Entry(token_id, lp, tuple(ids[i] for i in order), tuple(lps[i] for i in order))


def line_up(tokens: Sequence[int], entries: Sequence[Entry], what: str) -> tuple[Entry | None, ...]:
    """Pair entries with tokens from the end (a dropped entry is always followed by the one that completes the
    character, so the last token of a run has the entry); tokens left without one get None."""
    out: list[Entry | None] = [None] * len(tokens)
    j = len(entries) - 1
    for t in range(len(tokens) - 1, -1, -1):
        if j >= 0 and entries[j].token_id == tokens[t]:
            out[t] = entries[j]
            j -= 1
    if j >= 0:
        raise _fail(what, f"completion_probabilities has {j + 1} entries that match no generated token")
    return tuple(out)


def parse_completion(answer: Any, what: str, *, prompt_tokens: int, n_predict: int, exact: bool) -> Completion:
    """Check one ``/completion`` answer sent with ``return_tokens`` and ``n_probs > 0``."""
    if not isinstance(answer, Mapping):
        raise _fail(what, f"expected a JSON object, got {type(answer).__name__}")
    tokens = answer.get("tokens")
    if not isinstance(tokens, list):
        raise _fail(what, "tokens is missing (is this llama-server with return_tokens support?)")
    ids = tuple(_int(t, what, f"tokens[{k}]") for k, t in enumerate(tokens))
    if len(ids) > n_predict or (exact and len(ids) != n_predict):
        raise _fail(what, f"{len(ids)} generated tokens, expected {n_predict} (n_predict with ignore_eos)")
    evaluated = answer.get("tokens_evaluated")
    if evaluated is not None and _int(evaluated, what, "tokens_evaluated") != prompt_tokens:
        raise _fail(what, f"tokens_evaluated is {evaluated}, but {prompt_tokens} prompt tokens were sent")
    timings = answer.get("timings")
    if not isinstance(timings, Mapping):
        raise _fail(what, "timings is missing (needed for timings.cache_n, the reused prompt tokens)")
    cached = _int(timings.get("cache_n", 0), what, "timings.cache_n")
    if cached > prompt_tokens:
        raise _fail(what, f"timings.cache_n is {cached}, more than the {prompt_tokens} prompt tokens")
    raw = answer.get("completion_probabilities", [])
    if not isinstance(raw, list):
        raise _fail(what, "completion_probabilities is not a list")
    entries = [parse_entry(e, what, f"completion_probabilities[{k}]") for k, e in enumerate(raw)]
    return Completion(ids, line_up(ids, entries, what), cached, prompt_tokens)


def top_arrays(entries: Sequence[Entry], k: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(ids[n, k], logprobs[n, k])`` from entries that each list at least ``k`` top tokens."""
    ids = np.full((len(entries), k), -1, dtype=np.int32)
    lps = np.full((len(entries), k), np.nan, dtype=np.float64)
    for j, e in enumerate(entries):
        if len(e.top_ids) < k:
            raise EngineError(f"llama-server listed {len(e.top_ids)} top tokens where {k} were asked (n_probs)")
        ids[j] = e.top_ids[:k]
        lps[j] = e.top_logprobs[:k]
    return ids, lps
