from __future__ import annotations

import math

import numpy as np
import pytest

from precisionbot.errors import DataError
from precisionbot.results import (
    CacheStats,
    CheckResult,
    Diagnosis,
    EngineInfo,
    PositionRecord,
    RunResult,
    SampleSummary,
    Verdict,
    WorstPosition,
)
from precisionbot.results.directory import read_records, read_result, write_result


def _run() -> RunResult:
    check = CheckResult(
        name="prefill_cache_hit",
        verdict=Verdict.FAIL,
        reasons=("mean_k3 0.012 >= kl_div 0.0025",),
        stats={
            "positions": 4,
            "samples": 2,
            "mean_k3": 0.012,
            "p50": 1e-5,
            "p99": 0.3,
            "p999": 0.31,
            "max": math.inf,
            "frac_over": {"1e-4": 0.5, "1e-3": 0.5, "1e-2": 0.25},
        },
        cache=CacheStats(kept=2, total=2),
        worst=(WorstPosition(0, 7, 42, "NaN", -0.1, -2.3, 2.2, 6.8, margin_ref=0.5, flip=True),),
        samples=(SampleSummary(0, 100, 2, 0.02, 6.8, 0, True, cached_tokens=96),),
        extra={"duration_s": 1.5},
    )
    return RunResult.from_checks(
        [check, CheckResult.inconclusive("golden", "no baseline for signature abc")],
        signature="abc123",
        engine=EngineInfo(url="http://127.0.0.1:1", kind="builtin", commit=None),
        environment={"model": "builtin", "tp": 1},
        extra={"created_at": "2026-11-29T00:00:00Z"},
    ).with_diagnosis([Diagnosis("prefill_restore", "Only prefill_cache_hit diverged.", check="prefill_cache_hit")])


def test_verdict_combination_and_exit_codes() -> None:
    ok, bad, unsure = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
    assert Verdict.combine([ok, ok]) is ok
    assert Verdict.combine([ok, unsure]) is unsure
    assert Verdict.combine([unsure, bad, ok]) is bad
    assert Verdict.combine([]) is unsure  # nothing ran is never a pass
    assert [v.exit_code for v in (ok, bad, unsure)] == [0, 1, 2]


def test_result_json_round_trip_is_lossless() -> None:
    run = _run()
    assert run.verdict is Verdict.FAIL
    text = run.to_json()
    assert "Infinity" in text and "NaN" not in text.replace('"NaN"', "")
    back = RunResult.from_json(text)
    assert back == run
    assert back.checks[0].worst[0].token_text == "NaN"  # a token reading NaN stays text
    assert back.checks[0].stats["max"] == math.inf


def test_result_json_has_contract_keys() -> None:
    import json

    data = json.loads(_run().to_json())
    assert data["schema"] == 1 and data["verdict"] == "fail" and data["signature"] == "abc123"
    assert set(data["engine"]) >= {"url", "kind", "commit"}
    check = data["checks"][0]
    assert set(check) >= {"name", "verdict", "reasons", "stats", "cache", "worst"}
    assert set(check["worst"][0]) >= {
        "sample",
        "position",
        "token_id",
        "token_text",
        "lp_ref",
        "lp_test",
        "delta",
        "k3",
    }
    assert data["diagnosis"][0] == {
        "code": "prefill_restore",
        "text": "Only prefill_cache_hit diverged.",
        "check": "prefill_cache_hit",
    }


def test_unsupported_schema_is_rejected() -> None:
    with pytest.raises(ValueError, match="schema"):
        RunResult.from_dict({"schema": 2})


def test_position_record_validation_and_delta() -> None:
    rec = PositionRecord.from_lists([0, 0], [5, 6], [1, 2], [-1.0, -2.0], [-1.5, -2.0])
    assert rec.delta.tolist() == [0.5, 0.0]
    with pytest.raises(ValueError, match="rows"):
        PositionRecord.from_lists([0], [1, 2], [1], [0.0], [0.0])
    with pytest.raises(ValueError, match="together"):
        PositionRecord(rec.sample, rec.position, rec.token_id, rec.lp_ref, rec.lp_test, top_ids_ref=np.zeros((2, 3)))
    both = PositionRecord.concat([rec, rec])
    assert len(both) == 4


def test_result_directory_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ids = np.arange(6, dtype=np.int32).reshape(2, 3)
    lp = np.log(np.full((2, 3), 0.2))
    rec = PositionRecord(
        sample=np.array([0, 1], np.int32),
        position=np.array([3, 4], np.int32),
        token_id=np.array([9, 8], np.int32),
        lp_ref=np.array([-1.0, -2.0]),
        lp_test=np.array([-1.1, -2.0]),
        top_ids_ref=ids,
        top_lp_ref=lp,
    )
    write_result(tmp_path / "out", _run(), {"prefill_cache_hit": rec})
    assert read_result(tmp_path / "out") == _run()
    back = read_records(tmp_path / "out")["prefill_cache_hit"]
    assert np.array_equal(back.top_ids_ref, ids) and np.array_equal(back.lp_test, rec.lp_test)
    assert back.top_ids_test is None


def test_bad_result_directories_are_clear_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataError, match="not found"):
        read_result(tmp_path)
    (tmp_path / "result.json").write_text("{not json")
    with pytest.raises(DataError, match="not a valid precisionbot result"):
        read_result(tmp_path)
    (tmp_path / "x.npz").write_bytes(b"garbage")
    with pytest.raises(DataError, match=r"x\.npz"):
        read_records(tmp_path)


def test_every_check_carries_the_contract_stats_keys() -> None:
    import json

    run = RunResult.from_checks(
        [CheckResult.inconclusive("golden", "no baseline")], signature="s", engine=EngineInfo("u", "builtin")
    )
    stats = json.loads(run.to_json())["checks"][0]["stats"]
    assert set(stats) >= {"positions", "samples", "mean_k3", "p50", "p99", "p999", "max", "frac_over"}
    assert stats["positions"] == 0 and stats["p99"] is None
    assert RunResult.from_json(run.to_json()) == run
