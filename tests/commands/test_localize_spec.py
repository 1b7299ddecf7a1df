"""``localize --path spec-decode``: the speculative arm's verify against the plain arm's decode on the builtin
engine names the module of each spec fault that changes the target's forward, nothing on the clean pair, and
the job localizes a ``spec_decode`` failure whose target logprobs moved, on the check's own failing sample;
one that failed on acceptance alone, or arms at URLs, are not localized."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from precisionbot.cli import main
from precisionbot.commands.localize_failures import localize_failures
from precisionbot.localize.failing import failing_sample, localizable
from precisionbot.results import CheckResult, EngineInfo, RunResult, SampleTokens, Verdict

TINY = ["--model-preset", "tiny", "--max-new-tokens", "16"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "module"),
    [
        # Rejected drafts' KV put back after the next verify: the first attention layer reads it.
        ("spec-kv-rollback", "model.layers.0.self_attn"),
        # The verify extend's RoPE positions one too far: found before any module.
        ("spec-verify-offbyone", "positions"),
    ],
)
def test_a_spec_fault_is_named_by_its_module(
    fault: str, module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["localize", "--engine", "builtin", "--path", "spec-decode", "--fault", fault, "--out", str(tmp_path)]
    assert main([*argv, *TINY]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"first diverging op: {module} (")
    assert "verified by the spec arm" in line
    found = json.loads((tmp_path / "localization.json").read_text())
    assert found["path"] == "spec-decode" and found["first_diverging_op"]["module"] == module


@pytest.mark.slow
def test_the_clean_pair_names_no_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The hybrid preset: after each rejected draft its recurrent state is restored and the accepted tokens run
    # again, so the spec arm's dump holds rejected rows and reruns at the same positions as emitted ones.
    argv = ["localize", "--engine", "builtin", "--path", "spec-decode", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("first diverging op: none: all 103 aligned positions are bit-identical")
    assert "what moved is outside it" in out


def test_arms_at_urls_are_a_refusal_that_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["localize", "--engine-url", "http://127.0.0.1:9", "--path", "spec-decode", "--out", str(tmp_path)]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "--path spec-decode runs on the builtin engine only" in err and "verify batches" in err


def _spec_failure(caught_by: list[str]) -> CheckResult:
    return CheckResult("spec_decode", Verdict.FAIL, ("x",), stats={"caught_by": caught_by})


def test_only_a_failure_of_the_target_logprobs_is_localized() -> None:
    samples = {0: SampleTokens((1, 2, 3, 4), 2)}
    assert localizable(_spec_failure(["target logprobs", "tokens"]))
    chosen = failing_sample(_spec_failure(["target logprobs"]), samples)
    assert chosen is not None and chosen.path == "spec-decode"
    for parts in (["acceptance"], ["sampled path"], ["tokens"], []):
        assert not localizable(_spec_failure(parts))
        assert failing_sample(_spec_failure(parts), samples) is None
    result = RunResult.from_checks([_spec_failure(["acceptance"])], signature="", engine=EngineInfo("", "builtin"))
    none: Any = None  # nothing is launched or read for a check that is not localized
    found = localize_failures(result, {"spec_decode": samples}, engine=none, config=none, store=none, out=Path())
    assert found is result


@pytest.mark.slow
def test_the_job_localizes_a_failing_spec_decode_check_on_its_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "precision.yml"
    cfg.write_text("localize:\n  enabled: true\n")
    out = tmp_path / "run"
    argv = [
        "check", "--engine", "builtin", "--model-preset", "tiny", "--fault", "spec-kv-rollback",
        "--checks", "spec_decode", "--samples", "2", "--max-new-tokens", "32", "--prompt-tokens", "96",
        "--config", str(cfg), "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 1
    result = json.loads((out / "result.json").read_text())
    (check,) = result["checks"]
    assert "target logprobs" in check["stats"]["caught_by"]
    (found,) = result["localization"]
    assert found["check"] == "spec_decode" and found["path"] == "spec-decode"
    assert found["first_diverging_op"]["module"] == "model.layers.0.self_attn"
    # The failing sample itself, cut past its onset; the deterministic twins decoded the check's tokens.
    assert isinstance(found["sample"], int) and found["same_tokens_as_the_check"] is True
    assert found["tokens"] <= found["focus_position"] + 9
    capsys.readouterr()
    main(["report", str(out), "--format", "markdown"])
    comment = capsys.readouterr().out
    assert r"first diverging op: model.layers.0.self\_attn (attention)" in comment
    assert f"of spec\\_decode's sample {found['sample']}:" in comment


@pytest.mark.slow
def test_calibrate_localizes_the_catalogues_spec_faults(tmp_path: Path) -> None:
    """``calibrate --localize`` runs every op-level spec fault of the catalogue on the spec-decode path (the
    tiny preset has no recurrent layer: ``spec-state-rollback`` is the hybrid preset's)."""
    import argparse

    from precisionbot.commands.calibrate import _localize_all

    flags = {"preset": "tiny", "vocab": None, "enable_deterministic_inference": False}
    faults = "spec-kv-rollback,spec-verify-offbyone,spec-state-rollback"
    rows = _localize_all(argparse.Namespace(faults=faults), flags, tmp_path)
    assert [(r["fault"], r["path"], r["named"] == r["expected"]) for r in rows] == [
        ("spec-verify-offbyone", "spec-decode", True),
        ("spec-kv-rollback", "spec-decode", True),
    ]
