from __future__ import annotations

import pytest

from precisionbot.builtin import FAULT_NAMES, EngineOptions, Fault, parse_fault
from precisionbot.errors import ConfigError


def test_fault_names_match_the_contract_table() -> None:
    assert set(FAULT_NAMES) == {
        "restore-layer0-only", "restore-stale-page", "cache-decode-kv-rounded", "attn-p-fp8",
        "attn-p-fp8-scaled", "attn-p-bf16", "mantissa", "chunk-boundary", "batch-variant", "nondeterministic",
        "mamba-stale-checkpoint", "conv-state-shift", "swa-early-evict", "swa-decode-window", "state-mantissa",
        "state-bf16-decode", "mlp-bf16", "cross-node-bf16", "cross-node-stale", "spec-verify-offbyone",
        "spec-kv-rollback", "spec-state-rollback", "spec-bonus-logprob", "spec-accept-loose", "spec-draft-degraded",
        "spec-greedy-at-temperature", "router-fp8",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("attn-p-fp8", Fault("attn-p-fp8")),
        (" mantissa=5 ", Fault("mantissa", 5)),
        ("mantissa=16", Fault("mantissa", 16)),
        ("mlp-bf16=2", Fault("mlp-bf16", 2)),
    ],
)
def test_parse_fault(spec: str, expected: Fault) -> None:
    assert parse_fault(spec) == expected
    assert parse_fault(expected.spec()) == expected


def test_unknown_fault_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as err:
        parse_fault("attn-p-fp4")
    assert "attn-p-fp4" in str(err.value)
    for name in FAULT_NAMES:
        assert name in str(err.value)


@pytest.mark.parametrize("spec", ["mantissa", "mantissa=x", "mantissa=0", "mantissa=24", "attn-p-fp8=1"])
def test_bad_fault_values(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"mantissa|takes no value"):
        parse_fault(spec)


def test_mlp_bf16_needs_a_layer_the_model_has() -> None:
    with pytest.raises(ConfigError, match=r"fault mlp-bf16=3: the model has layers 0..2; pick one of them"):
        EngineOptions(faults=(parse_fault("mlp-bf16=3"),))
    with pytest.raises(ConfigError, match=r"mlp-bf16.*needs an integer value 0..63"):
        parse_fault("mlp-bf16")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"page_size": 0},
        {"chunked_prefill_size": 0},
        {"dtype": "float16"},
        {"max_context_tokens": 4096},
        {"n_heads": 3},
        {"faults": (Fault("attn-p-fp8"), Fault("attn-p-fp8"))},
    ],
)
def test_bad_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        EngineOptions(**kwargs)  # type: ignore[arg-type]


def test_defaults_are_the_clean_engine() -> None:
    options = EngineOptions()
    assert options.faults == () and options.dtype == "bfloat16" and options.max_context_tokens >= 8192
    assert not options.has_fault("attn-p-fp8")
    faulty = EngineOptions(faults=(parse_fault("mantissa=6"),))
    assert faulty.fault_value("mantissa") == 6 and faulty.fault_specs() == ["mantissa=6"]


def test_options_and_the_serve_command_import_without_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import precisionbot.builtin, precisionbot.commands.serve; "
        "from precisionbot.builtin import parse_fault, EngineOptions, FAULT_NAMES; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
