"""The pure localization core on hand-built captures: the first module with identical inputs and a differing
output, the alignment and probe proofs, and rel_diff against an independent float64 formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from precisionbot.localize.core import (
    AlignmentError,
    Capture,
    LocalizationError,
    ProbeError,
    StepDump,
    localize,
    split_name,
    tensor_diff,
)

MODULES = ["model.embed_tokens", "model.layers.0.self_attn", "model.layers.0.mlp", "model.layers.0", "lm_head"]


def _forward(positions: list[int], tokens: list[int], bump: dict[str, int] | None = None) -> dict[str, torch.Tensor]:
    """A toy 'model': each module's output derives from its input; ``bump`` adds 1 to a module's output at a
    position (a fault there), which every later module then inherits."""
    bump = bump or {}
    rows = len(positions)
    x = torch.tensor(tokens, dtype=torch.float32)[:, None].repeat(1, 4)
    out: dict[str, torch.Tensor] = {}
    chain = [("model.embed_tokens", x), *[(m, None) for m in MODULES[1:]]]
    prev = torch.tensor(tokens)
    h = x
    for name, _ in chain:
        inp = prev
        h = h * 1.5 + 0.25 if name != "model.embed_tokens" else x.clone()
        for r in range(rows):
            if bump.get(name) == positions[r]:
                h[r] += 1.0
        out[f"{name}.inputs.0"] = inp
        out[f"{name}.output"] = h.clone()
        prev = h.clone()
    return out


def _step(step: int, positions: list[int], tokens: list[int], bump: dict[str, int] | None = None) -> StepDump:
    tensors = _forward(positions, tokens, bump)
    order = {}
    for i, m in enumerate(MODULES):
        order[f"{m}.inputs.0"] = 2 * i
        order[f"{m}.output"] = 2 * i + 1
    return StepDump(step, tuple(positions), tuple(tokens), tensors, order)


TOKENS = [5, 7, 9, 11, 13, 15]


def _prefill(bump: dict[str, int] | None = None) -> Capture:
    return Capture("fresh prefill", (_step(0, list(range(6)), TOKENS, bump),))


def _decode(bump: dict[str, int] | None = None) -> Capture:
    steps = [_step(0, [0, 1, 2, 3], TOKENS[:4], bump)]
    steps += [_step(1 + k, [4 + k], [TOKENS[4 + k]], bump) for k in range(2)]
    return Capture("decode", tuple(steps))


def test_names_the_first_module_with_identical_inputs_and_lists_the_inheriting_ones() -> None:
    loc = localize(_prefill(), _decode({"model.layers.0.mlp": 5}), range(6))
    assert loc.position == 5
    assert loc.first is not None and loc.first.module == "model.layers.0.mlp"
    assert loc.first.inputs_identical and not loc.first.output_identical
    assert [r.module for r in loc.inheriting] == ["model.layers.0", "lm_head"]
    assert loc.hook_hits == (5, 5)


def test_the_earliest_position_wins_over_an_earlier_module() -> None:
    loc = localize(_prefill(), _decode({"model.layers.0.self_attn": 5, "lm_head": 4}), range(6))
    assert loc.position == 4 and loc.first is not None and loc.first.module == "lm_head"


def test_bit_identical_captures_give_no_divergence() -> None:
    loc = localize(_prefill(), _decode(), range(6))
    assert loc.first is None and loc.position is None and len(loc.aligned_positions) == 6


def test_misaligned_tokens_are_an_error_not_a_result() -> None:
    shifted = Capture("decode", (_step(0, list(range(6)), [5, 7, 9, 11, 15, 13]),))
    with pytest.raises(AlignmentError, match="rows are misaligned: position 4 consumes token 13"):
        localize(_prefill(), shifted, range(6))


def test_a_differing_embedding_is_misalignment() -> None:
    with pytest.raises(AlignmentError, match="embedding outputs differ at position 2"):
        localize(_prefill(), _decode({"model.embed_tokens": 2}), range(6))


def test_missing_positions_name_the_cuda_graph_flags() -> None:
    # A replayed decode graph runs no hook: the decode capture has the prefill step only.
    graphed = Capture("decode", _decode().steps[:1])
    with pytest.raises(ProbeError, match="--disable-cuda-graph"):
        localize(_prefill(), graphed, range(6))


def test_core_fields_only_name_the_non_intrusive_mode() -> None:
    core = Capture("decode", tuple(StepDump(s.step, s.positions, s.input_ids, {}, {}) for s in _decode().steps))
    with pytest.raises(ProbeError, match="DUMPER_NON_INTRUSIVE_MODE=all"):
        localize(_prefill(), core, range(6))


def test_a_position_seen_twice_is_refused() -> None:
    doubled = Capture("decode", (*_decode().steps, _step(9, [5], [TOKENS[5]])))
    with pytest.raises(AlignmentError, match="holds position 5 twice"):
        localize(_prefill(), doubled, range(6))


def test_a_difference_outside_every_hooked_module_is_said_so() -> None:
    target = _decode()
    step = target.steps[2]
    tensors = dict(step.tensors)
    for name in tensors:  # every module's inputs and output differ at once: no module is the first
        if not name.startswith("model.embed_tokens"):
            tensors[name] = tensors[name] + 1
    last = StepDump(step.step, step.positions, step.input_ids, tensors, step.order)
    broken = Capture("decode", (*target.steps[:2], last))
    with pytest.raises(LocalizationError, match="between the hooked modules"):
        localize(_prefill(), broken, range(6))


def test_rel_diff_matches_an_independent_float64_formula() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 33)).astype(np.float32)
    b = (a + 1e-3 * rng.standard_normal((7, 33))).astype(np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)
    expected = 1 - 2 * float(np.sum(x * y)) / float(np.sum(x**2 + y**2))
    d = tensor_diff(torch.from_numpy(a), torch.from_numpy(b))
    assert math.isclose(d.rel_diff, expected, rel_tol=1e-9)
    assert d.max_abs_diff == pytest.approx(float(np.abs(a - b).max()))
    assert abs(d.target_at_max - d.baseline_at_max) == pytest.approx(d.max_abs_diff)
    assert d.passed == (expected <= 1e-3)


def test_rel_diff_is_zero_when_nothing_differs_and_fails_past_1e_3() -> None:
    x = torch.randn(10, dtype=torch.bfloat16)
    assert tensor_diff(x, x.clone()).rel_diff == 0.0
    assert not tensor_diff(torch.ones(4), torch.tensor([1.0, 1.0, 1.0, -1.0])).passed


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("model.layers.1.mlp.inputs.0", ("model.layers.1.mlp", "inputs.0")),
        ("model.layers.1.output", ("model.layers.1", "output")),
        ("inputs.1", ("", "inputs.1")),
        ("output", ("", "output")),
        ("model.layers.3.output.1", ("model.layers.3", "output.1")),
        ("output.next_token_logits", ("", "output.next_token_logits")),
    ],
)
def test_split_name(name: str, split: tuple[str, str]) -> None:
    assert split_name(name) == split
