"""The PR comment of ``/precision bisect``: the first bad commit and the numbers at each step. Pure.

Built from the JSON ``precisionbot bisect --out FILE`` writes. That file is written in the PR's trust domain
(the bisect builds and runs every commit on the GPU runner), so the job that posts the comment treats it as
hostile data: :func:`parse_bisect` checks every field's type and bound and names the first bad one
(``steps[2].outcome: ...``); every string it lets through (commit subjects, notes, check names, the cell's
folder name) is escaped like the result comment's (precisionbot.report.escape), so no marker, tag, table
cell or ``@mention`` survives; and :func:`render_bisect` writes one comment for every matrix cell, under its
own :data:`MARKER`, which the poster upserts (one bisect comment per PR, however many runs and cells).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from precisionbot.errors import DataError
from precisionbot.report.escape import label_text, prose
from precisionbot.untrusted import FULL_SHA

MARKER = "<!-- precisionbot:bisect -->"
"""The bisect comment's own marker: never the verdict comment's (``<!-- precisionbot:comment ... -->``), so
neither can find, edit or delete the other."""
ICONS = {"good": "✅", "bad": "❌", "skip": "⏭️"}
OUTCOMES = tuple(ICONS)
HEADLINE_STATS = {"mean_k3": "mean k3", "kl_p99": "KL p99"}
"""The numbers a step carries (precisionbot.checks.bisect_search.HEADLINE_STATS) and how the comment names them."""

MAX_STEPS = 256
"""More steps than any real bisection takes (⌈log2 n⌉ plus one per skip; 2^20 commits take 20)."""
MAX_CHECKS = 32
"""Checks per step, far above the suite's check list."""
MAX_CELLS = 16
"""Cells shown in one comment; a matrix has one per model. The folders come from an artifact that PR code
wrote, so there may be more: they are counted, not shown."""

_CHECK = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")


@dataclass(frozen=True)
class BisectStep:
    """One tested commit, as ``bisect --out`` writes it (precisionbot.checks.bisect_search.Step plus its subject)."""

    sha: str
    outcome: str
    """``good``, ``bad`` or ``skip``."""
    verdict: str
    numbers: Mapping[str, Mapping[str, float]]
    """check → {``mean_k3`` | ``kl_p99``: value}."""
    note: str = ""
    cached: bool = False
    subject: str = ""
    """The commit's subject line: the PR author's text."""


@dataclass(frozen=True)
class BisectResult:
    good: str
    bad: str
    commits: int
    """Commits after ``good`` up to ``bad``."""
    first_bad: tuple[str, ...]
    """The answer: one commit, or the skipped ones before the first known-bad one and it."""
    max_steps: int
    steps: tuple[BisectStep, ...]


@dataclass(frozen=True)
class BisectCell:
    """One matrix cell's outcome for the comment: its folder name and the result, or why there is none."""

    label: str
    result: BisectResult | None = None
    problem: str = ""


def _fail(field: str, why: str) -> DataError:
    return DataError(f"{field}: {why}")


def _get(obj: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise _fail(f"{where}{key}", "missing")
    return obj[key]


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(field, f"expected an object, got {_kind(value)}")
    return value


def _list(value: Any, field: str, most: int, least: int = 0) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(field, f"expected an array, got {_kind(value)}")
    if not least <= len(value) <= most:
        raise _fail(field, f"expected {least} to {most} entries, got {len(value)}")
    return value


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise _fail(field, f"expected a string, got {_kind(value)}")
    return value


def _sha(value: Any, field: str) -> str:
    if not isinstance(value, str) or not FULL_SHA.fullmatch(value):
        raise _fail(field, "expected a full commit id (40 lower-case hex digits)")
    return value


def _count(value: Any, field: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 2**31:
        raise _fail(field, f"expected a whole number from {least}, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    """What a JSON value is, for an error message (a string shown cut, never whole)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else f"boolean {str(value).lower()}"
    if isinstance(value, int) and abs(value) >= 10**40:  # repr of a huge int is slow, past 4,300 digits an error
        return f"a {'negative ' if value < 0 else ''}number of more than 40 digits"
    if isinstance(value, (int, float)):
        return f"number {value!r}"[:60]
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    return "an object" if isinstance(value, Mapping) else "an array"


def _numbers(value: Any, field: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for check, stats in _object(value, field).items():
        if len(out) == MAX_CHECKS:
            raise _fail(field, f"more than {MAX_CHECKS} checks")
        if not _CHECK.fullmatch(check):
            raise _fail(field, f"check name {check[:40]!r} is not a check name ([A-Za-z0-9_.:@-], 1 to 64)")
        where = f"{field}.{check}"
        out[check] = {}
        for stat, number in _object(stats, where).items():
            if stat not in HEADLINE_STATS:
                raise _fail(where, f"unknown number {stat[:40]!r} (expected {', '.join(HEADLINE_STATS)})")
            out[check][stat] = _number(number, f"{where}.{stat}")
    return out


def _number(value: Any, field: str) -> float:
    """A headline number as a float. NaN and ±Infinity pass (Python's ``json`` reads them, and ``bisect --out``
    writes them: a commit whose logprobs are all NaN has a NaN ``mean_k3``, exactly what the bad step may
    show; :func:`_value` prints them as ``nan``/``inf``); an integer too large for a float is refused here,
    naming the field, rather than raising ``OverflowError`` in the caller."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(field, f"expected a number, got {_kind(value)}")
    try:
        return float(value)
    except OverflowError:
        raise _fail(field, f"expected a number a float can hold, got {_kind(value)}") from None


def _step(value: Any, field: str) -> BisectStep:
    step = _object(value, field)
    where = f"{field}."
    outcome = _text(_get(step, "outcome", where), f"{where}outcome")
    if outcome not in OUTCOMES:
        raise _fail(f"{where}outcome", f"{outcome[:40]!r} is not one of {', '.join(OUTCOMES)}")
    cached = step.get("cached", False)
    if not isinstance(cached, bool):
        raise _fail(f"{where}cached", f"expected true or false, got {_kind(cached)}")
    return BisectStep(
        sha=_sha(_get(step, "sha", where), f"{where}sha"),
        outcome=outcome,
        verdict=_text(_get(step, "verdict", where), f"{where}verdict"),
        numbers=_numbers(_get(step, "numbers", where), f"{where}numbers"),
        note=_text(step.get("note", ""), f"{where}note"),
        cached=cached,
        subject=_text(step.get("subject", ""), f"{where}subject"),
    )


def parse_bisect(data: Any, pinned: str | None = None) -> BisectResult:
    """A parsed ``bisect.json``, checked field by field; ``DataError("<field>: <why>")`` on the first bad one.

    ``pinned``: the commit the plan pinned, which the bisect had to take as its bad end (``--bad``); a file
    that names another one describes some other range and is refused."""
    top = _object(data, "the top level")
    steps = _list(_get(top, "steps", ""), "steps", MAX_STEPS)
    first_bad = _list(_get(top, "first_bad", ""), "first_bad", MAX_STEPS + 1, least=1)
    result = BisectResult(
        good=_sha(_get(top, "good", ""), "good"),
        bad=_sha(_get(top, "bad", ""), "bad"),
        commits=_count(_get(top, "commits", ""), "commits", 1),
        first_bad=tuple(_sha(s, f"first_bad[{i}]") for i, s in enumerate(first_bad)),
        max_steps=_count(_get(top, "max_steps", ""), "max_steps", 0),
        steps=tuple(_step(s, f"steps[{i}]") for i, s in enumerate(steps)),
    )
    if pinned is not None and result.bad != pinned:
        raise _fail("bad", f"{result.bad} is not the commit the plan pinned ({pinned}): a bisect of another range")
    return result


def bisect_comment(payload: Mapping[str, Any]) -> str:
    """The comment for one bisection (``bisect --comment``): :func:`render_bisect` of :func:`parse_bisect`."""
    return render_bisect([BisectCell("", parse_bisect(payload))])


def _value(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _head(result: BisectResult) -> str:
    subjects = {s.sha: s.subject for s in result.steps}
    if len(result.first_bad) == 1:
        sha = result.first_bad[0]
        subject = subjects.get(sha, "")
        return f"first bad commit `{sha[:12]}`" + (f" {label_text(subject)}" if subject else "")
    shown = ", ".join(f"`{s[:12]}`" for s in result.first_bad[:12])
    more = f" and {len(result.first_bad) - 12} more" if len(result.first_bad) > 12 else ""
    return f"first bad commit is one of {shown}{more} (the others could not be tested)"


def _table(result: BisectResult) -> list[str]:
    lines = [
        f"{result.commits} commits after `{result.good[:12]}` up to `{result.bad[:12]}`, "
        f"{len(result.steps)} steps (at most {result.max_steps}: ⌈log2 n⌉ plus one per skipped commit).",
        "",
        "| Step | Commit | Subject | Outcome | Numbers |",
        "|---:|---|---|---|---|",
    ]
    for i, s in enumerate(result.steps, 1):
        cells = [
            f"{label_text(check)} {HEADLINE_STATS[stat]} {_value(value)}"
            for check, stats in s.numbers.items()
            for stat, value in stats.items()
        ]
        cached = " (cached)" if s.cached else ""
        note = f" — {label_text(s.note, 120)}" if s.note else ""
        lines.append(
            f"| {i} | `{s.sha[:12]}` | {label_text(s.subject)} "
            f"| {ICONS[s.outcome]} {s.outcome} ({label_text(s.verdict, 40)}){cached}{note} "
            f"| {', '.join(cells) or '–'} |"
        )
    return lines


def render_bisect(cells: Sequence[BisectCell], run_url: str | None = None) -> str:
    """One comment for every cell of a bisect run, starting with :data:`MARKER`. ``run_url`` (trusted: built
    from the workflow's own variables) is linked where a cell has no result."""
    see = f" See the [workflow run]({run_url})." if run_url else ""
    if not cells:
        return f"{MARKER}\n### 🔎 precisionbot bisect: ❔ no result\n\nThe bisect wrote no result folder.{see}\n"
    lines = [MARKER]
    single = len(cells) == 1
    if not single:
        lines += ["### 🔎 precisionbot bisect", ""]
    for cell in cells[:MAX_CELLS]:
        title = "### 🔎 precisionbot bisect: " if single else f"#### {label_text(cell.label, 40)}: "
        if cell.result is None:
            lines += [f"{title}❔ no result", "", f"{prose(cell.problem, 500)}{see}", ""]
        else:
            lines += [f"{title}{_head(cell.result)}", "", *_table(cell.result), ""]
    if len(cells) > MAX_CELLS:
        lines.append(f"*{len(cells) - MAX_CELLS} more result folders are not shown (a matrix has one per model).*")
    return "\n".join(lines).rstrip("\n") + "\n"
