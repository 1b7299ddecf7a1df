"""Publishing staged baseline runs: verified, create-only, never from the future; model keys are injective."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import numpy as np
import pytest

from precisionbot.baselines import RunMeta, Signature, list_runs, new_run_id, open_store, write_run
from precisionbot.baselines.publish import publish
from precisionbot.baselines.record import model_key
from precisionbot.baselines.store import check_key
from precisionbot.cli import main
from precisionbot.errors import StoreError

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
SIG = Signature.build(model="tiny", tp=1, dtype="bf16", engine_args=["--tp", "1"])


def _stage(root: Path, when: datetime = NOW, model: str = "org/tiny") -> RunMeta:
    meta = RunMeta(
        run_id=new_run_id(when, "default"),
        model=model,
        signature=SIG.digest,
        signature_parts=SIG.parts,
        created=when.isoformat(),
        label="baseline_established",
        producer="default",
    )
    arrays = {"golden": {"logprobs": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    return write_run(open_store(str(root)), meta, arrays)


def test_publish_copies_verified_runs_to_s3_and_never_overwrites(aws: str, tmp_path: Path) -> None:
    boto3.client("s3").create_bucket(Bucket="pb-golden")
    target = open_store("s3://pb-golden/ci")
    meta = _stage(tmp_path / "stage")
    (published,) = publish(open_store(str(tmp_path / "stage")), target, NOW)
    assert published.run_id == meta.run_id
    assert [m.run_id for m in list_runs(target)] == [meta.run_id]
    with pytest.raises(StoreError, match="already exists"):
        publish(open_store(str(tmp_path / "stage")), target, NOW)


def test_a_run_dated_in_the_future_is_refused(tmp_path: Path) -> None:
    _stage(tmp_path / "stage", when=NOW + timedelta(days=365))
    target = open_store(str(tmp_path / "store"))
    with pytest.raises(StoreError, match="from the future"):
        publish(open_store(str(tmp_path / "stage")), target, NOW)
    assert not (tmp_path / "store").exists()


def test_tampered_or_stray_files_are_refused_before_any_write(tmp_path: Path) -> None:
    meta = _stage(tmp_path / "stage")
    npz = tmp_path / "stage" / meta.prefix / "golden.npz"
    npz.write_bytes(npz.read_bytes() + b"x")
    with pytest.raises(StoreError, match="does not match the sha256"):
        publish(open_store(str(tmp_path / "stage")), open_store(str(tmp_path / "store")), NOW)
    clean = _stage(tmp_path / "stage2")
    (tmp_path / "stage2" / clean.prefix / "extra.npz").write_bytes(b"zz")
    with pytest.raises(StoreError, match=r"no run's meta\.json lists"):
        publish(open_store(str(tmp_path / "stage2")), open_store(str(tmp_path / "store")), NOW)
    assert not (tmp_path / "store").exists()


def test_a_meta_moved_under_another_models_key_is_refused(tmp_path: Path) -> None:
    meta = _stage(tmp_path / "stage")
    src = tmp_path / "stage" / meta.prefix
    moved = tmp_path / "stage" / model_key("org/other") / meta.prefix.split("/", 1)[1]
    moved.parent.mkdir(parents=True)
    src.rename(moved)
    with pytest.raises(StoreError, match="describes"):
        publish(open_store(str(tmp_path / "stage")), open_store(str(tmp_path / "store")), NOW)


def test_publish_cli_reads_the_store_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = _stage(tmp_path / "stage", when=datetime.now(timezone.utc))
    config = tmp_path / "precision.yml"
    config.write_text(json.dumps({"baselines": {"store": str(tmp_path / "store")}}))
    assert main(["baseline", "publish", str(tmp_path / "stage"), "--config", str(config)]) == 0
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
