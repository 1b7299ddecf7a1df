"""``precisionbot init``: the files an engine repository needs, valid as written, never overwritten unasked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from precisionbot.cli import main
from precisionbot.commands.setup_files import (
    CALLER_PATH,
    CHECKLIST_PATH,
    CONFIG_PATH,
    ENGINE_KINDS,
    GATE_CALLER_PATH,
    IAM_DIR,
    REAP_CALLER_PATH,
    RELEASE_TAG,
    caller_text,
    gate_caller_text,
    reap_caller_text,
)
from precisionbot.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CALLERS = ROOT / "examples" / "callers"
STORE = "s3://acme-precision/engine"


def _init(repo: Path, *flags: str) -> int:
    return main(["init", "--dir", str(repo), *flags])


@pytest.mark.parametrize("kind", sorted(ENGINE_KINDS))
def test_init_writes_a_config_that_loads_validates_and_passes_doctor(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _init(tmp_path, "--engine-kind", kind, "--store", STORE, "--repo", "acme/engine") == 0
    out = capsys.readouterr().out
    for name in (CONFIG_PATH, CALLER_PATH, GATE_CALLER_PATH, CHECKLIST_PATH, f"{IAM_DIR}/launch-runners.json"):
        assert f"wrote {tmp_path / name}" in out
    assert "next: follow" in out and "precisionbot doctor" in out
    assert not (tmp_path / REAP_CALLER_PATH).exists()  # the first week has no EC2 to reap
    config = load_config(tmp_path / CONFIG_PATH)
    assert config.engine.kind == kind and config.engine.launch is not None and "{model}" in config.engine.launch
    assert config.baselines.store == STORE and config.runner.kind == "pool"
    assert [m.name for m in config.models] == [ENGINE_KINDS[kind].model]
    assert main(["config", "validate", str(tmp_path / CONFIG_PATH)]) == 0
    assert main(["doctor", "--dir", str(tmp_path)]) == 0
    caller = (tmp_path / CALLER_PATH).read_text()
    assert len(caller.splitlines()) <= 30
    assert f"precision.yml@{RELEASE_TAG} " in caller and "runner: pool" in caller
    assert f"engine-kind: {kind}\n" in caller


@pytest.mark.parametrize("kind", sorted(ENGINE_KINDS))
def test_the_callers_are_the_examples_text(kind: str) -> None:
    """init's callers are examples/callers/ word for word (at the examples' placeholder pin and runner)."""
    assert caller_text(kind) == (CALLERS / f"{kind}.yml").read_text()
    assert gate_caller_text() == (CALLERS / "precision-pr.yml").read_text()
    assert reap_caller_text() == (CALLERS / "precision-reap.yml").read_text()


def test_ec2_writes_the_reaper_and_a_pin_sha(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert _init(tmp_path, "--engine-kind", "sglang", "--runner", "ec2", "--pin", sha, "--store", STORE) == 0
    for name in (CALLER_PATH, GATE_CALLER_PATH, REAP_CALLER_PATH):
        assert f"@{sha} # {RELEASE_TAG}\n" in (tmp_path / name).read_text()
    config = load_config(tmp_path / CONFIG_PATH)
    assert config.runner.kind == "ec2" and config.runner.ami is not None
    assert "runner: ec2" in (tmp_path / CALLER_PATH).read_text()


def test_init_never_overwrites_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".github").mkdir()
    mine = tmp_path / CONFIG_PATH
    mine.write_text("engine: {kind: builtin}\n")
    assert _init(tmp_path, "--engine-kind", "vllm") == 3
    err = capsys.readouterr().err
    assert f"{mine} exists" in err and "--force" in err
    assert mine.read_text() == "engine: {kind: builtin}\n"
    assert not (tmp_path / CALLER_PATH).exists()  # nothing written when one file is refused
    assert _init(tmp_path, "--engine-kind", "vllm", "--force") == 0
    assert f"wrote {mine} (overwritten)" in capsys.readouterr().out
    assert load_config(mine).engine.kind == "vllm"


def test_without_a_store_the_placeholder_is_named_by_init_and_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _init(tmp_path, "--engine-kind", "llamacpp") == 0
    assert "next: replace the 'replace-with-...' values in .github/precision.yml" in capsys.readouterr().out
    assert main(["doctor", "--dir", str(tmp_path)]) == 1
    assert "still holds the placeholder 'replace-with-your-bucket/precisionbot'" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--store", "acme/engine"], "write 's3://acme/engine' for S3"),
        (["--store", "./local"], "is not an S3 store"),
        (["--pin", "main"], "--pin 'main' is not a full commit SHA"),
        (["--repo", "engine"], "--repo 'engine' is not OWNER/REPO"),
        (["--model-path", ""], "key 'models[0].path' is required"),
    ],
)
def test_bad_flags_are_refused_before_anything_is_written(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _init(tmp_path, "--engine-kind", "sglang", *flags) == 3
    assert message in capsys.readouterr().err
    assert not (tmp_path / ".github").exists()


def _docs_policy(doc: str, after: str) -> dict[str, object]:
    text = (ROOT / "docs" / doc).read_text()
    block = re.search(r"```json\n(.*?)```", text[text.index(after) :], re.S)
    assert block is not None
    policy: dict[str, object] = json.loads(block.group(1))
    return policy


def test_the_iam_policies_are_the_docs_and_never_wider(tmp_path: Path) -> None:
    assert _init(tmp_path, "--engine-kind", "sglang", "--store", STORE, "--repo", "acme/engine") == 0
    iam = tmp_path / IAM_DIR
    policies = {p.name: json.loads(p.read_text()) for p in iam.glob("*.json")}
    assert set(policies) == {
        "gpu-read-baselines.json",
        "publish-baselines.json",
        "bucket-policy.json",
        "oidc-trust-policy.json",
        "launch-runners.json",
    }

    def actions(policy: dict[str, object], effect: str = "Allow") -> set[str]:
        found: set[str] = set()
        for s in policy["Statement"]:  # type: ignore[attr-defined]
            if s["Effect"] == effect:
                found |= {s["Action"]} if isinstance(s["Action"], str) else set(s["Action"])
        return found

    assert actions(policies["gpu-read-baselines.json"]) == {"s3:GetObject", "s3:ListBucket"}
    assert actions(policies["publish-baselines.json"]) == {"s3:PutObject", "s3:ListBucket"}  # no delete
    assert actions(policies["bucket-policy.json"], "Deny") == {"s3:PutObject"}
    for name in ("gpu-read-baselines.json", "publish-baselines.json"):
        resources = {str(s["Resource"]) for s in policies[name]["Statement"]}
        assert resources <= {"arn:aws:s3:::acme-precision", "arn:aws:s3:::acme-precision/engine/*"}
    docs_launch = _docs_policy("runners.md", "The minimal permissions policy of the launch role")
    ours = policies["launch-runners.json"]
    assert [s["Sid"] for s in ours["Statement"]] == [s["Sid"] for s in docs_launch["Statement"]]  # type: ignore[attr-defined]
    assert actions(ours) == actions(docs_launch)
    trust = json.dumps(policies["oidc-trust-policy.json"])
    ref = f"precisionbot/precisionbot/.github/workflows/precision.yml@refs/tags/{RELEASE_TAG}"
    assert f"repo:acme/engine:environment:precisionbot:job_workflow_ref:{ref}" in trust
    assert "*" not in actions(ours) | actions(policies["publish-baselines.json"])
