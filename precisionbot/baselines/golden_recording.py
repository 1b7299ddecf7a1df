"""Recording a golden baseline (``precisionbot baseline record``): what a golden run is filed under, and
``record_golden``, which runs the corpus and stores it as a new run.

The target is the one rule for a run's model name, signature and fingerprint: the recording and the golden
check (``precisionbot.checks.golden``, which compares an engine against what is recorded here) must agree on
it, or every check misses its baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionbot.baselines.catalog import write_run
from precisionbot.baselines.helper_reruns import ARRAYS as HELPER_ARRAYS
from precisionbot.baselines.helper_reruns import HelperRuns
from precisionbot.baselines.host import gather_fingerprint
from precisionbot.baselines.produce import (
    RequestProgress,
    choose_documents,
    corpus_hash,
    golden_signature,
    plan_from_corpus,
    produce,
)
from precisionbot.baselines.record import RunMeta, new_run_id, now_utc
from precisionbot.baselines.routing_record import ROUTING_KEY, capture_routing, golden_sequences
from precisionbot.baselines.signature import Signature
from precisionbot.baselines.spec_acceptance import KEY as ACCEPTANCE_KEY
from precisionbot.baselines.spec_acceptance import AcceptanceReruns
from precisionbot.baselines.store import Store
from precisionbot.config import Config, GoldenOptions, ModelConfig
from precisionbot.corpus import Document
from precisionbot.engines.base import Engine
from precisionbot.results.golden_record import GOLDEN_ARRAYS, GoldenRecord

MODULES_KEY = "modules"
"""The baseline build's module tensors in a run: ``modules.npz`` and the meta's ``extra.modules`` manifest (or
``{"error": why}`` when they could not be captured)."""
ModuleCapture = Callable[[GoldenRecord], tuple[Mapping[str, Any], Mapping[str, Any]]]
"""Captures the module tensors of a recorded golden run: (arrays, manifest)."""

DOCS_PER_KIND = 2
"""Documents per kind (prose, code) in the golden corpus: each is scored at every position up to the deepest
configured depth, and again through ``decode_steps`` decode steps."""


@dataclass(frozen=True)
class GoldenTarget:
    """What a golden run is about: the engine, its model name in the store, and the signature inputs."""

    engine: Engine
    model: str
    documents: tuple[Document, ...]
    options: GoldenOptions
    engine_args: str | None = None
    revision: str | None = None
    docs_per_kind: int = DOCS_PER_KIND

    def chosen(self) -> list[Document]:
        return choose_documents(self.documents, self.docs_per_kind, max(self.options.context_depths))

    def fingerprint(self) -> dict[str, Any]:
        return gather_fingerprint(self.engine.server_info().raw, self.engine_args)

    def signature(self) -> Signature:
        chosen = self.chosen()
        return golden_signature(
            self.engine.server_info(),
            model=self.model,
            corpus=corpus_hash(chosen),
            documents=[f"{d.name} ({d.kind})" for d in chosen],
            options=self.options,
            docs_per_kind=self.docs_per_kind,
            engine_args=self.engine_args,
            revision=self.revision,
        )


def golden_target(
    engine: Engine,
    config: Config,
    options: GoldenOptions,
    model: ModelConfig | None,
    documents: Sequence[Document],
) -> GoldenTarget:
    """The one rule for what a golden run is filed under: ``baseline record`` and the golden check must agree
    on it, or every check misses its baseline (a different model name or signature)."""
    if model is None:
        return GoldenTarget(engine, engine.server_info().model_path or engine.kind, tuple(documents), options)
    return GoldenTarget(
        engine=engine,
        model=model.name,
        documents=tuple(documents),
        options=options,
        engine_args=config.launch_args(model),
        revision=model.revision,
    )


def record_golden(
    target: GoldenTarget,
    store: Store,
    *,
    label: str = "baseline_established",
    producer: str = "default",
    engine_commit: str | None = None,
    helpers: HelperRuns | None = None,
    acceptance: AcceptanceReruns | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    progress: RequestProgress | None = None,
    modules: ModuleCapture | None = None,
) -> RunMeta:
    """Run the golden corpus and store it as a new run record (never overwrites anything), with ``helpers``
    (main's helper reruns) and ``acceptance`` (main's spec-decoding acceptance reruns, in the meta) in the same
    record when given. ``fingerprint`` defaults to this host's and the
    engine's (``gather_fingerprint``); ``extra`` adds JSON keys to the meta (an acceptance's audit record);
    ``progress`` hears of each finished request; ``modules`` captures the baseline build's module tensors on
    the recorded samples (``localize:``), stored as ``modules.npz`` with their manifest as ``extra.modules``."""
    signature = target.signature()
    record = produce(target.engine, plan_from_corpus(target.engine, target.chosen(), target.options), progress=progress)
    module_arrays, module_manifest = modules(record) if modules is not None else ({}, None)
    routing, _ = capture_routing(target.engine, golden_sequences(record))  # MoE engines only (routing_record.py)
    margins = record.top_lp[:, 0].astype(np.float64) - record.top_lp[:, 1]
    when = now_utc()
    meta = RunMeta(
        run_id=new_run_id(when, producer),
        model=target.model,
        signature=signature.digest,
        signature_parts=signature.parts,
        created=when.isoformat(),
        label=label,
        producer=producer,
        engine_commit=engine_commit,
        stats={
            "positions": len(record),
            "samples": len(record.samples),
            "top_k": record.top_k,
            "margin_p50": float(np.median(margins)),
            "frac_margin_under_0.5": float(np.mean(margins < 0.5)),
            **({"helpers": helpers.summary()} if helpers is not None and helpers.helpers else {}),
            **({ACCEPTANCE_KEY: acceptance.summary()} if acceptance is not None else {}),
        },
        extra={
            "golden": {"samples": [s.to_dict() for s in record.samples], "decode_steps": target.options.decode_steps},
            **({"helpers": helpers.to_extra()} if helpers is not None and helpers.helpers else {}),
            **({ACCEPTANCE_KEY: acceptance.to_extra()} if acceptance is not None else {}),
            **({MODULES_KEY: module_manifest} if module_manifest is not None else {}),
            **({ROUTING_KEY: routing.to_extra()} if routing is not None else {}),
            **(extra or {}),
        },
        fingerprint=dict(fingerprint) if fingerprint is not None else target.fingerprint(),
    )
    arrays: dict[str, Any] = {GOLDEN_ARRAYS: record.to_arrays()}
    if helpers is not None and helpers.helpers:
        arrays[HELPER_ARRAYS] = helpers.to_arrays()
    if module_arrays:
        arrays[MODULES_KEY] = module_arrays
    if routing is not None:
        arrays[ROUTING_KEY] = routing.to_arrays()
    return write_run(store, meta, arrays)
