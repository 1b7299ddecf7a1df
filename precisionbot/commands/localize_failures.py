"""The job's localization (``localize:`` in the config): after the suite, every failing check that a capture
path reproduces is localized on its own failing sample (``localize.failing``), and result.json's
``localization`` lists one record per check: the op, or why there is none.

* A consistency helper's two paths run on the job's engine when it has deterministic numerics. The builtin
  engine with production numerics is localized on a deterministic twin (the same model and faults, the
  dumper on): decode and prefill take different kernels by design there, so every op would differ.
* ``golden`` needs the baseline build's tensors. ``baseline record`` stores them with the golden baseline
  (``localize.stored``); in merge-base mode the merge base is recorded the same way on the same runner. The
  job dumps the PR build prefilling the stored sample's tokens and localizes against them. A run without
  them, or whose tokens or format do not match, is a refusal that names what differs, never a wrong op.
* ``spec_decode`` is localized only when its target logprobs moved (``stats.caught_by``): the failing
  sample's prompt decoded by deterministic twins of both arms, the spec arm's verify against the plain arm's
  decode. A failure on acceptance, the tokens or the sampled path alone moved no logprob: nothing is localized.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from precisionbot.baselines import find_run, load_arrays, load_golden
from precisionbot.config import Config
from precisionbot.errors import ConfigError, PrecisionbotError, StoreError
from precisionbot.localize import stored
from precisionbot.localize.failing import CHECK_PATHS, failing_sample, localizable
from precisionbot.localize.run import Settings, localize_engines
from precisionbot.results import CheckResult, RunResult, SampleTokens, Verdict


def localize_failures(
    result: RunResult,
    samples: Mapping[str, Mapping[int, SampleTokens]],
    *,
    engine: Any,
    config: Config,
    store: Any,
    out: Path,
) -> RunResult:
    """``result`` with ``extra.localization``: one record per failing check localized (none failed: unchanged)."""
    records = []
    for check in result.checks:
        if check.verdict is not Verdict.FAIL or not localizable(check):
            continue
        record: dict[str, Any] = {"check": check.name}
        where = out / "localize" / check.name
        where.mkdir(parents=True, exist_ok=True)
        try:
            if check.name == "golden":
                record |= _golden(check, engine, config, store, where)
            elif check.name == "spec_decode":
                record |= _spec(check, samples.get(check.name) or {}, engine, config, where)
            else:
                record |= _helper(check, samples.get(check.name) or {}, engine, config, where)
        except PrecisionbotError as exc:
            record["error"] = str(exc)
        said = record.get("error") or f"{record.get('line')} (sample {record.get('sample')})"
        print(f"precisionbot: localize ({check.name}): {said}", file=sys.stderr)
        records.append(record)
    if not records:
        return result
    return dataclasses.replace(result, extra={**result.extra, "localization": records})


def module_capture(engine: Any, config: Config, workdir: Path) -> Any:
    """With ``localize:`` on, the capture of the baseline build's module tensors that ``record_golden`` stores
    with a golden run (``baseline record`` and the merge base alike); None when it is off."""
    if not config.localize.enabled or config.localize.stored_samples == 0:
        return None
    from precisionbot.localize.run import baseline_modules

    return baseline_modules(engine, config.localize, workdir)


def _settings(
    check: CheckResult, samples: Mapping[int, SampleTokens], config: Config
) -> tuple[Settings, dict[str, Any]]:
    """The check's failing sample as localize settings, and the record's fields saying which sample it is."""
    lc = config.localize
    failing = failing_sample(check, samples)
    settings = Settings(CHECK_PATHS[check.name], lc.prompt_tokens, lc.max_new_tokens, 24, lc.disk_floor_gib,
                        sample=None if failing is None else failing.tokens)  # fmt: skip
    record: dict[str, Any] = {} if failing is None else failing.to_dict()
    if failing is None:
        record["sample"] = "a prompt of the built-in text (the check's samples' tokens are not known)"
    return settings, record


def _helper(
    check: CheckResult, samples: Mapping[int, SampleTokens], engine: Any, config: Config, out: Path
) -> dict[str, Any]:
    settings, record = _settings(check, samples, config)
    deterministic = engine.server_info().raw.get("enable_deterministic_inference") is True
    if deterministic or engine.kind != "builtin" or getattr(engine, "options", None) is None:
        # A running engine without deterministic numerics is refused by name (localize.guards).
        return record | localize_engines(engine.url, None, settings, out, kind=_kind(engine)).summary
    from precisionbot.commands.localize import builtin_engines

    twin = dataclasses.replace(engine.options, enable_deterministic_inference=True)
    started = time.monotonic()
    with builtin_engines(twin, None, out) as engines:
        found = localize_engines(engines.target, None, settings, out, started).summary
    record["engine"] = (
        "a deterministic twin of the builtin engine (same model and faults; the run's has production numerics)"
    )
    return record | found


def _spec(
    check: CheckResult, samples: Mapping[int, SampleTokens], engine: Any, config: Config, out: Path
) -> dict[str, Any]:
    """``spec_decode``'s target logprobs moved: the failing sample's prompt decoded by both arms, as the check
    launched them (``spec_arms``), with deterministic numerics and the dumper on: the spec arm's verify against
    the plain arm's decode. Arms at URLs (``--spec-engine-url``) are refused (``SPEC_URL_REFUSAL``)."""
    from precisionbot.builtin.options import EngineOptions
    from precisionbot.commands.localize import SPEC_URL_REFUSAL, builtin_engines, spec_arms

    options = getattr(engine, "options", None)
    if engine.kind != "builtin" or not isinstance(options, EngineOptions):
        raise ConfigError(SPEC_URL_REFUSAL.replace("--path spec-decode", "spec_decode's localization"))
    settings, record = _settings(check, samples, config)
    plain, spec = (dataclasses.replace(o, enable_deterministic_inference=True) for o in spec_arms(options))
    started = time.monotonic()
    with builtin_engines(spec, plain, out) as engines:
        found = localize_engines(engines.target, engines.baseline, settings, out, started).summary
    record["engine"] = (
        "deterministic twins of the check's two arms (same model and faults; the spec arm's verify against the plain "
        "arm's decode)"
    )
    return record | found


def _golden(check: CheckResult, engine: Any, config: Config, store: Any, out: Path) -> dict[str, Any]:
    baseline = check.extra.get("baseline")
    run_id = baseline.get("run_id") if isinstance(baseline, Mapping) else None
    if not isinstance(run_id, str) or store is None:
        raise StoreError("golden has no baseline run to localize against")
    meta = find_run(store, run_id)
    manifest = meta.extra.get(stored.MODULES_ARRAYS)
    if not isinstance(manifest, Mapping):
        raise StoreError(
            f"the baseline run {run_id} stored no module tensors: record it with `localize: enabled: true` in the "
            "config (baseline record then stores them) to localize golden failures"
        )
    if isinstance(manifest.get("error"), str):
        raise StoreError(f"the baseline run {run_id} stored no module tensors: {manifest['error']}")
    kept = stored.stored_samples(manifest)
    if not kept:
        raise StoreError(f"the baseline run {run_id} stored module tensors of no sample (localize.stored_samples 0)")
    record = load_golden(store, meta)
    chosen = _stored_sample_for(check, kept)
    tokens = record.prompt_ids(chosen.sample)[: chosen.tokens]
    if stored.tokens_digest(tokens) != chosen.digest:
        raise StoreError(
            f"the module tensors stored with baseline run {run_id} were captured on other tokens than its golden "
            f"sample {chosen.sample} (digest {chosen.digest}, the record's {stored.tokens_digest(tokens)}): the tensor "
            "set is foreign or corrupt; re-record the baseline"
        )
    capture = stored.decode(load_arrays(store, meta, stored.MODULES_ARRAYS), manifest, chosen)
    lc = config.localize
    settings = Settings("golden", disk_floor_gib=lc.disk_floor_gib, sample=SampleTokens(tuple(tokens), 1))
    found = localize_engines(engine.url, None, settings, out, kind=_kind(engine), stored=capture).summary
    worst = check.worst[0] if check.worst else None
    fields: dict[str, Any] = {"path": "golden", "sample": chosen.sample, "tokens": chosen.tokens,
                              "baseline_run": run_id, "stored_positions": len(chosen.positions)}  # fmt: skip
    if worst is not None:
        fields["worst"] = {"sample": worst.sample, "position": worst.position}
    return fields | found


def _stored_sample_for(check: CheckResult, kept: list[stored.StoredSample]) -> stored.StoredSample:
    """The stored sample to localize on: the one holding the check's worst position within its stored tokens,
    else the one holding any of its worst positions, else the first stored."""
    for w in check.worst:
        for s in kept:
            if s.sample == w.sample and w.position < s.tokens:
                return s
    return kept[0]


def _kind(engine: Any) -> str:
    """The client kind to reach ``engine``'s URL with: the builtin engine serves SGLang's API."""
    return "sglang" if engine.kind == "builtin" else str(engine.kind)
