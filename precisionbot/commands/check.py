"""``precisionbot check``: run checks against an engine, write ``DIR/result.json`` (+ arrays), print a table.

Exit code = the run's verdict (0 pass, 1 fail, 2 inconclusive); 3 for our own setup errors (bad config or
arguments), raised as ``PrecisionbotError`` and printed by ``cli.main``. An engine that cannot be started or
reached before any check ran (an invalid URL, connection refused, a launch that fails) is a setup error too:
the engine we were told to use is not there (exit 3, one line with the fix; result.json, written for the report
step, says the same: its checks are INCONCLUSIVE with the reason ``setup error (exit 3): <that line>`` and its
``setup_error`` records the exit code). An engine that fails *during* a check, or answers a check with something
malformed, makes that check INCONCLUSIVE (exit 2) on every engine kind.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precisionbot import envvars
from precisionbot.commands.calibrate_grid import floor_warnings
from precisionbot.commands.options.engine import (
    EngineChoice,
    add_engine_options,
    engine_choice,
    open_engine,
    record_hint,
    select_model,
    spec_arm,
    unusable,
)
from precisionbot.commands.options.store import (
    add_store_option,
    golden_not_in_suite,
    preflight_check_store,
    require_existing_store,
    store_readers,
)
from precisionbot.commands.options.suite import SuiteFlags, add_size_flags, refuse_misfits, suite_flags
from precisionbot.config import DIGEST_KEY, Config, ModelConfig, SuiteConfig, config_digest, load_config_or_default
from precisionbot.errors import EngineError
from precisionbot.results import CHECK_NAMES, CheckResult, EngineInfo, RunResult

DEFAULT_OUT = "precisionbot-out"
DEFAULT_SUITE = "consistency"
SETUP_ERROR_PREFIX = "setup error (exit 3): "
"""How result.json's check reasons begin when ``check`` exited 3 before any check ran (the engine not usable)."""


def vs_main_skipped(config: Config, suite: SuiteConfig) -> str | None:
    """Why the comparison with main's reruns will be skipped at the suite's sizes, before the checks run."""
    from precisionbot.checks.main_noise import skipped_up_front
    from precisionbot.results import CONSISTENCY_CHECKS

    if not config.baselines.vs_main or not any(n in CONSISTENCY_CHECKS for n in suite.checks):
        return None
    return skipped_up_front(suite.samples)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "check",
        help="run checks against an engine; exit code = verdict",
        description="Runs the consistency helpers (and any configured check) against an engine, writes "
        "DIR/result.json plus per-position arrays, prints a short table. Exit 0 pass, 1 fail, 2 inconclusive, "
        "3 setup error.",
    )
    add_engine_options(p)
    p.add_argument("--config", metavar="FILE", help="YAML config (default: .github/precision.yml if present)")
    p.add_argument("--suite", help=f"suite from the config (default {DEFAULT_SUITE})")
    p.add_argument("--model", help="model name from the config (thresholds, launch)")
    p.add_argument("--checks", metavar="a,b", help=f"checks to run, from {', '.join(CHECK_NAMES)}")
    add_size_flags(p)
    p.add_argument(
        "--exact-sizes",
        action="store_true",
        help="keep --prompt-tokens / --max-new-tokens as given (default: rounded up to the engine's cache "
        "granularity so every cache helper can hit, said in a note)",
    )
    p.add_argument(
        "--spec-engine-url",
        metavar="URL",
        help="spec_decode: the same build served with speculative decoding (engine.spec_url); --engine-url is "
        "the plain arm",
    )
    p.add_argument("--profile", choices=("default", "deterministic"), help="threshold profile")
    add_store_option(p, dest="baseline_store", help="baseline store (golden)")
    p.add_argument("--layers-dump", metavar="DIR", help="layers: hidden-state dumps of the engine under test")
    p.add_argument("--layers-baseline", metavar="DIR", help="layers: the baseline build's dumps")
    p.add_argument(
        "--engine-commit",
        metavar="SHA",
        help=f"engine commit under test, shown in reports (default: ${envvars.ENGINE_COMMIT}, as baseline record)",
    )
    p.add_argument(
        "--base-ref",
        metavar="REF",
        help="baselines.mode merge-base: what the PR merges into (default: baselines.base_ref, origin/main)",
    )
    p.add_argument(
        "--out",
        "--output",  # as `report` spells it
        dest="out",
        metavar="DIR",
        default=DEFAULT_OUT,
        help=f"result directory (default {DEFAULT_OUT})",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=run)


@dataclass(frozen=True)
class CheckRequest:
    """What one ``check`` runs, resolved from its flags and config before anything starts."""

    config: Config
    config_path: str | None
    suite: SuiteConfig
    flags: SuiteFlags
    profile: str
    model: ModelConfig | None
    model_flag: str | None
    """``--model`` as given (the record hint repeats it; the config's only model needs no flag)."""
    engine: EngineChoice
    store_uri: str
    out: Path
    commit: str | None
    base_ref: str
    quiet: bool


def resolve(args: argparse.Namespace) -> CheckRequest:
    """The request ``args`` make, the config read and every flag checked (a setup error names the flag)."""
    config = load_config_or_default(args.config)
    if args.spec_engine_url:
        config = dataclasses.replace(config, engine=dataclasses.replace(config.engine, spec_url=args.spec_engine_url))
    flags = suite_flags(args)
    return CheckRequest(
        config=config,
        config_path=args.config,
        suite=flags.apply(config.suite(args.suite or DEFAULT_SUITE)),
        flags=flags,
        profile=args.profile or config.thresholds.profile,
        model=select_model(config, args.model),
        model_flag=args.model,
        engine=engine_choice(args, config),
        store_uri=args.baseline_store or config.baselines.store,
        out=Path(args.out),
        commit=args.engine_commit or os.environ.get(envvars.ENGINE_COMMIT) or None,
        base_ref=args.base_ref or config.baselines.base_ref,
        quiet=args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    from precisionbot.baselines.store import open_store
    from precisionbot.report import ReportSection, findings
    from precisionbot.results.directory import write_result

    req = resolve(args)
    if not req.quiet and req.engine.mode == "builtin":  # the floors are the builtin engine's faults'
        for warning in floor_warnings(req.suite):
            print(f"precisionbot: warning: {warning}", file=sys.stderr)
    store = open_store(req.store_uri)
    if "golden" in req.suite.checks and req.config.baselines.mode != "merge-base":  # merge-base records its own
        require_existing_store(store, "--baseline-store")
    readers = store_readers(req.config, req.suite)
    unused = golden_not_in_suite(req.suite, readers) if args.baseline_store else None
    if unused:
        print(f"precisionbot: warning: {unused}", file=sys.stderr)
    _preflight(req, store, readers)
    ab: Any = None
    if req.config.baselines.mode == "merge-base":
        from precisionbot.commands.merge_base import live_baseline

        stored = store
        store, ab_meta, ab_wall = live_baseline(
            req.config, req.suite, req.model, req.out / "merge-base", head=req.commit, base_ref=req.base_ref
        )
        ab = (stored, ab_meta, ab_wall)
    result, records, started = _run_engine(req, store)
    # The findings `report` will show for this directory (its previous run aside), localized op included.
    result = result.with_diagnosis(findings(ReportSection(label=str(req.out), run=result)))
    if ab is not None and started:
        result = _with_ab(result, *ab, base_ref=req.base_ref)
    # Which config judged this run, so the comment job can tell a PR-modified one (config/digest.py).
    result = dataclasses.replace(result, extra={**result.extra, DIGEST_KEY: config_digest(req.config_path)})
    write_result(req.out, result, records)
    _print_outcome(result, req.out)
    return result.verdict.exit_code


def _preflight(req: CheckRequest, store: Any, readers: tuple[str, ...]) -> None:
    """The store verified before the engine starts (options.store.preflight_check_store): a store error costs
    no engine time, and result.json still says why, for the report step."""
    from precisionbot.errors import StoreError
    from precisionbot.results.directory import write_result

    try:
        preflight_check_store(store, readers, req.model)
    except StoreError as exc:
        error = StoreError(f"the baseline store is not usable, no check ran: {exc}")
        write_result(req.out, _setup_failure(req, error))
        raise error from exc


def _setup_failure(req: CheckRequest, error: Exception) -> RunResult:
    """result.json of a run stopped by a setup error before any check ran (exit 3): schema 1 has no verdict for
    it, so every check is INCONCLUSIVE with the error as its reason, and ``setup_error`` names the exit code."""
    return RunResult.from_checks(
        [CheckResult.inconclusive(name, f"{SETUP_ERROR_PREFIX}{error}") for name in req.suite.checks],
        signature="",
        engine=EngineInfo(url=req.engine.url or "", kind=req.engine.kind),
        environment={"suite": req.suite.name, "profile": req.profile},
        extra={"setup_error": {"exit_code": 3, "message": str(error)}},
    )


def _run_engine(req: CheckRequest, store: Any) -> tuple[RunResult, dict[str, Any], bool]:
    """The suite on the chosen engine: the result, its per-position records, and whether the engine answered.
    An engine that never answered is a setup error (its result.json written first, for the report step)."""
    from precisionbot.checks.progress import TerminalProgress
    from precisionbot.checks.suite import run_suite
    from precisionbot.results.directory import write_result

    started = False
    try:
        with (
            open_engine(req.config, req.engine, req.model, req.out) as engine,
            spec_arm(req.config, req.engine, req.suite.checks) as spec_engine,
        ):
            info = EngineInfo(url=engine.url, kind=engine.kind, commit=req.commit)
            engine.server_info()  # reachable at all? (else every check would retry the same dead URL)
            started = True
            refuse_misfits(engine, (req.suite, req.suite.checks))
            up_front = vs_main_skipped(req.config, req.suite)
            if up_front and not req.quiet:
                print(f"note: {up_front}", file=sys.stderr)
            progress = TerminalProgress(sys.stderr)
            progress.enabled = not req.quiet
            try:
                done = run_suite(
                    engine,
                    req.config,
                    req.suite,
                    profile=req.profile,
                    model=req.model,
                    store=store,
                    progress=progress,
                    engine_info=info,
                    record_hint=record_hint(
                        req.engine,
                        config_path=req.config_path,
                        suite=req.suite.name,
                        sizes=req.flags.sizes(),
                        model=req.model_flag,
                    ),
                    # Passed by the EC2 runner's pr.sh (read from the instance metadata): where the GPU minutes ran.
                    instance_type=os.environ.get(envvars.INSTANCE_TYPE) or None,
                    fit_sizes=True,
                    spec_engine=spec_engine,
                )
            finally:
                progress.close()
            result = done.result
            if req.config.localize.enabled:
                from precisionbot.commands.localize_failures import localize_failures

                result = localize_failures(
                    result, done.samples, engine=engine, config=req.config, store=store, out=req.out
                )
            return result, done.records, True
    except EngineError as exc:
        if not started:
            # The engine we were told to use is not there: a setup error (exit 3), and result.json says so in
            # the same words, for the report step.
            error = unusable(exc, req.engine)
            write_result(req.out, _setup_failure(req, error))
            raise error from exc
        # Once it answered, its failure is a result about the engine, not an error of ours.
        result = RunResult.from_checks(
            [CheckResult.inconclusive(name, f"engine unavailable: {exc}") for name in req.suite.checks],
            signature="",
            engine=EngineInfo(url=req.engine.url or "", kind=req.engine.kind),
            environment={"suite": req.suite.name, "profile": req.profile},
        )
        return result, {}, started


def _with_ab(result: RunResult, stored: Any, meta: Any, wall_s: float, *, base_ref: str) -> RunResult:
    """result.json's ``ab``: the merge base's run against this one, and the wall time of both."""
    from precisionbot.checks.ab import ab_summary

    timing = result.extra.get("timing")
    wall = wall_s + (float(timing.get("wall_s", 0.0)) if isinstance(timing, dict) else 0.0)
    fingerprint = result.extra.get("fingerprint")
    summary = ab_summary(
        meta,
        base_ref=base_ref,
        wall_s=wall,
        fingerprint=fingerprint if isinstance(fingerprint, dict) else {},
        stored=stored,
    )
    return dataclasses.replace(result, extra={**result.extra, "ab": summary})


def _print_outcome(result: RunResult, out: Path) -> None:
    """The table on stdout; the A/B line; why it is inconclusive and where the engine stalled on stderr."""
    print(render_table(result, out))
    if isinstance(result.extra.get("ab"), dict):
        from precisionbot.report.rows import ab_text

        print(ab_text(result.extra["ab"]))
    if result.verdict.value == "inconclusive" and not _same_stream(sys.stdout, sys.stderr):
        # For a CI log that keeps only stderr; where both streams land in one place the table said it already.
        print(f"precisionbot: inconclusive: {inconclusive_reasons(result)}", file=sys.stderr)
    stall = stall_report(result, out / "engine.log")
    if stall:
        print(stall, file=sys.stderr)
    from precisionbot.checks.main_noise import skipped_notes
    from precisionbot.scoring.cache_fit import size_notes

    for note in size_notes(result.environment):
        print(f"note: {note}", file=sys.stderr)
    for note in skipped_notes(result):  # otherwise only in result.json
        print(f"note: not compared with main's noise: {note}", file=sys.stderr)
    spec = result.check("spec_decode")
    info = spec.extra.get("main_acceptance") if spec is not None else None
    if isinstance(info, dict) and info.get("brief"):
        note = f"spec_decode's acceptance not compared with main's stored reruns: {info['skipped']}"
        print(f"note: {note}", file=sys.stderr)


def _same_stream(a: Any, b: Any) -> bool:
    """Whether two text streams write to the same file or terminal (``2>&1``, an interactive shell)."""
    try:
        return os.path.sameopenfile(a.fileno(), b.fileno())
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor (captured, in-memory)
        return False


STALL_LOG_LINES = 15


def stall_report(result: RunResult, log: Path) -> str:
    """When the engine stalled: its log's last lines (the engine we launched), so a CI log says where it hung."""
    from precisionbot.engines.launcher import log_tail

    stalled = [c.name for c in result.checks if c.extra.get("stalled")]
    if not stalled:
        return ""
    head = f"precisionbot: the engine stalled during {stalled[0]} (no answer within engine.request_timeout_s)"
    if not log.is_file():
        return f"{head}; its log is wherever the engine was started (precisionbot did not launch it)"
    return f"{head}; last lines of {log}:\n{log_tail(log, STALL_LOG_LINES)}"


def inconclusive_reasons(result: RunResult) -> str:
    """The INCONCLUSIVE checks' reasons on one line, each distinct reason once (with the checks it hit)."""
    by_reason: dict[str, list[str]] = {}
    for c in result.checks:
        if c.verdict.value == "inconclusive":
            for reason in c.reasons[:1] or ("no reason given",):
                by_reason.setdefault(reason, []).append(c.name)
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())


def _num(x: Any) -> str:
    from precisionbot.fmt import plain

    return plain(x) if isinstance(x, (int, float)) else "-"


def render_table(result: RunResult, out: Path) -> str:
    """The short stdout table (pure apart from the path it names): the numbers the PR comment shows."""
    rows = [("check", "verdict", "measure", "mean", "p99", "max", "k3>1e-2", "cache")]
    for c in result.checks:
        s = c.stats
        m = c.measure
        measure, mean, p99, top = m.name, m.mean_key, m.p99_key, m.max_key
        frac = s.get("frac_over", {}).get("1e-2") if isinstance(s.get("frac_over"), dict) else None
        cache = f"{c.cache.kept}/{c.cache.total}" if c.cache is not None else "-"
        cells = (_num(s.get(mean)), _num(s.get(p99)), _num(s.get(top)))
        rows.append(
            (
                c.name,
                c.verdict.value.upper(),
                "-" if cells == ("-", "-", "-") else measure,
                *cells,
                "-" if frac is None or measure != "k3" else f"{100 * frac:.2g}%",
                cache,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    by_reason: dict[str, list[str]] = {}  # each distinct first reason once, with every check it hit
    for c in result.checks:
        if c.verdict.value != "pass" and c.reasons:
            by_reason.setdefault(c.reasons[0], []).append(c.name)
    lines += [f"  {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
    lines.append(f"verdict: {result.verdict.value.upper()} (exit {result.verdict.exit_code}); results in {out}/")
    return "\n".join(lines)
