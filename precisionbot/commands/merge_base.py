"""``baselines.mode: merge-base`` for ``check``: build, launch and record the PR's merge base on this runner.

Not a subcommand: ``check`` calls ``live_baseline`` before it starts the PR's engine, and judges the PR
against the store it returns.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from precisionbot.commands.options.engine import engine_at
from precisionbot.config import Config, ModelConfig, SuiteConfig


def live_baseline(
    config: Config,
    suite: SuiteConfig,
    model: ModelConfig | None,
    log_dir: Path,
    *,
    head: str | None,
    base_ref: str,
) -> tuple[Any, Any, float]:
    """The live store holding the merge base of ``head`` (the PR's commit; ``HEAD`` of the checkout when not
    given) and ``base_ref``, that run's meta, and the seconds it took. The merge base is built, launched and
    opened by ``engine_at``, as ``check`` opens the PR's engine, so both are spoken to alike."""
    from precisionbot import corpus
    from precisionbot.baselines.store import open_store
    from precisionbot.checks.ab import record_merge_base
    from precisionbot.commands.localize_failures import module_capture
    from precisionbot.engines.checkout import Checkout
    from precisionbot.errors import ConfigError

    e = config.engine
    if not e.launch or model is None:
        raise ConfigError(
            "baselines.mode: merge-base needs engine.launch and one model in the config (or --model NAME) to "
            "start the merge base; or set baselines.mode: stored"
        )
    checkout = Checkout(e.checkout)
    pr_head = checkout.resolve(head or "HEAD", "the PR head")
    base = checkout.merge_base(checkout.resolve(base_ref, "baselines.base_ref"), pr_head)
    root = tempfile.mkdtemp(prefix="precisionbot-merge-base-")
    # The live baseline serves this one run: removed when the process ends, whichever way the check went.
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    live = open_store(root)
    print(f"A/B: building and running merge-base {base[:12]} ({base_ref}) as the producer", file=sys.stderr)
    with engine_at(config, model, checkout, base, log_dir) as engine:
        modules = module_capture(engine, config, log_dir / "module-dumps")
        meta, wall = record_merge_base(
            engine, config, suite, model, corpus.suite_documents(suite.corpus), live, commit=base, modules=modules
        )
    return live, meta, wall
