"""Which people approved one exact commit of a PR, from its review log. Pure.

A fork PR's code runs on the GPU runner only when someone with the ``rerun`` role approved *that* commit: the
fork label and ``/precision rerun sha=...`` say "run it", a review says "I read it". GitHub records the
commit a review was given on (``commit_id``: the head at the time), so a push after the review, even a fast
forward that GitHub logs as no event at all, leaves a head nobody approved.
"""

from __future__ import annotations

from collections.abc import Iterable

from precisionbot.gh.api import Review

DECISIVE = frozenset({"APPROVED", "CHANGES_REQUESTED", "DISMISSED"})
"""Review states that state or withdraw a verdict; ``COMMENTED`` (and ``PENDING``) leave an earlier one as is."""


def approvers(reviews: Iterable[Review], head: str) -> tuple[str, ...]:
    """Logins whose latest decisive review approves exactly ``head``, in review order.

    Latest per person: an approval followed by "changes requested" or a dismissal no longer counts, and an
    approval of an older commit never counts for a newer head."""
    latest: dict[str, Review] = {}
    for review in reviews:
        if review.state in DECISIVE and review.user:
            latest.pop(review.user, None)  # re-insert: dict order is the order of each person's last word
            latest[review.user] = review
    return tuple(user for user, r in latest.items() if r.state == "APPROVED" and r.commit_id == head)
