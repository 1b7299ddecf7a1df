"""``precisionbot baseline record | list | show`` and ``check --checks golden`` through the CLI, with the
builtin engine in-process, a local store and S3 (moto's server over real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from precisionbot.cli import build_parser, main

CONFIG = """
baselines: {helper_reruns: 0}
suites:
  consistency:
    checks: [golden]
    golden: {top_k: 20, context_depths: [256, 1024], decode_steps: 8}
  baseline:
    checks: [golden]
    golden: {top_k: 20, context_depths: [256, 1024], decode_steps: 8}
"""


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "precision.yml"
    path.write_text(CONFIG)
    return str(path)


def _check(config: str, store: str, out: Path, *faults: str) -> int:
    flags = [x for f in faults for x in ("--fault", f)]
    return main(
        [
            "check",
            "--engine",
            "builtin",
            *flags,
            "--config",
            config,
            "--baseline-store",
            store,
            "--out",
            str(out),
            "--quiet",
        ]
    )


def test_record_list_show_and_check_local(config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "store")
    rc = main(
        [
            "baseline",
            "record",
            "--engine",
            "builtin",
            "--store",
            store,
            "--config",
            config,
            "--engine-commit",
            "abc1234",
        ]
    )
    assert rc == 0
    recorded = capsys.readouterr().out
    assert "recorded " in recorded and "baseline_established" in recorded
    run_id = recorded.split()[1]

    assert main(["baseline", "list", "--store", store]) == 0
    listing = capsys.readouterr().out
    assert run_id in listing and "abc1234" in listing and "builtin" in listing

    # One spelling works everywhere: `baseline ... --baseline-store` as on `check`, `check --store` as on `baseline`.
    assert main(["baseline", "list", "--baseline-store", store]) == 0
    assert run_id in capsys.readouterr().out
    args = build_parser().parse_args(["check", "--engine", "builtin", "--store", store])
    assert args.baseline_store == store

    assert main(["baseline", "show", run_id[:22], "--store", store]) == 0
    shown = capsys.readouterr().out
    assert f"run        {run_id}" in shown and "engine_args" in shown and "golden.npz" in shown

    assert main(["baseline", "show", run_id, "--store", store, "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["label"] == "baseline_established" and meta["engine_commit"] == "abc1234"

    assert _check(config, store, tmp_path / "bad", "attn-p-fp8") == 1
    result = json.loads((tmp_path / "bad" / "result.json").read_text())
    (golden,) = result["checks"]
    assert golden["name"] == "golden" and golden["verdict"] == "fail"
    for key in ("kl_p50", "kl_p99", "kl_max", "flips", "confident_flips", "flips_by_margin", "mean_k3", "p99"):
        assert key in golden["stats"]
    assert golden["baseline"]["run_id"] == run_id and golden["baseline"]["engine_commit"] == "abc1234"
    assert (tmp_path / "bad" / "golden.npz").is_file()


def test_record_and_check_through_s3(aws: str, config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="pb-cli")
    store = "s3://pb-cli/baselines"
    assert main(["baseline", "record", "--engine", "builtin", "--store", store, "--config", config]) == 0
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="pb-cli")["Contents"]]
    assert len(keys) == 2 and all(k.startswith("baselines/builtin/") for k in keys)
    assert _check(config, store, tmp_path / "ok") == 0
    capsys.readouterr()


def test_no_baseline_is_inconclusive_and_a_corrupt_one_is_an_error(
    config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    store.mkdir()  # an empty store: no baseline yet (a store that does not exist is a setup error, below)
    assert _check(config, str(store), tmp_path / "none") == 2
    (golden,) = json.loads((tmp_path / "none" / "result.json").read_text())["checks"]
    assert "no golden baseline" in golden["reasons"][0]
    # The command to record one reaches the same engine, config and suite, and names no port.
    assert (
        f"`precisionbot baseline record --engine builtin --config {config} --suite consistency --store {store}`"
    ) in golden["reasons"][0]
    assert golden["reasons"][1] == f"the store {store} holds no baseline yet"

    assert main(["baseline", "record", "--engine", "builtin", "--store", str(store), "--config", config]) == 0
    # Another model name (a Q8 file's path where the baseline was the f32's): the fields that differ are named.
    other = Path(config).with_name("q8.yml")
    other.write_text(CONFIG + "models:\n  - {name: tiny-q8, path: /models/tiny-q8.gguf}\n")
    assert _check(str(other), str(store), tmp_path / "q8") == 2
    (golden,) = json.loads((tmp_path / "q8" / "result.json").read_text())["checks"]
    assert "is of model 'builtin'" in golden["reasons"][1]
    assert "model: baseline builtin, now tiny-q8" in golden["reasons"][1]
    (npz,) = store.rglob("golden.npz")
    npz.write_bytes(npz.read_bytes()[:-100])
    capsys.readouterr()
    assert _check(config, str(store), tmp_path / "corrupt") == 3
    err = capsys.readouterr().err
    assert "golden.npz" in err and "sha256" in err and "Traceback" not in err


def test_bad_arguments_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", "show", "nope", "--store", str(tmp_path)]) == 3
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["baseline", "list", "--store", "gs://x/y"]) == 3
    assert "unsupported baseline store URI" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["baseline", "list", "--store", str(tmp_path / "empty")]) == 0
    assert "no runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["baseline", "list"], "--store"),
        (["baseline", "show", "latest"], "--store"),
        (["baseline", "history"], "--store"),
        (["check", "--engine", "builtin", "--checks", "golden", "--quiet"], "--baseline-store"),
    ],
)
def test_a_missing_local_store_is_a_setup_error(
    command: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo'd --store must not read as "no runs" (exit 0) nor as "no golden baseline" (exit 2): every command
    # that reads baselines says the same, with exit 3, before it starts an engine.
    assert (
        main(
            [
                *command,
                "--store",
                str(tmp_path / "typo"),
                "--out" if command[0] == "check" else "--json",
                *([str(tmp_path / "out")] if command[0] == "check" else []),
            ]
        )
        == 3
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line == (
        f"precisionbot: error: baseline store {tmp_path / 'typo'} does not exist; check {flag} "
        "(or baselines.store in the config; `precisionbot baseline record` creates it)"
    )


def test_s3_without_credentials_says_how_to_configure_them(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata probe on a dev box
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # botocore caches resolved credentials per session
    assert main(["baseline", "list", "--store", "s3://bucket/x"]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert "Unable to locate credentials" in line
    assert "configure AWS credentials" in line and "OIDC" in line and "AWS_ENDPOINT_URL" in line
