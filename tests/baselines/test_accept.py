"""Accepting an intended numerics change: a new baseline with its audit record, shown by ``baseline history``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot.baselines import list_runs, open_store
from precisionbot.baselines.accept import accepted, audit_record, check_reason
from precisionbot.baselines.record import now_utc
from precisionbot.cli import main
from precisionbot.errors import ConfigError

SUITE = {"checks": ["golden"], "golden": {"top_k": 8, "context_depths": [32], "decode_steps": 8}}


def test_reason_and_audit_fields_are_checked() -> None:
    assert check_reason("  fp32 router\n GEMM ") == "fp32 router GEMM"
    with pytest.raises(ConfigError, match="reason is empty"):
        check_reason("  ")
    with pytest.raises(ConfigError, match="--pr 0"):
        audit_record(reason="x", by="alice", pr=0, replaces=None, when=now_utc(), commit=None)


def test_accept_records_the_new_reference_with_an_audit_trail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "precision.json"
    store = tmp_path / "store"
    config.write_text(json.dumps({"suites": {"b": SUITE}, "baselines": {"store": str(store), "helper_reruns": 0}}))
    engine = ["--engine", "builtin", "--model-preset", "tiny"]
    record = ["baseline", "record", "--config", str(config), "--suite", "b", *engine]
    check = ["check", "--config", str(config), "--suite", "b", *engine, "--fault", "mantissa=2", "--quiet"]
    assert main([*record, "--engine-commit", "a" * 40]) == 0
    assert main([*check, "--out", str(tmp_path / "before")]) == 1  # the intended change fails golden
    (first,) = list_runs(open_store(str(store)))

    # Every part of the audit is required.
    assert main([*record, "--fault", "mantissa=2", "--accept-reason", "fp32 router GEMM", "--pr", "12"]) == 3
    assert "--accept-reason needs --accepted-by LOGIN and --pr N" in capsys.readouterr().err

    accept = ["--accept-reason", "fp32 router GEMM", "--accepted-by", "alice", "--pr", "12"]
    assert main([*record, "--fault", "mantissa=2", "--engine-commit", "b" * 40, *accept]) == 0
    assert "accepted by alice (PR #12): fp32 router GEMM; replaces " + first.run_id in capsys.readouterr().out
    newest = list_runs(open_store(str(store)))[0]
    audit = accepted(newest)
    assert audit is not None and audit["replaces"]["run_id"] == first.run_id and audit["commit"] == "b" * 40
    assert newest.label == "baseline_established" and first.label == "baseline_established"

    # The accepted numbers are the reference now: the same build passes.
    assert main([*check, "--out", str(tmp_path / "after")]) == 0
    capsys.readouterr()

    assert main(["baseline", "history", "--store", str(store), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["accepted"] is not None for r in rows] == [False, True]
    assert rows[1]["accepted"]["by"] == "alice" and rows[1]["golden_vs_first"]["kl_mean"] > 0
    assert main(["baseline", "history", "--store", str(store)]) == 0
    assert "PR #12 by alice: fp32 router GEMM" in capsys.readouterr().out


def test_a_staged_accept_names_the_baseline_of_the_store_it_is_published_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workflow records `/precision accept` into a staging store (the GPU job runs the engine's code) and a
    job running only precisionbot publishes it: the audit must name the reference in baselines.store, which
    the empty staging store does not hold."""
    config = tmp_path / "precision.json"
    store = tmp_path / "store"
    config.write_text(json.dumps({"suites": {"b": SUITE}, "baselines": {"store": str(store), "helper_reruns": 0}}))
    engine = ["--engine", "builtin", "--model-preset", "tiny"]
    record = ["baseline", "record", "--config", str(config), "--suite", "b", *engine]
    assert main([*record, "--engine-commit", "a" * 40]) == 0
    (first,) = list_runs(open_store(str(store)))
    accept = ["--accept-reason", "fp32 router GEMM", "--accepted-by", "alice", "--pr", "12"]
    staged = [*record, "--fault", "mantissa=2", "--engine-commit", "b" * 40, *accept]

    # Without --replaces-from the staging store is the reference: nothing to replace, which would be wrong.
    assert main([*staged, "--store", str(tmp_path / "naive")]) == 0
    assert "replaces no earlier baseline" in capsys.readouterr().out

    assert main([*staged, "--store", str(tmp_path / "stage"), "--replaces-from"]) == 0
    assert "replaces " + first.run_id in capsys.readouterr().out
    publish = ["baseline", "publish", str(tmp_path / "stage"), "--config", str(config), "--sha", "b" * 40]
    plan = [*publish, "--models", first.model, "--mode", "accept"]
    # Only the plan's accept is published: the staged run accepts PR #12, not #13, and nothing is written.
    assert main([*plan, "--pr", "13"]) == 3
    assert "accepts PR #12" in capsys.readouterr().err and len(list_runs(open_store(str(store)))) == 1
    assert main([*plan, "--pr", "12"]) == 0
    newest = list_runs(open_store(str(store)))[0]
    audit = accepted(newest)
    assert audit is not None and audit["replaces"]["run_id"] == first.run_id and audit["pr"] == 12
