"""The environment fingerprint: its parts, its difference, and the golden failure that names it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from precisionbot import __version__, corpus
from precisionbot.baselines import host, list_runs, open_store
from precisionbot.baselines.fingerprint import (
    FINGERPRINT_KEYS,
    build_fingerprint,
    fingerprint_diff,
    gpu_minutes,
    packages_digest,
)
from precisionbot.baselines.golden_recording import GoldenTarget, record_golden
from precisionbot.baselines.host import gather_fingerprint
from precisionbot.checks.golden import compare_golden
from precisionbot.config import GoldenOptions, GoldenThresholds
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.results import Verdict
from tests.support.engine_server import engine_options

OPTIONS = GoldenOptions(top_k=8, context_depths=(32,), decode_steps=8)
DOCS = tuple(corpus.builtin_documents(max_code_files=2))


def test_packages_digest_ignores_order_and_case() -> None:
    a = packages_digest(["numpy==2.0.0", "Torch==2.5.1"])
    assert a == packages_digest(["torch==2.5.1", "numpy==2.0.0", ""])
    assert a != packages_digest(["torch==2.5.2", "numpy==2.0.0"])
    assert len(a) == 16


def test_package_list_reads_the_metadata_headers_as_the_full_parse_does(tmp_path: Path) -> None:
    from importlib import metadata

    # This environment's list, read from the header lines, equals importlib.metadata's full parse.
    full = tuple(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"])
    assert host.installed_packages() == full
    # A description (after the blank line that ends the headers) cannot pose as a header.
    info = tmp_path / "demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n\nName: fake\nVersion: 9\n")
    assert host._name_version(metadata.PathDistribution(info)) == ("demo", "1.0")
    # Headers in another order, folded lines before them: still found; no Version header: the full parse.
    (info / "METADATA").write_text("Metadata-Version: 2.1\nSummary: a\n  b\nVersion: 2.0\nName: demo\n")
    assert host._name_version(metadata.PathDistribution(info)) == ("demo", "2.0")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\n\nVersion: 3\n")
    assert host._name_version(metadata.PathDistribution(info)) == ("demo", None)


def test_diff_names_each_changed_part_and_ignores_unknown_ones() -> None:
    old = build_fingerprint(
        gpu_model="NVIDIA H100", gpu_count=8, driver="550.54", torch="2.5.1", engine_args=["--tp", "8"]
    )
    new = build_fingerprint(
        gpu_model="NVIDIA H100", gpu_count=8, driver="560.28", torch=None, engine_args=["--tp", "4"]
    )
    assert set(old) == set(FINGERPRINT_KEYS)
    assert fingerprint_diff(old, new) == [
        "driver: baseline 550.54, now 560.28",
        "torch: baseline 2.5.1, now (unknown)",
        "engine_args: baseline --tp 8, now --tp 4",
    ]
    assert fingerprint_diff({}, new) == []  # a baseline recorded before fingerprints: nothing known to differ
    with pytest.raises(ValueError, match="unknown fingerprint parts"):
        build_fingerprint(colour="red")


def test_gpu_minutes_counts_every_gpu_and_at_least_one() -> None:
    assert gpu_minutes(120.0, 8) == 16.0
    assert gpu_minutes(60.0, None) == 1.0


def test_gathered_fingerprint_of_the_builtin_engine() -> None:
    engine = BuiltinEngine(options=engine_options())
    try:
        fp = gather_fingerprint(engine.server_info().raw, "--tp 1 --port 30000")
    finally:
        engine.close()
    assert fp["precisionbot"] == __version__
    assert fp["engine_version"] == f"precisionbot-builtin {__version__}"
    assert fp["engine_args"] == ["--tp", "1"]  # the port is not part of the environment
    assert fp["torch"] and len(fp["packages_sha256"]) == 16


@pytest.fixture(scope="module")
def other_runner_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A baseline from "another runner": its numbers differ (the mantissa fault stands in for another
    driver's kernels) and so does its recorded fingerprint."""
    root = tmp_path_factory.mktemp("fp") / "store"
    engine = BuiltinEngine(options=engine_options(faults=("mantissa=2",)))
    try:
        target = GoldenTarget(engine, "builtin", DOCS, OPTIONS, docs_per_kind=1)
        here = target.fingerprint()
        record_golden(target, open_store(str(root)), fingerprint={**here, "driver": "535.104", "gpu_model": "A100"})
    finally:
        engine.close()
    yield root


def test_golden_failure_against_another_environment_shows_the_difference(other_runner_store: Path) -> None:
    store = open_store(str(other_runner_store))
    (meta,) = list_runs(store)
    assert meta.fingerprint["driver"] == "535.104"  # stored in the baseline's meta.json
    engine = BuiltinEngine(options=engine_options())
    try:
        result = compare_golden(
            GoldenTarget(engine, "builtin", DOCS, OPTIONS, docs_per_kind=1), store, GoldenThresholds()
        ).result
    finally:
        engine.close()
    assert result.verdict is Verdict.FAIL, result.reasons
    note = result.reasons[-1]
    assert "recorded in another environment" in note and "gpu_model: baseline A100" in note
    assert "driver: baseline 535.104" in note and "baselines.mode: merge-base" in note
    assert result.extra["baseline"]["fingerprint"]["driver"] == "535.104"


def test_golden_failure_in_the_same_environment_says_nothing_of_it(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    engine = BuiltinEngine(options=engine_options(faults=("mantissa=2",)))
    try:
        record_golden(GoldenTarget(engine, "builtin", DOCS, OPTIONS, docs_per_kind=1), store)
    finally:
        engine.close()
    engine = BuiltinEngine(options=engine_options())
    try:
        result = compare_golden(
            GoldenTarget(engine, "builtin", DOCS, OPTIONS, docs_per_kind=1), store, GoldenThresholds()
        ).result
    finally:
        engine.close()
    assert result.verdict is Verdict.FAIL
    assert not any("another environment" in r for r in result.reasons)
    assert result.extra["fingerprint_diff"] == []


def test_gpu_inventory_reads_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi's CSV as a two-GPU host prints it (no header, ", " separated), from a stand-in on PATH. The
    # answer is cached per process: forget this machine's before, and the stand-in's after.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf 'NVIDIA H200, 550.54.15\\nNVIDIA H200, 550.54.15\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    try:
        host.gpu_inventory.cache_clear()
        assert host.gpu_inventory() == ("NVIDIA H200", 2, "550.54.15")
        assert host._nvidia_smi() == ("2x NVIDIA H200", "550.54.15")
        smi.write_text("#!/bin/sh\nexit 9\n")  # a driver that cannot answer: no GPU facts, no error
        host.gpu_inventory.cache_clear()
        assert host.gpu_inventory() == (None, None, None)
    finally:
        host.gpu_inventory.cache_clear()
