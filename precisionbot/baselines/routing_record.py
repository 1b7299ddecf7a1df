"""MoE routing recorded with a golden baseline: the top-k expert ids per token per layer of every golden sample.

When the engine returns routed experts (its ``/server_info`` says ``enable_return_routed_experts``, SGLang's
server argument, and ``num_experts_per_tok``), ``baseline record`` prefills each golden sample's full token
sequence once more asking for them, and stores them next to the golden arrays: ``routing.npz`` (one
``[tokens, layers x top_k]`` int32 array per sample, ``sample.<i>``) and ``meta.json``'s ``extra.routing``
(``{"version": 1, "top_k": k, "tokens": [...]}``). Versioned: a baseline recorded before routing existed,
or by an engine without it, has no ``extra.routing`` and reads as "no routing recorded", never as an error;
a version this build does not know reads the same way, with the version in the reason.

The prefill asks for input logprobs from position 0, which makes both SGLang and the builtin engine compute
every position (neither reuses a cached prefix below ``logprob_start_len``), so a recording never returns
another request's routing of a shared prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.baselines.catalog import load_arrays
from precisionbot.baselines.record import RunMeta
from precisionbot.baselines.store import CorruptObject, Store
from precisionbot.engines.base import Engine, GenerateRequest, ServerInfo
from precisionbot.results.golden_record import GoldenRecord

ROUTING_KEY = "routing"
VERSION = 1

IntMatrix = npt.NDArray[np.int32]


def routing_top_k(info: ServerInfo) -> tuple[int | None, str]:
    """``(top_k, "")`` when the engine returns routed experts, else ``(None, why not)``."""
    raw = info.raw
    flag = raw.get("enable_return_routed_experts")
    if raw.get("prefix_cache_rules") == "vllm":
        # vLLM 0.32 returns them per choice (base64 of an .npy [tokens, layers, top_k]) only with
        # --enable-return-routed-experts under its Model Runner V2, which needs Triton: its CPU build refuses to
        # start with both ("Model Runner V2 requires Triton"), so the client has no answer of vLLM's to read.
        return None, (
            "precisionbot's vLLM client does not read routed experts: vLLM 0.32 returns them only with "
            "--enable-return-routed-experts under Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1), which needs Triton "
            "(its CPU build refuses to start so: 'Model Runner V2 requires Triton'), so there was no answer to "
            "parse; SGLang with --enable-return-routed-experts and the builtin engine with --model-preset "
            "hybrid-moe are judged"
        )
    if flag is None:
        return None, (
            "the engine does not say it returns routed experts (no enable_return_routed_experts in /server_info): "
            "SGLang returns them with --enable-return-routed-experts on a MoE model; the builtin engine with "
            "--model-preset hybrid-moe"
        )
    if flag is not True:
        return None, (
            "the engine was started without routed experts (enable_return_routed_experts is false): a dense "
            "model, or an SGLang server without --enable-return-routed-experts"
        )
    k = raw.get("num_experts_per_tok")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return None, (
            "the engine returns routed experts but /server_info has no num_experts_per_tok (the model's top-k), "
            "so they cannot be split per layer"
        )
    return k, ""


def routing_requests(sequences: Sequence[Sequence[int]]) -> list[GenerateRequest]:
    """One prefill per sequence, asking for its routed experts at every position (see the module)."""
    return [
        GenerateRequest(tuple(s), max_new_tokens=1, logprob_start_len=0, return_routed_experts=True) for s in sequences
    ]


def prefill_routing(engine: Engine, sequences: Sequence[Sequence[int]]) -> list[IntMatrix] | None:
    """Each sequence's ``[len, layers x top_k]`` routed experts from one prefill; None when the engine answered
    without them."""
    out = []
    for seq, gen in zip(sequences, engine.generate(routing_requests(sequences)), strict=True):
        if gen.routed_experts is None:
            return None
        out.append(gen.routed_experts[: len(seq)])
    return out


@dataclass(frozen=True)
class RoutingRecord:
    """The routed experts of a baseline's golden samples."""

    top_k: int
    samples: tuple[IntMatrix, ...]
    """Per golden sample, ``[tokens, layers x top_k]`` int32 (the sample's full token sequence)."""

    def to_arrays(self) -> dict[str, IntMatrix]:
        return {f"sample.{i}": s.astype(np.int32) for i, s in enumerate(self.samples)}

    def to_extra(self) -> dict[str, Any]:
        return {"version": VERSION, "top_k": self.top_k, "tokens": [int(s.shape[0]) for s in self.samples]}

    @classmethod
    def from_stored(cls, extra: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]], where: str) -> RoutingRecord:
        try:
            tokens = [int(t) for t in extra["tokens"]]
            samples = tuple(np.asarray(arrays[f"sample.{i}"], dtype=np.int32) for i in range(len(tokens)))
            top_k = int(extra["top_k"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptObject(f"routing of baseline {where} is incomplete ({exc!r})") from exc
        if [s.shape[0] for s in samples] != tokens or any(s.ndim != 2 for s in samples):
            raise CorruptObject(f"routing of baseline {where} does not match its recorded token counts")
        return cls(top_k=top_k, samples=samples)


def capture_routing(engine: Engine, sequences: Sequence[Sequence[int]]) -> tuple[RoutingRecord | None, str]:
    """The routing of ``sequences`` for a baseline; ``(None, why)`` when the engine does not return any."""
    top_k, why = routing_top_k(engine.server_info())
    if top_k is None:
        return None, why
    samples = prefill_routing(engine, sequences)
    if samples is None:
        return None, "the engine answered without meta_info.routed_experts although it was asked"
    return RoutingRecord(top_k, tuple(samples)), ""


def golden_sequences(record: GoldenRecord) -> list[tuple[int, ...]]:
    """Each golden sample's full token sequence as both builds prefill it: a decode sample's prompt and the
    tokens the baseline generated (``checks.golden.golden_samples``' rule)."""
    out = []
    for i, ((start, stop), s) in enumerate(zip(record.bounds(), record.samples, strict=True)):
        prompt = tuple(int(t) for t in record.prompt_ids(i))
        out.append(prompt if s.phase == "prefill" else (*prompt, *(int(t) for t in record.token_id[start:stop])))
    return out


def load_routing(store: Store, meta: RunMeta) -> tuple[RoutingRecord | None, str]:
    """The routing recorded with ``meta``, or ``(None, why)``: none recorded (an older baseline, or an engine
    without routed experts) or a version this build does not read."""
    extra = meta.extra.get(ROUTING_KEY)
    if not isinstance(extra, Mapping):
        return None, f"the baseline {meta.run_id} has no routing recorded (recorded without routed experts)"
    version = extra.get("version")
    if version != VERSION:
        return None, f"the baseline {meta.run_id} has routing of version {version!r}; this build reads {VERSION}"
    where = f"{store.uri}/{meta.prefix}"
    return RoutingRecord.from_stored(extra, load_arrays(store, meta, ROUTING_KEY), where), ""
