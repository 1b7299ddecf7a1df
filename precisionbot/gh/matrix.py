"""The job matrix: one entry per configured model (``name@tpN``), each with its suite settings and the
runner spec its GPU job needs. Pure. The workflow uses it as ``strategy.matrix: ${{ fromJSON(...) }}``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from precisionbot.config import Config, ModelConfig, RunnerConfig
from precisionbot.errors import ConfigError

BUILTIN_MODEL = "builtin"


def runner_spec(runner: RunnerConfig) -> dict[str, Any]:
    spec = asdict(runner)
    spec["labels"] = list(runner.labels)
    spec["security_groups"] = list(runner.security_groups)
    return spec


def build_matrix(
    config: Config,
    suite_name: str,
    models: Sequence[str] = (),
    checks: Sequence[str] = (),
    samples: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``{"include": [...]}`` for ``suite_name``; ``models`` filters by name (unknown names are a
    ``ConfigError`` listing the known ones); ``checks``/``samples`` override the suite's."""
    suite = config.suite(suite_name)
    chosen: list[ModelConfig | None]
    if config.models:
        known = {m.name for m in config.models}
        unknown = [name for name in models if name not in known]
        if unknown:
            raise ConfigError(f"unknown model {unknown[0]!r}; configured models: {', '.join(sorted(known))}")
        chosen = [m for m in config.models if not models or m.name in models]
    else:
        if any(name != BUILTIN_MODEL for name in models):
            raise ConfigError(f"no models are configured; only {BUILTIN_MODEL!r} can run")
        chosen = [None]
    include = []
    for model in chosen:
        include.append(
            {
                "name": model.key if model else f"{BUILTIN_MODEL}@tp1",
                "model": model.name if model else BUILTIN_MODEL,
                "path": model.path if model else BUILTIN_MODEL,
                "tp": model.tp if model else 1,
                "suite": suite.name,
                "checks": ",".join(checks or suite.checks),
                "samples": samples if samples is not None else suite.samples,
                "runner": runner_spec(config.runner_for(model)),
            }
        )
    return {"include": include}


def with_runner_labels(matrix: dict[str, list[dict[str, Any]]], nonce: str) -> dict[str, list[dict[str, Any]]]:
    """Give each cell the one runner label its launch registers and its GPU job selects
    (``precisionbot-<nonce>-<index>``). ``nonce`` is fresh randomness per plan (128 bits): a run id is public
    and sequential, so a label built from it could be named in advance by another job's ``runs-on``."""
    return {"include": [{**cell, "label": f"precisionbot-{nonce}-{i}"} for i, cell in enumerate(matrix["include"])]}
