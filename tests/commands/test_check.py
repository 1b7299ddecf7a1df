"""``precisionbot check`` end to end against a local SGLang-shaped server: files, table, exit codes."""

from __future__ import annotations

import argparse
import json
import socket
from contextlib import ExitStack
from pathlib import Path

import pytest

from precisionbot.commands import check
from precisionbot.config import config_digest
from precisionbot.errors import ConfigError, EngineError
from precisionbot.results.directory import read_records, read_result
from tests.support.fake_sglang import Behaviour, fake_sglang

SMALL = ["--samples", "3", "--max-new-tokens", "4", "--prompt-tokens", "12..20", "--quiet"]


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    check.register(sub)
    args = parser.parse_args(["check", *argv])
    code: int = args.handler(args)
    return code


def test_check_writes_result_and_arrays_and_prints_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    with fake_sglang() as (url, _):
        code = _main(["--engine-url", url, *SMALL, "--out", str(out), "--engine-commit", "abc123"])
    assert code == 0
    result = read_result(out)
    assert [c.name for c in result.checks] == ["match", "prefill_cache_hit", "decode_cache_hit"]
    assert result.engine.url == url and result.engine.commit == "abc123" and result.engine.kind == "sglang"
    raw = json.loads((out / "result.json").read_text())
    for c in raw["checks"]:
        assert set(c["stats"]) >= {"positions", "samples", "mean_k3", "p50", "p99", "p999", "max", "frac_over"}
        assert set(c["stats"]["frac_over"]) >= {"1e-4", "1e-3", "1e-2"}
    assert set(read_records(out)) == {"match", "prefill_cache_hit", "decode_cache_hit"}
    assert raw["config_sha256"] == config_digest(None)  # which config judged it (the comment job compares)
    table = capsys.readouterr().out
    assert "match" in table and "PASS" in table and "verdict: PASS (exit 0)" in table


def test_engine_commit_defaults_to_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRECISIONBOT_ENGINE_COMMIT", "fedcba9")
    with fake_sglang() as (url, _):
        assert _main(["--engine-url", url, *SMALL, "--checks", "match", "--out", str(tmp_path)]) == 0
    assert read_result(tmp_path).engine.commit == "fedcba9"


def test_radix_cache_disabled_exits_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_sglang(Behaviour(disable_radix_cache=True)) as (url, _):
        assert _main(["--engine-url", url, *SMALL, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "radix cache disabled" in captured.out
    # The reasons also go to stderr, once, on one line (stdout may be a captured table).
    (line,) = [x for x in captured.err.splitlines() if x.startswith("precisionbot: inconclusive: ")]
    assert "radix cache disabled" in line


def test_failing_engine_exits_one(tmp_path: Path) -> None:
    with fake_sglang(Behaviour(mode="decode_bias", bias=0.5)) as (url, _):
        assert _main(["--engine-url", url, *SMALL, "--checks", "match", "--out", str(tmp_path)]) == 1
    assert read_result(tmp_path).verdict.value == "fail"


def test_unreachable_engine_is_a_setup_error_with_the_fix(tmp_path: Path) -> None:
    # The engine we were told to use is not there: our setup (exit 3), not an INCONCLUSIVE verdict about it.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError) as info:
        _main(["--engine-url", f"http://127.0.0.1:{port}", *SMALL, "--out", str(tmp_path)])
    message = str(info.value)
    assert message.startswith("the engine is not usable, no check ran: ") and "Connection refused" in message
    assert message.endswith("; start the server or fix --engine-url") and "\n" not in message
    result = read_result(tmp_path)  # still written, so a report step can say why
    assert result.verdict.value == "inconclusive" and result.engine.kind == "sglang"
    # ... and it says what the exit code says: a setup error, in the words stderr printed.
    assert all(c.reasons == (f"setup error (exit 3): {message}",) for c in result.checks)
    raw = json.loads((tmp_path / "result.json").read_text())
    assert raw["setup_error"] == {"exit_code": 3, "message": message}


@pytest.mark.parametrize("kind", ["sglang", "vllm", "openai"])
def test_a_malformed_answer_is_inconclusive_on_every_engine_kind(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same fault, the same exit: an engine that answers a check with bytes that are not JSON makes the checks
    INCONCLUSIVE naming it (exit 2), whichever client reads it; the table says each distinct reason once."""
    from tests.support.fake_vllm import fake_vllm

    with ExitStack() as stack:
        if kind == "sglang":
            url, _ = stack.enter_context(fake_sglang(Behaviour(mode="bad_json")))
        else:
            url = stack.enter_context(fake_vllm("vllm_bad_json"))
        code = _main(["--engine-url", url, "--engine-kind", kind, *SMALL, "--out", str(tmp_path)])
    assert code == 2
    result = read_result(tmp_path)
    assert "setup_error" not in json.loads((tmp_path / "result.json").read_text())
    reasons = {c.reasons[0] for c in result.checks}
    assert any("answered invalid JSON" in r for r in reasons), reasons
    out = capsys.readouterr().out
    for reason in reasons:
        assert out.count(reason) == 1, out


def test_one_reason_is_printed_once_where_stdout_and_stderr_meet(tmp_path: Path) -> None:
    """Four checks with one reason: one line in the table, and no stderr copy when both streams are one file."""
    import subprocess
    import sys

    log = tmp_path / "log"
    with fake_sglang(Behaviour(mode="bad_json")) as (url, _), log.open("w") as f:
        argv = ["check", "--engine-url", url, "--checks", "match,prefill_cache_hit,decode_cache_hit,cache_consistency"]
        argv += [*SMALL, "--out", str(tmp_path / "out")]
        code = subprocess.run(
            [sys.executable, "-m", "precisionbot", *argv], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, check=False
        ).returncode
    text = log.read_text()
    assert code == 2, text
    assert text.count("answered invalid JSON") == 1, text
    assert "match, prefill_cache_hit, decode_cache_hit, cache_consistency: could not run: " in text


@pytest.mark.parametrize("url", ["notaurl", "ftp://host/x", "http://", "http://127.0.0.1:99999"])
def test_an_invalid_engine_url_is_a_config_error(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--engine-url .*; write it as http://HOST:PORT"):
        _main(["--engine-url", url, *SMALL, "--out", str(tmp_path)])


@pytest.mark.parametrize("url", ["notaurl", "refused"])
def test_an_unusable_engine_is_one_stderr_line_and_exit_3(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from precisionbot.cli import main

    if url == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert main(["check", "--engine-url", url, *SMALL, "--out", str(tmp_path)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("precisionbot: error: ")
    assert "fix --engine-url" in lines[0] or "write it as http://HOST:PORT" in lines[0]


def test_a_failing_launch_command_is_a_setup_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from precisionbot.cli import main

    cfg = tmp_path / "precision.yml"
    cfg.write_text(
        "engine:\n"
        "  kind: sglang\n"
        f"  launch: {sys.executable} -c 'print(24680); raise SystemExit(4)' {{model}} {{port}}\n"
        "  health_timeout_s: 30\n"
        "models:\n"
        "  - name: toy\n"
        "    path: toy-model\n"
    )
    argv = ["check", "--engine", "launch", "--config", str(cfg), *SMALL, "--out", str(tmp_path / "o")]
    assert main(argv) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("precisionbot: error: the engine is not usable, no check ran: engine exited with code 4")
    assert "engine.log" in line and line.endswith(
        "fix engine.launch in the config (or start the server yourself and pass --engine-url)"
    )
    assert "24680" in (tmp_path / "o" / "engine.log").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--checks", "mtach"], "--checks: unknown check(s) mtach"),
        (["--samples", "0"], "--samples must be a positive integer"),
        (["--prompt-tokens", "9..3"], "--prompt-tokens '9..3'"),
        (["--fault", "restore-layer0-only"], "--fault and --disable-radix-cache are for the builtin engine"),
        (["--suite", "nope"], "no suite 'nope'"),
    ],
)
def test_bad_arguments_are_config_errors(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _main(["--engine-url", "http://127.0.0.1:9", *argv, "--out", str(tmp_path)])
    assert message in str(info.value)


def test_bad_config_file_is_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "p.yml"
    cfg.write_text("engine:\n  kind: tgi\n")
    with pytest.raises(ConfigError, match=r"p\.yml: key 'engine\.kind' must be one of"):
        _main(["--config", str(cfg), "--out", str(tmp_path)])


def test_cli_setup_error_is_one_line_and_exit_three(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from precisionbot.cli import main

    code = main(["check", "--engine-url", "http://127.0.0.1:9", "--checks", "mtach", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith("precisionbot: error: --checks: unknown check(s) mtach")
    assert err.count("\n") == 1 and "Traceback" not in err


ROOT = Path(__file__).resolve().parents[2]


def test_launch_from_config_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.chdir(ROOT)  # the template runs `python -m tests.support.fake_sglang`
    cfg = tmp_path / "precision.yml"
    cfg.write_text(
        "engine:\n"
        "  kind: sglang\n"
        f"  launch: {sys.executable} -m tests.support.fake_sglang --model-path {{model}} --port {{port}} {{args}}\n"
        "  health_timeout_s: 30\n"
        "models:\n"
        "  - name: toy\n"
        "    path: toy-model\n"
    )
    out = tmp_path / "out"
    assert _main(["--engine", "launch", "--config", str(cfg), *SMALL, "--out", str(out)]) == 0
    assert "fake engine starting" in (out / "engine.log").read_text()
    result = read_result(out)
    assert result.environment["model"] == "toy"


def test_configured_tokenizer_without_transformers_is_a_setup_error(tmp_path: Path) -> None:
    try:
        import transformers  # type: ignore[import-not-found]  # noqa: F401

        pytest.skip("transformers is installed")
    except ImportError:
        pass
    cfg = tmp_path / "p.yml"
    cfg.write_text("engine:\n  kind: sglang\n  tokenizer: Qwen/Qwen3-8B\n")
    with fake_sglang() as (url, _), pytest.raises(ConfigError, match="needs the 'transformers' package"):
        _main(["--engine-url", url, "--config", str(cfg), *SMALL, "--out", str(tmp_path / "o")])


@pytest.mark.slow
def test_builtin_fault_end_to_end_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from precisionbot.cli import main

    out = tmp_path / "out"
    argv = [
        "check",
        "--engine",
        "builtin",
        "--fault",
        "restore-layer0-only",
        "--samples",
        "6",
        "--model-preset",
        "tiny",
    ]
    argv += ["--max-new-tokens", "16", "--prompt-tokens", "64..128", "--out", str(out)]
    assert main(argv) == 1
    result = read_result(out)
    assert [c.verdict.value for c in result.checks] == ["pass", "fail", "fail"]
    assert result.engine.kind == "builtin"
    assert result.diagnosis and result.diagnosis[0].code == "prefill_restore"
    assert "verdict: FAIL (exit 1)" in capsys.readouterr().out


def test_openai_kind_against_the_builtin_server_runs_match(tmp_path: Path) -> None:
    # `precisionbot serve` speaks enough of vLLM's API (/v1/completions, /tokenize) for --engine-kind openai.
    from tests.support.engine_server import running_engine

    with running_engine() as url:
        argv = ["--engine-url", url, "--engine-kind", "openai", "--checks", "match", *SMALL, "--out", str(tmp_path)]
        assert _main(argv) == 0
    result = read_result(tmp_path)
    (match,) = result.checks
    assert result.engine.kind == "openai" and match.verdict.value == "pass" and match.stats["positions"] > 0


def test_the_table_labels_golden_kl_and_helper_k3(tmp_path: Path) -> None:
    """The console shows the numbers the comment shows: golden's KL (not its per-token k3), each row labelled."""
    from precisionbot.results import CheckResult, EngineInfo, RunResult, Verdict

    helper = CheckResult(name="match", verdict=Verdict.PASS, stats={"mean_k3": 1e-5, "p99": 2e-5, "max": 3e-5})
    golden = CheckResult(
        name="golden",
        verdict=Verdict.PASS,
        stats={"mean_k3": 0.231, "p99": 0.786, "max": 0.889, "kl_mean": 0.022, "kl_p99": 0.1, "kl_max": 0.14},
    )
    result = RunResult.from_checks([helper, golden], signature="", engine=EngineInfo(url="", kind="sglang"))
    lines = check.render_table(result, tmp_path).splitlines()
    assert lines[0].split() == ["check", "verdict", "measure", "mean", "p99", "max", "k3>1e-2", "cache"]
    assert lines[1].split()[:6] == ["match", "PASS", "k3", "1.00e-05", "2.00e-05", "3.00e-05"]
    assert lines[2].split()[:6] == ["golden", "PASS", "KL", "0.022", "0.1", "0.14"]
    assert "0.786" not in lines[2]


def test_a_stalled_launched_engine_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An engine that stops answering: the first check is INCONCLUSIVE after request_timeout_s, the rest are
    not run (each would wait as long again), result.json is written and stderr quotes the engine log."""
    import sys

    monkeypatch.chdir(ROOT)
    cfg = tmp_path / "precision.yml"
    cfg.write_text(
        "engine:\n"
        "  kind: sglang\n"
        f"  launch: {sys.executable} -m tests.support.fake_sglang --hang --model-path {{model}} --port {{port}}\n"
        "  health_timeout_s: 30\n"
        "  request_timeout_s: 0.5\n"
        "models:\n"
        "  - name: toy\n"
        "    path: toy-model\n"
    )
    out = tmp_path / "out"
    assert _main(["--engine", "launch", "--config", str(cfg), *SMALL, "--out", str(out)]) == 2
    result = read_result(out)
    first, *rest = result.checks
    assert "the engine stalled" in first.reasons[0] and "within 0.5 s" in first.reasons[0]
    assert [c.reasons[0] for c in rest] == ["not run: the engine stalled during match"] * 2
    err = capsys.readouterr().err
    assert "the engine stalled during match" in err
    assert "scheduler: waiting for rank 1 in all_reduce" in err  # the engine log's last lines


LLAMA_SERVER_ERRORS = {
    # What llama-server (llama.cpp b6xxx) prints for each, verbatim apart from the paths.
    "not GGUF": (
        [
            "gguf_init_from_file_impl: invalid magic characters: 'PK\x03\x04', expected 'GGUF'",
            "llama_model_load: error loading model: llama_model_loader: failed to load model from /m/model.bin",
            "main: exiting due to model loading error",
        ],
        "gguf_init_from_file_impl: invalid magic characters",
    ),
    "missing model": (
        [
            "gguf_init_from_file: failed to open GGUF file '/m/nope.gguf' (No such file or directory)",
            "llama_model_load_from_file_impl: failed to load model",
            "main: exiting due to model loading error",
        ],
        "gguf_init_from_file: failed to open GGUF file '/m/nope.gguf' (No such file or directory)",
    ),
    "slot dir": (
        [
            'error while handling argument "--slot-save-path": not a directory: /tmp/slots',
            "",
            "usage:",
            "--slot-save-path PATH                   path to save slot kv cache (default: disabled)",
            "",
            "to show complete usage, run with -h",
        ],
        'error while handling argument "--slot-save-path": not a directory: /tmp/slots',
    ),
    "python engine": (
        [
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "OSError: nope/model is not a local folder and is not a valid model identifier",
        ],
        "OSError: nope/model is not a local folder and is not a valid model identifier",
    ),
}


@pytest.mark.parametrize("case", sorted(LLAMA_SERVER_ERRORS))
def test_a_launch_the_engine_refused_quotes_its_log(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's own error (not GGUF, no such model, a --slot-save-path directory that does not exist) is
    quoted from its log, and the fix points at what it names instead of blaming the template."""
    import sys

    from precisionbot.cli import main

    lines, quoted = LLAMA_SERVER_ERRORS[case]
    script = tmp_path / "engine.py"
    script.write_text(
        f"import sys\nprint('build: 1 (abc)')\nprint('\\n'.join({lines!r}), file=sys.stderr)\nsys.exit(1)\n"
    )
    cfg = tmp_path / "precision.yml"
    cfg.write_text(
        f"engine:\n  kind: llamacpp\n  launch: {sys.executable} {script} -m {{model}} --port {{port}}\n"
        "models:\n  - name: toy\n    path: toy-model\n"
    )
    argv = ["check", "--engine", "launch", "--config", str(cfg), *SMALL, "--out", str(tmp_path / "o")]
    assert main(argv) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert f"its log says: {quoted}" in line
    assert line.endswith(
        "fix what the engine's log names (the model path, a directory in the engine's arguments: create it)"
    )
    assert "engine.launch" not in line.split("its log says:")[1]


def test_a_suite_below_a_detection_floor_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 64 new tokens with decode_cache_hit: below the size at which the builtin engine's
    # cache-decode-kv-rounded was caught (docs/builtin-engine.md); the warning comes before any engine call.
    sizes = ["--checks", "decode_cache_hit", "--samples", "2", "--max-new-tokens", "64", "--prompt-tokens", "12..20"]
    builtin = ["--engine", "builtin", "--model-preset", "tiny", *sizes]
    assert _main([*builtin, "--out", str(tmp_path / "loud")]) == 0
    err = capsys.readouterr().err
    assert err.count("precisionbot: warning: suite 'consistency': decode_cache_hit at 64 new tokens") == 1
    assert "cache-decode-kv-rounded (256 new tokens" in err
    assert _main([*builtin, "--quiet", "--out", str(tmp_path / "quiet")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_builtin_engines_floors_are_not_warned_about_for_another_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The floors are the builtin engine's faults': an SGLang (or vLLM) server at the same sizes gets no warning.
    with fake_sglang() as (url, _):
        argv = ["--engine-url", url, "--samples", "3", "--max-new-tokens", "64", "--prompt-tokens", "12..20"]
        assert _main([*argv, "--out", str(tmp_path)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_base_url_and_output_are_aliases(tmp_path: Path) -> None:
    """SGLang's and vLLM's benchmark tools say --base-url; `report` says --output: check takes both."""
    with fake_sglang() as (url, _):
        assert _main(["--base-url", url, *SMALL, "--checks", "match", "--output", str(tmp_path / "o")]) == 0
    assert read_result(tmp_path / "o").engine.url == url


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("sglang", "for a running SGLang server pass --engine-url URL --engine-kind sglang"),
        ("vllm", "for a running vLLM server pass --engine-url URL --engine-kind vllm"),
        ("bultin", "for a server that is already running pass --engine-url URL (and --engine-kind KIND)"),
    ],
)
def test_an_engine_kind_given_to_engine_is_one_line_with_the_fix(
    value: str, fix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from precisionbot.cli import main

    assert main(["check", "--engine", value, "--out", str(tmp_path)]) == 3
    captured = capsys.readouterr()
    expected = f"precisionbot: error: --engine takes builtin or launch (got {value!r}); {fix}"
    assert captured.err.splitlines() == [expected]
