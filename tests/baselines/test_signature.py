from __future__ import annotations

import pytest

from precisionbot.baselines import Signature, describe_mismatch, hash_params, normalize_engine_args


def test_ports_hosts_and_logs_are_dropped_but_numeric_args_stay() -> None:
    args = (
        "--model-path m --port 30000 --host=0.0.0.0 --tp 2 --nccl-port 1234 --dist-init-addr 10.0.0.1:5000 "
        "--log-level info --logits-processor-chunk-size 2048 --max-running-requests 8 "
        "--enable-deterministic-inference"
    )
    assert normalize_engine_args(args) == [
        "--model-path",
        "m",
        "--tp",
        "2",
        "--logits-processor-chunk-size",
        "2048",
        "--max-running-requests",
        "8",
        "--enable-deterministic-inference",
    ]
    assert normalize_engine_args(["--port", "--tp", "1"]) == [
        "--tp",
        "1",
    ]  # a flag right after keeps its place
    assert normalize_engine_args(None) == []


def test_digest_is_stable_and_covers_every_part() -> None:
    base = Signature.build(model="m", tp=1, dtype="bf16", gpu="H100", engine_args=["--tp", "1"], corpus="c")
    assert (
        base.digest
        == Signature.build(corpus="c", engine_args=("--tp", "1"), gpu="H100", dtype="bf16", tp=1, model="m").digest
    )
    assert len(base.digest) == 16 and int(base.digest, 16) >= 0
    for key, value in [
        ("tp", 2),
        ("gpu", "A100"),
        ("torch", "2.5"),
        ("check_params", "x"),
        ("revision", "r2"),
    ]:
        other = Signature.build(**{**base.parts, key: value})
        assert other.digest != base.digest
        assert describe_mismatch(other.parts, base.parts) == [
            f"{key}: baseline {base.parts[key] or '(unknown)'}, now {value}"
        ]
    with pytest.raises(ValueError, match="engine_commit"):
        Signature.build(engine_commit="abc")


def test_hash_params_ignores_key_order() -> None:
    assert hash_params({"a": 1, "b": [1, 2]}) == hash_params({"b": (1, 2), "a": 1})
    assert hash_params({"a": 1}) != hash_params({"a": 2})


def test_mapping_parts_name_only_the_keys_that_differ() -> None:
    was = Signature.build(engine_args={"page_size": 16, "dtype": "bf16"}, tp=1)
    now = Signature.build(engine_args={"page_size": 32, "dtype": "bf16"}, tp=1)
    assert describe_mismatch(now.parts, was.parts) == ["engine_args.page_size: baseline 16, now 32"]
