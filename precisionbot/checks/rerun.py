"""main's reruns: the suite's consistency helpers run R times against one engine, as the noise that the
noise-relative rule (``precisionbot.checks.main_noise``) judges a PR against (``baseline record --reruns R``,
``thresholds suggest --engine-url``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from precisionbot.baselines.helper_reruns import HelperRuns, helper_params
from precisionbot.checks.context import ProgressSink
from precisionbot.checks.suite import run_suite
from precisionbot.config import Config, ModelConfig, SuiteConfig
from precisionbot.engines.base import Engine
from precisionbot.results import CONSISTENCY_CHECKS, RunResult


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
