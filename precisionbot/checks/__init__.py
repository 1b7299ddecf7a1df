"""Checks: the consistency helpers (``match``, ``prefill_cache_hit``, ``decode_cache_hit``), and the registry
(``precisionbot.checks.registry.CHECKS``) through which ``run_suite`` finds every check by name."""

from __future__ import annotations

from precisionbot.checks.context import CheckContext
from precisionbot.checks.suite import CheckRun, run_suite
from precisionbot.results import CheckOutput

__all__ = ["CheckContext", "CheckOutput", "CheckRun", "run_suite"]
