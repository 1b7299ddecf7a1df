"""The ``routing`` check: its verdict rule on hand-made agreements, and end to end on the builtin engine through
the CLI (a dense model is not applicable; the MoE preset passes clean at several sizes and the router fault is
named by layer against a recorded baseline)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from precisionbot.checks.routing import Arm, judge
from precisionbot.cli import main
from precisionbot.metrics.routing import LayerAgreement
from precisionbot.results import Verdict

MOE = ["--engine", "builtin", "--model-preset", "hybrid-moe", "--vocab", "byte"]
DEPTHS = ["--golden-depths", "256"]


def _layer(layer: int, exact: float, tokens: int = 100) -> LayerAgreement:
    return LayerAgreement(layer, tokens, exact, exact, round((1 - exact) * tokens))


def test_the_first_layer_below_its_floor_is_named() -> None:
    arm = Arm("PR vs baseline", (_layer(0, 1.0), _layer(2, 0.9), _layer(4, 0.8)), dict.fromkeys((0, 2, 4), 0.99), "x")
    result = judge([arm], [])
    assert result.verdict is Verdict.FAIL
    assert result.stats["first_moved_layer"] == 2
    assert result.reasons[0].startswith("routing moved first at layer 2 (PR vs baseline): 90.0 % of 100 tokens")
    assert "also below at layer 4 (80.0 %)" in result.reasons[0]


def test_at_the_floor_passes_and_skips_are_listed() -> None:
    arm = Arm("decode vs prefill", (_layer(0, 0.9),), {0: 0.9}, "absolute floor")
    result = judge([arm], ["no baseline store was given"])
    assert result.verdict is Verdict.PASS
    assert result.reasons[-1] == "not compared: no baseline store was given"


def test_nothing_compared_is_inconclusive() -> None:
    result = judge([], ["a", "b"])
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons == ("no routing comparison could be made: a; b",)


def _routing(out: Path) -> dict[str, Any]:
    checks = json.loads((out / "result.json").read_text())["checks"]
    found: dict[str, Any] = next(c for c in checks if c["name"] == "routing")
    return found


def test_a_dense_model_is_not_applicable(tmp_path: Path) -> None:
    out = tmp_path / "dense"
    code = main(["check", "--engine", "builtin", "--model-preset", "tiny", "--checks", "routing", "--samples", "2",
                 "--max-new-tokens", "4", "--out", str(out)])  # fmt: skip
    assert code == 2
    (reason,) = _routing(out)["reasons"]
    assert reason.startswith("routing not applicable: the engine was started without routed experts")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("routing-store"))
    assert main(["baseline", "record", *MOE, *DEPTHS, "--reruns", "0", "--store", uri]) == 0
    meta = next(Path(uri).rglob("meta.json"))
    assert json.loads(meta.read_text())["extra"]["routing"]["version"] == 1
    return uri


@pytest.mark.slow
# Other sizes (8 x 16, 2 x 96, 32 x 512) pass too: benchmarks/bench_routing.py measures them (RESULTS.md).
@pytest.mark.parametrize(("samples", "new_tokens"), [(4, 32), (2, 96)])
def test_the_clean_moe_engine_passes(store: str, tmp_path: Path, samples: int, new_tokens: int) -> None:
    out = tmp_path / "clean"
    sizes = ["--samples", str(samples), "--max-new-tokens", str(new_tokens)]
    code = main(["check", *MOE, *DEPTHS, "--checks", "routing", *sizes, "--baseline-store", store, "--out", str(out)])
    result = _routing(out)
    assert code == 0, result["reasons"]
    assert result["stats"]["path"]["layers"] and result["stats"]["baseline"]["layers"]


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 2])
def test_the_router_fault_is_named_by_layer(store: str, tmp_path: Path, layer: int) -> None:
    out = tmp_path / "fault"
    code = main(["check", *MOE, *DEPTHS, "--checks", "routing", "--samples", "4", "--max-new-tokens", "16",
                 "--fault", f"router-fp8={layer}", "--baseline-store", store, "--out", str(out)])  # fmt: skip
    result = _routing(out)
    assert code == 1
    assert result["stats"]["first_moved_layer"] == layer
    assert result["reasons"][0].startswith(f"routing moved first at layer {layer} (PR vs baseline): ")


def test_the_comment_side_re_derives_a_pass_and_shows_the_row() -> None:
    from precisionbot.config import DEFAULT_PROFILES
    from precisionbot.report.rows import routing_cell
    from precisionbot.report.verify import verify_check

    limits = DEFAULT_PROFILES["default"]
    arm = Arm("PR vs baseline", (_layer(0, 1.0), _layer(2, 0.995)), dict.fromkeys((0, 2), 0.99), "absolute floor")
    passed = judge([arm], [])
    assert verify_check(passed, limits) == passed
    assert routing_cell(passed) == "top-k agreement ≥ 99.5 %"
    lowered = {
        **passed.stats,
        "baseline": {**arm.to_dict(), "layers": [{**la.to_dict(), "floor": 0.5} for la in arm.layers]},
    }
    forged = dataclasses.replace(passed, stats=lowered)
    assert verify_check(forged, limits).verdict is Verdict.INCONCLUSIVE
    failed = judge([Arm("PR vs baseline", (_layer(2, 0.9),), {2: 0.99}, "absolute floor")], [])
    assert routing_cell(failed) == "top-k agreement ≥ 90.0 % · first moved: layer 2"


def test_a_vllm_server_says_why_its_routing_is_not_read() -> None:
    """What ``VLLMEngine.server_info`` reports (``prefix_cache_rules: vllm``): the reason names vLLM's flags."""
    from precisionbot.baselines.routing_record import routing_top_k
    from precisionbot.engines.base import ServerInfo

    top_k, why = routing_top_k(ServerInfo.from_raw({"prefix_cache_rules": "vllm", "model": "m"}))
    assert top_k is None
    assert "--enable-return-routed-experts" in why and "VLLM_USE_V2_MODEL_RUNNER=1" in why
    assert routing_top_k(ServerInfo.from_raw({"enable_return_routed_experts": True, "num_experts_per_tok": 2})) == (
        2,
        "",
    )
