"""``check --spec-engine-url``: ``spec_decode`` on two running servers of one build, the plain arm at
``--engine-url`` and the speculative one at ``--spec-engine-url`` (what a real vLLM or SGLang user runs, since
engines fix speculation at launch). Here both are ``precisionbot serve``-style builtin servers over real HTTP
(SGLang's API; acceptance from ``/server_info`` ``internal_states``); tests/engines/test_vllm_real.py runs the
same against real vLLM."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from precisionbot.builtin.options import EngineOptions, parse_fault
from precisionbot.builtin.server import BuiltinServer
from precisionbot.cli import main
from tests.support.check_result import checks_by_name, read_result_json

SIZES = ["--samples", "4", "--max-new-tokens", "32", "--prompt-tokens", "64..160", "--exact-sizes", "--quiet"]
PLAIN = EngineOptions(preset="tiny")


@contextmanager
def _pair(*spec_faults: str) -> Iterator[tuple[str, str]]:
    spec = dataclasses.replace(PLAIN, speculative_algorithm="NGRAM", faults=tuple(parse_fault(f) for f in spec_faults))
    with BuiltinServer(PLAIN) as plain, BuiltinServer(spec) as spec_server:
        yield plain.url, spec_server.url


def _spec_decode(plain: str, spec: str, out: Path) -> tuple[int, dict[str, object]]:
    argv = ["check", "--engine-url", plain, "--spec-engine-url", spec, "--checks", "spec_decode", "--out", str(out)]
    code = main([*argv, *SIZES])
    return code, checks_by_name(read_result_json(out))["spec_decode"]


@pytest.mark.slow
def test_two_servers_are_the_arms_and_a_loose_acceptance_on_the_spec_server_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _pair() as (plain, spec):
        code, clean = _spec_decode(plain, spec, tmp_path / "clean")
    assert code == 0 and clean["verdict"] == "pass", clean
    stats = clean["stats"]
    assert isinstance(stats, dict) and stats["accept_length"] > 1.0 and stats["main_accept_length"] is None
    assert any("acceptance: not judged" in r for r in clean["reasons"])  # type: ignore[attr-defined]

    with _pair("spec-accept-loose") as (plain, spec):
        code, loose = _spec_decode(plain, spec, tmp_path / "loose")
    capsys.readouterr()
    assert code == 1 and loose["verdict"] == "fail", loose
    assert "tokens" in loose["stats"]["caught_by"]  # type: ignore[index]


def test_without_a_spec_server_a_url_engine_is_inconclusive_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with BuiltinServer(PLAIN) as plain:
        argv = ["check", "--engine-url", plain.url, "--checks", "spec_decode", "--out", str(tmp_path / "one")]
        assert main([*argv, *SIZES]) == 2
    capsys.readouterr()
    (reason,) = checks_by_name(read_result_json(tmp_path / "one"))["spec_decode"]["reasons"]  # type: ignore[misc]
    assert "only one arm is available" in reason and "--spec-engine-url" in reason


def test_a_spec_server_with_the_builtin_engine_is_a_setup_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check", "--engine", "builtin", "--spec-engine-url", "http://127.0.0.1:9", "--checks", "spec_decode"]
    assert main([*argv, *SIZES]) == 3
    err = capsys.readouterr().err
    assert "--spec-engine-url" in err and "the builtin engine starts both arms itself" in err


RECORD_CONFIG = """
suites:
  pr:
    checks: [match, golden, spec_decode]
    golden: {top_k: 5, context_depths: [64], decode_steps: 2}
  baseline:
    checks: [golden]
    golden: {top_k: 5, context_depths: [64], decode_steps: 2}
"""


@pytest.mark.slow
def test_two_servers_are_judged_against_mains_stored_acceptance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`baseline record --spec-engine-url` stores the spec server's acceptance with the plain server's golden
    baseline; a PR pair whose spec server drafts worse then fails on acceptance (reported only, before), and a
    check at other sizes says why main's figure was not used instead of judging against it."""
    cfg = tmp_path / "p.yml"
    cfg.write_text(RECORD_CONFIG)
    store = str(tmp_path / "store")
    sizes = [*SIZES[:1], "2", *SIZES[2:]]  # 2 samples
    with _pair() as (plain, spec):
        record = ["baseline", "record", "--engine-url", plain, "--spec-engine-url", spec, "--config", str(cfg)]
        assert main([*record, "--store", store, "--reruns", "3", *sizes[:-2]]) == 0  # no --exact-sizes there
    assert "spec_decode acceptance: x3, " in capsys.readouterr().out

    with _pair("spec-draft-degraded") as (plain, spec):
        argv = ["check", "--engine-url", plain, "--spec-engine-url", spec, "--checks", "spec_decode"]
        argv += ["--config", str(cfg), "--suite", "pr", "--store", store]
        assert main([*argv, "--out", str(tmp_path / "worse"), *sizes]) == 1
        other = [*sizes[:1], "3", *sizes[2:]]
        main([*argv, "--out", str(tmp_path / "other"), *other])
    err = capsys.readouterr().err
    worse = checks_by_name(read_result_json(tmp_path / "worse"))["spec_decode"]
    assert worse["stats"]["caught_by"] == ["acceptance"] and worse["stats"]["main_accept_stored"] is True  # type: ignore[index]
    assert "outputs unchanged: a draft regression, not a precision bug" in worse["reasons"][0]  # type: ignore[index]
    resized = checks_by_name(read_result_json(tmp_path / "other"))["spec_decode"]
    assert resized["stats"]["main_accept_length"] is None  # type: ignore[index]
    skipped = "main's acceptance was recorded at other sizes"
    assert any(f"acceptance: not judged (no stored figure of main's: {skipped}" in r for r in resized["reasons"])  # type: ignore[attr-defined]
    assert f"note: spec_decode's acceptance not compared with main's stored reruns: {skipped}" in err


def test_the_store_is_read_for_spec_decode_and_the_warning_says_so() -> None:
    from precisionbot.commands.options.store import golden_not_in_suite, store_readers
    from precisionbot.config import Config

    config = Config.default()
    suite = dataclasses.replace(config.suite("consistency"), checks=("spec_decode",))
    readers = store_readers(config, suite)
    assert readers == ("spec_acceptance",)
    warning = golden_not_in_suite(suite, readers)
    assert warning is not None and "read only for spec_decode's comparison with main's acceptance" in warning
    off = dataclasses.replace(config, baselines=dataclasses.replace(config.baselines, vs_main=False))
    assert store_readers(off, suite) == ()
