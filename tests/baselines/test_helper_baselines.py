"""Helper baselines in a store (local directory and S3 through moto's server), their selection rules, the
noise-relative rule on helper results, ``thresholds suggest`` and ``baseline history`` from stored runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import boto3
import numpy as np
import pytest
import yaml
from scipy import stats

from precisionbot.baselines import RunMeta, Signature, new_run_id, now_utc, open_store, write_run
from precisionbot.baselines.helper_reruns import ARRAYS, HelperRuns, select_helper_baseline
from precisionbot.checks.main_noise import judge_vs_main
from precisionbot.cli import main
from precisionbot.config import Config, from_mapping
from precisionbot.errors import ConfigError
from precisionbot.results import CheckResult, SampleSummary, Verdict
from precisionbot.results.golden_record import GoldenRecord, GoldenSample

PARAMS = {"samples": 32, "max_new_tokens": 512, "prompt_tokens": [1536, 4608], "corpus": "builtin", "seed": 0}
SIGNATURE = Signature.build(model="m", tp=2, corpus="c", check_params="p")


def _helpers(rng: np.random.Generator, reruns: int, level: float, samples: int = 32) -> HelperRuns:
    prompt = rng.normal(0, 0.5, samples)
    per = level * np.exp(prompt + rng.normal(0, 0.3, (reruns, samples)))
    per[:, -1] = np.nan  # a sample one cache helper never kept
    means = np.nanmean(per, axis=1)
    run_stats = {"mean_k3": means, "p99": means * 10, "max": means * 40, "frac_over": np.full(reruns, 0.001)}
    return HelperRuns(PARAMS, 1e-2, {"decode_cache_hit": per}, {"decode_cache_hit": run_stats})


def _golden(shift: float) -> GoldenRecord:
    """A 4-token vocabulary, so the top-4 logprobs are the whole distribution; ``shift`` moves token 0's logit."""
    rng = np.random.default_rng(0)
    rows = 64
    logits = rng.normal(0, 1, (rows, 4))
    logits[:, 0] += shift
    lp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    order = np.argsort(-lp, axis=1, kind="stable")
    top_lp = np.take_along_axis(lp, order, axis=1).astype(np.float32)
    ids = order.astype(np.int32)
    scored = np.full(rows, 1, dtype=np.int32)
    sample = GoldenSample("prefill", "doc", "prose", rows + 1, 1, rows, first_token=7)
    return GoldenRecord.build(
        [sample], [{"token_id": scored, "lp": lp[:, 1].astype(np.float32), "top_ids": ids, "top_lp": top_lp}]
    )


def _write(
    store_uri: str,
    helpers: HelperRuns | None,
    *,
    label: str = "baseline_established",
    shift: float = 0.0,
    signature: Signature = SIGNATURE,
) -> RunMeta:
    when = now_utc()
    golden = _golden(shift)
    extra: dict[str, object] = {"golden": {"samples": [s.to_dict() for s in golden.samples], "decode_steps": 0}}
    arrays: dict[str, object] = {"golden": golden.to_arrays()}
    if helpers is not None:
        extra["helpers"] = helpers.to_extra()
        arrays[ARRAYS] = helpers.to_arrays()
    meta = RunMeta(
        new_run_id(when, "default"),
        "m",
        signature.digest,
        signature.parts,
        when.isoformat(),
        label,
        "default",
        "c0ffee",
        {"positions": len(golden)},
        extra=extra,
    )
    return write_run(open_store(store_uri), meta, arrays)  # type: ignore[arg-type]


def _result(values: np.ndarray, verdict: Verdict = Verdict.PASS) -> CheckResult:
    samples = tuple(
        SampleSummary(i, 2000, 512, float(v), float(v) * 30, None, False)
        for i, v in enumerate(values)
        if np.isfinite(v)
    )
    reason = f"mean_k3 {np.nanmean(values):.3g} < kl_div 0.0025"
    return CheckResult("decode_cache_hit", verdict, (reason,), {"mean_k3": float(np.nanmean(values))}, samples=samples)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_stored_helper_runs_round_trip_and_selection(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if where == "s3":
        request.getfixturevalue("aws")
        boto3.client("s3").create_bucket(Bucket="pb-helpers")
        uri = "s3://pb-helpers/base"
    else:
        uri = str(tmp_path / "store")
    store = open_store(uri)
    found, why = select_helper_baseline(store, "m", SIGNATURE.digest, PARAMS)
    assert found is None and "no baseline" in str(why)
    _write(uri, None)
    found, why = select_helper_baseline(store, "m", SIGNATURE.digest, PARAMS)
    assert found is None and "has no helper reruns (record with --reruns R)" in str(why)
    helpers = _helpers(np.random.default_rng(1), 5, 1e-3)
    good = _write(uri, helpers)
    _write(uri, _helpers(np.random.default_rng(2), 5, 9e-3), label="failed")  # evidence, never selected
    found, loaded = select_helper_baseline(store, "m", SIGNATURE.digest, PARAMS)
    assert found is not None and found.run_id == good.run_id and isinstance(loaded, HelperRuns)
    np.testing.assert_array_equal(loaded.per_sample["decode_cache_hit"], helpers.per_sample["decode_cache_hit"])
    assert loaded.reruns("decode_cache_hit") == 5 and loaded.token_k3 == 1e-2
    other = {**PARAMS, "samples": 8}
    found, why = select_helper_baseline(store, "m", SIGNATURE.digest, other)
    assert found is None and "suite parameters" in str(why) and "'samples': 8" in str(why)


def test_a_doubling_under_kl_div_is_a_regression_and_a_rerun_is_within_noise() -> None:
    # SGLang #19581's prefill cache-hit numbers: 0.00123 on main, 0.00242 on the PR, both under kl_div 0.0025.
    rng = np.random.default_rng(19581)
    main = _helpers(rng, 5, 0.00123)
    meta = RunMeta("r1", "m", "s", {}, "2026-11-30T00:00:00", "baseline_established", "default")
    per = main.per_sample["decode_cache_hit"]
    typical = np.append(np.mean(per[:, :-1], axis=0), np.nan)  # the last sample was never kept
    pr = typical * 1.97 * np.exp(rng.normal(0, 0.3, per.shape[1]))
    judged = judge_vs_main(_result(pr), main, meta, alpha=0.01, min_ratio=1.5)
    assert judged.verdict is Verdict.FAIL
    assert (
        judged.reasons[0].startswith("regression: per-sample mean k3 is 1.89× main")
        and "p < 0.001" in judged.reasons[0]
    )
    assert judged.reasons[1].startswith("absolute thresholds pass: mean_k3")
    info = judged.extra["vs_main"]
    assert info["regression"] and info["reruns"] == 5 and info["samples"] == 31 and info["baseline"] == "r1"
    assert info["text"].endswith("× main's mean k3 (p < 0.001, floor 1.5×)")

    rerun = typical * np.exp(rng.normal(0, 0.3, per.shape[1]))
    clean = judge_vs_main(_result(rerun), main, meta, alpha=0.01, min_ratio=1.5)
    assert clean.verdict is Verdict.PASS and clean.reasons[-1].startswith("within main's noise: ")
    assert clean.extra["vs_main"]["text"].startswith("within main's noise (")

    # An inconclusive helper, or one main has no reruns of, is left alone.
    assert judge_vs_main(_result(pr, Verdict.INCONCLUSIVE), main, meta, alpha=0.01, min_ratio=1.5).extra == {}


def test_baselines_config_keys_are_validated() -> None:
    c = from_mapping({"baselines": {"helper_reruns": 8, "vs_main_alpha": 0.001, "vs_main_min_ratio": 2}})
    assert (c.baselines.helper_reruns, c.baselines.vs_main_alpha, c.baselines.vs_main_min_ratio) == (8, 0.001, 2.0)
    assert Config.default().baselines.helper_reruns == 8 and Config.default().baselines.vs_main
    for bad, key in [
        ({"helper_reruns": 2}, "baselines.helper_reruns"),
        ({"vs_main_alpha": 0.0}, "baselines.vs_main_alpha"),
        ({"vs_main_min_ratio": 0.5}, "baselines.vs_main_min_ratio"),
        ({"vs_main": "yes"}, "baselines.vs_main"),
        ({"helper_rerun": 3}, "baselines.helper_rerun"),
    ]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            from_mapping({"baselines": bad}, source="p.yml")


def test_thresholds_suggest_from_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(5)
    reruns = 120
    means = np.exp(rng.normal(math.log(4e-4), 0.3, reruns))
    helpers = HelperRuns(
        PARAMS,
        1e-2,
        {"match": np.exp(rng.normal(-8, 0.3, (reruns, 4)))},
        {"match": {"mean_k3": means, "p99": means * 5, "max": means * 60, "frac_over": np.full(reruns, 0.002)}},
    )
    uri = str(tmp_path / "store")
    _write(uri, helpers)
    assert main(["thresholds", "suggest", "--store", uri, "--flake-rate", "0.03", "--stats", "mean_k3,max"]) == 0
    out = capsys.readouterr().out
    # Pasted into a config that configures the model (an override of any other model is refused).
    config = from_mapping({**yaml.safe_load(out), "models": [{"name": "m", "path": "m", "tp": 2}]}, source="suggested")
    limits = config.thresholds_for("m", 2)
    rate = 0.03 / 2
    sd = float(np.std(np.log(means), ddof=1))
    k = stats.nct.ppf(0.9, reruns - 1, stats.norm.ppf(1 - rate) * math.sqrt(reruns)) / math.sqrt(reruns)
    expected = math.exp(float(np.mean(np.log(means))) + k * sd)
    assert limits.kl_div == pytest.approx(expected, rel=2e-3)  # printed to 3 significant figures
    assert limits.max_token_k3 == pytest.approx(60 * expected, rel=2e-3)
    assert f"{reruns} clean reruns" in out and "m@tp2" in out

    assert main(["thresholds", "suggest", "--store", uri, "--flake-rate", "0.001"]) == 2
    captured = capsys.readouterr()
    assert "# kl_div: not suggested" in captured.out
    assert "match mean_k3: 120 reruns cannot support a rate of 0.00033 per run (needs 300)" in captured.err
    assert "120 reruns support --flake-rate 0.0025 or more over these 3 gates" in captured.err
    assert main(["thresholds", "suggest", "--store", uri, "--json", "--stats", "mean_k3"]) == 0  # 1 gate: 100 do
    fits = json.loads(capsys.readouterr().out)["fits"]["match"]["mean_k3"]
    assert fits["needed_reruns"] == 100 and fits["threshold"] > fits["point"] > fits["largest_seen"]

    assert main(["thresholds", "suggest", "--store", str(tmp_path / "empty"), "--stats", "p42"]) == 3
    assert "--stats 'p42'" in capsys.readouterr().err


def test_history_against_the_first_and_the_previous(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "store")
    rng = np.random.default_rng(9)
    for i, shift in enumerate((0.0, 0.2, 0.4)):
        _write(uri, _helpers(rng, 3, 1e-4 * (1 + i)), shift=shift)
    _write(uri, None, label="failed", shift=3.0)
    assert main(["baseline", "history", "--store", uri, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in rows] == ["baseline_established"] * 3 + ["failed"]
    assert rows[0]["golden_vs_first"] is None and rows[3]["golden_vs_first"] is None
    first = [r["golden_vs_first"]["kl_mean"] for r in rows[1:3]]
    prev = [r["golden_vs_previous"]["kl_mean"] for r in rows[1:3]]
    assert 0 < first[0] < first[1] and prev[1] < first[1]  # drift shows against the first, not the previous
    ratios = [r["helpers"]["decode_cache_hit"]["vs_first"] for r in rows[:3]]
    assert ratios[0] == 1.0 and 1.5 < ratios[1] < 2.5 and 2.3 < ratios[2] < 3.7
    assert main(["baseline", "history", "--store", uri]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("date") and "decode_cache_hit mean_k3 (vs first)" in table[0] and len(table) == 5
