"""Parity with SGLang's own released helpers, not a claim: ``sglang==0.5.23`` (installed without its
dependencies by scripts/test) runs its ``kl_test_utils`` and ``kl_multiturn_utils`` helpers against
``precisionbot serve`` with planted faults, and precisionbot's numbers for the same prompts must equal them.

Only SGLang's tokenizer (``get_tokenizer``: here the server's own tokenisation, as precisionbot uses) and its
dataset loading (``get_input_ids``: here precisionbot's prompts) are stubbed; SGLang's package ``__init__``
files are not run (they import torch, transformers and FlashInfer), its two helper modules are loaded from
the installed files. Greedy (temperature 0): the builtin server's unseeded sampling differs run to run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from precisionbot.checks import multiturn, run_suite
from precisionbot.checks.context import CheckContext
from precisionbot.config import Config, SuiteConfig
from precisionbot.engines.sglang import SGLangEngine

pytestmark = pytest.mark.slow

SGLANG_VERSION = "0.5.23"
FAULTS = ("batch-variant", "cache-decode-kv-rounded")  # nonzero k3 everywhere, history-independent
CONFIG = Config.default()
NEW = 24  # > page_size 16: every decode crosses a page, so turn 2 reuses decoded tokens
SINGLE = dataclasses.replace(
    CONFIG.suite("consistency"), samples=4, max_new_tokens=NEW, prompt_tokens=(64, 96), separator="upstream"
)
MULTI = dataclasses.replace(
    SINGLE, branches=2, turns=3, suffix_tokens=(12, 24), replay_batch_size=1, checks=SINGLE.checks[1:]
)
NO_LIMIT = 1.0e9  # SGLang asserts avg_kl_div < threshold; the numbers are compared here instead


def _sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        if os.environ.get("PRECISIONBOT_REQUIRE_SGLANG"):
            pytest.fail(f"sglang=={SGLANG_VERSION} is not installed; scripts/test installs it with --no-deps")
        pytest.skip(f"needs sglang=={SGLANG_VERSION} (pip install --no-deps sglang=={SGLANG_VERSION} requests)")
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    faults = [a for f in FAULTS for a in ("--fault", f)]
    # The tiny preset: every page is a cache hit there (the hybrid one resumes at 64-token state checkpoints,
    # which these 64-96-token prompts rarely pass), and the point here is the helpers' arithmetic.
    cmd = [sys.executable, "-m", "precisionbot", "serve", "--port", "0", "--model-preset", "tiny", *faults]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()  # printed once the server is up
            assert url.startswith("http://127.0.0.1:"), url
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture
def sglang(server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """SGLang's two helper modules, loaded from the installed package with only the tokenizer stubbed."""
    root = _sglang_root()
    engine = SGLangEngine(server)

    class Tokenizer:
        def encode(self, text: str) -> list[int]:
            return list(engine.tokenize([text])[0])

    for name, sub in (
        ("sglang", ""),
        ("sglang.test", "test"),
        ("sglang.srt", "srt"),
        ("sglang.srt.utils", "srt/utils"),
    ):
        package = ModuleType(name)
        package.__path__ = [str(root / sub)]
        monkeypatch.setitem(sys.modules, name, package)
    hf = ModuleType("sglang.srt.utils.hf_transformers_utils")
    hf.get_tokenizer = lambda *a, **kw: Tokenizer()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, hf.__name__, hf)
    modules = {}
    for short in ("kl_test_utils", "kl_multiturn_utils"):
        name = f"sglang.test.{short}"
        spec = importlib.util.spec_from_file_location(name, root / "test" / f"{short}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        modules[short] = module
    yield SimpleNamespace(url=server, engine=engine, **modules)
    engine.close()


def _avg(capsys: pytest.CaptureFixture[str]) -> float:
    found = re.findall(r"^avg_kl_div=(\S+)$", capsys.readouterr().out, flags=re.M)
    assert len(found) == 1, found
    return float(found[0])


def _ours(engine: SGLangEngine, suite: SuiteConfig) -> tuple[dict[str, float], CheckContext]:
    ours = SGLangEngine(engine.url, batch_size=64, concurrency=1)  # one batch per call, as SGLang sends
    # The same prompts and suffixes, tokenised again through the open client (deterministic).
    ctx = CheckContext(engine=engine, config=CONFIG, suite=suite, thresholds=CONFIG.thresholds_for(None, None))
    try:
        run = run_suite(ours, CONFIG, suite).result
    finally:
        ours.close()
    means = {c.name: c.stats["mean_k3"] for c in run.checks}
    assert all(c.extra.get("conversation", {}).get("cache_violations", []) == [] for c in run.checks)
    return means, ctx


def _lists(seqs: Sequence[Sequence[int]]) -> list[list[int]]:
    return [list(s) for s in seqs]


def test_kl_test_utils_helpers_give_precisionbots_numbers(
    sglang: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    means, ctx = _ours(sglang.engine, SINGLE)
    prompts = _lists(ctx.prompts())
    monkeypatch.setattr(sglang.kl_test_utils, "get_input_ids", lambda *a, **kw: prompts)
    kl, model, limit = sglang.kl_test_utils, "precisionbot-builtin", {"precisionbot-builtin": {"kl_div": NO_LIMIT}}
    capsys.readouterr()
    upstream: dict[str, Any] = {}
    kl.test_input_output_logprobs_match_helper(sglang.url, limit, model, max_samples=4, max_new_tokens=NEW)
    upstream["match"] = _avg(capsys)
    kl.test_input_output_logprobs_match_prefill_cache_hit_helper(
        sglang.url, limit, model, max_samples=4, max_new_tokens=NEW
    )
    upstream["prefill_cache_hit"] = _avg(capsys)
    kl.test_input_output_logprobs_match_decode_cache_hit_helper(
        sglang.url, limit, model, max_samples=4, max_new_tokens=NEW
    )
    upstream["decode_cache_hit"] = _avg(capsys)
    assert all(v > 1e-6 for v in upstream.values()), upstream  # planted faults: not a 0 == 0 comparison
    assert means == pytest.approx(upstream, rel=1e-12, abs=1e-15)


def test_kl_multiturn_helpers_give_precisionbots_numbers(
    sglang: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    means, ctx = _ours(sglang.engine, MULTI)
    mt = sglang.kl_multiturn_utils
    prefixes, fulls = multiturn._branched(ctx, page=16)
    capsys.readouterr()
    mt.test_input_output_logprobs_match_prefill_cache_hit_helper(
        sglang.url,
        "precisionbot-builtin",
        NO_LIMIT,
        prefix_input_ids=_lists(prefixes),
        full_input_ids=_lists(fulls),
        turn_suffixes=[_lists(s) for s in multiturn._later_suffixes(ctx, "prefill_cache_hit")],
        branches_per_group=2,
        max_new_tokens=NEW,
        sampling_temperature=0,
    )
    prefill = _avg(capsys)
    groups = ctx.prompts()[: MULTI.groups]
    mt.test_input_output_logprobs_match_decode_cache_hit_helper(
        sglang.url,
        "precisionbot-builtin",
        NO_LIMIT,
        [list(groups[i // 2]) for i in range(4)],
        turn_suffixes=[_lists(s) for s in multiturn._later_suffixes(ctx, "decode_cache_hit")],
        branches_per_group=2,
        max_new_tokens=NEW,
        sampling_temperature=0,
    )
    decode = _avg(capsys)
    assert prefill > 1e-6 and decode > 1e-6
    assert means == pytest.approx({"prefill_cache_hit": prefill, "decode_cache_hit": decode}, rel=1e-12, abs=1e-15)
