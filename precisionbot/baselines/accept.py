"""Accepting an intended numerics change: the audit record a new baseline carries when a maintainer accepts
a merged PR's numbers (``/precision accept reason="..."``).

An intentional change (an fp32 router GEMM, a new attention kernel) turns golden red on every later PR until
the reference moves, and the only reviewed way to move it is this one: a maintainer names the reason, the PR
is merged, and the run recorded from the merged commit becomes the newest baseline of its signature with
who, why, which PR and which baseline it replaces in its ``meta.json``. A failed run is never relabelled:
runs are immutable, and a new one is recorded. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from precisionbot.baselines.record import RunMeta
from precisionbot.errors import ConfigError

KEY = "accepted"
"""The key of the audit record in a run's ``meta.json`` ``extra``."""
MAX_REASON_CHARS = 500


def check_reason(reason: str) -> str:
    """The reason as stored: one line, not empty, bounded."""
    text = " ".join(reason.split())
    if not text:
        raise ConfigError('the accept reason is empty; say why the numbers changed (reason="fp32 router GEMM")')
    if len(text) > MAX_REASON_CHARS:
        raise ConfigError(f"the accept reason has {len(text)} characters; keep it under {MAX_REASON_CHARS}")
    return text


def audit_record(
    *, reason: str, by: str, pr: int, replaces: RunMeta | None, when: datetime, commit: str | None
) -> dict[str, Any]:
    """What ``meta.json`` keeps of an acceptance."""
    if pr < 1:
        raise ConfigError(f"--pr {pr}: give the number of the merged PR whose numbers are accepted")
    if not by.strip():
        raise ConfigError("--accepted-by is empty: give the GitHub login of the maintainer who accepted it")
    return {
        "reason": check_reason(reason),
        "by": by.strip(),
        "pr": pr,
        "commit": commit,
        "at": when.isoformat(),
        "replaces": None
        if replaces is None
        else {
            "run_id": replaces.run_id,
            "engine_commit": replaces.engine_commit,
            "created": replaces.created,
            "label": replaces.label,
        },
    }


def accepted(meta: RunMeta) -> Mapping[str, Any] | None:
    """A run's acceptance record, or None for an ordinary run."""
    value = meta.extra.get(KEY)
    return value if isinstance(value, Mapping) else None
