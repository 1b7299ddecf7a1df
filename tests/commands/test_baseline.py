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
    keys = [k for k in keys if not k.startswith("baselines/.precisionbot-probe/")]  # the preflight's write probe
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
    # Issue 36: one corrupt run is skipped with a warning naming it, never an exit 3 for the whole store; with
    # no other baseline of the signature golden is INCONCLUSIVE, naming the run and the fix.
    assert _check(config, str(store), tmp_path / "corrupt") == 2
    err = capsys.readouterr().err
    assert "golden.npz" in err and "sha256" in err and "Traceback" not in err
    assert "re-record" not in err and "baseline quarantine" in err


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


SIZES = ["--samples", "4", "--max-new-tokens", "16", "--prompt-tokens", "64..96", "--golden-depths", "64"]


def test_record_takes_check_sizes_and_check_compares_with_its_reruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`baseline record` takes check's size flags and reruns the helpers with the PR suite's sizes, so a PR's
    check with the same flags finds main's reruns ("within main's noise"); progress and one line per rerun
    reach a non-terminal stderr (a CI log)."""
    monkeypatch.chdir(tmp_path)  # no .github/precision.yml: the shipped defaults
    store = str(tmp_path / "store")
    engine = ["--engine", "builtin", "--model-preset", "tiny"]
    assert main(["baseline", "record", *engine, "--store", store, "--reruns", "3", *SIZES]) == 0
    captured = capsys.readouterr()
    assert "progress:   0%  helper rerun 1/3: " in captured.err
    assert [
        line.split(":")[0] for line in captured.err.splitlines() if "helper rerun" in line and "match pass" in line
    ] == [
        "  helper rerun 1",
        "  helper rerun 2",
        "  helper rerun 3",
    ]
    assert "helper reruns: match x3, prefill_cache_hit x3, decode_cache_hit x3" in captured.out
    out = tmp_path / "pr"
    argv = ["check", *engine, "--suite", "pr", "--checks", "match", "--store", store, "--out", str(out), *SIZES]
    assert main([*argv, "--quiet"]) == 0
    (match,) = json.loads((out / "result.json").read_text())["checks"]
    assert match["reasons"][-1].startswith("within main's noise"), match["reasons"]


def test_record_refuses_a_suite_whose_helpers_run_other_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "p.yml"
    cfg.write_text("suites:\n  mine:\n    checks: [match, golden]\n    samples: 4\n")
    argv = ["baseline", "record", "--engine-url", "http://127.0.0.1:9", "--config", str(cfg), "--suite", "mine"]
    assert main([*argv, "--store", str(tmp_path / "s"), "--reruns", "3"]) == 3
    err = capsys.readouterr().err
    assert "--suite mine runs the helpers with other sizes than the PR suite 'pr' (samples 4 vs 32)" in err
    assert main([*argv, "--store", str(tmp_path / "s"), "--reruns", "3", "--samples", "4", "--quiet"]) == 3
    assert "other sizes" not in capsys.readouterr().err  # same sizes: on to the engine (not running here)


def test_sizes_beyond_the_engine_context_are_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server with 1,024 tokens of context and the default sizes: refused at once, naming both sizes."""
    from tests.support.fake_sglang import Behaviour, fake_sglang

    with fake_sglang(Behaviour(server_info_extra={"context_length": 1024})) as (url, behaviour):
        argv = ["baseline", "record", "--engine-url", url, "--store", str(tmp_path / "s"), "--reruns", "3"]
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert "need 5,634 tokens per sequence (prompts up to 4,608 + 2 turns of 512 new tokens" in err
        assert "more than the engine's context of 1,024 tokens (context_length)" in err
        assert "golden needs 4,128 tokens (depth 4,096 + 32 decode steps)" in err and "--golden-depths 512" in err
        assert main(["check", "--engine-url", url, "--out", str(tmp_path / "o"), "--quiet"]) == 3
        assert "need 5,634 tokens per sequence" in capsys.readouterr().err
        assert not any(call.startswith("/generate") for call in behaviour.calls)


class _Listener:
    """A TCP port that records whether anything connected: an engine URL nobody may reach before the store
    is verified (issue 36: a store error must cost no engine time)."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def contacted(self) -> bool:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True


def test_a_bad_bucket_fails_before_the_engine_is_contacted(
    aws: str, config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = _Listener()
    try:
        out = tmp_path / "out"
        argv = ["check", "--engine-url", engine.url, "--config", config, "--out", str(out), "--quiet"]
        assert main([*argv, "--baseline-store", "s3://no-such-bucket/x"]) == 3
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("precisionbot: error: the baseline store is not usable, no check ran: ")
        assert "'no-such-bucket'" in line and "does not exist" in line
        (golden,) = json.loads((out / "result.json").read_text())["checks"]  # for the report step
        assert golden["verdict"] == "inconclusive" and "no-such-bucket" in golden["reasons"][0]
        assert golden["reasons"][0].startswith("setup error (exit 3): the baseline store is not usable")
        assert json.loads((out / "result.json").read_text())["setup_error"]["exit_code"] == 3  # as an engine's
        record = ["baseline", "record", "--engine-url", engine.url, "--config", config, "--quiet"]
        assert main([*record, "--store", "s3://no-such-bucket/x"]) == 3
        err = capsys.readouterr().err
        assert "the baseline store is not usable, the engine was not started" in err and "no-such-bucket" in err
        assert not engine.contacted()
    finally:
        engine.sock.close()


def test_record_writes_a_probe_that_publish_ignores(aws: str, config: str, tmp_path: Path) -> None:
    boto3.client("s3").create_bucket(Bucket="pb-probe")
    assert main(["baseline", "record", "--engine", "builtin", "--store", "s3://pb-probe/b", "--config", config]) == 0
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="pb-probe")["Contents"]]
    assert len([k for k in keys if k.startswith("b/.precisionbot-probe/")]) == 1 and len(keys) == 3


def test_a_store_failing_after_the_preflight_leaves_a_complete_result(
    config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from precisionbot.baselines import list_runs, load_arrays, new_run_id, now_utc, open_store, write_run

    store = tmp_path / "store"
    assert main(["baseline", "record", "--engine", "builtin", "--store", str(store), "--config", config]) == 0
    opened = open_store(str(store))
    (run,) = list_runs(opened)
    # A newer good run of another signature (what the preflight reads), then the selected run's array made
    # unreadable: a store error, not corrupt data (a directory where the file was).
    other = replace(run, run_id=new_run_id(now_utc(), "default"), signature="0" * 16, created=now_utc().isoformat())
    write_run(opened, other, {"golden": load_arrays(opened, run, "golden")})
    npz = store / run.prefix / "golden.npz"
    npz.unlink()
    npz.mkdir()
    capsys.readouterr()
    out = tmp_path / "out"
    argv = ["check", "--engine", "builtin", "--config", config, "--checks", "match,golden", "--out", str(out)]
    assert main([*argv, "--baseline-store", str(store), "--quiet"]) == 2
    checks = {c["name"]: c for c in json.loads((out / "result.json").read_text())["checks"]}
    assert checks["match"]["verdict"] == "pass"  # kept
    assert checks["golden"]["verdict"] == "inconclusive"
    assert checks["golden"]["reasons"][0].startswith("the baseline store failed: cannot read ")


def test_a_store_given_to_a_suite_without_golden_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the shipped defaults: the consistency suite has no golden
    argv = ["check", "--engine", "builtin", "--fault", "attn-p-fp8", "--samples", "4", "--max-new-tokens", "8"]
    main([*argv, "--baseline-store", str(tmp_path / "s"), "--out", str(tmp_path / "o"), "--quiet"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if "no golden check" in line]
    assert warnings == [
        "precisionbot: warning: a baseline store was given, but suite 'consistency' has no golden check (it is "
        "read only for the helpers' comparison with main's noise): golden does not run; add it with "
        "`--checks match,prefill_cache_hit,decode_cache_hit,golden` or `--suite pr`"
    ]


def test_main_noise_skipped_for_other_sizes_is_said_on_stderr_and_in_the_comment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "store")
    engine = ["--engine", "builtin", "--model-preset", "tiny"]
    assert main(["baseline", "record", *engine, "--store", store, "--reruns", "3", *SIZES, "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "pr"
    other = [*SIZES[:1], "5", *SIZES[2:]]  # 5 samples where main's reruns have 4
    argv = ["check", *engine, "--suite", "pr", "--checks", "match", "--store", store, "--out", str(out), *other]
    main([*argv, "--quiet"])
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: not compared")]
    assert len(notes) == 1 and "main's reruns were recorded at other sizes (samples 4 vs 5" in notes[0]
    assert main(["report", str(out)]) in (0, 1, 2)
    assert "not compared with main's noise: main's reruns were recorded at other sizes" in capsys.readouterr().out


SPEC_CONFIG = """
suites:
  pr:
    checks: [match, prefill_cache_hit, decode_cache_hit, golden, spec_decode]
    golden: {top_k: 5, context_depths: [64], decode_steps: 2}
  baseline:
    checks: [golden]
    golden: {top_k: 5, context_depths: [64], decode_steps: 2}
"""
SPEC_SIZES = ["--samples", "2", "--max-new-tokens", "16", "--prompt-tokens", "64..96"]


@pytest.mark.slow
def test_record_stores_mains_acceptance_and_check_judges_a_draft_regression_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PR suite with spec_decode: `baseline record` reruns main's spec arm with the golden baseline, and a PR
    whose draft got worse (outputs identical) fails on acceptance against those reruns, named as a draft
    regression; the record's meta carries the reruns, their parameters and a summary."""
    cfg = tmp_path / "p.yml"
    cfg.write_text(SPEC_CONFIG)
    store = str(tmp_path / "store")
    common = ["--engine", "builtin", "--model-preset", "tiny", "--config", str(cfg), *SPEC_SIZES, "--quiet"]
    assert main(["baseline", "record", *common, "--store", store, "--reruns", "3"]) == 0
    captured = capsys.readouterr()
    assert "spec_decode acceptance: x3, " in captured.out
    assert captured.err.count("  acceptance rerun ") == 3
    run_id = captured.out.split()[1]
    assert main(["baseline", "show", run_id, "--store", store, "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    stored = meta["extra"]["spec_acceptance"]
    assert stored["version"] == 1 and len(stored["reruns"]) == 3 and meta["stats"]["spec_acceptance"]["reruns"] == 3
    params = stored["params"]
    assert params["samples"] == 2 and params["max_new_tokens"] == 16
    assert params["speculative_algorithm"] == "NGRAM" and params["speculative_num_draft_tokens"] == 4
    # The builtin engine reports acceptance per request, so each rerun keeps each sample's (text, counters).
    rows = [r["samples"] for r in stored["reruns"]]
    assert all(len(r) == 2 and len(r[0]) == 4 for r in rows) and rows[0] == rows[1] == rows[2]

    out = tmp_path / "pr"
    argv = ["check", *common, "--suite", "pr", "--checks", "spec_decode", "--store", store, "--out", str(out)]
    assert main([*argv, "--fault", "spec-draft-degraded"]) == 1
    (spec,) = json.loads((out / "result.json").read_text())["checks"]
    assert spec["stats"]["caught_by"] == ["acceptance"] and spec["stats"]["main_accept_stored"] is True
    assert len(spec["stats"]["main_accept_reruns"]) == 3 and spec["main_acceptance"]["baseline"] == run_id
    assert spec["stats"]["accept_samples_compared"] == 2  # the draft's fault leaves the text main's
    (reason,) = spec["reasons"]
    assert "main's 3 stored reruns" in reason and "outputs unchanged: a draft regression, not a precision bug" in reason
