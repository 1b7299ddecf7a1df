"""``precisionbot check``: run checks against an engine, write ``DIR/result.json`` (+ arrays), print a table.

Exit code = the run's verdict (0 pass, 1 fail, 2 inconclusive); 3 for our own setup errors (bad config or
arguments), raised as ``PrecisionbotError`` and printed by ``cli.main``. An engine that cannot be started or
reached before any check ran (an invalid URL, connection refused, a launch that fails) is a setup error too:
the engine we were told to use is not there (exit 3, one line with the fix; result.json still says why, as
INCONCLUSIVE, for the report step). An engine that fails *during* a check makes that check INCONCLUSIVE.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precisionbot.builtin.flags import add_engine_flags, engine_kwargs
from precisionbot.builtin.flags import given as builtin_flags_given
from precisionbot.commands.calibrate_grid import floor_warnings
from precisionbot.commands.store_option import add_store_option
from precisionbot.config import Config, ModelConfig, SuiteConfig, load_config_or_default
from precisionbot.config.fields import did_you_mean, parse_int_range
from precisionbot.errors import ConfigError, EngineError
from precisionbot.gh import provenance
from precisionbot.results import CHECK_NAMES, CheckResult, EngineInfo, RunResult

if TYPE_CHECKING:
    from precisionbot.engines.checkout import Checkout

DEFAULT_OUT = "precisionbot-out"
DEFAULT_SUITE = "consistency"


INSTANCE_TYPE_ENV = "PRECISIONBOT_INSTANCE_TYPE"
"""The runner's EC2 instance type, for the comment's GPU minutes and price (the runner's user data sets it)."""


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
    src = p.add_mutually_exclusive_group()
    src.add_argument("--engine-url", metavar="URL", help="an engine that is already running")
    src.add_argument(
        "--engine",
        choices=("builtin", "launch"),
        help="builtin: the builtin reference engine in-process; launch: start engine.launch from the config",
    )
    p.add_argument(
        "--engine-kind", choices=("sglang", "vllm", "openai", "builtin", "llamacpp"), help="client for --engine-url"
    )
    p.add_argument("--fault", action="append", default=[], metavar="NAME[=VALUE]", help="builtin engine fault")
    p.add_argument("--disable-radix-cache", action="store_true", help="builtin engine: no prefix cache")
    add_engine_flags(p)
    p.add_argument("--config", metavar="FILE", help="YAML config (default: .github/precision.yml if present)")
    p.add_argument("--suite", help=f"suite from the config (default {DEFAULT_SUITE})")
    p.add_argument("--model", help="model name from the config (thresholds, launch)")
    p.add_argument("--checks", metavar="a,b", help=f"checks to run, from {', '.join(CHECK_NAMES)}")
    p.add_argument("--samples", type=int, metavar="N")
    p.add_argument("--max-new-tokens", type=int, metavar="N")
    p.add_argument("--prompt-tokens", metavar="N|LO..HI", help="prompt length in tokens, or a range")
    p.add_argument(
        "--golden-depths", metavar="N,N,...", help="context depths (tokens) golden is teacher-forced at (the suite's)"
    )
    p.add_argument("--profile", choices=("default", "deterministic"), help="threshold profile")
    add_store_option(p, dest="baseline_store", help="baseline store (golden)")
    p.add_argument("--layers-dump", metavar="DIR", help="layers: hidden-state dumps of the engine under test")
    p.add_argument("--layers-baseline", metavar="DIR", help="layers: the baseline build's dumps")
    p.add_argument(
        "--engine-commit",
        metavar="SHA",
        help="engine commit under test, shown in reports (default: $PRECISIONBOT_ENGINE_COMMIT, as baseline record)",
    )
    p.add_argument(
        "--base-ref",
        metavar="REF",
        help="baselines.mode merge-base: what the PR merges into (default: baselines.base_ref, origin/main)",
    )
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, help=f"result directory (default {DEFAULT_OUT})")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=run)


def parse_depths(text: str) -> tuple[int, ...]:
    """``--golden-depths 256,512``: sorted, distinct token counts of at least 16."""
    try:
        depths = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        depths = ()
    if not depths or depths[0] < 16:
        raise ConfigError(f"--golden-depths {text!r}: write token counts of at least 16, e.g. 256,512")
    return depths


def refuse_misfits(engine: Any, *parts: tuple[SuiteConfig, tuple[str, ...]]) -> None:
    """A setup error (before anything runs) naming every part of the suites whose sizes cannot fit the engine's
    context: each ``(suite, checks)`` pair is judged for those checks."""
    from precisionbot.checks.fit import context_length, misfits

    found = context_length(engine.server_info().raw)
    if found is None:
        return  # the engine does not say; a request that is too long fails with the engine's own error
    problems = [p for suite, checks in parts for p in misfits(suite, checks, *found)]
    if problems:
        names = list(dict.fromkeys(repr(suite.name) for suite, _ in parts))
        which = f"suite {names[0]} does" if len(names) == 1 else f"suites {' and '.join(names)} do"
        raise ConfigError(f"{which} not fit this engine: {'; '.join(problems)}")


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        raise ConfigError(f"{flag} must be a positive integer (got {value})")
    return value


def apply_overrides(suite: SuiteConfig, args: argparse.Namespace) -> SuiteConfig:
    """CLI flags win over the config."""
    changes: dict[str, Any] = {}
    if args.checks:
        names = tuple(n.strip() for n in args.checks.split(",") if n.strip())
        bad = [n for n in names if n not in CHECK_NAMES]
        if bad or not names:
            hint = did_you_mean(bad[0], CHECK_NAMES) if len(bad) == 1 else None
            fix = f"{hint} (checks: {', '.join(CHECK_NAMES)})" if hint else f"use {', '.join(CHECK_NAMES)}"
            raise ConfigError(f"--checks: unknown check(s) {', '.join(bad) or '(none)'}; {fix}")
        changes["checks"] = names
    if _positive(args.samples, "--samples") is not None:
        changes["samples"] = args.samples
    if _positive(args.max_new_tokens, "--max-new-tokens") is not None:
        changes["max_new_tokens"] = args.max_new_tokens
    if args.prompt_tokens is not None:
        try:
            changes["prompt_tokens"] = parse_int_range(args.prompt_tokens)
        except ValueError as exc:
            raise ConfigError(f"--prompt-tokens {args.prompt_tokens!r}: {exc}; write N or LO..HI") from exc
    if getattr(args, "golden_depths", None):
        changes["golden"] = dataclasses.replace(suite.golden, context_depths=parse_depths(args.golden_depths))
    layers = getattr(args, "layers_dump", None), getattr(args, "layers_baseline", None)
    if any(layers):
        changes["layers"] = dataclasses.replace(
            suite.layers,
            dump_dir=layers[0] or suite.layers.dump_dir,
            baseline_dir=layers[1] or suite.layers.baseline_dir,
        )
    out = dataclasses.replace(suite, **changes)
    if out.samples % out.branches:
        raise ConfigError(
            f"--samples {out.samples}: suite {suite.name!r} has {out.branches} branches per group, so samples "
            f"must be a multiple of {out.branches}"
        )
    return out


def _model(config: Config, args: argparse.Namespace) -> ModelConfig | None:
    if args.model:
        return config.model(args.model)
    return config.models[0] if len(config.models) == 1 else None


@contextmanager
def open_engine(config: Config, args: argparse.Namespace, model: ModelConfig | None, log_dir: Path) -> Iterator[Any]:
    """The engine the flags and config select; closed (and stopped, if we started it) on exit."""
    e = config.engine
    common = client_options(config)
    builtin_flags = bool(args.fault or args.disable_radix_cache or builtin_flags_given(args))
    url = args.engine_url or (None if args.engine else e.url)
    mode = args.engine or ("url" if url else ("launch" if e.launch and e.kind != "builtin" else e.kind))
    if builtin_flags and mode != "builtin":
        raise ConfigError(
            "--fault and --disable-radix-cache are for the builtin engine (so are --enable-deterministic-inference "
            "and --model-preset); add --engine builtin"
        )
    if mode == "builtin":
        from precisionbot.engines.builtin import BuiltinEngine

        engine: Any = BuiltinEngine(
            faults=tuple(args.fault) or config.engine.faults,
            disable_radix_cache=args.disable_radix_cache,
            flags=_dumper_flags() if config.localize.enabled else None,
            **engine_kwargs(args),
            **common,
        )
        try:
            yield engine
        finally:
            engine.close()
        return
    if mode == "launch":
        if not e.launch or model is None:
            raise ConfigError("--engine launch needs engine.launch and one model in the config (or --model NAME)")
        from precisionbot.engines.launcher import Launcher

        launcher = Launcher(
            e.launch,
            model=model.path,
            tp=model.tp,
            args=f"{e.args} {model.args}".strip(),
            log_path=log_dir / "engine.log",
            health_timeout_s=e.health_timeout_s,
        )
        launcher.start()
        try:
            with _client(e.kind, launcher.url, common) as engine:
                yield engine
        finally:
            launcher.stop()
        return
    if not url:
        raise ConfigError("no engine: pass --engine-url URL or --engine builtin (or set engine.url in the config)")
    _check_url(url, "--engine-url" if args.engine_url else "engine.url in the config")
    # A URL speaks an HTTP API: the builtin default kind means "SGLang-compatible" there.
    kind = args.engine_kind or ("sglang" if e.kind == "builtin" else e.kind)
    with _client(kind, url, common) as engine:
        yield engine


def _dumper_flags() -> Any:
    """The builtin engine launched as localize needs it (docs/localize.md): routes, all modules, no graphs."""
    from precisionbot.builtin.dumper_config import DumperConfig, RuntimeFlags

    return RuntimeFlags(True, True, DumperConfig(server_port="reuse", non_intrusive_mode="all"))


def _localize_failure(result: RunResult, url: str, config: Config, out: Path) -> RunResult:
    """``localize:`` in the config: the first failing consistency helper's two paths, localized on the same
    engine; the finding (or why there is none) goes into result.json as ``localization``."""
    from precisionbot.errors import PrecisionbotError
    from precisionbot.localize.run import HELPER_PATHS, Settings, localize_engines
    from precisionbot.results import Verdict

    failing = next((c for c in result.checks if c.verdict is Verdict.FAIL and c.name in HELPER_PATHS), None)
    if failing is None:
        return result
    lc = config.localize
    settings = Settings(HELPER_PATHS[failing.name], lc.prompt_tokens, lc.max_new_tokens, 24, lc.disk_floor_gib)
    record: dict[str, Any] = {"check": failing.name}
    try:
        record |= localize_engines(url, None, settings, out / "localize").summary
    except PrecisionbotError as exc:
        record["error"] = str(exc)
        print(f"precisionbot: localize: {exc}", file=sys.stderr)
    return dataclasses.replace(result, extra={**result.extra, "localization": record})


def _check_url(url: str, source: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{source} {url!r} is not an http(s) URL; write it as http://HOST:PORT")
    try:
        parts.port  # noqa: B018  (a property that validates the port)
    except ValueError as exc:
        raise ConfigError(f"{source} {url!r}: {exc}; write it as http://HOST:PORT") from exc


def _unusable(exc: EngineError, args: argparse.Namespace, config: Config) -> EngineError:
    """The one-line setup error for an engine that was not usable before any check ran."""
    first = str(exc).splitlines()[0].rstrip(":").replace("; log tail (", "; engine log (")
    first = first.removesuffix("; is the engine running?")
    launched = args.engine == "launch" or not (args.engine_url or config.engine.url)
    fix = (
        "fix engine.launch in the config (or start the server yourself and pass --engine-url)"
        if launched
        else "start the server or fix --engine-url"
    )
    if launched and "; its log says: " in first:
        # The engine said why (a model that is not there or not GGUF, a directory its arguments name that does
        # not exist): that is the cause, not the template.
        fix = "fix what the engine's log names (the model path, a directory in the engine's arguments: create it)"
    return EngineError(f"the engine is not usable, no check ran: {first}; {fix}")


def client_options(config: Config) -> dict[str, Any]:
    """The client settings every engine kind takes from ``engine:`` in the config."""
    e = config.engine
    return {"batch_size": e.batch_size, "concurrency": e.concurrency, "request_timeout_s": e.request_timeout_s}


@contextmanager
def engine_at(config: Config, model: ModelConfig, checkout: Checkout, sha: str, log_dir: Path) -> Iterator[Any]:
    """A client of the configured engine built (``engine.install``) and launched (``engine.launch``) at commit
    ``sha`` of ``checkout``: how bisect starts each commit and the A/B its merge base. Stopped on exit."""
    from precisionbot.engines.checkout import launched_at

    e = config.engine
    with (
        launched_at(
            checkout,
            sha,
            install_command=e.install,
            launch=str(e.launch),
            model=model.path,
            tp=model.tp,
            args=f"{e.args} {model.args}".strip(),
            log_dir=log_dir,
            health_timeout_s=e.health_timeout_s,
        ) as url,
        _client(e.kind, url, client_options(config)) as engine,
    ):
        yield engine


@contextmanager
def _client(kind: str, url: str, common: dict[str, Any]) -> Iterator[Any]:
    if kind == "openai":
        from precisionbot.engines.openai import OpenAIEngine

        engine: Any = OpenAIEngine(url, **common)
    elif kind == "vllm":
        from precisionbot.engines.vllm import VLLMEngine

        engine = VLLMEngine(url, **common)
    elif kind == "llamacpp":
        from precisionbot.engines.llamacpp import LlamaCppEngine

        engine = LlamaCppEngine(url, **common)
    else:
        from precisionbot.engines.sglang import SGLangEngine

        engine = SGLangEngine(url, kind="builtin" if kind == "builtin" else "sglang", **common)
    try:
        yield engine
    finally:
        engine.close()


def record_hint(args: argparse.Namespace, config: Config, suite: SuiteConfig) -> str:
    """The ``baseline record`` flags (all but ``--store``) that reach the engine this run used, with its config,
    suite and model: an engine precisionbot started (builtin, launch) is started again rather than named by a
    port that is dead once the run ends, and without ``--config``/``--suite`` the recorded signature differs."""
    e = config.engine
    url = args.engine_url or (None if args.engine else e.url)
    mode = args.engine or ("url" if url else ("launch" if e.launch and e.kind != "builtin" else e.kind))
    if mode == "builtin":
        parts = ["--engine builtin"]
        if getattr(args, "enable_deterministic_inference", False):
            parts.append("--enable-deterministic-inference")
        parts += [
            f"--{flag} {getattr(args, attr)}"
            for flag, attr in (("model-preset", "model_preset"), ("vocab", "vocab"))
            if getattr(args, attr, None)
        ]
        if args.disable_radix_cache:
            parts.append("--disable-radix-cache")
    elif mode == "launch":
        parts = ["--engine launch"]
    else:
        parts = [f"--engine-url {url}"]
        if args.engine_kind:
            parts.append(f"--engine-kind {args.engine_kind}")
    if args.config:
        parts.append(f"--config {args.config}")
    parts.append(f"--suite {suite.name}")
    for flag in ("samples", "max_new_tokens", "prompt_tokens", "golden_depths"):
        if getattr(args, flag, None) is not None:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag)}")
    if args.model:
        parts.append(f"--model {args.model}")
    return " ".join(parts)


def require_existing_store(store: Any, flag: str) -> None:
    """A local store directory that does not exist is a typo or a store never recorded into: a setup error
    (exit 3) in every command that reads baselines, so ``check`` and ``baseline list`` agree."""
    from precisionbot.baselines.store.local import LocalStore
    from precisionbot.errors import StoreError

    if isinstance(store, LocalStore) and not store.root.exists():
        raise StoreError(
            f"baseline store {store.uri} does not exist; check {flag} "
            "(or baselines.store in the config; `precisionbot baseline record` creates it)"
        )


def run(args: argparse.Namespace) -> int:
    from precisionbot.baselines.store import open_store
    from precisionbot.checks.progress import TerminalProgress
    from precisionbot.checks.suite import run_suite
    from precisionbot.report import ReportSection, findings
    from precisionbot.results.directory import write_result

    config = load_config_or_default(args.config)
    suite = apply_overrides(config.suite(args.suite or DEFAULT_SUITE), args)
    profile = args.profile or config.thresholds.profile
    model = _model(config, args)
    out = Path(args.out)
    if not args.quiet:
        for warning in floor_warnings(suite):
            print(f"precisionbot: warning: {warning}", file=sys.stderr)
    store = open_store(args.baseline_store or config.baselines.store)
    if "golden" in suite.checks and config.baselines.mode != "merge-base":  # merge-base records its own
        require_existing_store(store, "--baseline-store")
    records: dict[str, Any] = {}
    started = False
    ab: Any = None
    if config.baselines.mode == "merge-base":
        from precisionbot.commands.merge_base import live_baseline

        stored = store
        store, ab_meta, ab_wall = live_baseline(config, args, suite, model, out / "merge-base", engine_at)
        ab = (stored, ab_meta, ab_wall)
    try:
        with open_engine(config, args, model, out) as engine:
            progress = TerminalProgress(sys.stderr)
            if args.quiet:
                progress.enabled = False
            commit = args.engine_commit or os.environ.get("PRECISIONBOT_ENGINE_COMMIT") or None
            info = EngineInfo(url=engine.url, kind=engine.kind, commit=commit)
            engine.server_info()  # reachable at all? (else every check would retry the same dead URL)
            started = True
            refuse_misfits(engine, (suite, suite.checks))
            up_front = vs_main_skipped(config, suite)
            if up_front and not args.quiet:
                print(f"note: {up_front}", file=sys.stderr)
            try:
                done = run_suite(
                    engine,
                    config,
                    suite,
                    profile=profile,
                    model=model,
                    store=store,
                    progress=progress,
                    engine_info=info,
                    record_hint=record_hint(args, config, suite),
                    # Passed by the EC2 runner's pr.sh (read from the instance metadata): where the GPU minutes ran.
                    instance_type=os.environ.get(INSTANCE_TYPE_ENV) or None,
                )
            finally:
                progress.close()
            result, records = done.result, done.records
            if config.localize.enabled:
                result = _localize_failure(result, engine.url, config, out)
    except EngineError as exc:
        # The engine would not start or answer: a result about the engine, not an error of ours.
        reason = f"engine unavailable: {exc}"
        result = RunResult.from_checks(
            [CheckResult.inconclusive(name, reason) for name in suite.checks],
            signature="",
            engine=EngineInfo(
                url=args.engine_url or "",
                kind=args.engine_kind
                or ("sglang" if args.engine_url and config.engine.kind == "builtin" else config.engine.kind),
            ),
            environment={"suite": suite.name, "profile": profile},
        )
        if not started:
            write_result(out, result)  # so a report step can still say why
            raise _unusable(exc, args, config) from exc
    # The findings `report` will show for this directory (its previous run aside), localized op included.
    result = result.with_diagnosis(findings(ReportSection(label=str(out), run=result)))
    if ab is not None and started:
        from precisionbot.checks.ab import ab_summary

        stored, ab_meta, ab_wall = ab
        timing = result.extra.get("timing")
        wall = ab_wall + (float(timing.get("wall_s", 0.0)) if isinstance(timing, dict) else 0.0)
        fingerprint = result.extra.get("fingerprint")
        summary = ab_summary(
            ab_meta,
            base_ref=args.base_ref or config.baselines.base_ref,
            wall_s=wall,
            fingerprint=fingerprint if isinstance(fingerprint, dict) else {},
            stored=stored,
        )
        result = dataclasses.replace(result, extra={**result.extra, "ab": summary})
    # Which config judged this run, so the comment job can tell a PR-modified one (gh/provenance.py).
    result = dataclasses.replace(result, extra={**result.extra, provenance.KEY: provenance.config_digest(args.config)})
    write_result(out, result, records)
    print(render_table(result, out))
    if isinstance(result.extra.get("ab"), dict):
        from precisionbot.report.rows import ab_text

        print(ab_text(result.extra["ab"]))
    if result.verdict.value == "inconclusive":
        print(f"precisionbot: inconclusive: {inconclusive_reasons(result)}", file=sys.stderr)
    stall = stall_report(result, out / "engine.log")
    if stall:
        print(stall, file=sys.stderr)
    return result.verdict.exit_code


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
    for c in result.checks:
        if c.verdict.value != "pass" and c.reasons:
            lines.append(f"  {c.name}: {c.reasons[0]}")
    lines.append(f"verdict: {result.verdict.value.upper()} (exit {result.verdict.exit_code}); results in {out}/")
    return "\n".join(lines)
