"""``precisionbot bisect``: test commits of the engine between a good and a bad one, name the first bad one.

Each tested commit is built and launched from its own checkout (the command hands in ``open_at(sha)``), the
configured suite runs against it, and the outcome (with each check's headline numbers) is cached in the
baseline store under ``bisect/<key>/<sha>.json``, where the key hashes everything that decides the outcome
(suite, thresholds, model, install and launch commands). A second bisection over the same range, or one that
overlaps it, tests only commits it has not seen.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from precisionbot.baselines.signature import hash_params
from precisionbot.baselines.store import Store
from precisionbot.checks.bisect_search import SKIP, Bisection, Step, step_of
from precisionbot.checks.suite import run_suite
from precisionbot.config import Config, ModelConfig, SuiteConfig
from precisionbot.engines.base import Engine
from precisionbot.errors import EngineError, EngineStartError, StoreError

CACHE_ROOT = "bisect"

OpenAt = Callable[[str], AbstractContextManager[Engine]]


def cache_key(params: Mapping[str, Any]) -> str:
    return hash_params(params)


def _cache_path(key: str, sha: str) -> str:
    return f"{CACHE_ROOT}/{key}/{sha}.json"


def cached_step(store: Store, key: str, sha: str) -> Step | None:
    path = _cache_path(key, sha)
    if path not in store.list_keys(f"{CACHE_ROOT}/{key}/"):
        return None
    try:
        return Step.from_dict(json.loads(store.get_bytes(path)), cached=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"bisect cache object {path} in {store.uri} is corrupt ({exc}); delete it") from exc


def save_step(store: Store, key: str, step: Step) -> None:
    store.put_bytes(_cache_path(key, step.sha), (json.dumps(step.to_dict(), sort_keys=True) + "\n").encode())


def evaluate_commit(
    open_at: OpenAt,
    sha: str,
    config: Config,
    suite: SuiteConfig,
    *,
    model: ModelConfig | None,
    store: Store | None,
    profile: str | None = None,
) -> Step:
    """Build, launch and check one commit. A build or start failure is a skip, never a verdict."""
    try:
        with open_at(sha) as engine:
            engine.server_info()
            result = run_suite(engine, config, suite, profile=profile, model=model, store=store).result
    except EngineStartError as exc:
        first = str(exc).splitlines()[0]
        return Step(sha, SKIP, "does not build" if "engine.install" in first else "engine did not start", {}, first)
    except EngineError as exc:
        return Step(sha, SKIP, "engine failed", {}, str(exc).splitlines()[0])
    return step_of(sha, result)


def bisect(
    bisection: Bisection,
    test: Callable[[str], Step],
    *,
    cache: Store | None,
    key: str,
    on_step: Callable[[int, Step], None] | None = None,
) -> Bisection:
    """Run the search to its end: cached outcomes first, ``test`` for the rest (each saved as it comes)."""
    number = 0
    while (sha := bisection.next_commit()) is not None:
        step = cached_step(cache, key, sha) if cache is not None else None
        if step is None:
            step = test(sha)
            if cache is not None:
                save_step(cache, key, step)
        bisection.record(step)
        number += 1
        if on_step is not None:
            on_step(number, step)
    return bisection
