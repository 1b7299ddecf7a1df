"""Run a suite's checks against an engine and assemble the ``RunResult`` (the shared check runner)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from precisionbot.baselines.host import gather_fingerprint
from precisionbot.baselines.signature import Signature
from precisionbot.baselines.store import Store
from precisionbot.checks.cache_sizes import SizesFit, fit_cache_sizes
from precisionbot.checks.context import CheckContext, NullProgress, ProgressSink
from precisionbot.checks.main_noise import apply_vs_main
from precisionbot.checks.registry import CHECKS
from precisionbot.config import Config, ModelConfig, SuiteConfig, ThresholdSet
from precisionbot.engines.base import Engine
from precisionbot.errors import EngineError, EngineStalled
from precisionbot.results import CheckOutput, CheckResult, EngineInfo, PositionRecord, RunResult, SampleTokens
from precisionbot.results.cost import run_cost
from precisionbot.results.run import JUDGED_AGAINST_MATCH
from precisionbot.scoring.k3 import judge_against_match
from precisionbot.scoring.window_step import judge_window_step


@dataclass(frozen=True)
class CheckRun:
    """A finished run: the result plus each check's per-position arrays and compared samples' tokens."""

    result: RunResult
    records: dict[str, PositionRecord] = field(default_factory=dict)
    samples: dict[str, Mapping[int, SampleTokens]] = field(default_factory=dict)
    suite: SuiteConfig | None = None
    """The suite as it ran (its sizes rounded up to the engine's cache granularity where ``fit_sizes`` did)."""


def run_one(ctx: CheckContext, name: str) -> CheckOutput:
    """One check; an engine that answers badly makes it INCONCLUSIVE with the engine's error as the reason."""
    spec = CHECKS.get(name)
    if spec is None:
        return CheckOutput(CheckResult.inconclusive(name, f"the {name!r} check is not available in this build"))
    try:
        return spec.run(ctx)
    except EngineStalled as exc:
        result = CheckResult.inconclusive(name, f"could not run: the engine stalled: {exc}")
        return CheckOutput(dataclasses.replace(result, extra={**result.extra, "stalled": True}))
    except EngineError as exc:
        return CheckOutput(CheckResult.inconclusive(name, f"could not run: {exc}"))


def relate_to_match(outputs: list[CheckOutput], limits: ThresholdSet) -> list[CheckOutput]:
    """Apply the cache-vs-match rule when ``match`` ran in the same run or the check measured its own no-cache
    control (``scoring.k3.noise_reference``)."""
    match = next((o.result for o in outputs if o.result.name == "match"), None)
    return [
        dataclasses.replace(o, result=judge_against_match(o.result, match, limits))
        if o.result.name in JUDGED_AGAINST_MATCH
        else o
        for o in outputs
    ]


def apply_window_step(outputs: list[CheckOutput], window: object) -> list[CheckOutput]:
    """``match`` judged by the window-step rule when the engine reports a sliding window (``window_step``)."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 2:
        return outputs
    return [
        dataclasses.replace(o, result=judge_window_step(o.result, o.record, window))
        if o.result.name == "match" and o.record is not None
        else o
        for o in outputs
    ]


def signature_for(ctx: CheckContext) -> str:
    """What must match for two runs to be comparable (no host facts here: the golden check adds its own)."""

    suite, model = ctx.suite, ctx.model
    launched: dict[str, object] = {}
    if model is not None:
        launched = {
            "model": model.path,
            "revision": model.revision,
            "tp": model.tp,
            "dtype": model.dtype,
            "engine_args": ctx.config.launch_args(model),
        }
    return Signature.build(
        **launched,
        corpus=suite.corpus or "builtin",
        check_params={
            "samples": suite.samples,
            "max_new_tokens": suite.max_new_tokens,
            "prompt_tokens": list(suite.prompt_tokens),
            "seed": suite.seed,
            **suite.conversation_params(),
        },
    ).digest


def run_suite(
    engine: Engine,
    config: Config,
    suite: SuiteConfig,
    *,
    checks: Sequence[str] | None = None,
    profile: str | None = None,
    model: ModelConfig | None = None,
    store: Store | None = None,
    progress: ProgressSink | None = None,
    engine_info: EngineInfo | None = None,
    record_hint: str | None = None,
    instance_type: str | None = None,
    fit_sizes: bool = False,
    spec_engine: Engine | None = None,
) -> CheckRun:
    """Run ``checks`` (default: the suite's) in order and collect results and arrays. ``instance_type``: the
    machine the engine runs on (the EC2 runner's type), for the run's GPU minutes and price estimate.
    ``fit_sizes`` (``check``): round the sizes up to the engine's cache granularity first, unless the suite
    keeps them (``checks.cache_sizes``); the run's signature and ``environment`` then name the sizes that ran.
    ``spec_engine``: the ``spec_decode`` check's spec arm (``CheckContext.spec_engine``)."""
    profile = profile or config.thresholds.profile
    thresholds = config.thresholds_for_model(model, profile)
    if suite.kl_div is not None and profile == "default":
        # the suite's own (a kit's threshold), named by its key in reasons
        thresholds = dataclasses.replace(thresholds, kl_div=suite.kl_div, kl_div_key=f"suites.{suite.name}.kl_div")
    ctx = CheckContext(
        engine=engine,
        config=config,
        suite=suite,
        thresholds=thresholds,
        profile=profile,
        model=model,
        store=store,
        progress=progress or NullProgress(),
        record_hint=record_hint,
        spec_engine=spec_engine,
    )
    names = tuple(checks or suite.checks)
    ctx.progress.start(planned_units(ctx, names))
    sizes = fit_cache_sizes(ctx, names) if fit_sizes else SizesFit()
    t0 = time.perf_counter()
    ran: list[CheckOutput] = []
    stalled: str | None = None
    for name in names:
        if stalled is not None:  # a stalled engine would make every later check wait as long again
            ran.append(CheckOutput(CheckResult.inconclusive(name, f"not run: the engine stalled during {stalled}")))
            continue
        ran.append(run_one(ctx, name))
        if ran[-1].result.extra.get("stalled"):
            stalled = name
    outputs = apply_vs_main(ctx, relate_to_match(ran, ctx.thresholds))
    wall = time.perf_counter() - t0
    info = engine_info or EngineInfo(url=engine.url, kind=engine.kind)
    extra: dict[str, object] = {"timing": _timing(wall, instance_type, config, model)}
    environment: dict[str, object] = {
        "suite": suite.name,
        "profile": profile,
        "samples": suite.samples,
        "max_new_tokens": ctx.suite.max_new_tokens,
        **sizes.environment(),
    }
    if model is not None:
        environment.update(model=model.name, tp=model.tp, dtype=model.dtype)
    try:
        if stalled is not None:
            raise EngineError("stalled")  # asking again would wait request_timeout_s once more
        server = engine.server_info()
        environment.update(
            {k: v for k, v in (("engine_version", server.version), ("model_path", server.model_path)) if v is not None}
        )
        # SGLang's server args that the diagnosis reads (hybrid checkpoints and windows) and the report shows
        # (the HTML report marks prefill chunks and the window on its per-position charts).
        environment.update({k: server.raw[k] for k in ENGINE_ARGS_KEPT if k in server.raw})
        extra["fingerprint"] = gather_fingerprint(server.raw, config.launch_args(model))
    except EngineError:
        pass  # already reflected in the checks' verdicts
    outputs = apply_window_step(outputs, environment.get("sliding_window_size"))
    result = RunResult.from_checks(
        (o.result for o in outputs),
        signature=signature_for(ctx),
        engine=info,
        environment=environment,
        extra=extra,
    )
    records = {o.result.name: o.record for o in outputs if o.record is not None}
    samples = {o.result.name: o.samples for o in outputs if o.samples}
    return CheckRun(result=result, records=records, samples=samples, suite=ctx.suite)


def _timing(wall: float, instance_type: str | None, config: Config, model: ModelConfig | None) -> dict[str, object]:
    """The wall time and, on a known runner, its GPU minutes and price (``results.cost``; the configured
    ``runner.price_per_hour`` overrides the list price of the configured instance type)."""
    timing: dict[str, object] = {"wall_s": wall}
    if instance_type:
        runner = config.runner_for(model)
        override = runner.price_per_hour if runner.instance_type == instance_type else None
        timing.update(run_cost(wall, instance_type, usd_per_hour=override).to_dict())
    return timing


ENGINE_ARGS_KEPT = (
    "enable_deterministic_inference",
    "page_size",
    "mamba_track_interval",
    "mamba_ssm_dtype",
    "sliding_window_size",
    "swa_full_tokens_ratio",
    "chunked_prefill_size",
)
"""``/server_info`` keys copied into the run's ``environment``."""


def planned_units(ctx: CheckContext, names: Sequence[str]) -> int:
    return sum(CHECKS[n].planned_units(ctx) if n in CHECKS else 0 for n in names)
