"""precisionbot against a real vLLM server serving a hybrid model (marker ``vllm``): the tiny Qwen3-Next
(gated delta-net + gated attention + MoE, bf16) with text-like bigram weights (``make_tiny_hf.py``
``qwen3-next-bigram``), in vLLM's align-mode prefix cache.

One server serves the Qwen3-Next tests (vLLM starts in 1-3 min on 2 cores): it runs with
``--prefix-cache-retention-interval 128``, without which vLLM keeps no decoded tokens' recurrent state and
``decode_cache_hit`` cannot hit (``scoring.cache_rules``; the pure tests below), and it loads the hybrid-bug
plugin (tests/support/vllm_hybrid_bugs), whose live bug is read from a file at every hook. With the file empty
the plugin passes everything through: every helper must pass with more than half its cache hits. With each
planted bug (a hit restoring another block's recurrent state, a conv window shifted by one, the attention KV
not restored with the state) ``prefill_cache_hit`` must fail with ``match`` clean, the diagnosis naming the
restore path (and the recurrent state for the first). A second server serves the sliding-window path: a
hybrid-SWA model (``swa-hybrid-bigram``: windowed and full attention layers interleaved, as in Gemma 3 or
GPT-OSS), whose helpers must pass with hits and fail when a hit hands over a stale window block.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from precisionbot.cli import main
from precisionbot.scoring.cache_fit import fit_new_tokens
from precisionbot.scoring.cache_rules import decode_reach, explain_decode_miss, rules_for
from tests.support.check_result import checks_by_name, read_result_json
from tests.support.vllm import VLLMInstall, general_plugin, install, plugins_env, vllm_server

PLUGIN = Path(__file__).resolve().parents[1] / "support" / "vllm_hybrid_bugs" / "precisionbot_hybrid_bugs.py"
ARGS = "--dtype bfloat16 --prefix-cache-retention-interval 128"
# 8 samples: at 4 (256 positions) the 2 % tail rule is a count of 6 tokens, and one clean seed in ten crossed it
# on this bf16 model (benchmarks/RESULTS.md); at 8 ten seeds gave no FAIL, and each bug failed at three seeds.
SIZES = ["--samples", "8", "--prompt-tokens", "200", "--max-new-tokens", "64", "--quiet"]
HELPERS = "match,prefill_cache_hit,decode_cache_hit,cache_consistency"
# What vllm.py reads from /metrics on this CPU build (block_size 128, mamba_block_size 16, align mode).
HYBRID_RAW = {
    "prefix_cache_rules": "vllm",
    "block_size": 128,
    "page_size": 128,
    "mamba_block_size": 16,
    "mamba_cache_mode": "align",
}


# --- the rules, pure (no server) ---


def test_default_retention_makes_decode_cache_hit_not_applicable_and_rounds_nothing() -> None:
    rules = rules_for({**HYBRID_RAW, "prefix_cache_retention_interval": "0"})
    reason = rules.decode_reuse_blocked
    assert reason is not None and "--prefix-cache-retention-interval 128" in reason
    # Measured on the real server: a 600-token prompt + 320 decoded tokens, then turn 2 hits 512 tokens.
    assert decode_reach(rules, 600, 320) == 512
    assert rules.decode(512, 600, 320) is None and rules.decode(896, 600, 320) is not None
    assert explain_decode_miss(rules, [600, 700], 320) == reason
    assert fit_new_tokens(rules, [600, 700], 64) == (64, None)  # no size helps


def test_a_retention_interval_lets_decoded_state_be_reused() -> None:
    rules = rules_for({**HYBRID_RAW, "prefix_cache_retention_interval": "128"})
    assert rules.decode_reuse_blocked is None
    assert decode_reach(rules, 600, 320) == 896  # measured: (600 + 320 - 1) // 128 * 128
    assert rules.decode(896, 600, 320) is None
    coarse = rules_for({**HYBRID_RAW, "prefix_cache_retention_interval": "256"})
    assert decode_reach(coarse, 600, 320) == 768 and coarse.decode(768, 600, 320) is None
    dense = rules_for({"prefix_cache_rules": "vllm", "block_size": 128, "prefix_cache_retention_interval": "0"})
    assert dense.decode_reuse_blocked is None  # no mamba or window group: every block is kept


# --- the real server ---


@pytest.fixture(scope="module")
def vllm() -> VLLMInstall:
    return install()


def _plugin_dist(root: Path) -> Path:
    return general_plugin(root, PLUGIN.stem, PLUGIN.read_text(), "hybrid_bugs")


@pytest.fixture(scope="module")
def server(vllm: VLLMInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(URL, the live-bug file, the server's log)."""
    root = tmp_path_factory.mktemp("vllm-hybrid")
    live = root / "live-bug"
    live.write_text("")
    env = {**plugins_env({"hybrid_bugs": _plugin_dist(root / "plugin")}), "PRECISIONBOT_HYBRID_BUG_FILE": str(live)}
    with vllm_server(vllm, vllm.model("qwen3-next-bigram"), root / "logs", ARGS, env=env) as url:
        yield url, live, root / "logs" / "vllm.log"


def _check(url: str, checks: str, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    argv = ["check", "--engine-url", url, "--engine-kind", "vllm", "--checks", checks, "--out", str(out)]
    code = main([*argv, *SIZES])
    capsys.readouterr()
    return code, read_result_json(out)


@pytest.mark.vllm
def test_clean_hybrid_server_passes_every_helper_with_cache_hits(
    server: tuple[str, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, live, log = server
    live.write_text("")
    code, result = _check(url, HELPERS, tmp_path / "out", capsys)
    assert "precisionbot hybrid bugs registered" in log.read_text()
    by_name = checks_by_name(result)
    assert code == 0, by_name
    for name, check in by_name.items():
        assert check["verdict"] == "pass", (name, check)
    for name in ("prefill_cache_hit", "decode_cache_hit"):
        cache = by_name[name]["cache"]
        assert isinstance(cache, dict) and 2 * cache["kept"] > cache["total"], (name, cache)
    environment = result["environment"]
    assert isinstance(environment, dict) and environment["mamba_track_interval"] == 128


@pytest.mark.vllm
@pytest.mark.parametrize("bug", ["other-state", "conv-shift", "stale-kv"])
def test_planted_hybrid_state_bug_fails_prefill_cache_hit_naming_the_state(
    bug: str, server: tuple[str, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, live, _ = server
    live.write_text(bug)
    try:
        code, result = _check(url, "match,prefill_cache_hit", tmp_path / "out", capsys)
    finally:
        live.write_text("")
    by_name = checks_by_name(result)
    assert code == 1, by_name
    assert by_name["match"]["verdict"] == "pass", by_name["match"]
    assert by_name["prefill_cache_hit"]["verdict"] == "fail", by_name["prefill_cache_hit"]
    diagnosis = result["diagnosis"]
    assert isinstance(diagnosis, list)
    codes = {d["code"] for d in diagnosis}
    assert "prefill_restore" in codes, diagnosis
    # The state kind is named when the divergence starts at the first token after the hit, which a wrong
    # recurrent state does. The other two move the next tokens less: a conv window shifted by one, or a stale
    # attention block, may first show mid-generation, where the diagnosis names the restore path only.
    if bug == "other-state":
        assert "recurrent_state" in codes, diagnosis


# --- the sliding-window path: a hybrid-SWA model (windowed and full attention layers interleaved) ---

SWA_HELPERS = "match,prefill_cache_hit,decode_cache_hit"


@pytest.fixture(scope="module")
def swa_server(vllm: VLLMInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(URL, the live-bug file) of a server of ``make_tiny_hf.py swa-hybrid-bigram`` (Llama layers alternating a
    64-token window and full attention, bf16): vLLM gives it a sliding-window KV cache group beside the full one,
    the pool whose prefix hits hand over only the window's blocks. Same plugin, same retention flag."""
    root = tmp_path_factory.mktemp("vllm-swa-hybrid")
    live = root / "live-bug"
    live.write_text("")
    env = {**plugins_env({"hybrid_bugs": _plugin_dist(root / "plugin")}), "PRECISIONBOT_HYBRID_BUG_FILE": str(live)}
    with vllm_server(vllm, vllm.model("swa-hybrid-bigram"), root / "logs", ARGS, env=env) as url:
        yield url, live


@pytest.mark.vllm
def test_clean_swa_hybrid_server_passes_the_helpers_with_cache_hits(
    swa_server: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, live = swa_server
    live.write_text("")
    # Not cache_consistency: on this bf16 model a restart's noise is about 5e-6 in whichever of its two arms vLLM
    # happens to batch differently, and 1e-10 in the other, so its 4x-the-control rule with the 1e-6 floor failed
    # it in one of two runs at these sizes (benchmarks/RESULTS.md, "The sliding-window path").
    code, result = _check(url, SWA_HELPERS, tmp_path / "out", capsys)
    by_name = checks_by_name(result)
    assert code == 0, by_name
    for name in ("prefill_cache_hit", "decode_cache_hit"):
        cache = by_name[name]["cache"]
        assert isinstance(cache, dict) and 2 * cache["kept"] > cache["total"], (name, cache)


@pytest.mark.vllm
def test_a_stale_window_block_on_a_hit_fails_the_cache_helpers(
    swa_server: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, live = swa_server
    live.write_text("swa-stale-window")
    try:
        code, result = _check(url, SWA_HELPERS, tmp_path / "out", capsys)
    finally:
        live.write_text("")
    by_name = checks_by_name(result)
    assert code == 1, by_name
    assert by_name["match"]["verdict"] == "pass", by_name["match"]
    assert by_name["prefill_cache_hit"]["verdict"] == "fail", by_name["prefill_cache_hit"]
    assert by_name["decode_cache_hit"]["verdict"] == "fail", by_name["decode_cache_hit"]
    diagnosis = result["diagnosis"]
    assert isinstance(diagnosis, list) and "prefill_restore" in {d["code"] for d in diagnosis}, diagnosis
