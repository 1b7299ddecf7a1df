"""Publishing staged baseline runs: verified, create-only, never from the future, only what the plan
dispatched (model, commit, label, one run per cell); run ids canonical; model keys are injective."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import yaml

from precisionbot.baselines import RunMeta, Signature, list_runs, new_run_id, open_store, select_baseline, write_run
from precisionbot.baselines.publish import Plan, publish
from precisionbot.baselines.record import encode_meta, model_key, run_id_time
from precisionbot.baselines.store import check_key
from precisionbot.cli import main
from precisionbot.errors import StoreError

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
SIG = Signature.build(model="tiny", tp=1, dtype="bf16", engine_args=["--tp", "1"])
SHA = "c" * 40
PLAN = Plan(commit=SHA, models=("org/tiny",))
ROOT = Path(__file__).resolve().parents[2]


def _meta(when: datetime = NOW, model: str = "org/tiny", **kw: Any) -> RunMeta:
    fields: dict[str, Any] = dict(
        run_id=new_run_id(when, "default"),
        model=model,
        signature=SIG.digest,
        signature_parts=SIG.parts,
        created=when.isoformat(),
        label="baseline_established",
        producer="default",
        engine_commit=SHA,
    )
    return RunMeta(**{**fields, **kw})


def _stage(root: Path, when: datetime = NOW, model: str = "org/tiny", **kw: Any) -> RunMeta:
    arrays = {"golden": {"logprobs": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    return write_run(open_store(str(root)), _meta(when, model, **kw), arrays)


def test_publish_copies_verified_runs_to_s3_and_never_overwrites(aws: str, tmp_path: Path) -> None:
    boto3.client("s3").create_bucket(Bucket="pb-golden")
    target = open_store("s3://pb-golden/ci")
    meta = _stage(tmp_path / "stage")
    (published,) = publish(open_store(str(tmp_path / "stage")), target, NOW, plan=PLAN)
    assert published.run_id == meta.run_id
    assert [m.run_id for m in list_runs(target)] == [meta.run_id]
    with pytest.raises(StoreError, match="already exists"):
        publish(open_store(str(tmp_path / "stage")), target, NOW, plan=PLAN)


def test_a_run_dated_in_the_future_is_refused(tmp_path: Path) -> None:
    _stage(tmp_path / "stage", when=NOW + timedelta(days=365))
    target = open_store(str(tmp_path / "store"))
    with pytest.raises(StoreError, match="from the future"):
        publish(open_store(str(tmp_path / "stage")), target, NOW, plan=PLAN)
    assert not (tmp_path / "store").exists()


def test_tampered_or_stray_files_are_refused_before_any_write(tmp_path: Path) -> None:
    meta = _stage(tmp_path / "stage")
    npz = tmp_path / "stage" / meta.prefix / "golden.npz"
    npz.write_bytes(npz.read_bytes() + b"x")
    with pytest.raises(StoreError, match="does not match the sha256"):
        publish(open_store(str(tmp_path / "stage")), open_store(str(tmp_path / "store")), NOW, plan=PLAN)
    clean = _stage(tmp_path / "stage2")
    (tmp_path / "stage2" / clean.prefix / "extra.npz").write_bytes(b"zz")
    with pytest.raises(StoreError, match=r"no run's meta\.json lists"):
        publish(open_store(str(tmp_path / "stage2")), open_store(str(tmp_path / "store")), NOW, plan=PLAN)
    assert not (tmp_path / "store").exists()


def test_a_meta_moved_under_another_models_key_is_refused(tmp_path: Path) -> None:
    meta = _stage(tmp_path / "stage")
    src = tmp_path / "stage" / meta.prefix
    moved = tmp_path / "stage" / model_key("org/other") / meta.prefix.split("/", 1)[1]
    moved.parent.mkdir(parents=True)
    src.rename(moved)
    with pytest.raises(StoreError, match="describes"):
        publish(open_store(str(tmp_path / "stage")), open_store(str(tmp_path / "store")), NOW, plan=PLAN)


def test_publish_cli_reads_the_store_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = _stage(tmp_path / "stage", when=datetime.now(timezone.utc))
    config = tmp_path / "precision.yml"
    config.write_text(json.dumps({"baselines": {"store": str(tmp_path / "store")}}))
    plan = ["--sha", SHA, "--models", "org/tiny"]
    assert main(["baseline", "publish", str(tmp_path / "stage"), "--config", str(config), *plan]) == 0
    assert f"published {meta.run_id}" in capsys.readouterr().out
    assert [m.run_id for m in list_runs(open_store(str(tmp_path / "store")))] == [meta.run_id]


@pytest.mark.parametrize(
    ("name", "key"),
    [("Qwen/Qwen3-8B", "Qwen--Qwen3-8B"), ("llama-3.1+fp8", "llama-3.1+fp8"), ("a--b", "=612d2d62")],
)
def test_model_keys_stay_readable_for_plain_names(name: str, key: str) -> None:
    assert model_key(name) == key


def test_model_keys_are_injective() -> None:
    names = ["a/b", "a--b", "a-b", "a b", "a_b", "a/-b", "a=b", "=61", "a//b", "-a", "a.", "a/../b", "ä", "a+b"]
    keys = [model_key(n) for n in names]
    assert len(set(keys)) == len(names)
    for key in keys:
        assert check_key(key) == key


ACCEPTED = {"accepted": {"reason": "fp32 router GEMM", "by": "alice", "pr": 12, "commit": SHA}}


@pytest.mark.parametrize(
    ("run", "plan", "problem"),
    [
        ({"model": "org/other"}, PLAN, "is of model 'org/other', which the plan did not run (its cells: org/tiny)"),
        ({"engine_commit": "d" * 40}, PLAN, f"recorded at engine commit {'d' * 40}, not the plan's {SHA}"),
        ({"engine_commit": None}, PLAN, f"recorded at engine commit none, not the plan's {SHA}"),
        ({"label": "passed"}, PLAN, "is labelled 'passed', not 'baseline_established'"),
        ({"extra": ACCEPTED}, PLAN, "carries an acceptance record (PR #12), but the plan records a baseline"),
        ({}, replace(PLAN, accepted_pr=12), "carries no acceptance record, but the plan accepts PR #12"),
        ({"extra": ACCEPTED}, replace(PLAN, accepted_pr=13), f"accepts PR #12 at {SHA}, not the plan's PR #13"),
        ({}, replace(PLAN, models=("org/tiny", "org/tiny")), "the plan ran 2 cell(s) of model 'org/tiny' but"),
        ({}, replace(PLAN, models=("org/tiny", "org/big")), "cell(s) of model 'org/big' but the staging stores hold 0"),
    ],
)
def test_a_run_the_plan_did_not_dispatch_is_refused_naming_it(
    tmp_path: Path, run: dict[str, Any], plan: Plan, problem: str
) -> None:
    """The staging store is written by the engine's code: a run of another model, commit or label, a forged
    or missing acceptance, or a cell without its one run is refused before anything is written."""
    meta = _stage(tmp_path / "stage", **run)
    with pytest.raises(StoreError) as caught:
        publish(open_store(str(tmp_path / "stage")), open_store(str(tmp_path / "store")), NOW, plan=plan)
    assert problem in str(caught.value)
    if "cell(s)" not in problem:
        assert f"run {meta.prefix[:-1]} in " in str(caught.value)  # names the run
    assert not (tmp_path / "store").exists()
    assert [m.run_id for m in list_runs(open_store(str(tmp_path / "stage")))] == [meta.run_id]  # loses nothing


def test_an_accepted_run_of_the_plan_is_published(tmp_path: Path) -> None:
    meta = _stage(tmp_path / "stage", extra=ACCEPTED)
    (published,) = publish(
        open_store(str(tmp_path / "stage")),
        open_store(str(tmp_path / "store")),
        NOW,
        plan=replace(PLAN, accepted_pr=12),
    )
    assert published.run_id == meta.run_id


def test_two_runs_for_one_cell_are_refused_across_staging_stores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each cell's GPU job records one run; a second one (a second recording, or a second stage naming the
    same model) would pick which of them is the baseline by a timestamp the engine's code chose."""
    first = _stage(tmp_path / "cell0")
    second = _stage(tmp_path / "cell1", when=NOW + timedelta(seconds=1))
    config = tmp_path / "precision.yml"
    config.write_text(json.dumps({"baselines": {"store": str(tmp_path / "store")}}))
    stages = [str(tmp_path / "cell0"), str(tmp_path / "cell1")]
    argv = ["baseline", "publish", *stages, "--config", str(config), "--sha", SHA, "--models", "org/tiny"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "the plan ran 1 cell(s) of model 'org/tiny' but the staging stores hold 2 run(s)" in err
    assert first.run_id in err and second.run_id in err
    assert not (tmp_path / "store").exists()
    assert main([*argv[:-1], "org/tiny,org/tiny"]) == 0  # two cells of that model: one run each
    assert len(list_runs(open_store(str(tmp_path / "store")))) == 2


def test_publish_cli_needs_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _stage(tmp_path / "stage")
    stage = str(tmp_path / "stage")
    # Workflows written before the plan check omit both: the error says what to add, with an example.
    assert main(["baseline", "publish", stage, "--store", str(tmp_path / "store")]) == 3
    err = capsys.readouterr().err
    assert "needs the plan it publishes against: add --sha and --models, e.g. in the publish job's" in err
    assert "--models ${{ join(fromJSON(needs.plan.outputs.matrix).include.*.model, ',') }}" in err
    assert main(["baseline", "publish", stage, "--store", str(tmp_path / "store"), "--sha", SHA]) == 3
    assert "add --models, e.g." in capsys.readouterr().err
    plan = ["--store", str(tmp_path / "store"), "--sha", SHA, "--models", "org/tiny"]
    assert main(["baseline", "publish", stage, *plan, "--mode", "accept"]) == 3
    assert "--mode accept needs --pr N" in capsys.readouterr().err
    assert main(["baseline", "publish", stage, *plan, "--mode", "accept", "--pr", "12"]) == 3
    assert "carries no acceptance record, but the plan accepts PR #12" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()
    # `/precision baseline` on PR 12: the plan's pr output is set, the mode says baseline.
    assert main(["baseline", "publish", stage, *plan, "--mode", "baseline", "--pr", "12"]) == 0


def test_the_example_workflow_publishes_against_the_plan() -> None:
    """The publish job hands the plan's sha, mode, PR and cells to `baseline publish`."""
    workflow = yaml.safe_load((ROOT / "examples/workflows/precision.yml").read_text())
    step = workflow["jobs"]["publish-baseline"]["steps"][-1]["with"]
    assert step["command"] == "baseline publish"
    assert step["sha"] == "${{ needs.plan.outputs.sha }}" and step["pr"] == "${{ needs.plan.outputs.pr }}"
    assert "--mode ${{ needs.plan.outputs.mode }}" in step["args"]
    assert "--models ${{ join(fromJSON(needs.plan.outputs.matrix).include.*.model, ',') }}" in step["args"]
    action = (ROOT / "action.yml").read_text()
    publish_case = action.split('elif [ "${cmd[*]}" = "baseline publish" ]; then', 1)[1].split("fi ;;", 1)[0]
    assert 'opt --sha "$PRECISIONBOT_SHA"' in publish_case and 'opt --pr "$PRECISIONBOT_PR"' in publish_case


BOGUS = "202691T0000000Z-default-12345678"
"""P2: ``strptime`` reads it as 2026-09-01; as a string it sorts after every ``2026...`` id."""


def test_a_lenient_run_id_is_refused_and_never_selected(tmp_path: Path) -> None:
    assert datetime.strptime(BOGUS.split("-")[0], "%Y%m%dT%H%M%S%fZ") == datetime(2026, 9, 1)  # the lenient read
    for bad in (BOGUS, "20261301T000000000000Z-default-12345678", "20260101T000000000000Z-default-1234567"):
        with pytest.raises(StoreError, match="run id"):
            run_id_time(bad)
    assert run_id_time("20260901T000000000000Z-default-12345678") == datetime(2026, 9, 1, tzinfo=timezone.utc)
    # Publish refuses it, naming the run and the canonical form.
    stage = open_store(str(tmp_path / "stage"))
    bogus = _meta(when=datetime(2026, 9, 1, tzinfo=timezone.utc), run_id=BOGUS)
    stage.put_bytes(bogus.prefix + "meta.json", encode_meta(bogus))
    with pytest.raises(StoreError, match=r"run id '202691T0000000Z-default-12345678' is not of the form") as caught:
        publish(stage, open_store(str(tmp_path / "store")), NOW, plan=PLAN)
    assert f"run {bogus.prefix[:-1]} in" in str(caught.value)
    with pytest.raises(StoreError, match="is not of the form"):
        write_run(open_store(str(tmp_path / "store")), bogus, {})
    # A store that holds one anyway (written before the fix, or by hand): selection goes by the parsed time
    # of canonical ids, so the newest real baseline is chosen and the bogus run is not even listed.
    store = open_store(str(tmp_path / "store2"))
    store.put_bytes(bogus.prefix + "meta.json", encode_meta(bogus))
    older = write_run(store, _meta(when=datetime(2026, 10, 1, tzinfo=timezone.utc)), {})
    newer = write_run(store, _meta(when=datetime(2026, 11, 1, tzinfo=timezone.utc)), {})
    chosen = select_baseline(store, "org/tiny", SIG.digest)
    assert chosen is not None and chosen.run_id == newer.run_id
    assert [m.run_id for m in list_runs(store)] == [newer.run_id, older.run_id]
