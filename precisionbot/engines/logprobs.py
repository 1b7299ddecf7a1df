"""One logprob from an engine answer, checked, and the error that names the request and the field (pure).

Every engine's answer parser (SGLang's ``/generate``, the OpenAI-compatible completions, llama-server's)
reads logprobs out of JSON it does not trust; each uses this one rule, so an answer that is not a logprob is
refused with the same words whichever engine sent it.
"""

from __future__ import annotations

import math
from typing import Any

from precisionbot.errors import EngineError


def answer_error(index: int, field: str, problem: str) -> EngineError:
    """``engine answer to request {index}: {field} {problem}``."""
    return EngineError(f"engine answer to request {index}: {field} {problem}")


def logprob(value: Any, index: int, field: str, allow_none: bool = False) -> float:
    """One logprob from an engine answer, checked: a number <= 0 (1e-3 of rounding allowed), not NaN or inf."""
    if value is None:
        if allow_none:
            return math.nan
        raise answer_error(index, field, "is null where a logprob belongs")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise answer_error(index, field, f"is not a number (got {str(value)[:40]!r})")
    try:
        f = float(value)
    except OverflowError:
        raise answer_error(index, field, "is not a valid logprob (a number out of range)") from None
    # A logprob is <= 0; allow float rounding just above it (log_softmax of a dominant logit).
    if math.isnan(f) or f > 1e-3 or f == math.inf:
        raise answer_error(index, field, f"is not a valid logprob (got {f!r})")
    return f
