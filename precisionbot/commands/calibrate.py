"""``precisionbot calibrate``: replay known-good and known-bad builtin engine variants and show, per check and
threshold, where each lands — "calibrate thresholds by replaying past bugs" as a command.

A clean builtin engine records a golden baseline into a temporary store; then the clean engine, every fault
of the catalogue (or ``--faults``) and ``--reruns N`` more clean runs (other prompts, other batch
compositions) run the chosen checks (default: all of the three helpers, golden and batch_invariance) against
it. With ``spec_decode`` among ``--checks`` the catalogue also holds the speculative-decoding faults, each of
which must fail ``spec_decode`` by the part that exists to see it (its cell names the parts that caught it; a
wrong part counts as a miss); without it they are left out (``spec_decode`` launches two arms per run). The
first table is each variant's verdicts and key numbers; then the false-alarm count over the runs that must
pass; the last table, per threshold, the largest value among the variants that must pass, the smallest
among those that must fail, and whether the threshold sits between them. ``--localize`` adds the localization
column: every op-level fault through ``localize`` on its own path, with the module named, the module expected
and the time. Exit 1 when a bug is missed, a must-pass run fails, a threshold does not separate (a must-pass
value beyond it) or a fault is localized to the wrong module; 0 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from precisionbot.commands import calibrate_grid
from precisionbot.commands.options.builtin import add_engine_flags, engine_kwargs

DEFAULT_CHECKS = "match,prefill_cache_hit,decode_cache_hit,golden,batch_invariance"

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
    "mamba-stale-checkpoint": ("prefill_cache_hit",),
    "conv-state-shift": ("prefill_cache_hit",),
    "swa-early-evict": ("prefill_cache_hit",),
    "swa-decode-window": ("match",),
    "state-mantissa=4": ("golden",),
    "state-mantissa=12": (),
    "state-bf16-decode": (),
    **dict.fromkeys(calibrate_grid.SPEC_PARTS, ("spec_decode",)),
}
"""Variant → the checks that must catch it (docs/builtin-engine.md's fault table); empty = must pass every check.
The spec faults must also be caught by the right part of ``spec_decode`` (``calibrate_grid.SPEC_PARTS``)."""

MAY_FAIL: Mapping[str, tuple[str, ...]] = {
    "batch-variant": ("batch_invariance",),
    "nondeterministic": ("batch_invariance",),
}
"""Checks a must-pass variant may fail without a false alarm: ``batch_invariance`` holds the deterministic
tolerance (1e-5), and these two faults are, by definition, what that tolerance exists to see
(docs/builtin-engine.md: they pass the default thresholds and fail the deterministic profile)."""

REPORTED = frozenset({"state-bf16-decode"})
"""Variants whose verdicts are measured and shown but neither must pass nor must fail
(docs/builtin-engine.md: a decode state kept in bf16 grows with decode steps; whether it crosses a threshold
depends on the generation length)."""

LONG_GENERATION = {"swa-decode-window": 256}
"""Variants that show only once generation passes the sliding window: they generate this many tokens past it."""

MIN_GENERATION = {"cache-decode-kv-rounded": 256}
"""Variants whose error grows with the tokens generated: they generate at least this many. ``decode_cache_hit``
turn 2 reuses turn 1's decode-written KV up to its last 64-token checkpoint: at 64 new tokens that is 0–63
rounded tokens, an excess over match of about 3x with bpe-4096 (under the 4x cache-vs-match rule), at 256 about
5.6x (benchmarks/RESULTS.md)."""

RERUN_BATCHES = ((8, 4), (3, 2), (1, 1), (16, 2), (5, 3))
"""(batch size, concurrency) of the clean reruns, in turn: other batch compositions, the same engine."""

# (check, stat, threshold attribute path, label): the numbers each threshold gates.
RULES = (
    ("golden", "kl_judged", "golden.logit_kl", "golden per-position KL {stat} (no band)"),
    ("golden", "confident_flips", None, "golden confident flips"),
    ("match", "mean_k3", "kl_div", "match mean_k3"),
    ("match", "max", "max_token_k3", "match max token k3"),
    ("prefill_cache_hit", "mean_k3", "kl_div", "prefill_cache_hit mean_k3"),
    ("prefill_cache_hit", "max", "max_token_k3", "prefill_cache_hit max token k3"),
    ("decode_cache_hit", "mean_k3", "kl_div", "decode_cache_hit mean_k3"),
    ("decode_cache_hit", "max", "max_token_k3", "decode_cache_hit max token k3"),
    ("spec_decode", "mean_k3", "kl_div", "spec_decode mean_k3 (target logprobs)"),
    ("spec_decode", "max", "max_token_k3", "spec_decode max token k3 (target logprobs)"),
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="run known-good and known-bad builtin variants; show where each threshold separates them",
        description=(__doc__ or "").replace("``", ""),  # the docstring is RST; --help is plain text
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--faults", metavar="a,b", help="variants to run (default: the whole catalogue); '' = clean")
    p.add_argument("--checks", default=DEFAULT_CHECKS, metavar="a,b", help=f"checks to run (default {DEFAULT_CHECKS})")
    p.add_argument(
        "--reruns",
        type=int,
        default=0,
        metavar="N",
        help="N more clean runs, each with other prompts (suite seed) and another batch composition: false alarms",
    )
    p.add_argument("--config", metavar="FILE", help="YAML config (thresholds, suite options)")
    p.add_argument("--suite", help="suite whose options to use (default consistency)")
    p.add_argument("--profile", choices=("default", "deterministic"))
    p.add_argument("--samples", type=int, default=8, metavar="N")
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N")
    p.add_argument("--prompt-tokens", default="256..1024", metavar="N|LO..HI")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.add_argument(
        "--localize",
        action="store_true",
        help="also localize every op-level fault (of --faults, if given) and show the module named, the module "
        "expected and the time: a wrong or missing module fails the run",
    )
    g = p.add_argument_group(
        "size grid",
        "--grid: the clean engine over sizes users pick (every check must pass or be inconclusive) and each "
        "bug fault's detection floor; --faults picks the faults whose floors to walk ('' = none)",
    )
    g.add_argument("--grid", action="store_true", help="run the size grid instead of the variant table")
    for axis, default in calibrate_grid.DEFAULT_AXES.items():
        g.add_argument(f"--grid-{axis.replace('_', '-')}", metavar="a,b", help=f"default {','.join(default)}")
    g.add_argument(
        "--grid-numerics",
        metavar="a,b",
        help="clean variants: production (shipped) and/or nondeterministic (default both)",
    )
    add_engine_flags(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.grid:
        return _run_grid(args)
    from precisionbot.baselines import open_store
    from precisionbot.baselines.golden_recording import golden_target, record_golden
    from precisionbot.builtin.options import HYBRID_ONLY_FAULTS, EngineOptions
    from precisionbot.checks.suite import run_suite
    from precisionbot.commands.options.suite import suite_flags
    from precisionbot.config import load_config_or_default
    from precisionbot.engines.builtin import BuiltinEngine
    from precisionbot.errors import ConfigError

    config = load_config_or_default(args.config)
    suite = suite_flags(args).apply(config.suite(args.suite or "consistency"))
    profile = args.profile or config.thresholds.profile
    thresholds = config.thresholds_for(None, None, profile)
    flags = engine_kwargs(args)
    if args.reruns < 0:
        raise ConfigError(f"--reruns must be >= 0 (got {args.reruns})")
    catalogue = [v for v in EXPECTED if flags["preset"] != "tiny" or v.split("=")[0] not in HYBRID_ONLY_FAULTS]
    if "spec_decode" not in suite.checks:  # nothing else exists to see them, and each run launches two arms
        catalogue = [v for v in catalogue if v not in calibrate_grid.SPEC_PARTS]
    variants = catalogue if args.faults is None else [v.strip() for v in args.faults.split(",")]
    hybrid_only = [v for v in variants if v in EXPECTED and v not in catalogue]
    if hybrid_only:
        raise ConfigError(f"--faults: {', '.join(hybrid_only)} need the hybrid preset; drop --model-preset tiny")
    unknown = [v for v in variants if v not in EXPECTED]
    if unknown:
        raise ConfigError(
            f"--faults: unknown variant(s) {', '.join(unknown)}; use {', '.join(v for v in catalogue if v)}"
        )
    runs: list[tuple[str, str, Any, dict[str, Any]]] = [(v, v or "(clean)", suite, {}) for v in variants]
    for i in range(args.reruns):
        batch, concurrency = RERUN_BATCHES[i % len(RERUN_BATCHES)]
        rerun_suite = dataclasses.replace(suite, seed=suite.seed + 1 + i)
        label = f"(clean rerun {i + 1}: seed {rerun_suite.seed}, batch {batch}×{concurrency})"
        runs.append(("", label, rerun_suite, {"batch_size": batch, "concurrency": concurrency}))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="precisionbot-calibrate-") as tmp:
        store = open_store(str(Path(tmp) / "baselines"))
        if "golden" in suite.checks:
            engine = BuiltinEngine(**flags)
            try:
                from precisionbot import corpus

                docs = corpus.suite_documents(suite.corpus)
                record_golden(golden_target(engine, config, suite.golden, None, docs), store)
            finally:
                engine.close()
        for variant, label, run_suite_cfg, batching in runs:
            extra = LONG_GENERATION.get(variant)
            least = MIN_GENERATION.get(variant, 0)
            if extra is not None:
                least = EngineOptions().sliding_window_size + extra
            if run_suite_cfg.max_new_tokens < least:
                run_suite_cfg = dataclasses.replace(run_suite_cfg, max_new_tokens=least)
            engine = BuiltinEngine(faults=(variant,) if variant else (), **flags, **batching)
            try:
                run = run_suite(engine, config, run_suite_cfg, profile=profile, store=store)
            finally:
                engine.close()
            verdicts = ", ".join(f"{c.name} {c.verdict.value}" for c in run.result.checks)
            print(f"calibrate [{len(rows) + 1}/{len(runs)}] {label}: {verdicts}", file=sys.stderr, flush=True)
            rows.append(
                {
                    "variant": label,
                    "fault": variant,
                    "must_fail": list(EXPECTED[variant]),
                    "reported": variant in REPORTED,
                    "checks": {c.name: _cell(c) for c in run.result.checks},
                }
            )
        located = _localize_all(args, flags, Path(tmp)) if args.localize else []
    summary = assess(rows, suite.checks, thresholds)
    misnamed = [r["fault"] for r in located if r["named"] != r["expected"]]
    if args.json:
        localization = {"localization": located, "misnamed": misnamed} if args.localize else {}
        print(json.dumps({"profile": profile, "variants": rows, **summary, **localization}, indent=2, default=str))
    else:
        print(render(rows, suite.checks, thresholds))
        print()
        print(summary_text(summary))
        if args.localize:
            print()
            print(render_localization(located))
    return 1 if summary["misses"] or summary["false_alarms"] or summary["not_separating"] or misnamed else 0


def _localize_all(args: argparse.Namespace, flags: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    """``--localize``: each op-level fault (of ``--faults``, if given) through ``localize`` on its own path."""
    from precisionbot.commands.localize import localize_builtin_fault
    from precisionbot.localize.catalogue import OP_FAULTS

    chosen = None if args.faults is None else {v.strip() for v in args.faults.split(",")}
    tiny = flags["preset"] == "tiny"
    faults = [f for f in OP_FAULTS if (chosen is None or f.fault in chosen) and not (tiny and f.hybrid_only)]
    located = []
    for i, f in enumerate(faults, start=1):
        out = tmp / "localize" / f.fault.replace("=", "-")
        engine = {**flags, **dict(f.engine)}
        outcome = localize_builtin_fault(f.fault, f.path, f.prompt_tokens, f.max_new_tokens, engine, out)
        first = outcome.summary["first_diverging_op"]
        named = first["module"] if first else None
        located.append(
            {
                "fault": f.fault,
                "path": f.path,
                "named": named,
                "expected": f.expected,
                "seconds": outcome.summary["seconds"],
                "dump_bytes": outcome.summary["dump_bytes"],
            }
        )
        verdict = "as expected" if named == f.expected else f"EXPECTED {f.expected}"
        print(f"calibrate localize [{i}/{len(faults)}] {f.fault} ({f.path}): {named} {verdict}", file=sys.stderr)
    return located


def _cell(c: Any) -> dict[str, Any]:
    """One check of one variant: its verdict and numeric stats, and for ``spec_decode`` the parts that caught it."""
    out: dict[str, Any] = {"verdict": c.verdict.value, "stats": _plain(c.stats)}
    if isinstance(c.stats.get("caught_by"), list):
        out["caught_by"] = [str(p) for p in c.stats["caught_by"]]
    return out


def render_localization(located: Sequence[Mapping[str, Any]]) -> str:
    """The localization column as its own table: one row per op-level fault."""
    lines = [
        "| fault | path | module named | expected | time s | dumps MB |",
        "| --- | --- | --- | --- | ---: | ---: |",
    ]
    for r in located:
        mark = "" if r["named"] == r["expected"] else " ✗"
        lines.append(
            f"| `{r['fault']}` | {r['path']} | `{r['named']}`{mark} | `{r['expected']}` | {r['seconds']:.1f} | "
            f"{r['dump_bytes'] / 1e6:.1f} |"
        )
    if not located:
        lines.append("| (no op-level fault among --faults) | | | | | |")
    return "\n".join(lines)


def assess(rows: Sequence[Mapping[str, Any]], checks: Sequence[str], thresholds: Any) -> dict[str, Any]:
    """Misses (a bug not caught by a check that must catch it), false alarms (a failed check in a run that must
    pass), and thresholds that do not separate the must-pass from the must-fail values."""
    misses, alarms, must_pass = [], [], 0
    for r in rows:
        if r.get("reported"):
            continue
        if not r["must_fail"]:
            must_pass += 1
            allowed = MAY_FAIL.get(str(r.get("fault", "")), ())
            failed = [n for n, c in r["checks"].items() if c["verdict"] == "fail" and n not in allowed]
            alarms += [f"{r['variant']}: {n}" for n in failed]
        for name in r["must_fail"]:
            c = r["checks"].get(name)
            if c is not None and c["verdict"] != "fail":
                misses.append(f"{r['variant']}: {name} {c['verdict']}")
            elif c is not None and "caught_by" in c:
                wrong = calibrate_grid.right_part(str(r.get("fault", "")), c["caught_by"])
                if wrong:
                    misses.append(f"{r['variant']}: {name} {wrong}")
    not_separating = [label for label, verdict in _separation(rows, checks, thresholds) if verdict == "no"]
    return {
        "must_pass_runs": must_pass,
        "false_alarms": alarms,
        "misses": misses,
        "not_separating": not_separating,
    }


def summary_text(summary: Mapping[str, Any]) -> str:
    alarms, misses = summary["false_alarms"], summary["misses"]
    lines = [
        f"false alarms: {len(alarms)} in {summary['must_pass_runs']} runs that must pass"
        + (f" ({'; '.join(alarms)})" if alarms else ""),
        f"missed bugs: {len(misses)}" + (f" ({'; '.join(misses)})" if misses else ""),
    ]
    if summary["not_separating"]:
        lines.append(f"thresholds that do not separate: {', '.join(summary['not_separating'])}")
    return "\n".join(lines)


def _plain(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    from precisionbot.fmt import plain

    return plain(x)


def _golden_kl_key(thresholds: Any) -> str:
    """The golden stat that ``golden.logit_kl`` bounds under these thresholds (``logit_kl_stat``)."""
    return "kl_max" if thresholds.golden.logit_kl_stat == "max" else "kl_p999"


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
            allowed = name in MAY_FAIL.get(str(r.get("fault", "")), ())
            ok = (
                caught
                if name in r["must_fail"]
                else (not caught or bool(r["must_fail"]) or r.get("reported") or allowed)
            )
            key = _golden_kl_key(thresholds) if name == "golden" else "mean_k3"
            shown = f"{key} {_fmt(c['stats'].get(key))}"
            if "caught_by" in c:  # spec_decode: which part caught it, or main → PR acceptance when it passed
                wrong = caught and calibrate_grid.right_part(str(r.get("fault", "")), c["caught_by"])
                ok = ok and not wrong
                shown += f"; caught by {', '.join(c['caught_by'])}" if caught else _acceptance(c["stats"])
            cells.append(f"{c['verdict']}{'' if ok else ' ✗'} ({shown})")
        must = "(reported)" if r.get("reported") else (", ".join(r["must_fail"]) or "-")
        lines.append(f"| {r['variant']} | {must} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| threshold | value | largest among must-pass | smallest among must-fail | separates |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for label, verdict, limit, g, b in _separation_rows(rows, checks, thresholds):
        lines.append(f"| {label} | {_fmt(limit)} | {_fmt(g)} | {_fmt(b)} | {verdict} |")
    return "\n".join(lines)


def _acceptance(stats: Mapping[str, Any]) -> str:
    """The PR's and main's mean accepted length over the samples compared (those whose text is main's, when the
    run paired them), with how many when not all."""
    pr, main = stats.get("accept_length"), stats.get("main_accept_length")
    if not isinstance(pr, (int, float)):
        return ""
    compared, samples = stats.get("accept_samples_compared"), stats.get("arm_samples")
    if compared == 0:
        return f"; acceptance {pr:.2f} (not compared: no sample kept main's text)"
    judged = stats.get("accept_length_compared", pr)
    scope = f" on {compared} of {samples} samples" if isinstance(compared, int) and compared != samples else ""
    return f"; acceptance {judged:.2f}" + (f" (main {main:.2f}{scope})" if isinstance(main, (int, float)) else "")


def _separation_rows(
    rows: Sequence[Mapping[str, Any]], checks: Sequence[str], thresholds: Any
) -> list[tuple[str, str, float | None, float | None, float | None]]:
    """Per threshold: (label, "yes ..." / "no" / "-", threshold, largest must-pass value, smallest must-fail)."""
    out = []
    judged = [r for r in rows if not r.get("reported")]
    for check, stat, path, label in RULES:
        if check not in checks:
            continue
        if stat == "kl_judged":  # the statistic golden.logit_kl bounds: its p99.9 or its max
            stat = _golden_kl_key(thresholds)
            label = label.format(stat="p99.9" if stat == "kl_p999" else "max")
        limit = _threshold(thresholds, path)
        good = [r["checks"][check]["stats"].get(stat) for r in judged if check in r["checks"] and not r["must_fail"]]
        bad = [
            r["checks"][check]["stats"].get(stat) for r in judged if check in r["must_fail"] and check in r["checks"]
        ]
        g = max((v for v in good if v is not None), default=None)
        b = min((v for v in bad if v is not None), default=None)
        if limit is None or g is None:
            verdict = "-"
        elif g > limit:
            verdict = "no"  # a run that must pass sits beyond the threshold: a false alarm waiting to happen
        elif b is None:
            verdict = "-"
        elif b <= limit:
            # The bugs below this number were caught by the check's other rules (tails, relative to match).
            verdict = "by other rules"
        else:
            verdict = "yes"
            if g > 0 and limit > 0:
                verdict += f" (×{limit / g:.3g} above good, ×{b / limit:.3g} below bad)"
        out.append((label, verdict, limit, g, b))
    return out


def _separation(rows: Sequence[Mapping[str, Any]], checks: Sequence[str], thresholds: Any) -> list[tuple[str, str]]:
    return [(label, verdict) for label, verdict, *_ in _separation_rows(rows, checks, thresholds)]


def _run_grid(args: argparse.Namespace) -> int:
    """``--grid``: the clean runs over every cell, then each bug fault's floor; exit 1 on a false alarm."""
    import time

    from precisionbot.builtin.options import HYBRID_ONLY_FAULTS
    from precisionbot.checks.suite import run_suite
    from precisionbot.config import load_config_or_default
    from precisionbot.engines.builtin import BuiltinEngine
    from precisionbot.errors import ConfigError

    config = load_config_or_default(args.config)
    base = config.suite(args.suite or "consistency")
    profile = args.profile or config.thresholds.profile
    flags = engine_kwargs(args)
    axes = calibrate_grid.parse_axes({k: getattr(args, f"grid_{k}") for k in calibrate_grid.DEFAULT_AXES})
    numerics = [v.strip() for v in (args.grid_numerics or "production,nondeterministic").split(",") if v.strip()]
    bad = [v for v in numerics if v not in ("production", "nondeterministic")]
    if bad or not numerics:
        raise ConfigError(f"--grid-numerics: unknown {', '.join(bad) or '(none)'}; use production,nondeterministic")
    chosen = args.checks.split(",")
    checks = [c for c in calibrate_grid.GRID_CHECKS if args.checks == DEFAULT_CHECKS or c in chosen]
    checks += [c for c in calibrate_grid.OPT_IN_CHECKS if c in chosen]  # only when named: two arms per run
    grid = calibrate_grid.cells(axes)
    tiny = flags["preset"] == "tiny"
    bugs = [v for v, must in EXPECTED.items() if must and not (tiny and v.split("=")[0] in HYBRID_ONLY_FAULTS)]
    if "spec_decode" not in checks:
        bugs = [v for v in bugs if v not in calibrate_grid.SPEC_PARTS]
    faults = bugs if args.faults is None else [v.strip() for v in args.faults.split(",") if v.strip()]
    unknown = [v for v in faults if v not in bugs]
    if unknown:
        hint = " (the spec faults need --checks spec_decode)" if set(unknown) & set(calibrate_grid.SPEC_PARTS) else ""
        raise ConfigError(
            f"--faults: {', '.join(unknown)} is not a bug fault of this preset{hint}; use {', '.join(bugs)}"
        )
    # A size-only check (spec_decode) alone runs once per size, not once per shape and cache_consistency size.
    sizes = [c for c in grid if any(calibrate_grid.runs_check(n, c, axes) for n in checks)]
    total = len(sizes) * len(numerics)
    print(f"calibrate --grid: {total} clean runs ({len(sizes)} sizes x {len(numerics)} numerics)", file=sys.stderr)
    parts: dict[str, list[str]] = {}  # per fault, the spec_decode parts that caught it in its last run (its floor)

    def run(cell: calibrate_grid.Cell, names: Sequence[str], fault: str) -> tuple[dict[str, tuple[str, str]], float]:
        names = [n for n in names if calibrate_grid.runs_check(n, cell, axes)]
        suite = calibrate_grid.suite_for(base, cell, names)
        engine = BuiltinEngine(faults=(fault,) if fault else (), **flags)
        t0 = time.perf_counter()
        try:
            result = run_suite(engine, config, suite, profile=profile).result
        finally:
            engine.close()
        verdicts = {c.name: (c.verdict.value, c.reasons[0] if c.reasons else "") for c in result.checks}
        spec = result.check("spec_decode")
        parts.pop(fault, None)
        if spec is not None and isinstance(spec.stats.get("caught_by"), list):
            parts[fault] = [str(p) for p in spec.stats["caught_by"]]
        return verdicts, time.perf_counter() - t0

    t_start = time.perf_counter()
    clean: list[calibrate_grid.CleanRun] = []
    for variant in numerics:
        fault = "" if variant == "production" else variant
        for cell in sizes:
            verdicts, wall = run(cell, checks, fault)
            clean.append(calibrate_grid.CleanRun(cell, fault, verdicts, wall))
            shown = ", ".join(f"{n} {v}" for n, (v, _) in verdicts.items())
            print(
                f"calibrate --grid [{len(clean)}/{total}] {variant}, {cell.label}: {shown}", file=sys.stderr, flush=True
            )
    floors: dict[str, tuple[list[str], calibrate_grid.Cell | None, str]] = {}
    for fault in faults:
        must = [c for c in EXPECTED[fault] if c in (*calibrate_grid.GRID_CHECKS, *calibrate_grid.OPT_IN_CHECKS)]
        if not must:
            floors[fault] = (list(EXPECTED[fault]), None, "golden only: its sizes are its depths (calibrate)")
            continue
        # A cache helper is judged against match's noise too, so match runs with it (spec_decode needs none).
        spec = fault in calibrate_grid.SPEC_PARTS
        names = [c for c in (*calibrate_grid.GRID_CHECKS, "spec_decode") if c in must or (c == "match" and not spec)]

        def caught(cell: calibrate_grid.Cell, fault: str = fault, names: list[str] = names) -> bool:
            verdicts, _ = run(cell, names, fault)
            hit = all(verdicts.get(c, ("", ""))[0] == "fail" for c in EXPECTED[fault] if c in names)
            wrong = calibrate_grid.right_part(fault, parts.get(fault, ())) if hit else None
            said = "missed" if not hit else f"caught, but {wrong}" if wrong else "caught"
            print(f"calibrate --grid floor {fault}, {cell.label}: {said}", file=sys.stderr)
            return hit and wrong is None

        walked = [c for c in grid if all(calibrate_grid.runs_check(n, c, axes) for n in names)]
        floors[fault] = (must, calibrate_grid.walk_floor(walked, caught), "")
    wall = time.perf_counter() - t_start
    alarms = calibrate_grid.false_alarms(clean, MAY_FAIL)
    if args.json:
        print(
            json.dumps(
                {
                    "profile": profile,
                    "wall_s": wall,
                    "clean": [
                        {
                            "size": dataclasses.asdict(r.cell),
                            "numerics": r.numerics or "production",
                            "verdicts": r.verdicts,
                            "wall_s": r.wall_s,
                        }
                        for r in clean
                    ],
                    "false_alarms": alarms,
                    "floors": {f: None if c is None else dataclasses.asdict(c) for f, (_, c, _) in floors.items()},
                    "floor_parts": {f: parts[f] for f, (_, c, _) in floors.items() if c is not None and f in parts},
                },
                indent=2,
            )
        )
    else:
        print(calibrate_grid.render_grid(clean, MAY_FAIL))
        if floors:
            print()
            print(calibrate_grid.render_floors(floors, grid[0] if grid else None, parts))
        fails = sum(c["fail"] for c in alarms.values())
        print(f"\nfalse alarms: {fails} FAIL verdicts in {len(clean)} clean runs; {wall:.0f} s wall")
    return 1 if any(c["fail"] for c in alarms.values()) else 0
