"""``precisionbot calibrate`` on a clean and a known-bad builtin variant: the table says the golden threshold
separates them."""

from __future__ import annotations

from pathlib import Path

import pytest

from precisionbot.cli import main


def test_calibrate_shows_where_golden_separates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "precision.yml"
    config.write_text("suites:\n  consistency:\n    golden: {context_depths: [256, 1024], decode_steps: 4}\n")
    rc = main(
        [
            "calibrate",
            "--faults",
            ",attn-p-fp8",
            "--checks",
            "golden",
            "--config",
            str(config),
            "--model-preset",
            "tiny",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| (clean) | - | pass (kl_p999 0) |" in out
    assert "| attn-p-fp8 | golden | fail (kl_p999 " in out
    row = next(line for line in out.splitlines() if line.startswith("| golden per-position KL"))
    assert "| 0.01 | 0 |" in row and "| yes" in row


def test_unknown_variant_is_a_setup_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--faults", "nope"]) == 3
    assert "unknown variant(s) nope" in capsys.readouterr().err


def _row(variant: str, must_fail: list[str], **verdicts: tuple[str, float]) -> dict[str, object]:
    checks = {name: {"verdict": v, "stats": {"mean_k3": x, "max": x}} for name, (v, x) in verdicts.items()}
    return {"variant": variant, "must_fail": must_fail, "reported": False, "checks": checks}


def test_assess_counts_false_alarms_misses_and_thresholds_that_do_not_separate() -> None:
    from precisionbot.commands.calibrate import assess
    from precisionbot.config import Config

    thresholds = Config.default().thresholds_for(None, None, "default")
    rows = [
        _row("(clean)", [], match=("pass", 2e-5), prefill_cache_hit=("pass", 2e-5)),
        _row("(clean rerun 1)", [], match=("pass", 3e-5), prefill_cache_hit=("fail", 3e-3)),
        _row("stale", ["prefill_cache_hit"], match=("pass", 2e-5), prefill_cache_hit=("fail", 4e-2)),
        _row("shift", ["prefill_cache_hit"], match=("pass", 2e-5), prefill_cache_hit=("pass", 1e-4)),
        {**_row("bf16", [], match=("fail", 1.0)), "reported": True},  # measured, never judged
        # batch_invariance holds the deterministic tolerance: batch-variant failing it is what it is for
        {**_row("batch-variant", [], match=("pass", 7e-5), batch_invariance=("fail", 1e-4)), "fault": "batch-variant"},
    ]
    summary = assess(rows, ["match", "prefill_cache_hit"], thresholds)
    assert summary["must_pass_runs"] == 3
    assert summary["false_alarms"] == ["(clean rerun 1): prefill_cache_hit"]
    assert summary["misses"] == ["shift: prefill_cache_hit pass"]
    assert summary["not_separating"] == ["prefill_cache_hit mean_k3"]  # a must-pass run at 3e-3 > 0.0025


def test_negative_reruns_are_a_setup_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--reruns", "-1", "--model-preset", "tiny"]) == 3
    assert "--reruns must be >= 0" in capsys.readouterr().err


def test_hybrid_faults_are_not_in_the_tiny_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--faults", "conv-state-shift", "--model-preset", "tiny"]) == 3
    assert "conv-state-shift need the hybrid preset" in capsys.readouterr().err


def test_grid_on_a_tiny_grid_has_no_false_alarm_and_finds_a_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two sizes on the tiny preset: at 8 new tokens decode_cache_hit cannot reuse a decoded page (pages of 16)
    # and says so, at 16 it can; restore-stale-page is caught at the smallest size.
    argv = ["calibrate", "--grid", "--model-preset", "tiny", "--grid-samples", "4", "--grid-new-tokens", "8,16"]
    argv += ["--grid-prompt-tokens", "64", "--grid-shapes", "single", "--grid-cc", "small"]
    rc = main([*argv, "--grid-numerics", "production", "--faults", "restore-stale-page"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| decode_cache_hit | 2 | 1 | 1 | 0 |" in out
    assert "| cache_consistency | 2 | 2 | 0 | 0 |" in out
    assert "page_size 16" in out and "--max-new-tokens 15 or more" in out  # the inconclusive reason names the size
    assert (
        "| restore-stale-page | prefill_cache_hit | 4 × 8 new, prompts ~64, single, cc small (the grid's smallest"
        in out
    )
    assert "false alarms: 0 FAIL verdicts in 2 clean runs" in out


def test_grid_cells_parse_count_and_warn() -> None:
    import dataclasses

    from precisionbot.commands.calibrate_grid import CleanRun, cells, false_alarms, floor_warnings, parse_axes
    from precisionbot.config import Config
    from precisionbot.errors import ConfigError

    axes = parse_axes({"samples": "8,4", "new_tokens": "128,32", "prompt_tokens": "200", "shapes": None, "cc": None})
    grid = cells(axes)
    assert len(grid) == 2 * 2 * 1 * 2 * 2
    assert (grid[0].new_tokens, grid[0].samples, grid[0].shape, grid[0].cc) == (32, 4, "single", "small")
    assert (grid[-1].new_tokens, grid[-1].samples, grid[-1].shape, grid[-1].cc) == (128, 8, "branch", "default")
    with pytest.raises(ConfigError, match="--grid-shapes: unknown chat; use single, branch"):
        parse_axes({"shapes": "chat"})
    with pytest.raises(ConfigError, match="--grid-new-tokens '0'"):
        parse_axes({"new_tokens": "0"})
    runs = [
        CleanRun(grid[0], "", {"match": ("pass", ""), "batch_invariance": ("pass", "")}, 1.0),
        CleanRun(grid[0], "nondeterministic", {"match": ("fail", "x"), "batch_invariance": ("fail", "y")}, 1.0),
    ]
    counts = false_alarms(runs, {"nondeterministic": ("batch_invariance",)})
    assert counts["match"] == {"pass": 1, "inconclusive": 0, "fail": 1, "allowed": 0}
    assert counts["batch_invariance"] == {"pass": 1, "inconclusive": 0, "fail": 0, "allowed": 1}
    suite = Config.default().suite("consistency")
    assert floor_warnings(suite) == []  # 512 new tokens: above every floor
    short = dataclasses.replace(suite, max_new_tokens=64)
    (warning,) = floor_warnings(short)
    assert "decode_cache_hit at 64 new tokens" in warning and "cache-decode-kv-rounded (256 new tokens" in warning
    assert floor_warnings(dataclasses.replace(short, checks=("match",))) == []


def test_localize_column_names_each_op_level_faults_module(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    argv = ["calibrate", "--model-preset", "tiny", "--faults", "attn-p-fp8,restore-stale-page", "--checks",
            "match", "--samples", "2", "--max-new-tokens", "16", "--prompt-tokens", "64..96", "--localize",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["fault"], r["named"], r["expected"]) for r in out["localization"]] == [
        ("attn-p-fp8", "model.layers.0.self_attn", "model.layers.0.self_attn"),
        ("restore-stale-page", "model.layers.0.self_attn", "model.layers.0.self_attn"),
    ]
    assert out["misnamed"] == [] and all(r["seconds"] > 0 and r["dump_bytes"] > 0 for r in out["localization"])


def test_localization_table_marks_a_wrong_module() -> None:
    from precisionbot.commands.calibrate import render_localization

    row = {"fault": "mlp-bf16=1", "path": "golden", "named": "model.layers.0.mlp", "expected": "model.layers.1.mlp",
           "seconds": 1.0, "dump_bytes": 2e6}  # fmt: skip
    assert "`model.layers.0.mlp` ✗ | `model.layers.1.mlp`" in render_localization([row])


def test_the_chunk_boundary_fault_is_localized_with_the_catalogues_64_token_chunk(tmp_path: Path) -> None:
    """``chunk-boundary`` fires only past a prefill chunk: the catalogue gives both builds a 64-token chunk, so
    the 96-token sample crosses one and the finding is the positions field (no module computes wrongly)."""
    import argparse

    from precisionbot.commands.calibrate import _localize_all

    flags = {"preset": "tiny", "vocab": None, "enable_deterministic_inference": False}
    (row,) = _localize_all(argparse.Namespace(faults="chunk-boundary"), flags, tmp_path)
    assert (row["path"], row["named"], row["expected"]) == ("golden", "positions", "positions")


def _spec_row(variant: str, verdict: str, caught_by: list[str]) -> dict[str, object]:
    must = [] if variant == "(clean)" else ["spec_decode"]
    stats = {"mean_k3": 1e-5, "max": 1e-4, "accept_length": 1.8, "main_accept_length": 1.8}
    cell = {"verdict": verdict, "stats": stats, "caught_by": caught_by}
    return {"variant": variant, "fault": variant.strip("()").replace("clean", ""), "must_fail": must,
            "reported": False, "checks": {"spec_decode": cell}}  # fmt: skip


def test_a_spec_fault_must_be_caught_by_its_part() -> None:
    from precisionbot.commands.calibrate import assess, render
    from precisionbot.config import Config

    thresholds = Config.default().thresholds_for(None, None, "default")
    rows = [
        _spec_row("(clean)", "pass", []),
        _spec_row("spec-kv-rollback", "fail", ["target logprobs", "tokens"]),
        _spec_row("spec-draft-degraded", "fail", ["tokens", "acceptance"]),  # the greedy parts must see nothing
        _spec_row("spec-greedy-at-temperature", "fail", ["acceptance"]),
        _spec_row("spec-accept-loose", "pass", []),
    ]
    summary = assess(rows, ["spec_decode"], thresholds)
    assert summary["false_alarms"] == []
    assert summary["misses"] == [
        "spec-draft-degraded: spec_decode caught by tokens, acceptance, expected acceptance only",
        "spec-greedy-at-temperature: spec_decode caught by acceptance, expected sampled path only",
        "spec-accept-loose: spec_decode pass",
    ]
    table = render(rows, ["spec_decode"], thresholds)
    assert "| (clean) | - | pass (mean_k3 1.00e-05; acceptance 1.80 (main 1.80)) |" in table
    assert "| spec-kv-rollback | spec_decode | fail (mean_k3 1.00e-05; caught by target logprobs, tokens) |" in table
    assert "| spec-draft-degraded | spec_decode | fail ✗ (mean_k3 1.00e-05; caught by tokens, acceptance) |" in table
    assert "| spec_decode mean_k3 (target logprobs) | 0.0025 |" in table


def test_the_grid_runs_spec_decode_once_per_size_and_names_the_part_at_each_floor() -> None:
    from precisionbot.builtin.options import SPEC_FAULTS
    from precisionbot.commands.calibrate_grid import (
        SPEC_PARTS,
        cells,
        parse_axes,
        render_floors,
        right_part,
        runs_check,
    )

    assert set(SPEC_PARTS) == set(SPEC_FAULTS)  # every spec fault has the part that must catch it
    assert right_part("spec-kv-rollback", ["tokens"]) is None and right_part("restore-stale-page", []) is None
    assert right_part("spec-bonus-logprob", []) == "caught by no part, expected target logprobs"
    axes = parse_axes({"samples": "4", "new_tokens": "32", "prompt_tokens": "200", "shapes": None, "cc": None})
    grid = cells(axes)
    assert len(grid) == 4 and [runs_check("spec_decode", c, axes) for c in grid] == [True, False, False, False]
    assert all(runs_check("match", c, axes) for c in grid)
    floors = {"spec-draft-degraded": (["spec_decode"], grid[0], ""), "spec-accept-loose": (["spec_decode"], None, "")}
    table = render_floors(floors, grid[0], {"spec-draft-degraded": ["acceptance"]})
    assert (
        "| spec-draft-degraded | spec_decode (acceptance only) | 4 × 32 new, prompts ~200, single, cc small (the "
        "grid's smallest size: may be lower); caught by acceptance |" in table
    )
    assert "| spec-accept-loose | spec_decode (tokens) | not caught on this grid |" in table


def test_spec_faults_on_the_grid_need_spec_decode(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "--grid", "--model-preset", "tiny", "--faults", "spec-kv-rollback", "--checks", "match"]
    assert main(argv) == 3
    assert "(the spec faults need --checks spec_decode)" in capsys.readouterr().err


@pytest.mark.slow
def test_grid_with_spec_decode_passes_clean_and_finds_a_spec_faults_floor_by_its_part(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # One size, both shapes: spec_decode runs once; the draft regression is caught by acceptance alone.
    argv = ["calibrate", "--grid", "--model-preset", "tiny", "--checks", "spec_decode", "--grid-samples", "2"]
    argv += ["--grid-new-tokens", "16", "--grid-prompt-tokens", "64", "--grid-shapes", "single,branch"]
    rc = main([*argv, "--grid-cc", "small", "--grid-numerics", "production", "--faults", "spec-draft-degraded"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| spec_decode | 1 | 1 | 0 | 0 |" in out
    assert "| spec-draft-degraded | spec_decode (acceptance only) | 2 × 16 new, prompts ~64" in out
    assert "caught by acceptance |" in out
    assert "false alarms: 0 FAIL verdicts in 1 clean runs" in out
