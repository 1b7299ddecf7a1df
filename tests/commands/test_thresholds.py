"""The noise-relative helper verdicts end to end: ``baseline record --reruns`` on a noisy builtin engine (its
``nondeterministic`` fault plays main's run-to-run noise), a clean rerun within main's noise, a build several
times noisier (``batch-variant`` on top) but under ``kl_div`` reported as a regression, the PR comment's
words, and ``thresholds suggest`` refusing what 4 reruns cannot support. The builtin engine's noise is seeded
per request, so these runs are the same on every machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionbot.cli import main

CONFIG = """
engine: {concurrency: 1}
baselines: {helper_reruns: 5, vs_main_alpha: 0.001}
github: {pr_suite: consistency}  # main's reruns run with the PR suite's sizes: the suite `check` runs here
suites:
  baseline:
    checks: [golden]
    samples: 8
    max_new_tokens: 16
    prompt_tokens: [64, 128]
    golden: {top_k: 5, context_depths: [64], decode_steps: 4}
  consistency:
    samples: 8
    max_new_tokens: 16
    prompt_tokens: [64, 128]
    golden: {top_k: 5, context_depths: [64], decode_steps: 4}
"""

TINY = ("--model-preset", "tiny")
"""The dense preset: a hybrid engine's decode_cache_hit needs 64+ new tokens (checkpoints every 64) to judge."""


def _check(config: Path, store: Path, out: Path, *faults: str) -> dict[str, dict[str, object]]:
    flags = [x for f in faults for x in ("--fault", f)]
    argv = ["check", "--engine", "builtin", *TINY, *flags, "--config", str(config), "--baseline-store", str(store)]
    main([*argv, "--out", str(out), "--quiet"])
    return {c["name"]: c for c in json.loads((out / "result.json").read_text())["checks"]}


def test_helpers_are_judged_against_mains_reruns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, store = tmp_path / "precision.yml", tmp_path / "store"
    config.write_text(CONFIG)
    record = ["baseline", "record", "--engine", "builtin", *TINY, "--fault", "nondeterministic", "--store", str(store)]
    assert main([*record, "--config", str(config)]) == 0
    assert "helper reruns: match x5, prefill_cache_hit x5, decode_cache_hit x5" in capsys.readouterr().out
    (helpers_npz,) = store.rglob("helpers.npz")
    assert (helpers_npz.parent / "golden.npz").is_file()

    clean = _check(config, store, tmp_path / "clean", "nondeterministic")
    for name in ("match", "prefill_cache_hit", "decode_cache_hit"):
        assert clean[name]["verdict"] == "pass"
        assert clean[name]["vs_main"]["regression"] is False  # type: ignore[index]
        assert str(clean[name]["reasons"][-1]).startswith("within main's noise: ")  # type: ignore[index]

    noisier = _check(config, store, tmp_path / "pr", "nondeterministic", "batch-variant")
    # batch-variant on top makes every helper 4-7x noisier than main, all still far under kl_div 0.0025.
    flagged = [c for c in noisier.values() if c.get("vs_main", {}).get("regression")]  # type: ignore[union-attr]
    assert flagged, {name: c.get("vs_main") for name, c in noisier.items()}
    for hit in flagged:
        assert hit["verdict"] == "fail" and hit["stats"]["mean_k3"] < 0.0025  # type: ignore[index]
        assert str(hit["reasons"][0]).startswith("regression: per-sample mean k3 is ")  # type: ignore[index]
        info = hit["vs_main"]
        assert info["ratio"] > 2 and info["p_value"] < 0.001 and info["reruns"] == 5  # type: ignore[index]
    capsys.readouterr()
    assert main(["report", str(tmp_path / "pr")]) == 0
    comment = capsys.readouterr().out
    assert "❌ fail · " in comment and "× main's mean k3 (p &lt; 0.001, floor 1.5×)" in comment
    if len(flagged) < 3:
        assert "✅ pass · within main's noise (" in comment

    # No helper baseline for this suite's parameters: the absolute thresholds alone, and the reason why.
    # 40 new tokens, not a size that rounds to main's own: `check` fits both up to the engine's 16-token page.
    cut = CONFIG.rindex("max_new_tokens: 16")  # the consistency suite's, not the baseline suite's
    config.write_text(CONFIG[:cut] + "max_new_tokens: 40" + CONFIG[cut + len("max_new_tokens: 16") :])
    other = _check(config, store, tmp_path / "other", "nondeterministic")
    assert "suite parameters" in other["match"]["vs_main"]["skipped"]  # type: ignore[index]

    assert main(["thresholds", "suggest", "--store", str(store)]) == 2
    assert "5 reruns cannot support" in capsys.readouterr().err

    # A corrupt helper baseline is skipped with a warning naming the object (issue 36: never an exit 3 for the
    # whole store), and never a silently skipped rule: the skip is said on stderr and in the comment.
    config.write_text(CONFIG)
    helpers_npz.write_bytes(helpers_npz.read_bytes()[:-64])
    argv = ["check", "--engine", "builtin", *TINY, "--fault", "nondeterministic", "--config", str(config)]
    assert main([*argv, "--baseline-store", str(store), "--out", str(tmp_path / "corrupt"), "--quiet"]) != 3
    err = capsys.readouterr().err
    assert "helpers.npz" in err and "sha256" in err and "baseline quarantine" in err
    assert "note: not compared with main's noise: main's helper reruns of these sizes are corrupt" in err
