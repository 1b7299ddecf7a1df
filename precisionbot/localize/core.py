"""Which op: the first module whose inputs are bit-identical and whose output differs. Pure (tensors in, a
finding out; no files, no network).

The method (a forward-hook dumper answers *where*, where an ablation answers only *whether*): capture every
module's inputs and output on two runs that should agree row for row (decode steps against a fresh prefill of
the same tokens, a cache hit against a fresh prefill, or a PR build against a baseline build), line the rows
up by position, and go to the first position where anything differs. There, walk the modules in the order
their outputs were written (a parent finishes after its children, so the innermost module comes first): the
first one whose inputs all agree bit for bit while its output does not is where the numbers changed; every
later module that differs only inherits the difference through its inputs.

Two proofs come before any reading, because both failures look like "no difference" or like a wrong answer:

* *alignment*: the two rows at each position must consume the same token and their embedding outputs must
  be bit-identical; otherwise the rows are misaligned and every diff after is meaningless (``AlignmentError``);
* *the probe fired*: every position the caller needs must be present on both sides with module tensors; an
  untaken hook writes nothing, which would read as agreement (``ProbeError``).

Differences are measured as SGLang's comparator measures them: both sides cast to float32, then
``rel_diff = 1 - 2 sum(x y) / sum(x^2 + y^2)`` in float64 (0 when max |x - y| is 0), passing at ``rel_diff <=
1e-3``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from precisionbot.errors import PrecisionbotError

PASS_REL_DIFF = 1e-3
"""SGLang's comparator's default predicate, ``rel <= 0.001``."""
EMBED_MODULE = "model.embed_tokens"


class LocalizationError(PrecisionbotError):
    """A localization that cannot give a trustworthy answer; the message says why and what to change."""


class AlignmentError(LocalizationError):
    """The two captures' rows do not consume the same tokens: any diff would be meaningless."""


class ProbeError(LocalizationError):
    """The hooks did not fire where they had to: an empty diff would read as agreement."""


@dataclass(frozen=True)
class StepDump:
    """One forward pass as the dumper wrote it."""

    step: int
    positions: tuple[int, ...]
    """Position of each row (the ``positions`` core field)."""
    input_ids: tuple[int, ...]
    tensors: Mapping[str, torch.Tensor]
    """Module tensor name (``model.layers.1.mlp.output``, ``model.layers.1.mlp.inputs.0``; the root's are
    ``inputs.0`` and ``output``) -> value, first dimension one row per position."""
    order: Mapping[str, int]
    """Tensor name -> its ``dump_index`` (the order the dumper wrote them)."""
    seq_lens: tuple[int, ...] = ()
    """Each request's length after this forward (the ``seq_lens`` core field; empty where not dumped): where its
    rows really sit, whatever positions a RoPE bug reports (the spec-decode path lines rows up by it)."""


@dataclass(frozen=True)
class Capture:
    """The forwards dumped around one request (or several)."""

    label: str
    """What ran, for messages: ``decode``, ``fresh prefill``, ``baseline build``, ..."""
    steps: tuple[StepDump, ...]
    sparse: bool = False
    """Holds only some rows of its request (a stored capture, stored.py): its positions increase, with gaps."""


@dataclass(frozen=True)
class TensorDiff:
    """SGLang's comparator's ``DiffInfo`` numbers for one pair of tensors."""

    rel_diff: float
    max_abs_diff: float
    mean_abs_diff: float
    max_diff_coord: tuple[int, ...]
    baseline_at_max: float
    target_at_max: float

    @property
    def passed(self) -> bool:
        return self.rel_diff <= PASS_REL_DIFF


def tensor_diff(baseline: torch.Tensor, target: torch.Tensor) -> TensorDiff:
    """Differences of two same-shape tensors, as SGLang's comparator computes them (see the module docstring).

    >>> tensor_diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])).rel_diff
    0.0
    """
    x, y = baseline.float(), target.float()
    if x.numel() == 0:
        return TensorDiff(0.0, 0.0, 0.0, (), 0.0, 0.0)
    raw = (y - x).abs()
    flat = int(raw.argmax())
    coord = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), raw.shape))
    max_abs = float(raw.max())
    xd, yd = x.double(), y.double()
    rel = 0.0 if max_abs == 0.0 else float(1 - 2 * (xd * yd).sum() / (xd * xd + yd * yd).sum())
    return TensorDiff(rel, max_abs, float(raw.mean()), coord, float(x[coord]), float(y[coord]))


def split_name(name: str) -> tuple[str, str]:
    """``model.layers.1.mlp.inputs.0`` -> (``model.layers.1.mlp``, ``inputs.0``); ``model.layers.1.output.0``
    (one tensor of a tuple output, as SGLang's decoder layers return) -> (``model.layers.1``, ``output.0``);
    the root's -> (``""``, ...)."""
    if name == "output" or name.startswith(("inputs.", "output.")):
        return "", name
    for marker in (".inputs.", ".output."):
        cut = name.rfind(marker)
        if cut >= 0:
            return name[:cut], name[cut + 1 :]
    if name.endswith(".output"):
        return name[: -len(".output")], "output"
    raise ValueError(f"{name!r} is not a module tensor name (<module>.inputs.<i> or <module>.output)")


def _is_output(part: str) -> bool:
    return part == "output" or part.startswith("output.")


@dataclass(frozen=True)
class ModuleResult:
    module: str
    inputs_identical: bool
    output_identical: bool
    diff: TensorDiff
    """Of the module's output rows at the position."""


@dataclass(frozen=True)
class Localization:
    """The answer: where the two captures first part, or that they never do."""

    position: int | None
    """First position where any module's output differs; None: every aligned row is bit-identical."""
    first: ModuleResult | None
    """The first module in order with identical inputs and a differing output at ``position``."""
    inheriting: tuple[ModuleResult, ...]
    """Later modules whose output differs at ``position`` (their inputs differ too: they only inherit)."""
    aligned_positions: tuple[int, ...]
    hook_hits: tuple[int, int]
    """Module tensors read (baseline, target) at the aligned positions: the proof that the probe fired."""
    modules: tuple[str, ...]
    """Every module compared, in order."""


@dataclass(frozen=True)
class _Rows:
    """One capture's rows: position -> (step index, row index)."""

    where: dict[int, tuple[int, int]]
    capture: Capture

    @staticmethod
    def of(capture: Capture) -> _Rows:
        where: dict[int, tuple[int, int]] = {}
        for s, step in enumerate(capture.steps):
            for r, pos in enumerate(step.positions):
                if pos in where:
                    other = capture.steps[where[pos][0]].step
                    raise AlignmentError(
                        f"the {capture.label} capture holds position {pos} twice (steps {other} and {step.step}): "
                        "another request ran while dumping, so its rows cannot be lined up; "
                        "rerun on an otherwise idle engine"
                    )
                where[pos] = (s, r)
        return _Rows(where, capture)

    def token(self, pos: int) -> int:
        s, r = self.where[pos]
        return self.capture.steps[s].input_ids[r]

    def stacked(self, name: str, positions: Sequence[int]) -> torch.Tensor | None:
        """The rows of tensor ``name`` at ``positions`` (None where a step lacks it or it is not row-shaped)."""
        rows = []
        for pos in positions:
            s, r = self.where[pos]
            step = self.capture.steps[s]
            t = step.tensors.get(name)
            if t is None or t.dim() == 0 or t.shape[0] != len(step.positions):
                return None
            rows.append(t[r])
        return torch.stack(rows)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bits, so that bit-identical means equal (NaN == NaN, -0.0 != 0.0)."""
    if t.is_floating_point():
        return t.contiguous().view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()])
    return t


def _row_differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape != b.shape or a.dtype != b.dtype:
        return torch.ones(a.shape[0], dtype=torch.bool)
    return (_bits(a) != _bits(b)).reshape(a.shape[0], -1).any(dim=1)


def module_order(capture: Capture) -> list[str]:
    """Modules in the order their outputs were written (first step that has each)."""
    seen: dict[str, tuple[int, int]] = {}
    for s, step in enumerate(capture.steps):
        for name, index in step.order.items():
            module, part = split_name(name)
            if _is_output(part) and module not in seen:
                seen[module] = (s, index)
    return sorted(seen, key=lambda m: seen[m])


POSITIONS_FIELD = "positions"
"""The forward batch's positions (a core field of the dump, not a module): what RoPE and the KV slots are
computed from. Named as the first diverging "op" when one build gives a token the wrong position."""


def positions_break(capture: Capture) -> tuple[int, int, int] | None:
    """Where a capture of one request numbers its rows out of order: (row in request order, the position it
    should have, the position reported), or None. Each forward continues the request where the last one ended,
    so rows in step order are consecutive positions (strictly increasing for a ``sparse`` capture). A position
    bug (RoPE off by one past a chunk boundary) breaks that; so would another request dumped alongside."""
    flat = [p for step in capture.steps for p in step.positions]
    for k in range(1, len(flat)):
        broken = flat[k] <= flat[k - 1] if capture.sparse else flat[k] != flat[k - 1] + 1
        if broken:
            return k, flat[k - 1] + 1, flat[k]
    return None


def _in_order(capture: Capture) -> list[tuple[int, int]]:
    """(reported position, token) of every row, in request order."""
    return [(p, t) for step in capture.steps for p, t in zip(step.positions, step.input_ids, strict=False)]


def _positions_finding(baseline: Capture, target: Capture) -> Localization | None:
    """Where a side numbers its rows out of order (``positions_break``), the captures are lined up by each row's
    place in the request instead, which holds while both consume the same tokens in the same order (the same
    request, numbered wrongly; anything else, such as another request dumped alongside, is left to the
    alignment proof to refuse). The first place where the two sides report different positions is the finding:
    the positions field is where they part. None when no side is out of order, or both number alike."""
    if positions_break(baseline) is None and positions_break(target) is None:
        return None
    rows_b, rows_t = _in_order(baseline), _in_order(target)
    start = rows_t[0][0] if rows_t else 0
    if baseline.sparse:  # stored rows at their true positions: the target's row at that place in its request
        inside = [(pos, tok, rows_t[pos - start]) for pos, tok in rows_b if 0 <= pos - start < len(rows_t)]
        same_tokens = all(tok == got[1] for _, tok, got in inside)
        reported = [(pos, pos, got[0]) for pos, _, got in inside]
    else:
        same_tokens = len(rows_b) == len(rows_t) and all(a[1] == b[1] for a, b in zip(rows_b, rows_t, strict=True))
        reported = [(start + k, a[0], b[0]) for k, (a, b) in enumerate(zip(rows_b, rows_t, strict=False))]
    if not same_tokens:
        return None
    first = next(((place, pb, pt) for place, pb, pt in reported if pb != pt), None)
    if first is None:
        return None  # both number alike: ``renumbered`` lines them up
    k = reported.index(first)
    ref = torch.tensor([float(pb) for _, pb, _ in reported[k:]])
    got = torch.tensor([float(pt) for _, _, pt in reported[k:]])
    return Localization(first[0], ModuleResult(POSITIONS_FIELD, True, False, tensor_diff(ref, got)), (), (), (0, 0),
                        (POSITIONS_FIELD,))  # fmt: skip


def renumbered(capture: Capture) -> Capture:
    """``capture`` with each row at its place in the request (the first row's position, then one more per
    row): where both paths give the same tokens the same wrong positions, the bug is shared by both paths and
    is not what parts them, so their rows are lined up by order instead."""
    start = capture.steps[0].positions[0] if capture.steps and capture.steps[0].positions else 0
    steps, k = [], start
    for step in capture.steps:
        steps.append(StepDump(step.step, tuple(range(k, k + len(step.positions))), step.input_ids, step.tensors,
                              step.order))  # fmt: skip
        k += len(step.positions)
    return Capture(capture.label, tuple(steps), capture.sparse)


def _shared_wrong_positions(baseline: Capture, target: Capture) -> bool:
    if baseline.sparse or target.sparse:
        return False
    return _in_order(baseline) == _in_order(target) and positions_break(baseline) is not None


def localize(baseline: Capture, target: Capture, required: Sequence[int]) -> Localization:
    """Where ``target`` first departs from ``baseline`` (see the module docstring); ``required`` are the
    positions the caller sent and must find on both sides."""
    wrong_positions = _positions_finding(baseline, target)
    if wrong_positions is not None:
        return wrong_positions
    if _shared_wrong_positions(baseline, target):
        baseline, target = renumbered(baseline), renumbered(target)
    rows_b, rows_t = _Rows.of(baseline), _Rows.of(target)
    for rows in (rows_b, rows_t):
        missing = [p for p in required if p not in rows.where]
        if missing:
            raise ProbeError(
                f"the {rows.capture.label} capture has no rows for {len(missing)} of the {len(required)} positions "
                f"sent (first {missing[0]}): the dumper did not run for those forwards. Hooks do not fire inside a "
                "replayed CUDA graph: launch with --disable-cuda-graph and --disable-prefill-cuda-graph"
            )
    positions = sorted(required)
    if not positions:
        raise LocalizationError("no position to compare: the requests sent no token")
    modules = module_order(target)
    names = sorted({n for step in target.steps for n in step.tensors if split_name(n)[0] in modules})
    hits: list[int] = []
    for rows in (rows_b, rows_t):
        count = 0
        for name in names:
            if _is_output(split_name(name)[1]) and rows.stacked(name, positions) is not None:
                count += 1
        hits.append(count)
        if count == 0 or EMBED_MODULE not in modules:
            raise ProbeError(
                f"the {rows.capture.label} capture holds no module tensor at the positions sent (only the forward "
                "batch's core fields): the engine's dumper runs DUMPER_NON_INTRUSIVE_MODE=core (or off, or its hooks "
                "were reset); launch it with DUMPER_NON_INTRUSIVE_MODE=all"
            )
    _prove_alignment(rows_b, rows_t, positions)
    stacked: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    one_sided = set()
    for name in names:
        a, b = rows_b.stacked(name, positions), rows_t.stacked(name, positions)
        if a is not None and b is not None:
            stacked[name] = (a, b)
        elif (a is None) != (b is None):
            one_sided.add(split_name(name)[0])
    differs = {name: _row_differs(a, b) for name, (a, b) in stacked.items()}
    out_names = {m: [n for n in differs if split_name(n)[0] == m and _is_output(split_name(n)[1])] for m in modules}
    # A module whose outputs are not one row per position on either side (SGLang's root writes only each
    # request's last logits row in a prefill) is left out; one present on a single side is a probe failure.
    outputs = [m for m in modules if out_names[m]]
    lost = [m or "(root)" for m in modules if not out_names[m] and m in one_sided]
    if lost:
        raise ProbeError(
            f"modules {', '.join(lost[:4])} have no output rows on one side: the two captures hooked different "
            "modules; launch both engines with the same DUMPER_* settings"
        )
    out_differs = {m: torch.stack([differs[n] for n in out_names[m]]).any(dim=0) for m in outputs}
    first_row: int | None = None
    for m in outputs:
        hit = torch.nonzero(out_differs[m])
        if len(hit):
            first_row = int(hit[0]) if first_row is None else min(first_row, int(hit[0]))
    proof = (tuple(positions), (hits[0], hits[1]), tuple(outputs))
    if first_row is None:
        return Localization(None, None, (), *proof)
    results = []
    for m in outputs:
        inputs = [n for n in differs if split_name(n)[0] == m and split_name(n)[1].startswith("inputs.")]
        same_in = not any(bool(differs[n][first_row]) for n in inputs)
        same_out = not bool(out_differs[m][first_row])
        # The output tensor that differs there (the first one when a tuple output has several).
        shown = next((n for n in out_names[m] if bool(differs[n][first_row])), out_names[m][0])
        a, b = stacked[shown]
        results.append(ModuleResult(m, same_in, same_out, tensor_diff(a[first_row], b[first_row])))
    first = next((r for r in results if r.inputs_identical and not r.output_identical), None)
    pos = positions[first_row]
    if first is None:
        raise LocalizationError(
            f"at position {pos} module outputs differ but no hooked module has identical inputs and a different "
            "output: the change is in code between the hooked modules"
        )
    later = results[results.index(first) + 1 :]
    inheriting = tuple(r for r in later if not r.output_identical)
    return Localization(pos, first, inheriting, *proof)


def _out(module: str) -> str:
    return f"{module}.output" if module else "output"


def _prove_alignment(rows_b: _Rows, rows_t: _Rows, positions: Sequence[int]) -> None:
    for pos in positions:
        a, b = rows_b.token(pos), rows_t.token(pos)
        if a != b:
            raise AlignmentError(
                f"rows are misaligned: position {pos} consumes token {a} in the {rows_b.capture.label} capture and "
                f"{b} in the {rows_t.capture.label} capture; no diff is meaningful"
            )
    name = _out(EMBED_MODULE)
    ea, eb = rows_b.stacked(name, positions), rows_t.stacked(name, positions)
    if ea is None or eb is None:
        raise ProbeError(f"no embedding output ({name}) on both sides: alignment cannot be proven")
    bad = torch.nonzero(_row_differs(ea, eb))
    if len(bad):
        raise AlignmentError(
            f"rows are misaligned: the embedding outputs differ at position {positions[int(bad[0])]} although the "
            "token ids agree; no diff after it is meaningful"
        )


def aligned_tensors(
    baseline: Capture, target: Capture, positions: Sequence[int]
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Every tensor name both captures hold as rows at ``positions``, stacked: what the JSONL report compares."""
    rows_b, rows_t = _Rows.of(baseline), _Rows.of(target)
    names = sorted({n for step in target.steps for n in step.tensors})
    out = []
    for name in names:
        a, b = rows_b.stacked(name, positions), rows_t.stacked(name, positions)
        if a is not None and b is not None:
            out.append((name, a, b))
    return out
