"""The spec-decode path's row selection on hand-built captures: a speculative arm's verify rows of rejected
drafts, the verify that re-writes their positions and the rerun after a rejection are reduced to one row per
position, the one that produced the emitted token, and the result lines up with a plain decode's rows."""

from __future__ import annotations

import pytest
import torch

from precisionbot.localize.core import AlignmentError, Capture, StepDump, localize
from precisionbot.localize.spec import common_length, emitted_rows

MODULES = ("model.embed_tokens", "model.layers.0.self_attn")
PROMPT = [3, 4, 5]
EMITTED = [*PROMPT, 6, 7, 8, 9]
"""The prompt and the tokens both arms emitted (the last one is consumed by no forward)."""


def _step(step: int, first: int, tokens: list[int], *, shift: int = 0, marks: list[float] | None = None) -> StepDump:
    """One forward of one request: rows at real positions ``first..``, reported at ``first + shift``; ``marks``
    sets each row's attention output (where a row's computation differs)."""
    n = len(tokens)
    embed = torch.tensor(tokens, dtype=torch.float32)[:, None].repeat(1, 2)
    attn = embed * 2 if marks is None else torch.tensor(marks)[:, None].repeat(1, 2)
    tensors = {
        "model.embed_tokens.inputs.0": torch.tensor(tokens),
        "model.embed_tokens.output": embed,
        "model.layers.0.self_attn.inputs.0": embed,
        "model.layers.0.self_attn.output": attn,
        "logits_total": torch.zeros(()),  # not one row per position: left out
    }
    order = {name: i for i, name in enumerate(tensors)}
    positions = tuple(range(first + shift, first + shift + n))
    return StepDump(step, positions, tuple(tokens), tensors, order, (first + n,))


def _plain() -> Capture:
    steps = [_step(0, 0, PROMPT)]
    steps += [_step(1 + k, 3 + k, [EMITTED[3 + k]]) for k in range(3)]
    return Capture("plain decode", tuple(steps))


def _spec(*, shift: int = 0, stale_at: int | None = None) -> Capture:
    """Prefill; a verify of [6, drafts 7 1 8] at positions 3..6: 7 accepted, 1 rejected (8 emitted at 5);
    the rerun of the accepted [6, 7] (the hybrid state restored); the next verify of [8, draft 9] at 5..6.
    ``stale_at``: the last verify's attention output differs at that position (stale KV read there)."""

    def marks(tokens: list[int], first: int) -> list[float]:
        return [2.0 * t + (1.0 if first + r == stale_at else 0.0) for r, t in enumerate(tokens)]

    verify = [6, 7, 1, 8]
    steps = [
        _step(0, 0, PROMPT),
        _step(1, 3, verify, shift=shift, marks=[2.0 * t for t in verify]),
        _step(2, 3, [6, 7], shift=shift, marks=[99.0, 99.0]),  # the rerun: same tokens, not the verify's rows
        _step(3, 5, [8, 9], shift=shift, marks=marks([8, 9], 5)),
    ]
    return Capture("speculative decode", tuple(steps))


def test_keeps_each_position_once_from_the_forward_that_emitted_it() -> None:
    consumed = EMITTED[:-1]
    kept = emitted_rows(_spec(), consumed)
    rows = [(p, t) for s in kept.steps for p, t in zip(s.positions, s.input_ids, strict=True)]
    assert rows == list(enumerate(consumed))
    # The verify's rows of 6 and 7 (attention 12, 14), not the rerun's (99): the verify chose the next token.
    attn = torch.cat([s.tensors["model.layers.0.self_attn.output"][:, 0] for s in kept.steps])
    assert attn.tolist() == [6.0, 8.0, 10.0, 12.0, 14.0, 16.0]
    assert all("logits_total" not in s.tensors for s in kept.steps)


def test_a_draft_after_a_rejected_one_is_dropped_even_when_it_equals_the_emitted_token() -> None:
    # Drafts [7, 1, 8]: 1 is rejected at position 5 (8 was emitted there); the draft 8 after it sits at
    # position 6, where the emitted sequence has 8 too, but it was computed after the rejected draft.
    seq = [*PROMPT, 6, 7, 8, 8]
    spec = Capture("spec", (_step(0, 0, PROMPT), _step(1, 3, [6, 7, 1, 8], marks=[0.0, 0.0, 0.0, 5.0]),
                            _step(2, 5, [8, 8])))  # fmt: skip
    kept = emitted_rows(spec, seq)
    sixth = [s for s in kept.steps if 6 in s.positions]
    assert len(sixth) == 1 and sixth[0].step == 2


def test_the_clean_pair_agrees_and_a_stale_row_is_found_at_its_module() -> None:
    consumed = EMITTED[:-1]
    plain = emitted_rows(_plain(), consumed)
    required = range(len(consumed))
    assert localize(plain, emitted_rows(_spec(), consumed), required).first is None
    found = localize(plain, emitted_rows(_spec(stale_at=5), consumed), required)
    assert found.position == 5 and found.first is not None
    assert found.first.module == "model.layers.0.self_attn"


def test_a_verify_at_the_wrong_positions_is_the_positions_finding() -> None:
    # Rows are kept by their real place (seq_lens), so the reported positions are still compared: a RoPE bug.
    consumed = EMITTED[:-1]
    found = localize(emitted_rows(_plain(), consumed), emitted_rows(_spec(shift=1), consumed), range(6))
    assert found.first is not None and found.first.module == "positions" and found.position == 3


def test_a_forward_of_two_requests_is_refused() -> None:
    step = _step(0, 0, PROMPT)
    two = StepDump(0, step.positions, step.input_ids, step.tensors, step.order, (2, 1))
    with pytest.raises(AlignmentError, match="another request ran while dumping"):
        emitted_rows(Capture("spec", (two,)), PROMPT)


def test_common_length() -> None:
    assert common_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_length([1, 2], [1, 2, 3]) == 2
