"""The job names the op of every failing check, on the failing check's own sample, through its own path: a
stored baseline (``baseline record`` with ``localize:`` on stores the baseline build's module tensors) and the
merge-base A/B (the merge base recorded the same way on the same runner).

The engine is ``precisionbot serve`` launched from ``engine.launch`` as a user's engine is, with the dumper
settings and deterministic numerics, a 16-key sliding window and 64-token prefill chunks (so the window's
hand-off and the chunk boundary fall inside small samples). A commit's ``fault.txt`` holds its ``--fault``
flags. Faults that fail different checks share one engine (a golden fault, a decode fault, a cache fault):
each check's localization must name its own fault's module, which also shows that one check's fault does
not leak into another's answer.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from precisionbot.baselines import list_runs, open_store
from precisionbot.cli import main
from tests.support.engine_repo import commit, git

pytestmark = pytest.mark.slow

DUMPER_ENV = "DUMPER_ENABLE=0 DUMPER_SERVER_PORT=reuse DUMPER_NON_INTRUSIVE_MODE=all"
SERVE = (
    f"{shlex.quote(sys.executable)} -m precisionbot serve --port {{port}} --enable-deterministic-inference "
    "--disable-cuda-graph --disable-prefill-cuda-graph --sliding-window-size 16 --chunked-prefill-size 64"
)
LAUNCH = f"sh -c 'exec env {DUMPER_ENV} {SERVE} $(cat fault.txt)'"
SUITE = {
    "checks": ["match", "prefill_cache_hit", "decode_cache_hit", "golden"],
    "samples": 2,
    "prompt_tokens": [160, 200],
    "max_new_tokens": 48,
    "golden": {"top_k": 8, "context_depths": [200], "decode_steps": 8},
}

# fault flags -> {check: the module its localization must name}
CASES = {
    "--fault attn-p-fp8 --fault state-bf16-decode --fault restore-layer0-only": {
        "golden": "model.layers.0.self_attn",
        "match": "model.layers.1.linear_attn",
        "prefill_cache_hit": "model.layers.1.linear_attn",
    },
    "--fault mlp-bf16=1 --fault swa-decode-window --fault cache-decode-kv-rounded": {
        "golden": "model.layers.1.mlp",
        "match": "model.layers.2.self_attn",
        # Turn 2 resumes from turn 1's decode-written KV, rounded to fp8 when it was cached.
        "decode_cache_hit": "model.layers.0.self_attn",
    },
    # RoPE positions off by one in every prefill chunk after the first: only past position 64.
    "--fault chunk-boundary": {"golden": "positions"},
}
IDS = ["golden+decode+cache", "mlp+window+decode-cache", "chunk-boundary"]


def _config(tmp_path: Path, repo: Path, mode: str) -> Path:
    path = tmp_path / f"{mode}.json"
    data = {
        "engine": {"kind": "builtin", "launch": LAUNCH, "install": "true", "checkout": str(repo)},
        "models": [{"name": "hybrid", "path": "builtin"}],
        "baselines": {"store": str(tmp_path / "store"), "mode": mode, "helper_reruns": 0},
        "localize": {"enabled": True},
        "suites": {"job": SUITE},
    }
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """An engine repository whose main is clean, and a stored baseline of main with its module tensors."""
    root = tmp_path_factory.mktemp("job")
    repo = root / "engine"
    repo.mkdir()
    git(repo, "init", "-q")
    base = commit(repo, "main", fault="")
    cfg = _config(root, repo, "stored")
    argv = ["baseline", "record", "--engine", "launch", "--config", str(cfg), "--suite", "job", "--quiet"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(repo)
        assert main([*argv, "--reruns", "0"]) == 0
    return root, repo, base


def _check(cfg: Path, out: Path, *extra: str) -> dict[str, dict[str, object]]:
    argv = ["check", "--engine", "launch", "--config", str(cfg), "--suite", "job", "--profile", "deterministic"]
    assert main([*argv, "--quiet", "--out", str(out), *extra]) == 1
    result = json.loads((out / "result.json").read_text())
    return {r["check"]: r for r in result["localization"]}


def _comment(out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    main(["report", str(out), "--format", "markdown"])
    return capsys.readouterr().out


def _assert_named(found: dict[str, dict[str, object]], expected: dict[str, str], comment: str) -> None:
    for check, module in expected.items():
        record = found[check]
        op = record.get("first_diverging_op")
        assert isinstance(op, dict) and op["module"] == module, (check, record.get("error") or op)
        assert isinstance(record["sample"], int)
        assert f"first diverging op: {module.replace('_', chr(92) + '_')} (" in comment
        assert f"of {check.replace('_', chr(92) + '_')}'s sample {record['sample']}" in comment


def test_stored_baseline_keeps_module_tensors_within_its_bound(recorded: tuple[Path, Path, str]) -> None:
    root, _, _ = recorded
    store = open_store(str(root / "store"))
    (run,) = list_runs(store)
    manifest = run.extra["modules"]
    assert [s["sample"] for s in manifest["samples"]] == [0, 1]  # localize.stored_samples: 2
    assert all(s["positions"] == 16 + 4 for s in manifest["samples"])  # 200 tokens: the head and 128..131
    assert 0 < run.files["modules.npz"]["bytes"] <= 32 * 1024**2


@pytest.mark.parametrize("faults", list(CASES), ids=IDS)
def test_the_job_names_each_failing_checks_op_from_a_stored_baseline(
    faults: str, recorded: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    root, repo, _ = recorded
    work = tmp_path / "pr"
    work.mkdir()
    (work / "fault.txt").write_text(faults)
    monkeypatch.chdir(work)
    found = _check(_config(root, repo, "stored"), tmp_path / "out")
    assert found["golden"]["baseline_run"]
    _assert_named(found, CASES[faults], _comment(tmp_path / "out", capsys))


@pytest.mark.parametrize("faults", list(CASES), ids=IDS)
def test_the_job_names_each_failing_checks_op_in_the_merge_base_ab(
    faults: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "engine"
    repo.mkdir()
    git(repo, "init", "-q")
    base = commit(repo, "main", fault="")
    head = commit(repo, "PR: the kernel change", fault=faults)
    monkeypatch.chdir(repo)
    found = _check(_config(tmp_path, repo, "merge-base"), tmp_path / "out", "--base-ref", base, "--engine-commit", head)
    assert "merge-base" in str(found["golden"]["baseline_run"])  # the merge base's own tensors, on this runner
    _assert_named(found, CASES[faults], _comment(tmp_path / "out", capsys))


TINY = {"checks": ["golden"], "golden": {"top_k": 8, "context_depths": [40], "decode_steps": 4}}


def _tiny_config(tmp_path: Path, localize: bool) -> Path:
    path = tmp_path / f"tiny-{localize}.json"
    data = {"baselines": {"store": str(tmp_path / "tiny-store")}, "localize": {"enabled": localize},
            "suites": {"tiny": TINY}}  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def _tiny_golden_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    argv = ["check", "--engine", "builtin", "--model-preset", "tiny", "--fault", "mantissa=4", "--suite", "tiny"]
    out = tmp_path / "out"
    assert main([*argv, "--config", str(_tiny_config(tmp_path, True)), "--out", str(out), "--quiet"]) == 1
    capsys.readouterr()
    (record,) = json.loads((out / "result.json").read_text())["localization"]
    comment = _comment(out, capsys)
    assert f"golden not localized: {str(record['error'])[:40]}" in comment.replace("\\", "")
    return dict(record)


def _tiny_record(tmp_path: Path, localize: bool) -> Path:
    argv = ["baseline", "record", "--engine", "builtin", "--model-preset", "tiny", "--suite", "tiny", "--reruns", "0"]
    assert main([*argv, "--config", str(_tiny_config(tmp_path, localize)), "--quiet"]) == 0
    (meta,) = (tmp_path / "tiny-store").rglob("meta.json")
    return meta


def test_a_baseline_without_module_tensors_is_a_refusal_that_says_how_to_get_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_record(tmp_path, localize=False)
    record = _tiny_golden_failure(tmp_path, capsys)
    assert "stored no module tensors: record it with `localize: enabled: true`" in str(record["error"])
    assert "first_diverging_op" not in record


def test_a_corrupt_tensor_set_is_refused_never_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = _tiny_record(tmp_path, localize=True)
    modules = meta.with_name("modules.npz")
    modules.write_bytes(modules.read_bytes()[:-100])
    record = _tiny_golden_failure(tmp_path, capsys)
    assert "modules.npz" in str(record["error"]) and "sha256" in str(record["error"])


def test_a_tensor_set_of_other_tokens_is_refused_naming_the_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = _tiny_record(tmp_path, localize=True)
    data = json.loads(meta.read_text())
    for sample in data["extra"]["modules"]["samples"]:
        sample["digest"] = "0" * 16
    meta.write_text(json.dumps(data))
    record = _tiny_golden_failure(tmp_path, capsys)
    assert re.search(r"captured on other tokens than its golden sample \d \(digest 0{16}, ", str(record["error"]))
