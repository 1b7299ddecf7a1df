"""Results: what a run found (``RunResult`` and its parts) and the result directory that carries it.

::

    run.py        the dataclasses of result.json (schema 1), the check names, verdicts   pure
    check_output.py  ``CheckOutput``: a check's result, its per-position arrays, its samples' tokens  pure
    golden_record.py  golden's teacher-forced record (the baseline's and the run's)       pure
    arrays.py     reading a result directory's ``<check>.npz`` safely (sizes checked before inflating)
    directory.py  ``write_result`` / ``read_result`` / ``read_records``: result.json and the arrays

A result directory may come from a job that ran PR code: everything read back is validated and size-capped.
"""

from __future__ import annotations

from precisionbot.results.check_output import CheckOutput, SampleTokens
from precisionbot.results.directory import (
    RESULT_FILE,
    RESULT_MAX_BYTES,
    read_records,
    read_result,
    shape_problem,
    write_result,
)
from precisionbot.results.run import (
    CACHE_HIT_HELPERS,
    CHECK_NAMES,
    CONSISTENCY_CHECKS,
    CONTEXT_MAX_CHARS,
    CONTEXT_TOKENS,
    CONTRACT_STATS,
    JUDGED_AGAINST_MATCH,
    K3_CHECKS,
    SCHEMA_VERSION,
    CacheStats,
    CheckResult,
    Diagnosis,
    EngineInfo,
    FloatArray,
    IntArray,
    Measure,
    PositionRecord,
    RunResult,
    SampleSummary,
    Verdict,
    WorstPosition,
    token_context,
)

__all__ = [
    "CACHE_HIT_HELPERS",
    "CHECK_NAMES",
    "CONSISTENCY_CHECKS",
    "CONTEXT_MAX_CHARS",
    "CONTEXT_TOKENS",
    "CONTRACT_STATS",
    "JUDGED_AGAINST_MATCH",
    "K3_CHECKS",
    "RESULT_FILE",
    "RESULT_MAX_BYTES",
    "SCHEMA_VERSION",
    "CacheStats",
    "CheckOutput",
    "CheckResult",
    "Diagnosis",
    "EngineInfo",
    "FloatArray",
    "IntArray",
    "Measure",
    "PositionRecord",
    "RunResult",
    "SampleSummary",
    "SampleTokens",
    "Verdict",
    "WorstPosition",
    "read_records",
    "read_result",
    "shape_problem",
    "token_context",
    "write_result",
]
