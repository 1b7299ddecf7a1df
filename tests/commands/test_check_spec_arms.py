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
