"""The baseline store: local directory and S3 (moto's server over real HTTP) behave the same."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import numpy as np
import pytest

from precisionbot.baselines import (
    RunMeta,
    Signature,
    Store,
    band_runs,
    find_run,
    list_runs,
    load_arrays,
    new_run_id,
    open_store,
    select_baseline,
    write_run,
)
from precisionbot.errors import StoreError

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
SIG = Signature.build(model="tiny", tp=1, dtype="bf16", engine_args=["--tp", "1"])


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "local":
        yield open_store(str(tmp_path / "baselines"))
    else:
        request.getfixturevalue("aws")  # reset moto and point boto3 at it
        boto3.client("s3").create_bucket(Bucket="pb-baselines")
        yield open_store("s3://pb-baselines/ci/golden")


def _meta(label: str = "passed", minutes: int = 0, producer: str = "default", commit: str = "abc") -> RunMeta:
    when = T0 + timedelta(minutes=minutes)
    return RunMeta(
        run_id=new_run_id(when, producer),
        model="org/tiny",
        signature=SIG.digest,
        signature_parts=SIG.parts,
        created=when.isoformat(),
        label=label,
        producer=producer,
        engine_commit=commit,
        stats={"positions": 3, "kl_max": float("nan")},
    )


def _arrays(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {
        "golden": {
            "top_ids": rng.integers(0, 1000, size=(3, 20)).astype(np.int32),
            "top_lp": rng.normal(size=(3, 20)).astype(np.float32),
        }
    }


def test_round_trip_and_layout(store: Store) -> None:
    arrays = _arrays()
    written = write_run(store, _meta(), arrays)
    keys = store.list_keys("")
    assert keys == sorted([written.prefix + "golden.npz", written.prefix + "meta.json"])
    assert written.prefix.startswith(f"org--tiny/{SIG.digest}/2026-11-29/20261129T120000000000Z-default-")
    (run,) = list_runs(store)
    assert run == written
    assert run.stats["kl_max"] == "nan"  # strict JSON: a NaN stat is kept visibly, never dropped
    loaded = load_arrays(store, run, "golden")
    np.testing.assert_array_equal(loaded["top_ids"], arrays["golden"]["top_ids"])
    assert loaded["top_lp"].dtype == np.float32
    assert find_run(store, run.run_id[:20]) == written


def test_selection_skips_failed_and_other_signatures(store: Store) -> None:
    old_good = write_run(store, _meta("baseline_established", minutes=0), _arrays())
    write_run(store, _meta("failed", minutes=5), _arrays())
    other = Signature.build(model="tiny", tp=2)
    write_run(store, RunMeta(**{**_meta(minutes=9).__dict__, "signature": other.digest}), _arrays())
    chosen = select_baseline(store, "org/tiny", SIG.digest)
    assert chosen is not None and chosen.run_id == old_good.run_id
    assert [r.label for r in list_runs(store, "org/tiny", SIG.digest)] == ["failed", "baseline_established"]
    newer = write_run(store, _meta("passed", minutes=10), _arrays())
    assert select_baseline(store, "org/tiny", SIG.digest) == newer
    assert select_baseline(store, "org/tiny", "0" * 16) is None
    assert select_baseline(store, "org/other", SIG.digest) is None


def test_only_failed_runs_select_nothing(store: Store) -> None:
    write_run(store, _meta("failed"), _arrays())
    assert select_baseline(store, "org/tiny", SIG.digest) is None


def test_producers_form_the_band(store: Store) -> None:
    base = write_run(store, _meta(minutes=3, producer="default"), _arrays(0))
    write_run(store, _meta(minutes=1, producer="rerun"), _arrays(1))
    write_run(store, _meta(minutes=2, producer="bad", label="failed"), _arrays(2))
    write_run(store, _meta(minutes=0, producer="old", commit="zzz"), _arrays(3))
    assert [r.producer for r in band_runs(store, base)] == ["default", "rerun"]


def test_concurrent_recorders_both_land(store: Store) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def record(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            write_run(store, _meta(producer=f"p{i}"), _arrays(i))  # same timestamp on purpose
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.producer for r in list_runs(store)) == ["p0", "p1", "p2", "p3"]


def test_keys_are_immutable(store: Store) -> None:
    store.put_bytes("a/b.bin", b"one")
    with pytest.raises(StoreError, match=r"a/b\.bin already exists"):
        store.put_bytes("a/b.bin", b"two")
    assert store.get_bytes("a/b.bin") == b"one"


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_array_is_a_clear_error(store: Store, tmp_path: Path, damage: str) -> None:
    run = write_run(store, _meta(), _arrays())
    key = run.prefix + "golden.npz"
    data = store.get_bytes(key)
    bad = data[: len(data) // 2] if damage == "truncate" else data[:-40] + bytes(40)
    # Immutable keys: overwrite behind the store's back, as a broken disk or a bad upload would.
    _overwrite(store, key, bad)
    with pytest.raises(StoreError, match=rf"{key}.*sha256"):
        load_arrays(store, run, "golden")


def test_corrupt_meta_is_skipped_with_a_warning_naming_it(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 36: it was an error for the whole store, for good (a create-only store cannot delete it).
    run = write_run(store, _meta(), _arrays())
    key = run.prefix + "meta.json"
    _overwrite(store, key, store.get_bytes(key)[:50])
    assert select_baseline(store, "org/tiny", SIG.digest) is None
    assert f"skipped corrupt run {key}" in capsys.readouterr().err


def test_missing_object_and_bad_keys(store: Store) -> None:
    with pytest.raises(StoreError, match="nope/x not found"):
        store.get_bytes("nope/x")
    for key in ("../etc/passwd", "a//b", "", "a/ b"):
        with pytest.raises(StoreError, match="invalid store key"):
            store.put_bytes(key, b"")
    with pytest.raises(StoreError, match="no run 'zzz'"):
        find_run(store, "zzz")


def test_missing_bucket_names_it(aws: str) -> None:
    store = open_store("s3://no-such-bucket/x")
    with pytest.raises(StoreError, match="no-such-bucket"):
        store.list_keys("")


def test_uris(tmp_path: Path) -> None:
    assert open_store(f"file://{tmp_path}").list_keys("") == []
    with pytest.raises(StoreError, match="unsupported baseline store URI"):
        open_store("gs://bucket/x")
    with pytest.raises(StoreError, match="names no bucket"):
        open_store("s3:///x")


def _overwrite(store: Store, key: str, data: bytes) -> None:
    from precisionbot.baselines.store.local import LocalStore
    from precisionbot.baselines.store.s3 import S3Store

    if isinstance(store, LocalStore):
        (store.root / key).write_bytes(data)
    else:
        assert isinstance(store, S3Store)
        boto3.client("s3").put_object(Bucket=store.bucket, Key=f"{store.prefix}/{key}", Body=data)
