from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from precisionbot.checks.layers import compare_dumps, load_dump_dir, natural_key
from precisionbot.errors import DataError
from precisionbot.results import Verdict


def _dump(n: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"layer_{i}_input": rng.normal(size=(4, 16)) for i in range(n)}


def test_identical_dumps_pass() -> None:
    ref = _dump()
    result = compare_dumps(ref, {k: v.copy() for k, v in ref.items()})
    assert result.verdict is Verdict.PASS
    assert result.stats["layers_compared"] == 12 and result.stats["max"] == 0.0


def test_first_divergent_layer_is_named_with_the_last_matching_one() -> None:
    ref = _dump()
    cand = {k: v.copy() for k, v in ref.items()}
    for i in (9, 10, 11):  # layer 8 broke: the input of layer 9 onwards differs
        cand[f"layer_{i}_input"] = cand[f"layer_{i}_input"] + 0.2
    result = compare_dumps(ref, cand)
    assert result.verdict is Verdict.FAIL
    assert result.stats["first_divergent"] == "layer_9_input"  # natural order, not layer_10 first
    assert "layer_8_input still matches" in result.reasons[0]
    assert "3 of 12" in result.reasons[0]


def test_small_differences_within_threshold_pass() -> None:
    ref = _dump()
    cand = {k: v * (1 + 1e-5) for k, v in ref.items()}
    assert compare_dumps(ref, cand).verdict is Verdict.PASS


def test_zero_layers_compared_is_a_failure_not_a_pass() -> None:
    result = compare_dumps({"model.layers.0": np.ones(3)}, {"layer_0_input": np.ones(3)})
    assert result.verdict is Verdict.FAIL
    assert "0 layers compared" in result.reasons[0] and "name mismatch" in result.reasons[0]


def test_shape_mismatch_fails() -> None:
    result = compare_dumps({"a": np.ones((2, 3))}, {"a": np.ones((3, 2))})
    assert result.verdict is Verdict.FAIL and "shape" in result.reasons[0]


def test_natural_key() -> None:
    assert sorted(["layer_10", "layer_9", "layer_1"], key=natural_key) == ["layer_1", "layer_9", "layer_10"]


def test_load_dump_dir_npy_npz_pt(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    np.save(tmp_path / "layer_0_input.npy", np.arange(3.0))
    np.savez(tmp_path / "layer_8_input.npz", np.ones(2))
    torch.save(torch.ones(2, dtype=torch.bfloat16), tmp_path / "layer_16_input.pt")
    torch.save({"h": torch.zeros(2), "r": torch.ones(1)}, tmp_path / "layer_24.pt")
    loaded = load_dump_dir(tmp_path)
    assert set(loaded) == {"layer_0_input", "layer_8_input", "layer_16_input", "layer_24/h", "layer_24/r"}
    assert loaded["layer_16_input"].dtype == np.float64


def test_bad_dump_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_dump_dir(tmp_path / "missing")
    (tmp_path / "x.npy").write_bytes(b"not numpy")
    with pytest.raises(DataError, match=r"x\.npy"):
        load_dump_dir(tmp_path)


def test_layers_through_the_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from precisionbot.cli import main

    base, same, broken = tmp_path / "base", tmp_path / "same", tmp_path / "broken"
    for d in (base, same, broken):
        d.mkdir()
    for name, arr in _dump(4).items():
        np.save(base / f"{name}.npy", arr)
        np.save(same / f"{name}.npy", arr)
        np.save(broken / f"{name}.npy", arr + (0.5 if name == "layer_3_input" else 0.0))
    common = ["check", "--engine", "builtin", "--checks", "layers", "--layers-baseline", str(base), "--quiet"]
    assert main([*common, "--layers-dump", str(same), "--out", str(tmp_path / "ok")]) == 0
    assert main([*common, "--layers-dump", str(broken), "--out", str(tmp_path / "bad")]) == 1
    assert "layer_3_input" in capsys.readouterr().out + (tmp_path / "bad" / "result.json").read_text()
