"""One localization against running engines, from the guards to the written report: what ``precisionbot
localize`` and the check job (``localize:`` in the config) both call."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precisionbot.corpus import builtin_documents
from precisionbot.engines.clients import client
from precisionbot.errors import ConfigError, PrecisionbotError
from precisionbot.localize import finding, jsonl, session, stored
from precisionbot.localize.core import POSITIONS_FIELD, Capture, aligned_tensors, localize
from precisionbot.localize.dumps import dump_bytes
from precisionbot.localize.guards import deterministic_refusal, server_refusals
from precisionbot.results import SampleTokens


@dataclass(frozen=True)
class Settings:
    path: str
    prompt_tokens: int = 96
    max_new_tokens: int = 8
    suffix_tokens: int = 24
    disk_floor_gib: float = 5.0
    sample: SampleTokens | None = None
    """The tokens to re-run (a failing check's sample, ``failing.py``); None: a prompt of the built-in text of
    ``prompt_tokens``, ``max_new_tokens`` decoded and ``suffix_tokens`` after a cache hit."""


@dataclass(frozen=True)
class Outcome:
    summary: dict[str, Any]
    """What ``localization.json`` holds (``finding.summary`` plus time and disk)."""
    line: str
    """``first diverging op: ...``."""
    inherit: str | None
    tensors: int


def localize_engines(
    target_url: str,
    baseline_url: str | None,
    settings: Settings,
    out: Path,
    started: float | None = None,
    kind: str = "sglang",
    stored: Capture | None = None,
) -> Outcome:
    """Checks the engines' dumper settings (a ``ConfigError`` naming each one wrong), captures the path's two
    runs into ``out/dumps``, localizes, and writes ``out/comparison.jsonl`` and ``out/localization.json``.
    ``kind``: the engines' kind (``engine.kind``), whose client generates and flushes. ``stored``: for the
    golden path without a baseline engine, the baseline build's capture of ``settings.sample``'s tokens, as
    ``baseline record`` stored it. For ``spec-decode`` ``target_url`` is the speculative arm and
    ``baseline_url`` the plain one (both need deterministic numerics)."""
    started = time.monotonic() if started is None else started
    clients = {"target": client(kind, target_url)}
    if baseline_url:
        clients["baseline"] = client(kind, baseline_url)
    try:
        drivers = {name: session.DumperDriver(c, name) for name, c in clients.items()}
        infos = {}
        for name, driver in drivers.items():
            info = driver.engine.server_info().raw
            refusals = server_refusals(info, driver.state(), kind=kind)
            if settings.path != "golden" and (r := deterministic_refusal(info, kind)):
                refusals.append(r)
            if refusals:
                where = f" ({name} engine)" if baseline_url else ""
                raise ConfigError(f"localize refuses{where}: " + "; ".join(refusals))
            infos[name] = info
        rec = session.Recorder(out / "dumps", int(settings.disk_floor_gib * 1024**3))
        if settings.sample is not None:
            caps = _capture_sample(rec, drivers, settings.path, settings.sample, stored)
        else:
            caps = _capture_text(rec, drivers, settings)
        loc = localize(caps.baseline, caps.target, caps.required)
        layer_types = (infos["target"].get("model_config") or {}).get("layer_types")
        # Rows cannot be lined up by position when one side's positions are wrong: that is the finding itself.
        wrong_positions = loc.first is not None and loc.first.module == POSITIONS_FIELD
        pairs = [] if wrong_positions else aligned_tensors(caps.baseline, caps.target, caps.required)
        records = [jsonl.tensor_record(n, a, b) for n, a, b in pairs]
        line = finding.first_line(loc, settings.path, caps.prompt_tokens, layer_types)
        records += [jsonl.log_record(line), jsonl.summary_record(records)]
        (out / "comparison.jsonl").write_text(jsonl.render(records))
        summary = finding.summary(loc, settings.path, caps.prompt_tokens, layer_types)
        if settings.sample is not None:
            # False when the re-run decoded other tokens than the check did (an engine that is not deterministic
            # between the two): the localization then describes the tokens it re-ran, not the check's.
            summary["same_tokens_as_the_check"] = caps.tokens == settings.sample.tokens[: len(caps.tokens)]
        summary |= {"seconds": round(time.monotonic() - started, 2), "dump_bytes": dump_bytes(out / "dumps")}
        (out / "localization.json").write_text(json.dumps(summary, indent=2) + "\n")
        return Outcome(summary, line, finding.inherit_line(loc), len(pairs))
    finally:
        for c in clients.values():
            c.close()


def _capture_text(
    rec: session.Recorder, drivers: dict[str, session.DumperDriver], settings: Settings
) -> session.Captures:
    """The path's two runs on a prompt of the built-in text (``precisionbot localize`` without a sample)."""
    target = drivers["target"]
    text = builtin_documents()[0].text or ""
    ids = list(target.engine.tokenize([text])[0])
    need = settings.prompt_tokens + settings.suffix_tokens
    if len(ids) < need:
        raise ConfigError(
            f"--prompt-tokens {settings.prompt_tokens} is longer than the built-in text ({len(ids)} tokens)"
        )
    prompt = ids[: settings.prompt_tokens]
    suffix = ids[settings.prompt_tokens : need]
    if settings.path == "decode":
        return session.capture_decode(rec, target, prompt, settings.max_new_tokens)
    if settings.path == "spec-decode":
        return session.capture_spec(rec, drivers["baseline"], target, prompt, settings.max_new_tokens)
    if settings.path == "golden":
        base = drivers["baseline"]
        base.engine.flush_cache()
        generated, _ = base.generate(prompt, settings.max_new_tokens)
        return session.capture_golden(rec, base, target, prompt + generated)
    decode = settings.max_new_tokens if settings.path == "decode-cache-hit" else 0
    return session.capture_cache_hit(rec, target, prompt, suffix, decode)


def _capture_sample(
    rec: session.Recorder,
    drivers: dict[str, session.DumperDriver],
    path: str,
    sample: SampleTokens,
    stored: Capture | None,
) -> session.Captures:
    """The path's two runs on a failing check's sample, set up as the check ran it: ``decode`` re-decodes the
    prompt; ``prefill-cache-hit`` caches the prompt and sends the whole sample; ``decode-cache-hit`` decodes
    turn 1 into the cache and sends turn 2; ``spec-decode`` decodes the prompt on both arms (the plain one
    is ``baseline``); ``golden`` prefills the sample on both builds (or on the PR build
    against the stored capture)."""
    target = drivers["target"]
    tokens, start = list(sample.tokens), sample.scored_from
    if path == "decode":
        return session.capture_decode(rec, target, tokens[:start], len(tokens) - start)
    if path == "spec-decode":
        return session.capture_spec(rec, drivers["baseline"], target, tokens[:start], len(tokens) - start)
    if path == "prefill-cache-hit":
        return session.capture_cache_hit(rec, target, tokens[:start], tokens[start:], 0)
    if path == "decode-cache-hit":
        turn1 = sample.cached_prompt
        return session.capture_cache_hit(rec, target, tokens[:turn1], tokens[turn1 + sample.decoded :], sample.decoded)
    if stored is not None:
        return session.capture_against_stored(rec, stored, target, tokens)
    return session.capture_golden(rec, drivers["baseline"], target, tokens)


def baseline_modules(engine: Any, lc: Any, workdir: Path) -> Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]:
    """What ``baseline record`` (and the merge-base A/B) calls with the golden record it just made: the engine's
    module tensors on the record's first ``lc.stored_samples`` prefill samples (``lc``: the ``localize:``
    config), ``stored.encode``d under the ``lc.stored_max_mib`` bound. A capture that cannot be made (the engine
    lacks a dumper setting) stores ``{"error": why}`` instead and says so on stderr: the golden baseline is
    recorded either way, and a golden failure against it says why it cannot be localized."""

    def capture(record: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            return _capture_stored(engine, record, lc, workdir)
        except (PrecisionbotError, OSError) as exc:
            print(f"precisionbot: warning: module tensors not stored (golden failures will not be localized): {exc}",
                  file=sys.stderr)  # fmt: skip
            return {}, {"error": str(exc)}

    return capture


def _capture_stored(engine: Any, record: Any, lc: Any, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    driver = session.DumperDriver(engine, "baseline")
    refusals = server_refusals(engine.server_info().raw, driver.state())
    if refusals:
        raise ConfigError("the engine's dumper is not usable: " + "; ".join(refusals))
    rec = session.Recorder(workdir, int(lc.disk_floor_gib * 1024**3))
    chosen = [i for i, s in enumerate(record.samples) if s.phase == "prefill"][: lc.stored_samples]
    captures = []
    for i in chosen:
        tokens = record.prompt_ids(i)[: lc.stored_tokens]
        engine.flush_cache()
        with rec.dumping(driver, f"sample-{i}"):
            driver.generate(tokens, 1)
        captures.append((i, tokens, rec.read(f"sample-{i}", "baseline build")))
        shutil.rmtree(workdir / f"sample-{i}", ignore_errors=True)
    bound = int(lc.stored_max_mib * 1024**2)
    kept = list(captures)
    arrays, manifest = stored.encode(kept, lc.stored_stride)
    while kept and stored.encoded_bytes(arrays) > bound:
        kept.pop()
        arrays, manifest = stored.encode(kept, lc.stored_stride)
    left = [i for i, *_ in captures[len(kept) :]]
    manifest["bytes"] = stored.encoded_bytes(arrays)
    if left:
        manifest["left_out"] = {"samples": left, "why": f"over localize.stored_max_mib ({lc.stored_max_mib:g})"}
        print(
            f"precisionbot: warning: module tensors of golden samples {left} not stored: they would pass "
            f"localize.stored_max_mib ({lc.stored_max_mib:g} MiB)",
            file=sys.stderr,
        )
    return arrays, manifest
