"""``precisionbot calibrate --grid``: the clean builtin engine over the sizes a user may pick, and each bug
fault's detection floor on the same sizes.

A threshold calibrated at one size can false-alarm at another: at 48 new tokens ``match`` sees almost no noise
while a restart from a cut re-prefills a recurrent chunk and carries noise of its own. So the grid runs the
checks whose verdicts depend on sizes (``match``, both cache helpers, ``cache_consistency``,
``batch_invariance``) on every cell of samples x new tokens x prompt length x conversation shape x
``cache_consistency`` size, under production numerics with and without the ``nondeterministic`` fault. Every
check must PASS or be INCONCLUSIVE (whose reason names the size that would decide); a FAIL is a false alarm.
Then each bug fault walks the cells from the cheapest and stops at the first where every check that must
catch it fails: its detection floor. ``golden`` is not on the grid (its sizes are its context depths, which
``calibrate`` without ``--grid`` covers).

``spec_decode`` joins the grid only when ``--checks`` names it (``OPT_IN_CHECKS``): each of its runs launches
a plain and a speculative arm and draws the sampled path, several times a helper's cost, so the default grid
keeps its cost. It depends on samples, new tokens and prompt length only, so it runs once per such size (on
the cheapest shape and ``cache_consistency`` size given, :func:`runs_check`), and the spec faults walk those
sizes, caught only when ``spec_decode`` fails by the part that exists to see them (``SPEC_PARTS``).

The pure part (cells, suites, counting, floors) is here; ``calibrate`` wires the engine in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from precisionbot.builtin.options import DETECTION_FLOORS
from precisionbot.config import CacheConsistencyOptions, SuiteConfig
from precisionbot.errors import ConfigError

GRID_CHECKS = ("match", "prefill_cache_hit", "decode_cache_hit", "cache_consistency", "batch_invariance")
"""The checks whose verdicts depend on the sizes of a suite (golden's on its depths, layers' on its dumps)."""
OPT_IN_CHECKS = ("spec_decode",)
"""Size-dependent checks the grid runs only when ``--checks`` names them (two engine launches per run)."""
SIZE_ONLY_CHECKS = frozenset({"spec_decode"})
"""Checks that read samples, new tokens and prompt length only: one run per such size, not per shape or
``cache_consistency`` size."""

SPEC_PARTS: Mapping[str, tuple[tuple[str, ...], bool]] = {
    "spec-verify-offbyone": (("target logprobs", "tokens"), False),
    "spec-kv-rollback": (("target logprobs", "tokens"), False),
    "spec-state-rollback": (("target logprobs", "tokens"), False),
    "spec-bonus-logprob": (("target logprobs",), False),
    "spec-accept-loose": (("tokens",), False),
    "spec-draft-degraded": (("acceptance",), True),
    "spec-greedy-at-temperature": (("sampled path",), True),
}
"""Spec fault -> (the ``spec_decode`` parts that exist to catch it, one of which must; whether they must be the
only ones): docs/check.md's spec fault table. A draft regression (outputs identical) and greedy acceptance while
sampling pass every greedy part, so another part firing on them would be a false alarm of that part."""


def right_part(fault: str, caught_by: Sequence[str]) -> str | None:
    """None when ``spec_decode``'s ``caught_by`` names a part that exists to catch ``fault`` (and only such parts,
    for the exclusive ones); else what is wrong, in words. Faults without parts: None."""
    if fault not in SPEC_PARTS:
        return None
    parts, exclusive = SPEC_PARTS[fault]
    expected = " or ".join(parts) + (" only" if exclusive else "")
    if not set(parts) & set(caught_by):
        return f"caught by {', '.join(caught_by) or 'no part'}, expected {expected}"
    extra = [p for p in caught_by if p not in parts]
    if exclusive and extra:
        return f"caught by {', '.join(caught_by)}, expected {expected}"
    return None


SHAPES: Mapping[str, Mapping[str, Any]] = {
    "single": {"turns": 1, "branches": 1},
    # kl_multiturn_utils' shape at its smallest: 2 branches per group, 2 turns, short corpus suffixes.
    "branch": {"turns": 2, "branches": 2, "suffix_tokens": (32, 64)},
}
CC_SIZES: Mapping[str, CacheConsistencyOptions] = {
    "small": CacheConsistencyOptions(prefixes=3, cuts=3, top_k=5),
    "default": CacheConsistencyOptions(),
}

DEFAULT_AXES: Mapping[str, tuple[str, ...]] = {
    "samples": ("4", "8", "32"),
    "new_tokens": ("32", "128", "512"),
    "prompt_tokens": ("200", "1000", "4000"),
    "shapes": tuple(SHAPES),
    "cc": tuple(CC_SIZES),
}


@dataclass(frozen=True)
class Cell:
    """One size a user may pick (ordered by cost: new tokens, then samples, then prompt length)."""

    new_tokens: int
    samples: int
    prompt_tokens: int
    shape: str = "single"
    cc: str = "small"

    def cost(self) -> tuple[int, int, int, int, int]:
        """The walk's order: fewer new tokens, samples and prompt tokens first; the single-turn shape and the
        small cache_consistency before the larger ones."""
        return (
            self.new_tokens,
            self.samples,
            self.prompt_tokens,
            list(SHAPES).index(self.shape),
            list(CC_SIZES).index(self.cc),
        )

    @property
    def label(self) -> str:
        return f"{self.samples} × {self.new_tokens} new, prompts ~{self.prompt_tokens}, {self.shape}, cc {self.cc}"


def parse_axes(raw: Mapping[str, str | None]) -> dict[str, tuple[str, ...]]:
    """``--grid-<axis> a,b`` values over the defaults; unknown shapes / cc sizes and non-positive numbers are
    setup errors naming the flag."""
    axes = dict(DEFAULT_AXES)
    for key, value in raw.items():
        if value is None:
            continue
        items = tuple(v.strip() for v in value.split(",") if v.strip())
        flag = f"--grid-{key.replace('_', '-')}"
        if not items:
            raise ConfigError(f"{flag}: empty; give a comma-separated list such as {','.join(DEFAULT_AXES[key])}")
        if key in ("shapes", "cc"):
            known = SHAPES if key == "shapes" else CC_SIZES
            bad = [v for v in items if v not in known]
            if bad:
                raise ConfigError(f"{flag}: unknown {', '.join(bad)}; use {', '.join(known)}")
        elif not all(v.isdigit() and int(v) > 0 for v in items):
            raise ConfigError(f"{flag} {value!r}: give positive whole numbers, e.g. {','.join(DEFAULT_AXES[key])}")
        axes[key] = items
    return axes


def runs_check(check: str, cell: Cell, axes: Mapping[str, Sequence[str]]) -> bool:
    """Whether ``check`` runs at ``cell``: every check does, except a size-only one (``SIZE_ONLY_CHECKS``) on
    any shape and ``cache_consistency`` size but the cheapest of the axes' (its run there would repeat the same
    one)."""
    if check not in SIZE_ONLY_CHECKS:
        return True
    first = (min(axes["shapes"], key=list(SHAPES).index), min(axes["cc"], key=list(CC_SIZES).index))
    return (cell.shape, cell.cc) == first


def cells(axes: Mapping[str, Sequence[str]]) -> list[Cell]:
    """Every combination, cheapest first."""
    return sorted(
        (
            Cell(int(n), int(s), int(p), shape, cc)
            for n in axes["new_tokens"]
            for s in axes["samples"]
            for p in axes["prompt_tokens"]
            for shape in axes["shapes"]
            for cc in axes["cc"]
        ),
        key=Cell.cost,
    )


def suite_for(base: SuiteConfig, cell: Cell, checks: Sequence[str]) -> SuiteConfig:
    """The base suite at ``cell``'s sizes: prompts of ±25 % around its length, its shape, its cache_consistency."""
    lo, hi = cell.prompt_tokens * 3 // 4, cell.prompt_tokens * 5 // 4
    shape = dict(SHAPES[cell.shape])
    if cell.samples % int(shape["branches"]):
        shape = dict(SHAPES["single"])
    return dataclasses.replace(
        base,
        checks=tuple(checks),
        samples=cell.samples,
        max_new_tokens=cell.new_tokens,
        prompt_tokens=(lo, hi),
        cache_consistency=CC_SIZES[cell.cc],
        **shape,
    )


@dataclass(frozen=True)
class CleanRun:
    """One clean run's verdicts: check -> (verdict, first reason)."""

    cell: Cell
    numerics: str
    verdicts: Mapping[str, tuple[str, str]]
    wall_s: float


def false_alarms(runs: Iterable[CleanRun], may_fail: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
    """Per check: how many clean runs gave PASS, INCONCLUSIVE and FAIL (a FAIL is a false alarm, except a check
    the numerics variant is allowed to fail: ``batch_invariance`` under ``nondeterministic``)."""
    out: dict[str, dict[str, int]] = {}
    for run in runs:
        allowed = may_fail.get(run.numerics, ())
        for name, (verdict, _) in run.verdicts.items():
            counts = out.setdefault(name, {"pass": 0, "inconclusive": 0, "fail": 0, "allowed": 0})
            counts["allowed" if verdict == "fail" and name in allowed else verdict] += 1
    return out


def walk_floor(grid: Sequence[Cell], caught: Callable[[Cell], bool]) -> Cell | None:
    """The first cell (cheapest first) where ``caught`` holds; None when none does. Stops at the first."""
    return next((c for c in grid if caught(c)), None)


def floor_warnings(suite: SuiteConfig, floors: Mapping[str, tuple[str, int]] = DETECTION_FLOORS) -> list[str]:
    """For ``check`` on the builtin engine: each of its faults a suite's checks exist to catch but its size is
    below the measured floor of (the floors are that engine's faults': another engine is not warned)."""
    out = []
    for fault, (check, new_tokens) in floors.items():
        if check in suite.checks and suite.max_new_tokens < new_tokens:
            out.append(
                f"suite {suite.name!r}: {check} at {suite.max_new_tokens} new tokens is below the size that caught "
                f"the builtin engine's {fault} ({new_tokens} new tokens; docs/builtin-engine.md, detection floors)"
            )
    return out


def render_grid(runs: Sequence[CleanRun], may_fail: Mapping[str, Sequence[str]]) -> str:
    """The clean runs' verdicts (Markdown), then the false alarms per check."""
    names = [n for n in (*GRID_CHECKS, *OPT_IN_CHECKS) if any(n in r.verdicts for r in runs)]
    lines = [
        "| size | numerics | " + " | ".join(names) + " | wall s |",
        "| --- | --- |" + " --- |" * len(names) + " ---: |",
    ]
    for r in runs:
        cells_ = []
        for n in names:
            v = r.verdicts.get(n)
            cells_.append("-" if v is None else (v[0] if v[0] != "fail" else f"**fail** ({v[1][:80]})"))
        lines.append(
            f"| {r.cell.label} | {r.numerics or 'production'} | " + " | ".join(cells_) + f" | {r.wall_s:.0f} |"
        )
    counts = false_alarms(runs, may_fail)
    lines += ["", "| check | runs | pass | inconclusive | false alarms (fail) |", "| --- | ---: | ---: | ---: | ---: |"]
    for n in names:
        c = counts.get(n, {"pass": 0, "inconclusive": 0, "fail": 0, "allowed": 0})
        total = sum(c.values())
        extra = f" (+{c['allowed']} allowed)" if c["allowed"] else ""
        lines.append(f"| {n} | {total} | {c['pass']} | {c['inconclusive']} | {c['fail']}{extra} |")
    reasons = sorted({v[1] for r in runs for v in r.verdicts.values() if v[0] == "inconclusive"})
    if reasons:
        lines += ["", "Inconclusive because:", *(f"* {x}" for x in reasons)]
    return "\n".join(lines)


def render_floors(
    floors: Mapping[str, tuple[Sequence[str], Cell | None, str]],
    smallest: Cell | None = None,
    parts: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """Per bug fault: the checks that must catch it and the cheapest size at which they all did (at the grid's
    smallest size the true floor may be lower: the grid says so); for a spec fault, the part of ``spec_decode``
    that must catch it and, in ``parts``, the parts that did at the floor."""
    lines = ["| fault | must catch (on the grid) | detection floor |", "| --- | --- | --- |"]
    for fault, (checks, cell, note) in floors.items():
        where = note or ("not caught on this grid" if cell is None else cell.label)
        if cell is not None and cell == smallest:
            where += " (the grid's smallest size: may be lower)"
        must = ", ".join(checks) or "-"
        if fault in SPEC_PARTS:
            expected, exclusive = SPEC_PARTS[fault]
            must += f" ({' or '.join(expected)}{' only' if exclusive else ''})"
            if cell is not None and parts and parts.get(fault):
                where += f"; caught by {', '.join(parts[fault])}"
        lines.append(f"| {fault} | {must} | {where} |")
    return "\n".join(lines)
