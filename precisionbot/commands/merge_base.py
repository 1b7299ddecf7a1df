"""``baselines.mode: merge-base`` for ``check``: build, launch and record the PR's merge base on this runner.

Not a subcommand: ``check`` calls ``live_baseline`` before it starts the PR's engine, and judges the PR
against the store it returns.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precisionbot.config import Config, ModelConfig, SuiteConfig

if TYPE_CHECKING:
    from precisionbot.engines.checkout import Checkout


def live_baseline(
    config: Config,
    args: argparse.Namespace,
    suite: SuiteConfig,
    model: ModelConfig | None,
    log_dir: Path,
    engine_at: Callable[[Config, ModelConfig, Checkout, str, Path], AbstractContextManager[Any]],
) -> tuple[Any, Any, float]:
    """The live store holding the merge base's run, that run's meta, and the seconds it took. ``engine_at``
    builds, launches and opens the engine at a commit (``check``'s own, so both engines are spoken to alike)."""
    from precisionbot import corpus
    from precisionbot.baselines.store import open_store
    from precisionbot.checks.ab import record_merge_base
    from precisionbot.engines.checkout import Checkout
    from precisionbot.errors import ConfigError

    e = config.engine
    if not e.launch or model is None:
        raise ConfigError(
            "baselines.mode: merge-base needs engine.launch and one model in the config (or --model NAME) to "
            "start the merge base; or set baselines.mode: stored"
        )
    checkout = Checkout(e.checkout)
    head = args.engine_commit or os.environ.get("PRECISIONBOT_ENGINE_COMMIT") or "HEAD"
    base_ref = args.base_ref or config.baselines.base_ref
    base = checkout.merge_base(checkout.resolve(base_ref, "baselines.base_ref"), checkout.resolve(head, "the PR head"))
    root = tempfile.mkdtemp(prefix="precisionbot-merge-base-")
    # The live baseline serves this one run: removed when the process ends, whichever way the check went.
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    live = open_store(root)
    print(f"A/B: building and running merge-base {base[:12]} ({base_ref}) as the producer", file=sys.stderr)
    with engine_at(config, model, checkout, base, log_dir) as engine:
        meta, wall = record_merge_base(
            engine, config, suite, model, corpus.suite_documents(suite.corpus), live, commit=base
        )
    return live, meta, wall
