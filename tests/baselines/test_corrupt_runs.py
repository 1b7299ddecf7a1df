"""One bad run never breaks the store (issue 36): corrupt and foreign runs are skipped with one warning naming
their key, the newest good run is served, a quarantine marker silences the warning; local and S3 alike."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import numpy as np
import pytest

from precisionbot.baselines import RunMeta, Signature, Store, list_runs, new_run_id, open_store, select_baseline
from precisionbot.baselines.catalog import find_run_key, select_golden, write_run
from precisionbot.baselines.preflight import PROBE_DIR, preflight_read, preflight_write
from precisionbot.baselines.publish import check_staged
from precisionbot.baselines.quarantine import read_markers, write_marker
from precisionbot.baselines.signature import describe_mismatch
from precisionbot.errors import StoreError

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
SIG = Signature.build(model="tiny", tp=1)
SAMPLE = {"phase": "prefill", "doc": "a", "kind": "prose", "prompt_tokens": 3, "first_position": 1, "rows": 2}


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "local":
        yield open_store(str(tmp_path / "baselines"))
    else:
        request.getfixturevalue("aws")
        boto3.client("s3").create_bucket(Bucket="pb-corrupt")
        yield open_store(f"s3://pb-corrupt/{tmp_path.name}")


def _run(store: Store, minutes: int, label: str = "baseline_established") -> RunMeta:
    when = T0 + timedelta(minutes=minutes)
    meta = RunMeta(
        run_id=new_run_id(when, "default"),
        model="org/tiny",
        signature=SIG.digest,
        signature_parts=SIG.parts,
        created=when.isoformat(),
        label=label,
        producer="default",
        engine_commit="abc",
        stats={"positions": 2},
        extra={"golden": {"samples": [SAMPLE]}},
    )
    rows = np.arange(2)
    golden = {"token_id": rows.astype(np.int32), "lp": np.zeros(2, np.float32)}
    golden |= {"top_ids": np.zeros((2, 4), np.int32), "top_lp": np.zeros((2, 4), np.float32)}
    return write_run(store, meta, {"golden": golden})


def _overwrite(store: Store, key: str, data: bytes) -> None:
    """Behind the store's back (keys are immutable), as a broken disk or a bad upload would."""
    from precisionbot.baselines.store.local import LocalStore
    from precisionbot.baselines.store.s3 import S3Store

    if isinstance(store, LocalStore):
        (store.root / key).write_bytes(data)
    else:
        assert isinstance(store, S3Store)
        boto3.client("s3").put_object(Bucket=store.bucket, Key=f"{store.prefix}/{key}", Body=data)


def _truncate_meta(store: Store, run: RunMeta) -> str:
    key = run.prefix + "meta.json"
    _overwrite(store, key, store.get_bytes(key)[:50])
    return key


def test_a_corrupt_old_run_is_skipped_with_one_warning(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    old = _run(store, 0)
    good = _run(store, 5)
    key = _truncate_meta(store, old)
    assert select_baseline(store, "org/tiny", SIG.digest) == good
    assert [r.run_id for r in list_runs(store)] == [good.run_id]
    assert [r.run_id for r in list_runs(store, "org/tiny", SIG.digest)] == [good.run_id]
    (line,) = capsys.readouterr().err.splitlines()  # once, however often the store is listed
    assert line.startswith(f"precisionbot: warning: skipped corrupt run {key} in {store.uri} (")
    assert "is corrupt or truncated" in line and "re-record" not in line
    assert line.endswith(
        f"to silence this, `precisionbot baseline quarantine {old.run_id} --reason ... --store {store.uri}` "
        "(the store's policy forbids deletes)"
    )
    assert preflight_read(store, "org/tiny") == good


def test_a_corrupt_newest_run_serves_the_previous_one(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    good = _run(store, 0)
    newest = _run(store, 5)
    _truncate_meta(store, newest)
    assert select_baseline(store, "org/tiny", SIG.digest) == good
    # Its array failing its sha256 (the meta intact): golden's selection takes the previous run as well.
    newer = _run(store, 9)
    npz = newer.prefix + "golden.npz"
    _overwrite(store, npz, store.get_bytes(npz)[:-10])
    found = select_golden(store, "org/tiny", SIG.digest)
    assert found is not None and found[0][0] == good
    err = capsys.readouterr().err
    assert f"skipped corrupt run {newer.prefix}meta.json" in err and "sha256" in err


def test_every_run_corrupt_names_them_and_the_fix(store: Store) -> None:
    run = _run(store, 0)
    npz = run.prefix + "golden.npz"
    _overwrite(store, npz, b"x")
    with pytest.raises(StoreError, match=r"every baseline .* is corrupt .*baseline record.*baseline quarantine"):
        select_golden(store, "org/tiny", SIG.digest)
    assert select_golden(store, "org/tiny", "0" * 16) is None  # nothing recorded at all: no baseline


def test_a_foreign_run_is_skipped_with_a_warning(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    good = _run(store, 0)
    copy = good.prefix.replace(good.run_id, new_run_id(T0 + timedelta(minutes=3), "copy")) + "meta.json"
    store.put_bytes(copy, store.get_bytes(good.prefix + "meta.json"))  # a meta copied to another key
    store.put_bytes(f"org--tiny/{SIG.digest}/2026-11-29/not-a-run-id/meta.json", b"{}")
    assert list_runs(store) == [good]
    err = capsys.readouterr().err
    assert f"skipped corrupt run {copy}" in err and "foreign: its meta.json describes" in err
    assert "not-a-run-id/meta.json" in err and "not a run precisionbot recorded" in err


def test_quarantine_silences_the_run(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    good = _run(store, 0)
    bad = _run(store, 5)
    key = _truncate_meta(store, bad)
    assert find_run_key(store, bad.run_id[:24]) == key  # found without reading its meta
    marker = write_marker(store, key, reason="truncated upload", by="alice", when=T0)
    assert marker.run_id == bad.run_id
    capsys.readouterr()
    assert select_baseline(store, "org/tiny", SIG.digest) == good and list_runs(store) == [good]
    assert capsys.readouterr().err == ""  # quarantined: skipped silently
    (listed,) = read_markers(store)
    assert (listed.key, listed.reason, listed.by) == (key, "truncated upload", "alice")
    assert store.list_keys("quarantine/") == [f"quarantine/{bad.run_id}.json"]
    with pytest.raises(StoreError, match="already quarantined"):
        write_marker(store, key, reason="again", by="bob", when=T0)


def test_probes_are_new_keys_that_publish_ignores(store: Store) -> None:
    key = preflight_write(store, T0, "baseline record")
    assert key.startswith(PROBE_DIR + "/") and store.list_keys(PROBE_DIR + "/") == [key]
    assert preflight_read(store, None) is None  # an empty store is not an error
    _run(store, 0)
    assert len(check_staged(store, T0 + timedelta(hours=1))) == 1  # no stray-key refusal for the probe


def test_preflight_names_a_missing_bucket(aws: str) -> None:
    with pytest.raises(StoreError, match="no-such-bucket"):
        preflight_read(open_store("s3://no-such-bucket/x"), "org/tiny")
    with pytest.raises(StoreError, match="no-such-bucket"):
        preflight_write(open_store("s3://no-such-bucket/x"), T0, "baseline record")


def test_a_mismatch_says_what_differs_in_words() -> None:
    def sig(depths: list[int], docs: list[str]) -> Signature:
        params = {"top_k": 20, "context_depths": depths, "decode_steps": 8}
        return Signature.build(
            model="m", check_params=str(depths), corpus=",".join(docs), details={"check_params": params, "corpus": docs}
        )

    now, was = sig([512, 2048], ["a (prose)"]), sig([512], ["a (prose)", "b (code)"])
    assert (
        now.digest != was.digest
        and sig([512], ["x"]).digest == Signature.build(model="m", check_params="[512]", corpus="x").digest
    )  # the details are not hashed
    assert describe_mismatch(now.parts, was.parts) == [
        "corpus documents differ: [a (prose), b (code)] (baseline) vs [a (prose)] (now)",
        "golden depths differ: [512] (baseline) vs [512, 2048] (now)",
    ]
    # A run recorded before the details were kept: the digests, as before.
    old = {k: v for k, v in was.parts.items() if k != "details"}
    assert describe_mismatch(now.parts, old)[0].startswith("corpus: baseline ")


def test_baseline_list_and_quarantine_through_the_cli(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    from precisionbot.cli import main

    good = _run(store, 0)
    bad = _run(store, 5)
    key = _truncate_meta(store, bad)
    capsys.readouterr()
    assert main(["baseline", "list", "--store", store.uri]) == 0  # exit 3 for the whole store before issue 36
    listed = capsys.readouterr()
    assert good.run_id in listed.out and bad.run_id not in listed.out
    assert f"skipped corrupt run {key}" in listed.err
    argv = ["baseline", "quarantine", bad.run_id, "--reason", "truncated upload", "--by", "alice"]
    assert main([*argv, "--store", store.uri]) == 0
    assert f"quarantined {bad.run_id} ({key})" in capsys.readouterr().out
    assert main(["baseline", "list", "--store", store.uri]) == 0
    listed = capsys.readouterr()
    assert listed.err == ""
    assert f"quarantined {bad.run_id} ({key}) by alice at " in listed.out and "truncated upload" in listed.out
    assert main([*argv, "--store", store.uri]) == 3
    assert "already quarantined" in capsys.readouterr().err


def test_baseline_show_says_a_run_is_quarantined(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from precisionbot.cli import main

    good, kept = _run(store, 0), _run(store, 5)
    argv = ["baseline", "quarantine", good.run_id, "--reason", "built from the wrong branch", "--by", "bob"]
    assert main([*argv, "--store", store.uri]) == 0
    capsys.readouterr()
    assert main(["baseline", "show", good.run_id, "--store", store.uri]) == 0
    shown = capsys.readouterr().out
    assert "quarantined by bob at " in shown and "built from the wrong branch" in shown
    assert main(["baseline", "show", good.run_id, "--store", store.uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["quarantined"]["reason"] == "built from the wrong branch"
    assert main(["baseline", "show", kept.run_id, "--store", store.uri]) == 0
    assert "quarantined" not in capsys.readouterr().out
