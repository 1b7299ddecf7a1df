"""The ``spec_decode`` check's own limits, shared by the check and the comment side's re-derivation of its
verdict (report/verify.py), so both judge a run by the same numbers."""

from __future__ import annotations

ACCEPT_REL_TOL = 0.05
"""vLLM's default relative tolerance on the mean accepted length (``test_acceptance_length.py``)."""
SAMPLED_ALPHA = 1e-3
"""False-alarm rate of the sampled-path test (one chi-square over every tested context)."""


def acceptance_fell(pr_tokens: float, main_tokens: float) -> bool:
    """Whether the mean accepted length fell more than ``ACCEPT_REL_TOL`` below main's."""
    return pr_tokens < main_tokens * (1 - ACCEPT_REL_TOL)
