"""The ``spec-decode`` path's rows: which rows of a speculative arm's dump belong to the tokens it emitted. Pure.

The plain arm decodes one token per forward: one row per position. The spec arm verifies ``[t_{L-1}, d1..dk]``
at positions ``L-1..L-1+k`` in one extend, and the dumper writes a row for each of them, the drafts that are
then rejected included; the next verify writes the positions after the last accepted draft again, with the
bonus token; on the hybrid preset the accepted tokens are run once more after a rejection (the recurrent
state restored from its copy). So a position can have several rows, and only one of them is the computation
that produced the emitted token. The rows kept:

* a row's *real* position comes from the forward's ``seq_lens`` (the request's length after it): its ``n``
  rows sit at ``seq_len - n .. seq_len - 1``. The dumped ``positions`` are not used for this, because a RoPE
  bug of the verify (``spec-verify-offbyone``) moves them, and that is the finding, not something to line up
  by; the rows keep the positions the dumper reported, so ``core.localize`` still finds it;
* a row is *emitted* when it and every earlier row of its forward consume the emitted sequence's tokens at
  their positions (the prompt and the output): a draft after a rejected one was computed on another context,
  even where it happens to equal the token emitted there later;
* of the emitted rows at one position, the first: the verify whose logits chose the next token (a rerun
  after a rejection comes after it).

Applied to both arms (on the plain arm it keeps every row), each capture then holds every position once, in
request order, and the two line up row for row as the other paths' captures do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from precisionbot.localize.core import AlignmentError, Capture, StepDump


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def emitted_rows(capture: Capture, sequence: Sequence[int]) -> Capture:
    """``capture`` reduced to the rows of ``sequence``'s tokens (the module docstring's rule): each position
    ``0..len(sequence) - 1`` at most once, in request order. A forward of more than one request, or one without
    ``seq_lens``, is refused: its rows' real positions are not known."""
    seen: set[int] = set()
    steps = []
    for step in capture.steps:
        n = len(step.positions)
        if len(step.seq_lens) != 1:
            raise AlignmentError(
                f"the {capture.label} capture's step {step.step} has seq_lens {list(step.seq_lens)}, not one "
                "request's length: another request ran while dumping (rerun on an otherwise idle engine), or the "
                "dumper wrote no seq_lens, without which a verify's rows cannot be placed"
            )
        first = step.seq_lens[0] - n
        keep = []
        for r in range(n):
            pos = first + r
            if pos < 0 or pos >= len(sequence) or step.input_ids[r] != sequence[pos]:
                break  # a rejected draft (or past the tokens compared): it and every later row are off-path
            if pos not in seen:
                seen.add(pos)
                keep.append(r)
        if keep:
            steps.append(_rows(step, keep))
    return Capture(capture.label, tuple(steps), capture.sparse)


def _rows(step: StepDump, keep: list[int]) -> StepDump:
    """``step`` with only rows ``keep`` (tensors that are not one row per position are left out)."""
    n = len(step.positions)
    index = torch.tensor(keep, dtype=torch.int64)
    tensors = {name: t.index_select(0, index) for name, t in step.tensors.items() if t.dim() > 0 and t.shape[0] == n}
    return StepDump(
        step.step,
        tuple(step.positions[r] for r in keep),
        tuple(step.input_ids[r] for r in keep),
        tensors,
        {name: step.order[name] for name in tensors},
    )
