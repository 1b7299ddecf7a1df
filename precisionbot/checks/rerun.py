"""main's reruns: the suite's consistency helpers run R times against one engine, as the noise that the
noise-relative rule (``precisionbot.checks.main_noise``) judges a PR against (``baseline record --reruns R``,
``thresholds suggest --engine-url``); and, for a suite with ``spec_decode``, main's spec arm R times, the
acceptance a PR's is judged against (``checks.spec_main``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from precisionbot.baselines.helper_reruns import HelperRuns, helper_params
from precisionbot.baselines.spec_acceptance import AcceptanceReruns, acceptance_params
from precisionbot.checks.cache_sizes import fit_cache_sizes
from precisionbot.checks.context import CheckContext, ProgressSink
from precisionbot.checks.spec_decode import arm_options, launched_arm, measure_acceptance, per_sample, spec_requests
from precisionbot.checks.suite import run_suite
from precisionbot.config import Config, ModelConfig, SuiteConfig
from precisionbot.engines.base import Engine
from precisionbot.results import CONSISTENCY_CHECKS, RunResult
from precisionbot.scoring.spec_rules import Acceptance


def rerun_helpers(
    engine: Engine,
    config: Config,
    suite: SuiteConfig,
    model: ModelConfig | None,
    reruns: int,
    *,
    on_rerun: Callable[[int, RunResult], Any] | None = None,
    progress: ProgressSink | None = None,
) -> HelperRuns:
    """Run the suite's consistency helpers (all three when it has none) ``reruns`` times; the noise rule is
    off for these runs (they *are* main). The sizes are rounded up to the engine's cache granularity as a PR's
    ``check`` rounds them, so the reruns are filed under the sizes a PR's run will have (``helper_params``)."""
    names: Sequence[str] = [c for c in suite.checks if c in CONSISTENCY_CHECKS] or CONSISTENCY_CHECKS
    plain_config = dataclasses.replace(config, baselines=dataclasses.replace(config.baselines, vs_main=False))
    results = []
    ran = suite
    for i in range(reruns):
        done = run_suite(engine, plain_config, suite, checks=names, model=model, progress=progress, fit_sizes=True)
        ran = done.suite or suite
        results.append(done.result)
        if on_rerun is not None:
            on_rerun(i, done.result)
    token_k3 = config.thresholds_for_model(model).token_k3
    return HelperRuns.from_results(results, helper_params(ran), token_k3)


def rerun_acceptance(
    engine: Engine,
    config: Config,
    suite: SuiteConfig,
    model: ModelConfig | None,
    reruns: int,
    *,
    spec_engine: Engine | None = None,
    on_rerun: Callable[[int, Acceptance], Any] | None = None,
) -> AcceptanceReruns | str:
    """main's speculative-decoding acceptance: the spec arm generates the suite's prompts ``reruns`` times, as a
    PR's ``spec_decode`` does once (``baseline record``, when the suite runs ``spec_decode``). The spec arm is
    ``spec_engine`` (``engine.spec_url``) or, on the builtin engine, the one the check launches. The sizes are
    rounded up to the engine's cache granularity as ``check`` rounds the suite's (for all its checks), so the
    reruns are filed under the sizes a PR's run will have. A string: why there is no spec arm to rerun."""
    ctx = CheckContext(
        engine=engine,
        config=config,
        suite=suite,
        thresholds=config.thresholds_for_model(model),
        model=model,
        spec_engine=spec_engine,
    )
    fit_cache_sizes(ctx, suite.checks)
    if spec_engine is not None:
        arm: contextlib.AbstractContextManager[Engine] = contextlib.nullcontext(spec_engine)
    else:
        arms = arm_options(engine)
        if isinstance(arms, str):
            return arms
        arm = launched_arm(engine, arms[1])
    requests = spec_requests(ctx.prompts(), ctx.suite.max_new_tokens)
    measured: list[Acceptance] = []
    samples = []
    with arm as spec_arm:
        for i in range(reruns):
            spec_arm.flush_cache()
            gens, acceptance = measure_acceptance(spec_arm, requests)
            measured.append(acceptance)
            samples.append(per_sample(gens))
            if on_rerun is not None:
                on_rerun(i, acceptance)
        params = acceptance_params(ctx.suite, spec_arm.server_info().raw)
    # Per-sample figures only when every rerun had them (an engine reports them for every request or none).
    kept = tuple(s for s in samples if s is not None) if all(s is not None for s in samples) else ()
    return AcceptanceReruns(params=params, reruns=tuple(measured), samples=kept)
