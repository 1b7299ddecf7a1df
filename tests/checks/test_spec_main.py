"""Where ``spec_decode`` takes main's acceptance from, and main's acceptance reruns: every way there is no stored
figure is a reason in words, never a figure (the stored entries themselves: tests/baselines/test_spec_acceptance.py;
end to end: tests/commands/test_baseline.py and test_check_spec_arms.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.server import BuiltinServer
from precisionbot.checks.context import CheckContext
from precisionbot.checks.rerun import rerun_acceptance
from precisionbot.checks.spec_main import stored_main
from precisionbot.config import Config
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.errors import EngineError, StoreError

CONFIG = Config.default()
SUITE = dataclasses.replace(CONFIG.suite("pr"), checks=("spec_decode",), samples=2, max_new_tokens=8)


class _Down:
    kind, url = "sglang", "http://127.0.0.1:9"

    def server_info(self) -> Any:
        raise EngineError("connection refused")


class _FailingStore:
    uri = "s3://bucket/p"

    def __getattr__(self, name: str) -> Any:
        raise StoreError("AccessDenied")


def _ctx(config: Config = CONFIG, store: Any = None, engine: Any = None) -> CheckContext:
    return CheckContext(engine or _Down(), config, SUITE, config.thresholds_for_model(None), store=store)


def test_without_a_stored_figure_the_reason_says_why() -> None:
    off = dataclasses.replace(CONFIG, baselines=dataclasses.replace(CONFIG.baselines, vs_main=False))
    assert stored_main(_ctx(off, store=_FailingStore()), _Down()) == "baselines.vs_main is off"  # type: ignore[arg-type]
    assert stored_main(_ctx(), _Down()).startswith("no baseline store was given")  # type: ignore[arg-type, union-attr]
    reason = stored_main(_ctx(store=_FailingStore()), _Down())  # type: ignore[arg-type]
    assert reason == "could not find the run's signature: connection refused"


def test_a_store_that_fails_is_a_reason() -> None:
    with BuiltinServer(EngineOptions(preset="tiny")) as server:
        engine = SGLangEngine(server.url)
        try:
            reason = stored_main(_ctx(store=_FailingStore(), engine=engine), engine)
        finally:
            engine.close()
    assert isinstance(reason, str) and reason.startswith("the baseline store failed: ")


def test_an_engine_with_one_arm_records_no_acceptance() -> None:
    with BuiltinServer(EngineOptions(preset="tiny")) as server:
        engine = SGLangEngine(server.url)
        try:
            found = rerun_acceptance(engine, CONFIG, SUITE, None, 3)
        finally:
            engine.close()
    assert isinstance(found, str) and "--spec-engine-url" in found
