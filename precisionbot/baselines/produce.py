"""Running the golden corpus through an engine: the plan (which prompts), the requests, the record.

Prefill: every chosen document is sent once as a pure prefill (``max_new_tokens = 0``,
``logprob_start_len = 0``, ``top_logprobs_num = k``), so every position from 1 to the deepest configured
depth is scored and the depth of a row is its position. Decode: the same document is the prompt of a greedy
generation (``temperature = 0``, ``ignore_eos``) of ``decode_steps`` tokens with top-k at every step, so
decode-path kernels are scored at full depth too. The cache is flushed first, so a run does not depend on what
the engine served before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from precisionbot.baselines.host import host_parts
from precisionbot.baselines.signature import Signature, hash_params, normalize_engine_args
from precisionbot.config import GoldenOptions
from precisionbot.corpus import Document
from precisionbot.engines.base import Engine, GenerateRequest, ServerInfo
from precisionbot.errors import DataError, EngineError
from precisionbot.results.golden_record import GoldenRecord, GoldenSample

PLAN_FORMAT = 1

SERVER_ARG_KEYS = (
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "attention_backend",
    "sampling_backend",
    "chunked_prefill_size",
    "page_size",
    "disable_radix_cache",
    "enable_deterministic_inference",
    "max_running_requests",
    "random_seed",
    "seed",
    "context_length",
    "num_layers",
    "hidden_size",
)
"""``/server_info`` keys that change the numbers; used for the signature when the launch args are unknown.
Never the builtin engine's ``faults``: a fault is what a candidate build changes, like a commit."""


@dataclass(frozen=True)
class PlannedDoc:
    name: str
    kind: str
    input_ids: tuple[int, ...]


@dataclass(frozen=True)
class GoldenPlan:
    docs: tuple[PlannedDoc, ...]
    top_k: int
    decode_steps: int


CHARS_PER_TOKEN_MAX = 6
"""Enough text per document for the deepest depth under any tokenizer we know (BPE ~4 chars a token)."""


def choose_documents(documents: Sequence[Document], docs_per_kind: int, depth: int) -> list[Document]:
    """``docs_per_kind`` long documents of each kind: consecutive corpus documents of that kind joined until
    they hold enough text for ``depth`` tokens (the corpus's documents are often shorter). Deterministic."""
    chosen: list[Document] = []
    for kind in sorted({d.kind for d in documents}):
        pool = [d for d in documents if d.kind == kind]
        i = 0
        for _ in range(docs_per_kind):
            if i >= len(pool):
                break
            names: list[str] = []
            texts: list[str] = []
            ids: list[int] = []
            while (
                i < len(pool)
                and max(sum(map(len, texts)), CHARS_PER_TOKEN_MAX * len(ids)) < CHARS_PER_TOKEN_MAX * depth
            ):
                names.append(pool[i].name)
                if pool[i].text is not None:
                    texts.append(pool[i].text or "")
                else:
                    ids.extend(pool[i].input_ids or ())
                i += 1
            name = names[0] + (f"+{len(names) - 1}" if len(names) > 1 else "")
            if texts and not ids:
                chosen.append(Document(name, kind, text="\n\n".join(texts)[: CHARS_PER_TOKEN_MAX * depth]))
            elif ids and not texts:
                chosen.append(Document(name, kind, input_ids=tuple(ids[:depth])))
            else:
                raise DataError(f"golden corpus mixes text and input_ids rows of kind {kind!r}; use one form")
    if not chosen:
        raise DataError("the golden corpus is empty; point suites.<name>.corpus at a JSONL with rows")
    return chosen


def corpus_hash(documents: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in documents:
        h.update(f"{d.name}\0{d.kind}\0".encode())
        if d.text is not None:
            h.update(d.text.encode())
        else:
            h.update(np.asarray(d.input_ids, dtype=np.int64).tobytes())
        h.update(b"\1")
    return h.hexdigest()[:16]


TOKENIZE_PIECE_CHARS = 4000
"""Text is tokenized in pieces of at most this many characters (cut at a newline where possible): the engine
tokenizes through ``/generate``, which refuses prompts beyond its context length."""


def _pieces(text: str) -> list[str]:
    out = []
    while text:
        cut = len(text) if len(text) <= TOKENIZE_PIECE_CHARS else text.rfind("\n", 0, TOKENIZE_PIECE_CHARS) + 1
        if cut <= 0:
            cut = TOKENIZE_PIECE_CHARS
        out.append(text[:cut])
        text = text[cut:]
    return out


def _tokenize_long(engine: Engine, texts: Sequence[str]) -> list[tuple[int, ...]]:
    """Each text's ids, tokenized piece by piece; a BOS the engine puts before every piece is kept once."""
    probe = engine.tokenize(["a", "b"])
    bos = probe[0][0] if len(probe[0]) > 1 and len(probe[1]) > 1 and probe[0][0] == probe[1][0] else None
    pieces = [_pieces(t) for t in texts]
    flat = engine.tokenize([p for ps in pieces for p in ps]) if any(pieces) else []
    out, i = [], 0
    for ps in pieces:
        ids: list[int] = []
        for j in range(len(ps)):
            piece = list(flat[i + j])
            ids.extend(piece[1:] if j and bos is not None and piece[:1] == [bos] else piece)
        i += len(ps)
        out.append(tuple(ids))
    return out


def plan_from_corpus(engine: Engine, documents: Sequence[Document], options: GoldenOptions) -> GoldenPlan:
    """Tokenize (by the engine) and cut each document to the deepest configured depth."""
    depth = max(options.context_depths)
    texts = [d.text for d in documents if d.text is not None]
    ids_of_texts = iter(_tokenize_long(engine, texts))
    docs = []
    for d in documents:
        ids = tuple(d.input_ids) if d.input_ids is not None else next(ids_of_texts)
        if len(ids) < 2:
            raise DataError(f"golden corpus document {d.name!r} has fewer than 2 tokens")
        docs.append(PlannedDoc(d.name, d.kind, ids[:depth]))
    return GoldenPlan(tuple(docs), options.top_k, options.decode_steps)


def plan_from_record(record: GoldenRecord, decode_steps: int) -> GoldenPlan:
    """The baseline's exact prompts, so the candidate scores the same token ids."""
    docs = tuple(
        PlannedDoc(s.doc, s.kind, record.prompt_ids(i)) for i, s in enumerate(record.samples) if s.phase == "prefill"
    )
    return GoldenPlan(docs, record.top_k, decode_steps)


class RequestProgress(Protocol):
    """Told the number of requests first (``start``), then each batch of finished ones (``__call__``)."""

    def start(self, total: int) -> None: ...

    def __call__(self, n: int) -> None: ...


def produce(
    engine: Engine, plan: GoldenPlan, texts: list[str] | None = None, progress: RequestProgress | None = None
) -> GoldenRecord:
    """Run the plan's prefill and decode requests; one row per scored position. With ``texts`` (a list to
    fill), the engine is asked for token text and ``texts`` receives one string per row (for reports)."""
    want_text = texts is not None
    k = plan.top_k
    if progress is not None:
        progress.start(len(plan.docs) * (2 if plan.decode_steps > 0 else 1))
    engine.flush_cache()
    prefill = engine.generate(
        [
            GenerateRequest(
                d.input_ids, max_new_tokens=0, logprob_start_len=0, top_logprobs_num=k, return_text=want_text
            )
            for d in plan.docs
        ],
        progress=progress,
    )
    samples: list[GoldenSample] = []
    parts: list[Mapping[str, Any]] = []
    for d, g in zip(plan.docs, prefill, strict=True):
        if g.input_top is None or len(g.input_logprobs) != len(d.input_ids):
            raise EngineError(f"prefill of golden document {d.name!r} returned no input top-k logprobs")
        samples.append(
            GoldenSample(
                "prefill", d.name, d.kind, len(d.input_ids), 1, len(d.input_ids) - 1, first_token=d.input_ids[0]
            )
        )
        parts.append(
            {
                "token_id": np.asarray(d.input_ids[1:]),
                "lp": g.input_logprobs[1:],
                "top_ids": g.input_top.ids[1:],
                "top_lp": g.input_top.logprobs[1:],
            }
        )
        if texts is not None:
            texts.extend(_texts(g.input_token_text[1:], len(d.input_ids) - 1))
    if plan.decode_steps > 0:
        decode = engine.generate(
            [
                GenerateRequest(
                    d.input_ids, max_new_tokens=plan.decode_steps, top_logprobs_num=k, return_text=want_text
                )
                for d in plan.docs
            ],
            progress=progress,
        )
        for i, (d, g) in enumerate(zip(plan.docs, decode, strict=True)):
            if g.output_top is None:
                raise EngineError(f"decode of golden document {d.name!r} returned no output top-k logprobs")
            samples.append(
                GoldenSample("decode", d.name, d.kind, len(d.input_ids), len(d.input_ids), len(g.output_ids), source=i)
            )
            parts.append(
                {
                    "token_id": np.asarray(g.output_ids),
                    "lp": g.output_logprobs,
                    "top_ids": g.output_top.ids,
                    "top_lp": g.output_top.logprobs,
                }
            )
            if texts is not None:
                texts.extend(_texts(g.output_token_text, len(g.output_ids)))
    record = GoldenRecord.build(samples, parts)
    if np.any(record.top_ids < 0):
        raise EngineError("the engine returned fewer top-k entries than asked at some golden position")
    return record


def _texts(values: Sequence[str | None], n: int) -> list[str]:
    out = [v or "" for v in values[:n]]
    return out + [""] * (n - len(out))


def golden_signature(
    info: ServerInfo,
    *,
    model: str,
    corpus: str,
    options: GoldenOptions,
    docs_per_kind: int,
    engine_args: str | Sequence[str] | None = None,
    revision: str | None = None,
    documents: Sequence[str] | None = None,
) -> Signature:
    """Everything that must match between a baseline and a candidate (not the engine commit). ``documents``:
    the corpus' document names, kept readable next to its hash (``signature.DETAILS_KEY``) with the check
    parameters, so that a mismatch says what differs in words."""
    raw = info.raw
    keys: tuple[str, ...] = SERVER_ARG_KEYS
    if "faults" in raw:  # the builtin engine derives this flag from its faults, which are the change under test
        keys = tuple(k for k in keys if k != "enable_deterministic_inference")
    args: Any = normalize_engine_args(engine_args) if engine_args is not None else {k: raw[k] for k in keys if k in raw}
    params = {
        "format": PLAN_FORMAT,
        "top_k": options.top_k,
        "context_depths": list(options.context_depths),
        "decode_steps": options.decode_steps,
        "docs_per_kind": docs_per_kind,
    }
    return Signature.build(
        model=model,
        revision=revision or raw.get("revision") or raw.get("model_revision"),
        tp=info.tp_size if info.tp_size is not None else raw.get("tp_size", 1),
        dtype=raw.get("dtype"),
        quantization=raw.get("quantization"),
        engine_args=args,
        corpus=corpus,
        check_params=hash_params(params),
        details={"check_params": params, **({"corpus": list(documents)} if documents is not None else {})},
        **host_parts(raw),
    )
