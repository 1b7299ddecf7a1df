"""The bisect search (``checks/bisect_search.py``): the first bad commit within the bound, skips included."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from precisionbot.checks.bisect_search import BAD, GOOD, SKIP, Bisection, Step


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64, 100])
def test_search_finds_the_first_bad_commit_within_the_bound(n: int) -> None:
    rng = random.Random(n)
    for first_bad, n_skip in itertools.product(range(n), range(min(n, 4))):
        commits = [f"{i:040x}" for i in range(n)]
        untestable = set(rng.sample(range(n - 1), min(n_skip, n - 1)))
        search = Bisection(commits)
        while (sha := search.next_commit()) is not None:
            i = commits.index(sha)
            outcome = SKIP if i in untestable else (BAD if i >= first_bad else GOOD)
            search.record(Step(sha, outcome, outcome))
        answer = search.first_bad()
        assert commits[first_bad] in answer
        assert len(search.steps) <= math.ceil(math.log2(n)) + len(search.skipped) if n > 1 else not search.steps
        # Ambiguous only through skips right before the answer.
        assert all(commits.index(a) in untestable for a in answer[:-1])
