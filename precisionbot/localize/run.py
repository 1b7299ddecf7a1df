"""One localization against running engines, from the guards to the written report: what ``precisionbot
localize`` and the check job (``localize:`` in the config) both call."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precisionbot.corpus import builtin_documents
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.errors import ConfigError
from precisionbot.localize import finding, jsonl, session
from precisionbot.localize.core import aligned_tensors, localize
from precisionbot.localize.dumps import dump_bytes
from precisionbot.localize.guards import deterministic_refusal, server_refusals

HELPER_PATHS = {"match": "decode", "prefill_cache_hit": "prefill-cache-hit", "decode_cache_hit": "decode-cache-hit"}
"""The capture path that reproduces each consistency helper's two paths."""


@dataclass(frozen=True)
class Settings:
    path: str
    prompt_tokens: int = 96
    max_new_tokens: int = 8
    suffix_tokens: int = 24
    disk_floor_gib: float = 5.0


@dataclass(frozen=True)
class Outcome:
    summary: dict[str, Any]
    """What ``localization.json`` holds (``finding.summary`` plus time and disk)."""
    line: str
    """``first diverging op: ...``."""
    inherit: str | None
    tensors: int


def localize_engines(
    target_url: str, baseline_url: str | None, settings: Settings, out: Path, started: float | None = None
) -> Outcome:
    """Checks the engines' dumper settings (a ``ConfigError`` naming each one wrong), captures the path's two
    runs into ``out/dumps``, localizes, and writes ``out/comparison.jsonl`` and ``out/localization.json``."""
    started = time.monotonic() if started is None else started
    clients = {"target": SGLangEngine(target_url)}
    if baseline_url:
        clients["baseline"] = SGLangEngine(baseline_url)
    try:
        drivers = {name: session.DumperDriver(c, name) for name, c in clients.items()}
        infos = {}
        for name, driver in drivers.items():
            info = driver.engine.server_info().raw
            refusals = server_refusals(info, driver.state())
            if settings.path != "golden" and (r := deterministic_refusal(info)):
                refusals.append(r)
            if refusals:
                where = f" ({name} engine)" if baseline_url else ""
                raise ConfigError(f"localize refuses{where}: " + "; ".join(refusals))
            infos[name] = info
        text = builtin_documents()[0].text or ""
        ids = list(clients["target"].tokenize([text])[0])
        need = settings.prompt_tokens + settings.suffix_tokens
        if len(ids) < need:
            raise ConfigError(
                f"--prompt-tokens {settings.prompt_tokens} is longer than the built-in text ({len(ids)} tokens)"
            )
        prompt = ids[: settings.prompt_tokens]
        suffix = ids[settings.prompt_tokens : need]
        rec = session.Recorder(out / "dumps", int(settings.disk_floor_gib * 1024**3))
        target = drivers["target"]
        if settings.path == "decode":
            caps = session.capture_decode(rec, target, prompt, settings.max_new_tokens)
        elif settings.path == "golden":
            base = drivers["baseline"]
            base.engine.flush_cache()
            generated, _ = base.generate(prompt, settings.max_new_tokens)
            caps = session.capture_golden(rec, base, target, prompt + generated)
        else:
            decode = settings.max_new_tokens if settings.path == "decode-cache-hit" else 0
            caps = session.capture_cache_hit(rec, target, prompt, suffix, decode)
        loc = localize(caps.baseline, caps.target, caps.required)
        layer_types = (infos["target"].get("model_config") or {}).get("layer_types")
        pairs = aligned_tensors(caps.baseline, caps.target, caps.required)
        records = [jsonl.tensor_record(n, a, b) for n, a, b in pairs]
        line = finding.first_line(loc, settings.path, caps.prompt_tokens, layer_types)
        records += [jsonl.log_record(line), jsonl.summary_record(records)]
        (out / "comparison.jsonl").write_text(jsonl.render(records))
        summary = finding.summary(loc, settings.path, caps.prompt_tokens, layer_types)
        summary |= {"seconds": round(time.monotonic() - started, 2), "dump_bytes": dump_bytes(out / "dumps")}
        (out / "localization.json").write_text(json.dumps(summary, indent=2) + "\n")
        return Outcome(summary, line, finding.inherit_line(loc), len(pairs))
    finally:
        for c in clients.values():
            c.close()
