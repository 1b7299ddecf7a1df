"""Where a report came from and how to run it again: the HTML page's provenance lines. Pure: a section in, text out.

A page opened from a downloaded artifact weeks later must say which run it shows: the engine commit, the run's
signature, the baseline it was compared with, the config that judged it, the workflow run when there was one,
and a ``precisionbot check`` command line rebuilt from what result.json records (the engine, the suite and its
sizes). result.json keeps no command line, so the command is a reconstruction: flags it does not record (a
``--config`` path, ``--prompt-tokens``, ``--golden-depths``, a builtin engine's faults) are said to be missing,
not guessed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from precisionbot.report.rows import baseline_info
from precisionbot.report.section import ReportSection
from precisionbot.report.view import ReportLinks, safe_url

MISSING = "not recorded in result.json: add --config, --prompt-tokens and --golden-depths as the run had them"


def provenance(section: ReportSection, links: ReportLinks | None = None) -> tuple[tuple[str, str], ...]:
    """``(what, value)`` pairs, plain text (the HTML template escapes them); a field the run does not know is
    left out."""
    run = section.run
    out: list[tuple[str, str]] = []
    if run.engine.commit:
        out.append(("engine commit", str(run.engine.commit)))
    out.append(("engine", " ".join(v for v in (run.engine.kind, run.engine.url) if v) or "unknown"))
    if run.signature:
        out.append(("signature", run.signature))
    base = baseline_info(run)
    if isinstance(base, Mapping) and base.get("run_id"):
        when = base.get("created") or base.get("date")
        out.append(("baseline run", f"{base['run_id']}" + (f" (recorded {when})" if when else "")))
    config = run.extra.get("config_sha256")
    if isinstance(config, str) and config:
        out.append(("config", "the built-in defaults" if config == "defaults" else f"sha256 {config}"))
    fingerprint = run.extra.get("fingerprint")
    if isinstance(fingerprint, Mapping) and fingerprint.get("precisionbot"):
        out.append(("precisionbot", str(fingerprint["precisionbot"])))
    url = safe_url(links.run_url) if links is not None else None
    if url:
        out.append(("workflow run", url))
    if section.directory:
        out.append(("result directory", section.directory))
    out.append(("to reproduce", check_command(section)))
    return tuple(out)


def check_command(section: ReportSection) -> str:
    """``precisionbot check --engine-url URL --engine-kind sglang --suite pr --checks ... --samples 8 ...`` from
    what the run recorded, and what it could not."""
    run = section.run
    env: Mapping[str, Any] = run.environment
    words = ["precisionbot", "check"]
    if run.engine.kind == "builtin":
        words += ["--engine", "builtin"]
    else:
        words += ["--engine-url", run.engine.url or "URL", "--engine-kind", run.engine.kind or "sglang"]
    model = env.get("model")
    if model:
        words += ["--model", str(model)]
    if env.get("suite"):
        words += ["--suite", str(env["suite"])]
    if run.checks:
        words += ["--checks", ",".join(c.name for c in run.checks)]
    for key, flag in (("samples", "--samples"), ("max_new_tokens", "--max-new-tokens")):
        if isinstance(env.get(key), int):
            words += [flag, str(env[key])]
    if env.get("enable_deterministic_inference") is True:
        words.append("--enable-deterministic-inference")
    if run.check("golden") is not None:
        words += ["--baseline-store", "STORE"]
    return f"{shlex.join(words)}  ({MISSING})"
