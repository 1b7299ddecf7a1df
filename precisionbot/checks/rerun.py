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
    off for these runs (they *are* main)."""
    names: Sequence[str] = [c for c in suite.checks if c in CONSISTENCY_CHECKS] or CONSISTENCY_CHECKS
    plain_config = dataclasses.replace(config, baselines=dataclasses.replace(config.baselines, vs_main=False))
    results = []
    for i in range(reruns):
        result = run_suite(engine, plain_config, suite, checks=names, model=model, progress=progress).result
        results.append(result)
        if on_rerun is not None:
            on_rerun(i, result)
    token_k3 = config.thresholds_for_model(model).token_k3
    return HelperRuns.from_results(results, helper_params(suite), token_k3)
