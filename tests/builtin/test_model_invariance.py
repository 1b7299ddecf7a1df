"""The clean model is batch- and path-invariant by construction: bit-identical logits for a position whatever
computed it (one prefill, any chunking, token-by-token decode, inside a batch with other requests)."""

from __future__ import annotations

import pytest
import torch

from precisionbot.builtin.model import Model, Segment
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.tokenizer import encode
from precisionbot.builtin.weights import build_weights

TEXT = "The quick brown fox jumps over the lazy dog; def f(x):\n    return x * 2  # twice\n" * 5


def _model(dtype: str) -> Model:
    options = EngineOptions(dtype=dtype, kv_pool_tokens=32768)
    return Model(options, build_weights(options), 32768, torch.device("cpu"))


def _run(model: Model, ids: list[int], base_slot: int, chunks: list[int]) -> torch.Tensor:
    slots = torch.arange(base_slot, base_slot + len(ids))
    outs, start = [], 0
    for n in chunks:
        seg = Segment(ids[start : start + n], start, slots)
        model.forward([seg])
        assert seg.out_logits is not None
        outs.append(seg.out_logits)
        start += n
    assert start == len(ids)
    return torch.cat(outs)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_prefill_chunking_and_decode_are_bit_identical(dtype: str) -> None:
    model = _model(dtype)
    ids = encode(TEXT)
    n = len(ids)
    whole = _run(model, ids, 1024, [n])
    assert torch.equal(whole, _run(model, ids, 4096, [37] * (n // 37) + [n % 37]))
    assert torch.equal(whole, _run(model, ids, 8192, [n - 40] + [1] * 40))  # 40 decode steps


def test_batch_composition_does_not_change_a_request() -> None:
    model = _model("bfloat16")
    ids = encode(TEXT)
    solo = _run(model, ids, 1024, [len(ids)])
    other = encode("import os\nprint(os.getcwd())\n" * 12)
    a_slots, b_slots = torch.arange(4096, 4096 + len(ids)), torch.arange(8192, 8192 + len(other))
    a = Segment(ids[:100], 0, a_slots)
    b = Segment(other[:200], 0, b_slots)
    model.forward([a, b])  # a mixed prefill batch
    rows = [a.out_logits]
    for pos in range(100, len(ids)):  # then decode a alone / together with b
        seg = Segment([ids[pos]], pos, a_slots)
        batch = [seg, Segment([other[pos % 200]], 200 + pos % 50, b_slots)] if pos % 2 else [seg]
        model.forward(batch)
        rows.append(seg.out_logits)
    assert torch.equal(solo, torch.cat([r for r in rows if r is not None]))


def test_a_fault_breaks_invariance_where_it_should() -> None:
    options = EngineOptions(faults=(), kv_pool_tokens=32768)
    from precisionbot.builtin.options import parse_fault

    faulty = EngineOptions(faults=(parse_fault("batch-variant"),), kv_pool_tokens=32768)
    ids = encode(TEXT)
    clean = Model(options, build_weights(options), 32768, torch.device("cpu"))
    bv = Model(faulty, build_weights(faulty), 32768, torch.device("cpu"))
    n = len(ids)
    assert torch.equal(_run(clean, ids, 0 + 64, [n]), _run(clean, ids, 4096, [n - 20] + [1] * 20))
    prefill = _run(bv, ids, 64, [n])
    decode = _run(bv, ids, 4096, [n - 20] + [1] * 20)
    assert torch.equal(prefill[: n - 20], decode[: n - 20])  # same shapes, same numbers
    diff = (prefill[n - 20 :] - decode[n - 20 :]).abs().max().item()
    assert 0 < diff < 0.5  # decode (few rows) rounds differently, a little


def test_weights_are_deterministic_per_seed() -> None:
    from precisionbot.builtin.weights import _build

    a, b = _build(EngineOptions(seed=1)), _build(EngineOptions(seed=1))
    c = _build(EngineOptions(seed=2))
    assert torch.equal(a.embed, b.embed) and torch.equal(a.layers[1].wqkv, b.layers[1].wqkv)
    assert not torch.equal(a.layers[0].wqkv, c.layers[0].wqkv)
