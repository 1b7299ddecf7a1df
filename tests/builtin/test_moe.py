"""The ``hybrid-moe`` preset: its routed experts over HTTP in SGLang's shape, the dense presets untouched, and
the ``router-fp8`` fault."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from precisionbot.builtin import EngineOptions, parse_fault
from precisionbot.builtin.moe import NO_EXPERT, TOP_K, route
from precisionbot.builtin.weights import build_weights
from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.errors import ConfigError

PROMPT = "The quick brown fox jumps over the lazy dog, and then it runs back home again. " * 2


def _moe(*faults: str) -> BuiltinEngine:
    # The byte vocabulary: the routing path is the point, and its weights build in a fraction of a second.
    options = EngineOptions(preset="hybrid-moe", vocab="byte", faults=tuple(map(parse_fault, faults)))
    return BuiltinEngine(options=options)


@pytest.fixture(scope="module")
def clean() -> Iterator[BuiltinEngine]:
    engine = _moe()
    yield engine
    engine.close()


def test_dense_presets_keep_their_weights() -> None:
    """The MoE weights come from their own generator: the hybrid preset's layers are the same tensors in
    hybrid-moe, so every figure measured on the dense presets stands."""
    dense = build_weights(EngineOptions(preset="hybrid", vocab="byte"))
    moe = build_weights(EngineOptions(preset="hybrid-moe", vocab="byte"))
    assert dense.moe == {} and sorted(moe.moe) == [0, 2]
    for a, b in zip(dense.layers, moe.layers, strict=True):
        for x, y in zip(vars(a).values(), vars(b).values(), strict=True):
            assert torch.equal(x, y)


def test_routed_experts_in_sglang_shape(clean: BuiltinEngine) -> None:
    info = clean.server_info().raw
    assert info["enable_return_routed_experts"] is True and info["num_experts_per_tok"] == TOP_K
    (prompt,) = clean.tokenize([PROMPT])
    (gen,) = clean.generate([GenerateRequest(prompt, 8, return_routed_experts=True)])
    assert gen.routed_experts is not None
    # [seqlen - 1, layers x top_k]: the last output token is never forwarded.
    assert gen.routed_experts.shape == (len(prompt) + 8 - 1, 3 * TOP_K)
    per_layer = gen.routed_experts.reshape(-1, 3, TOP_K)
    assert (per_layer[:, 1] == NO_EXPERT).all()  # the recurrent layer's MLP is dense
    for layer in (0, 2):
        ids = per_layer[:, layer]
        assert ((ids >= 0) & (ids < 8)).all() and (ids[:, 0] != ids[:, 1]).all()
        assert len(np.unique(ids)) > 4  # the router uses more than a couple of experts


def test_not_asked_not_returned(clean: BuiltinEngine) -> None:
    (prompt,) = clean.tokenize([PROMPT])
    (gen,) = clean.generate([GenerateRequest(prompt, 2)])
    assert gen.routed_experts is None


def test_a_cache_hit_returns_the_routing_its_prefix_had(clean: BuiltinEngine) -> None:
    """Routing is kept per KV slot (as SGLang's capturer keeps it per cache location): a request served from
    the prefix cache still answers for every position."""
    clean.flush_cache()
    (prompt,) = clean.tokenize([PROMPT * 2])
    (first,) = clean.generate([GenerateRequest(prompt, 1, return_routed_experts=True)])
    (second,) = clean.generate([GenerateRequest(prompt, 1, return_routed_experts=True)])
    assert second.cached_tokens > 0
    assert first.routed_experts is not None and second.routed_experts is not None
    assert np.array_equal(first.routed_experts, second.routed_experts)


def test_router_fp8_moves_its_layer() -> None:
    """The fault changes layer 2's routing of some tokens and leaves layer 0 (before it) exactly as it was."""
    engine = _moe("router-fp8=2")
    try:
        (prompt,) = engine.tokenize([PROMPT * 3])
        req = GenerateRequest(prompt, 1, logprob_start_len=0, return_routed_experts=True)
        (faulty,) = engine.generate([req])
    finally:
        engine.close()
    clean = _moe()
    try:
        (good,) = clean.generate([req])
    finally:
        clean.close()
    assert faulty.routed_experts is not None and good.routed_experts is not None
    a, b = (np.sort(g.routed_experts.reshape(-1, 3, TOP_K), axis=2) for g in (good, faulty))
    assert np.array_equal(a[:, 0], b[:, 0])
    moved = (a[:, 2] != b[:, 2]).any(axis=1).mean()
    assert 0.0 < moved < 0.5


def test_route_rounds_logits_to_fp8() -> None:
    # 1.01 and 1.03 differ in fp32 but are one e4m3 value (steps of 0.125 above 1): their weights tie.
    logits = torch.tensor([[1.01, 1.03, 0.0, -1.0]])
    ids, weights = route(logits)
    assert ids.tolist() == [[1, 0]] and weights[0, 0] > weights[0, 1]
    ids, weights = route(logits, fp8=True)
    assert sorted(ids[0].tolist()) == [0, 1] and weights.tolist() == [[0.5, 0.5]]


@pytest.mark.parametrize(
    ("preset", "fault", "match"),
    [
        ("hybrid-moe", "router-fp8=1", r"layer 1 has no router \(MoE layers: 0, 2\)"),
        ("hybrid", "router-fp8=0", "hybrid-moe"),
    ],
)
def test_router_fault_needs_a_router(preset: str, fault: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EngineOptions(preset=preset, faults=(parse_fault(fault),))


def test_bad_routed_experts_answer_is_named() -> None:
    from precisionbot.engines.sglang_parse import _routed
    from precisionbot.errors import EngineError

    good = base64.b64encode(np.arange(12, dtype="<i4").tobytes()).decode()
    assert _routed(good, 0, 3).shape == (3, 4)
    with pytest.raises(EngineError, match="routed_experts"):
        _routed(good, 0, 5)
    with pytest.raises(EngineError, match="base64"):
        _routed("not base64!", 0, 3)
