"""The module tensors stored with a golden baseline: which rows are kept, a bit-exact round trip through the
store's arrays, and a foreign or damaged set refused by name (never read as a capture)."""

from __future__ import annotations

import pytest
import torch

from precisionbot.localize import stored
from precisionbot.localize.core import Capture, LocalizationError, StepDump, localize


def _capture(n: int, chunk: int, shift: int = 0) -> Capture:
    """A prefill of ``n`` tokens in chunks of ``chunk``: an embedding and one bf16 layer; ``shift`` adds 64 to the
    layer's output from that position on."""
    steps = []
    for s, start in enumerate(range(0, n, chunk)):
        pos = tuple(range(start, min(n, start + chunk)))
        ids = tuple(1000 + p for p in pos)
        emb = torch.tensor([[float(t), float(t) / 7] for t in ids], dtype=torch.bfloat16)
        out = emb * 3 + (torch.tensor(pos).unsqueeze(1) >= shift).to(torch.bfloat16) * (64 if shift else 0)
        tensors = {
            "model.embed_tokens.output": emb,
            "model.layers.0.inputs.0": emb,
            "model.layers.0.output": out.to(torch.bfloat16),
        }
        order = {"model.embed_tokens.output": 0, "model.layers.0.inputs.0": 1, "model.layers.0.output": 2}
        steps.append(StepDump(s, pos, ids, tensors, order))
    return Capture("baseline build", tuple(steps))


def test_the_head_and_the_first_rows_past_every_stride_are_kept() -> None:
    assert stored.kept_positions(10, 128) == tuple(range(10))
    kept = stored.kept_positions(600, 128)
    assert kept[:16] == tuple(range(16))
    assert kept[16:] == (128, 129, 130, 131, 256, 257, 258, 259, 384, 385, 386, 387, 512, 513, 514, 515)


def test_a_stored_capture_round_trips_bit_exactly_and_localizes_a_late_change() -> None:
    tokens = [1000 + p for p in range(300)]
    arrays, manifest = stored.encode([(3, tokens, _capture(300, 64))])
    (sample,) = stored.stored_samples(manifest)
    assert sample.sample == 3 and sample.digest == stored.tokens_digest(tokens)
    back = stored.decode(arrays, manifest, sample)
    assert back.sparse and back.steps[0].positions == sample.positions
    assert back.steps[0].tensors["model.layers.0.output"].dtype == torch.bfloat16
    # Same rows as the original capture, bit for bit.
    full = _capture(300, 64)
    row = full.steps[2].tensors["model.layers.0.output"][128 - 128]
    assert torch.equal(back.steps[0].tensors["model.layers.0.output"][16], row)
    # A PR build that differs from position 200 on is found at the first stored row past it (256).
    pr = _capture(300, 64, shift=200)
    found = localize(back, pr, sample.positions)
    assert found.position == 256 and found.first is not None and found.first.module == "model.layers.0"
    assert localize(back, _capture(300, 64), sample.positions).first is None


def test_a_foreign_or_damaged_tensor_set_is_refused_by_name() -> None:
    tokens = list(range(40))
    arrays, manifest = stored.encode([(0, tokens, _capture(40, 64))])
    with pytest.raises(LocalizationError, match="format 7, not 1"):
        stored.stored_samples({**manifest, "format": 7})
    (sample,) = stored.stored_samples(manifest)
    with pytest.raises(LocalizationError, match="no rows for sample 0"):
        stored.decode({k: v for k, v in arrays.items() if not k.endswith("positions")}, manifest, sample)
    with pytest.raises(LocalizationError, match="dtype 'float8'"):
        stored.decode(arrays, {**manifest, "dtypes": {**manifest["dtypes"], "model.layers.0.output": "float8"}},
                      sample)  # fmt: skip
    short = {**arrays, "s0.model.layers.0.output": arrays["s0.model.layers.0.output"][:3]}
    with pytest.raises(LocalizationError, match="has 3 rows for 16 positions"):
        stored.decode(short, manifest, sample)
