"""Which commit: a binary search for the first bad commit that steps round the ones that cannot be tested.

The commits are those after a known-good commit up to a known-bad one, oldest first, so the last is bad. The
answer is the first bad one. A commit that does not build (or whose engine does not start, or whose checks
are inconclusive) is *skipped*: it is neither good nor bad. Tests go to the middle of the untested,
unskipped candidates, so each verdict halves the possible answers and each skip removes one: at most
``ceil(log2 n) + skips`` steps for ``n`` commits. Pure: the caller tests commits and reports outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from precisionbot.results import RunResult, Verdict

GOOD, BAD, SKIP = "good", "bad", "skip"


@dataclass(frozen=True)
class Step:
    """One commit's test."""

    sha: str
    outcome: str
    """``good`` (the checks passed), ``bad`` (one failed) or ``skip`` (not testable)."""
    verdict: str
    """The run's verdict, or ``build failed`` / ``engine failed``."""
    numbers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """check → its headline numbers (``mean_k3``, golden's ``kl_p99``)."""
    note: str = ""
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "sha": self.sha,
            "outcome": self.outcome,
            "verdict": self.verdict,
            "numbers": {k: dict(v) for k, v in self.numbers.items()},
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], cached: bool = False) -> Step:
        outcome = str(data["outcome"])
        if outcome not in (GOOD, BAD, SKIP):
            raise ValueError(f"unknown outcome {outcome!r}")
        numbers = {str(k): {str(n): float(x) for n, x in dict(v).items()} for k, v in dict(data["numbers"]).items()}
        return cls(str(data["sha"]), outcome, str(data["verdict"]), numbers, str(data.get("note", "")), cached)


HEADLINE_STATS = ("mean_k3", "kl_p99")


def step_of(sha: str, result: RunResult) -> Step:
    """A run's outcome: FAIL is bad, PASS good, INCONCLUSIVE untestable."""
    outcome = {Verdict.PASS: GOOD, Verdict.FAIL: BAD}.get(result.verdict, SKIP)
    numbers = {
        c.name: {k: float(c.stats[k]) for k in HEADLINE_STATS if isinstance(c.stats.get(k), (int, float))}
        for c in result.checks
    }
    failing = [c.name for c in result.checks if c.verdict is Verdict.FAIL]
    note = f"failed: {', '.join(failing)}" if failing else ""
    return Step(sha, outcome, result.verdict.value, numbers, note)


class Bisection:
    """The search's state over ``commits`` (oldest first; the last is the known-bad one)."""

    def __init__(self, commits: Sequence[str]) -> None:
        if not commits:
            raise ValueError("nothing to bisect")
        self.commits = list(commits)
        self.lo = -1
        """Index of the newest commit known good (-1: the given good commit, before the list)."""
        self.hi = len(commits) - 1
        """Index of the oldest commit known bad."""
        self.skipped: set[int] = set()
        self.steps: list[Step] = []

    @property
    def max_steps(self) -> int:
        """The bound the search keeps: ``ceil(log2 n)`` plus one per skipped commit."""
        return math.ceil(math.log2(len(self.commits))) + len(self.skipped) if len(self.commits) > 1 else 0

    def _open(self) -> list[int]:
        return [i for i in range(self.lo + 1, self.hi) if i not in self.skipped]

    def next_commit(self) -> str | None:
        """The commit to test next, or None when the answer is known."""
        candidates = self._open()
        return self.commits[candidates[len(candidates) // 2]] if candidates else None

    def record(self, step: Step) -> None:
        i = self.commits.index(step.sha)
        if not self.lo < i < self.hi:
            raise ValueError(f"{step.sha[:12]} is outside the open range")
        self.steps.append(step)
        if step.outcome == GOOD:
            self.lo = i
        elif step.outcome == BAD:
            self.hi = i
        else:
            self.skipped.add(i)

    def first_bad(self) -> list[str]:
        """The answer: one commit, or the skipped commits just before the first known-bad one and it (any
        of which may be the first bad one)."""
        if self.next_commit() is not None:
            raise ValueError("the search is not finished")
        return [self.commits[i] for i in range(self.lo + 1, self.hi + 1)]
