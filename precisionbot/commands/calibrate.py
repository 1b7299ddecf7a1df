"""``precisionbot calibrate``: replay known-good and known-bad builtin engine variants and show, per check and
threshold, where each lands — the seeds' advice ("calibrate thresholds by replaying past bugs") as a command.

A clean builtin engine records a golden baseline into a temporary store; then the clean engine and every fault
of the catalogue (or ``--faults``) run the chosen checks against it. The first table is each variant's
verdicts and key numbers; the second, per threshold, the largest value among the variants that must pass,
the smallest among those that must fail, and whether the threshold sits between them.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EXPECTED: Mapping[str, tuple[str, ...]] = {
    "": (),
    "attn-p-fp8-scaled": (),
    "attn-p-bf16": (),
    "mantissa=16": (),
    "nondeterministic": (),
    "batch-variant": (),
    "restore-layer0-only": ("prefill_cache_hit", "decode_cache_hit"),
    "restore-stale-page": ("prefill_cache_hit",),
    "cache-decode-kv-rounded": ("decode_cache_hit",),
    "attn-p-fp8": ("golden",),
    "mantissa=5": ("golden",),
    "chunk-boundary": ("golden", "match"),
}
"""Variant → the checks that must catch it (CONTRACT's fault table); empty = must pass every check."""

# (check, stat, threshold attribute path, label): the numbers each threshold gates.
RULES = (
    ("golden", "kl_max", "golden.logit_kl", "golden per-position KL (no band)"),
    ("golden", "confident_flips", None, "golden confident flips"),
    ("match", "mean_k3", "kl_div", "match mean_k3"),
    ("match", "max", "max_token_k3", "match max token k3"),
    ("prefill_cache_hit", "mean_k3", "kl_div", "prefill_cache_hit mean_k3"),
    ("prefill_cache_hit", "max", "max_token_k3", "prefill_cache_hit max token k3"),
    ("decode_cache_hit", "mean_k3", "kl_div", "decode_cache_hit mean_k3"),
    ("decode_cache_hit", "max", "max_token_k3", "decode_cache_hit max token k3"),
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="run known-good and known-bad builtin variants; show where each threshold separates them",
        description=(__doc__ or "").replace("``", ""),  # the docstring is RST; --help is plain text
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--faults", metavar="a,b", help="variants to run (default: the whole catalogue); '' = clean")
    p.add_argument("--checks", default="golden,match", metavar="a,b", help="checks to run (default golden,match)")
    p.add_argument("--config", metavar="FILE", help="YAML config (thresholds, suite options)")
    p.add_argument("--suite", help="suite whose options to use (default consistency)")
    p.add_argument("--profile", choices=("default", "deterministic"))
    p.add_argument("--samples", type=int, default=8, metavar="N")
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N")
    p.add_argument("--prompt-tokens", default="256..1024", metavar="N|LO..HI")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from precisionbot.baselines import open_store
    from precisionbot.checks.golden import golden_target, record_golden
    from precisionbot.checks.runner import run_suite
    from precisionbot.commands.check import apply_overrides
    from precisionbot.config import load_config_or_default
    from precisionbot.engines.builtin import BuiltinEngine
    from precisionbot.errors import ConfigError

    config = load_config_or_default(args.config)
    suite = apply_overrides(config.suite(args.suite or "consistency"), args)
    profile = args.profile or config.thresholds.profile
    thresholds = config.thresholds_for(None, None, profile)
    variants = list(EXPECTED) if args.faults is None else [v.strip() for v in args.faults.split(",")]
    unknown = [v for v in variants if v not in EXPECTED]
    if unknown:
        raise ConfigError(
            f"--faults: unknown variant(s) {', '.join(unknown)}; use {', '.join(v for v in EXPECTED if v)}"
        )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="precisionbot-calibrate-") as tmp:
        store = open_store(str(Path(tmp) / "baselines"))
        if "golden" in suite.checks:
            engine = BuiltinEngine()
            try:
                from precisionbot import corpus

                docs = corpus.suite_documents(suite.corpus)
                record_golden(golden_target(engine, config, suite.golden, None, docs), store)
            finally:
                engine.close()
        for variant in variants:
            engine = BuiltinEngine(faults=(variant,) if variant else ())
            try:
                run = run_suite(engine, config, suite, profile=profile, baseline_store=store.uri)
            finally:
                engine.close()
            rows.append(
                {
                    "variant": variant or "(clean)",
                    "must_fail": list(EXPECTED[variant]),
                    "checks": {
                        c.name: {"verdict": c.verdict.value, "stats": _plain(c.stats)} for c in run.result.checks
                    },
                }
            )
    if args.json:
        print(json.dumps({"profile": profile, "variants": rows}, indent=2, default=str))
        return 0
    print(render(rows, suite.checks, thresholds))
    return 0


def _plain(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    from precisionbot.fmt import plain

    return plain(x)


def _threshold(thresholds: Any, path: str | None) -> float | None:
    if path is None:
        return 0.0
    value: Any = thresholds
    for part in path.split("."):
        value = getattr(value, part)
    return None if value is None else float(value)


def render(rows: Sequence[Mapping[str, Any]], checks: Sequence[str], thresholds: Any) -> str:
    """Two Markdown tables: verdicts per variant, then per threshold where good and bad variants land."""
    lines = ["| variant | must fail | " + " | ".join(checks) + " |", "| --- | --- |" + " --- |" * len(checks)]
    for r in rows:
        cells = []
        for name in checks:
            c = r["checks"].get(name)
            if c is None:
                cells.append("-")
                continue
            caught = c["verdict"] == "fail"
            # ✗ marks a miss (a check that must catch this variant did not) or a false alarm (a good variant
            # failed); a bad variant also caught by another check is fine.
            ok = caught if name in r["must_fail"] else (not caught or bool(r["must_fail"]))
            key = "kl_max" if name == "golden" else "mean_k3"
            cells.append(f"{c['verdict']}{'' if ok else ' ✗'} ({key} {_fmt(c['stats'].get(key))})")
        lines.append(f"| {r['variant']} | {', '.join(r['must_fail']) or '-'} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| threshold | value | largest among must-pass | smallest among must-fail | separates |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for check, stat, path, label in RULES:
        if check not in checks:
            continue
        limit = _threshold(thresholds, path)
        good = [r["checks"][check]["stats"].get(stat) for r in rows if check in r["checks"] and not r["must_fail"]]
        bad = [r["checks"][check]["stats"].get(stat) for r in rows if check in r["must_fail"] and check in r["checks"]]
        g = max((v for v in good if v is not None), default=None)
        b = min((v for v in bad if v is not None), default=None)
        if limit is None or g is None or b is None:
            verdict = "-"
        else:
            verdict = "yes" if g <= limit < b else "no"
            if verdict == "yes" and g > 0:
                verdict += f" (×{limit / g:.3g} above good, ×{b / limit:.3g} below bad)" if limit > 0 else ""
        lines.append(f"| {label} | {_fmt(limit)} | {_fmt(g)} | {_fmt(b)} | {verdict} |")
    return "\n".join(lines)
