"""The Python API the README and docs/architecture.md document: every name imports from where they say.

Kept as a list of names, not derived from the package, so a re-layout that drops or moves one fails here.
"""

from __future__ import annotations

import importlib

import pytest

DOCUMENTED = {
    "precisionbot.metrics": (
        "k3",
        "kl_divergence",
        "flip_probability",
        "tail_stats",
        "sglang_mean_k3",
        "kl_from_logits",
        "topk_rest_kl",
        "topk_union_kl",
        "align_topk",
        "TopkAlignment",
        "top1_flip",
        "margin",
        "rank_of",
        "shared_topk_abs_delta",
        "rel_diff",
        "delta_p_stats",
        "same_top",
        "accuracy_bound",
        "log_softmax",
    ),
    "precisionbot.metrics.flips": ("expected_flips", "flips_by_margin", "noise_band", "NoiseBand"),
    "precisionbot.metrics.onset": (),
    "precisionbot.metrics.rerun_stats": ("compare_to_main", "suggest"),
    "precisionbot.config": ("Config", "load_config", "load_config_or_default", "from_mapping", "SuiteConfig"),
    "precisionbot.results": (
        "RunResult",
        "CheckResult",
        "Verdict",
        "read_result",
        "write_result",
        "read_records",
        "CHECK_NAMES",
    ),
    "precisionbot.baselines": ("open_store", "Store", "list_runs", "select_baseline", "write_run", "load_golden"),
    "precisionbot.checks": ("run_suite", "CheckContext", "CheckOutput", "CheckRun"),
    "precisionbot.report": ("diagnose", "render_comment", "render_summary", "render_json", "ReportSection"),
    "precisionbot.engines": ("Engine", "GenerateRequest", "Generation", "ServerInfo"),
    "precisionbot.builtin": ("EngineOptions", "parse_fault", "FAULT_NAMES"),
}


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_names_import(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in DOCUMENTED[module] if not hasattr(imported, name)]
    assert missing == []


def test_check_names_are_the_stable_ones() -> None:
    from precisionbot.results import CHECK_NAMES

    assert CHECK_NAMES == (
        "match",
        "prefill_cache_hit",
        "decode_cache_hit",
        "golden",
        "batch_invariance",
        "layers",
        "cache_consistency",
        "spec_decode",
        "routing",
    )
