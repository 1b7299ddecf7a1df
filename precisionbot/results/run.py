"""The data model of a run: verdicts, per-position records, check and run results, ``result.json``.

Pure: no I/O here (``precisionbot.results.directory`` reads and writes directories). ``RunResult.to_json`` /
``RunResult.from_json`` are a lossless round trip of schema 1 (docs/architecture.md); unknown extra keys survive
in ``extra``.

Sign convention, everywhere: ``delta = lp_ref - lp_test`` in nats, where *ref* is the trusted path
(the no-cache replay for the consistency helpers, the baseline for ``golden``) and *test* is the path
under test (the decode / cache-hit generation, the candidate build). This is SGLang's
``logr = replay - generation``, so ``k3(delta)`` ports its thresholds unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

SCHEMA_VERSION = 1

CACHE_HIT_HELPERS = ("prefill_cache_hit", "decode_cache_hit")
"""The two helpers whose generation reuses the prefix cache (SGLang's ``kl_test_utils.py``)."""
CONSISTENCY_CHECKS = ("match", *CACHE_HIT_HELPERS)
"""The three consistency helpers: decode vs a no-cache prefill of the same tokens, k3 per token."""
JUDGED_AGAINST_MATCH = (*CACHE_HIT_HELPERS, "cache_consistency")
"""Checks of a cache path, judged against ``match`` of the same run (a cache path must be as exact as the
no-cache path)."""
K3_CHECKS = ("match", *JUDGED_AGAINST_MATCH)
"""Checks scored by per-token k3 between two paths of one engine (no baseline)."""
CHECK_NAMES = (
    *CONSISTENCY_CHECKS,
    "golden",
    "batch_invariance",
    "layers",
    "cache_consistency",
    "spec_decode",
    "routing",
)
"""Stable check names (config, comments, JSON), in the order reports list them. The one place they are spelled."""


class Verdict(str, Enum):
    """A check's or a run's verdict. ``exit_code`` is the CLI contract: 0 pass, 1 fail, 2 inconclusive."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"

    def __str__(self) -> str:
        return self.value

    @property
    def exit_code(self) -> int:
        return {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.INCONCLUSIVE: 2}[self]

    @staticmethod
    def combine(verdicts: Iterable[Verdict]) -> Verdict:
        """FAIL if any fails; else INCONCLUSIVE if any is inconclusive or there is none; else PASS."""
        items = list(verdicts)
        if Verdict.FAIL in items:
            return Verdict.FAIL
        if not items or Verdict.INCONCLUSIVE in items:
            return Verdict.INCONCLUSIVE
        return Verdict.PASS


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]


@dataclass(frozen=True)
class PositionRecord:
    """Columnar per-position data of one check: one row per compared position.

    Attributes are numpy arrays of length ``N`` (top-k arrays ``[N, k]``):
    """

    sample: IntArray
    """Index of the sample (prompt) the position belongs to."""
    position: IntArray
    """Index of the scored token in that sample's token sequence (prompt + output)."""
    token_id: IntArray
    """The token scored at that position."""
    lp_ref: FloatArray
    """Logprob of ``token_id`` on the reference path (nats)."""
    lp_test: FloatArray
    """Logprob of ``token_id`` on the path under test (nats)."""
    top_ids_ref: IntArray | None = None
    top_lp_ref: FloatArray | None = None
    top_ids_test: IntArray | None = None
    top_lp_test: FloatArray | None = None

    def __post_init__(self) -> None:
        n = len(self.sample)
        for name in ("position", "token_id", "lp_ref", "lp_test"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"PositionRecord.{name} has {len(getattr(self, name))} rows, sample has {n}")
        for prefix in ("ref", "test"):
            ids, lps = getattr(self, f"top_ids_{prefix}"), getattr(self, f"top_lp_{prefix}")
            if (ids is None) != (lps is None):
                raise ValueError(f"PositionRecord.top_ids_{prefix} and top_lp_{prefix} must be given together")
            if ids is not None and (ids.shape != lps.shape or ids.ndim != 2 or ids.shape[0] != n):
                raise ValueError(f"PositionRecord top-k arrays ({prefix}) must be [{n}, k]; got {ids.shape}")

    @classmethod
    def from_lists(
        cls,
        sample: Iterable[int],
        position: Iterable[int],
        token_id: Iterable[int],
        lp_ref: Iterable[float],
        lp_test: Iterable[float],
    ) -> PositionRecord:
        return cls(
            sample=np.asarray(list(sample), dtype=np.int32),
            position=np.asarray(list(position), dtype=np.int32),
            token_id=np.asarray(list(token_id), dtype=np.int32),
            lp_ref=np.asarray(list(lp_ref), dtype=np.float64),
            lp_test=np.asarray(list(lp_test), dtype=np.float64),
        )

    def __len__(self) -> int:
        return len(self.sample)

    @property
    def delta(self) -> FloatArray:
        """``lp_ref - lp_test`` per position (nats)."""
        return self.lp_ref - self.lp_test

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The non-empty arrays by attribute name (for ``.npz`` files)."""
        out: dict[str, npt.NDArray[Any]] = {}
        for name in PositionRecord.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.NDArray[Any]]) -> PositionRecord:
        fields = PositionRecord.__dataclass_fields__
        unknown = set(arrays) - set(fields)
        if unknown:
            raise ValueError(f"unknown PositionRecord arrays: {sorted(unknown)}")
        return cls(**{k: arrays.get(k) for k in fields})  # type: ignore[arg-type]

    @staticmethod
    def concat(records: Iterable[PositionRecord]) -> PositionRecord:
        items = list(records)
        if not items:
            return PositionRecord.from_lists([], [], [], [], [])
        merged: dict[str, npt.NDArray[Any]] = {}
        for name in PositionRecord.__dataclass_fields__:
            values = [getattr(r, name) for r in items]
            if all(v is not None for v in values):
                merged[name] = np.concatenate(values)
        return PositionRecord.from_arrays(merged)


CONTEXT_TOKENS = 4
"""Tokens of context kept either side of a worst position."""
CONTEXT_MAX_CHARS = 120
"""Characters of context kept either side (read back capped too)."""


def token_context(texts: Sequence[str | None], index: int, lo: int = 0, hi: int | None = None) -> tuple[str, str]:
    """The text of up to :data:`CONTEXT_TOKENS` tokens before and after ``texts[index]``, within
    ``texts[lo:hi]`` (one sample's tokens)."""
    end = len(texts) if hi is None else min(hi, len(texts))
    before = "".join(t or "" for t in texts[max(lo, index - CONTEXT_TOKENS) : index])
    after = "".join(t or "" for t in texts[index + 1 : min(end, index + 1 + CONTEXT_TOKENS)])
    return before[-CONTEXT_MAX_CHARS:], after[:CONTEXT_MAX_CHARS]


@dataclass(frozen=True)
class WorstPosition:
    """One of a check's worst positions, as shown in the report."""

    sample: int
    position: int
    token_id: int
    token_text: str
    lp_ref: float
    lp_test: float
    delta: float
    """``lp_ref - lp_test`` (nats)."""
    k3: float
    margin_ref: float | None = None
    """The reference path's top-1 minus top-2 logprob at this position (nats), when known."""
    flip: bool | None = None
    """Whether the top-1 token differs between the two paths, when known."""
    context_before: str = ""
    """The text of a few tokens before this one in the same sample (the HTML report shows it), when known."""
    context_after: str = ""
    """The text of a few tokens after it."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "sample": self.sample,
            "position": self.position,
            "token_id": self.token_id,
            "token_text": self.token_text,
            "lp_ref": self.lp_ref,
            "lp_test": self.lp_test,
            "delta": self.delta,
            "k3": self.k3,
        }
        if self.margin_ref is not None:
            out["margin_ref"] = self.margin_ref
        if self.flip is not None:
            out["flip"] = self.flip
        if self.context_before:
            out["context_before"] = self.context_before
        if self.context_after:
            out["context_after"] = self.context_after
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorstPosition:
        return cls(
            sample=int(data["sample"]),
            position=int(data["position"]),
            token_id=int(data["token_id"]),
            token_text=str(data["token_text"]),
            lp_ref=float(data["lp_ref"]),
            lp_test=float(data["lp_test"]),
            delta=float(data["delta"]),
            k3=float(data["k3"]),
            margin_ref=None if data.get("margin_ref") is None else float(data["margin_ref"]),
            flip=None if data.get("flip") is None else bool(data["flip"]),
            # Context is shown, never parsed: capped so a hostile result cannot bloat the report.
            context_before=str(data.get("context_before") or "")[-CONTEXT_MAX_CHARS:],
            context_after=str(data.get("context_after") or "")[:CONTEXT_MAX_CHARS],
        )


@dataclass(frozen=True)
class SampleSummary:
    """Per-sample figures, used by the diagnosis (where and in which requests a divergence sits)."""

    sample: int
    prompt_tokens: int
    positions: int
    mean_k3: float
    max_k3: float
    onset: int | None
    """Index (0 = first compared position) of the first position over the onset threshold, if any."""
    contiguous_from_first: bool
    """True when the divergence starts at the first compared position and stays above threshold there."""
    cached_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sample": self.sample,
            "prompt_tokens": self.prompt_tokens,
            "positions": self.positions,
            "mean_k3": self.mean_k3,
            "max_k3": self.max_k3,
            "onset": self.onset,
            "contiguous_from_first": self.contiguous_from_first,
            "cached_tokens": self.cached_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SampleSummary:
        return cls(
            sample=int(data["sample"]),
            prompt_tokens=int(data["prompt_tokens"]),
            positions=int(data["positions"]),
            mean_k3=float(data["mean_k3"]),
            max_k3=float(data["max_k3"]),
            onset=None if data.get("onset") is None else int(data["onset"]),
            contiguous_from_first=bool(data["contiguous_from_first"]),
            cached_tokens=None if data.get("cached_tokens") is None else int(data["cached_tokens"]),
        )


@dataclass(frozen=True)
class CacheStats:
    kept: int
    total: int


CONTRACT_STATS: Mapping[str, Any] = {
    "positions": 0,
    "samples": 0,
    "mean_k3": None,
    "p50": None,
    "p99": None,
    "p999": None,
    "max": None,
    "frac_over": {},
}
"""The ``stats`` keys result.json always carries; a check that compared nothing has 0 positions and nulls."""


@dataclass(frozen=True)
class Measure:
    """A check's headline quantity (``k3`` or ``KL``) and the ``stats`` keys of its mean, p99 and max."""

    name: str
    mean_key: str
    p99_key: str
    max_key: str


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome. ``stats`` holds the stable keys (and, for ``golden``, the KL/flip keys); any of
    the stable keys a check did not set are filled in from ``CONTRACT_STATS``, so readers can rely on them."""

    name: str
    verdict: Verdict
    reasons: tuple[str, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    cache: CacheStats | None = None
    worst: tuple[WorstPosition, ...] = ()
    samples: tuple[SampleSummary, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Any further JSON-native keys (kept through the round trip)."""

    def __post_init__(self) -> None:
        missing = {k: v for k, v in CONTRACT_STATS.items() if k not in self.stats}
        if missing:
            object.__setattr__(self, "stats", {**missing, **self.stats})

    @classmethod
    def inconclusive(cls, name: str, reason: str, **kwargs: Any) -> CheckResult:
        return cls(name=name, verdict=Verdict.INCONCLUSIVE, reasons=(reason,), **kwargs)

    @property
    def measure(self) -> Measure:
        """What this check's headline numbers measure, and under which ``stats`` keys. Golden is judged on the KL
        of the two next-token distributions, the helpers on per-token k3 (SGLang's mean); the two are different
        quantities (a Q4 model's golden k3 p99 can be 0.79 while its KL p99 is 0.10), so every table (console,
        comment, diagnosis) names the measure and never shows golden's k3 under a KL verdict."""
        if self.name == "golden" and "kl_p99" in self.stats:
            return Measure("KL", "kl_mean", "kl_p99", "kl_max")
        return Measure("k3", "mean_k3", "p99", "max")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "name": self.name,
                "verdict": self.verdict.value,
                "reasons": list(self.reasons),
                "stats": dict(self.stats),
                "worst": [w.to_dict() for w in self.worst],
                "samples": [s.to_dict() for s in self.samples],
            }
        )
        if self.cache is not None:
            out["cache"] = {"kept": self.cache.kept, "total": self.cache.total}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        known = {"name", "verdict", "reasons", "stats", "worst", "samples", "cache"}
        cache = data.get("cache")
        return cls(
            name=str(data["name"]),
            verdict=Verdict(data["verdict"]),
            reasons=tuple(str(r) for r in data.get("reasons", ())),
            stats=dict(data.get("stats", {})),
            cache=None if cache is None else CacheStats(kept=int(cache["kept"]), total=int(cache["total"])),
            worst=tuple(WorstPosition.from_dict(w) for w in data.get("worst", ())),
            samples=tuple(SampleSummary.from_dict(s) for s in data.get("samples", ())),
            extra={k: v for k, v in data.items() if k not in known},
        )


@dataclass(frozen=True)
class Diagnosis:
    """One diagnosis finding: a stable code and one sentence."""

    code: str
    text: str
    check: str | None = None
    """The check it is about, when it is about one."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "text": self.text}
        if self.check is not None:
            out["check"] = self.check
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        return cls(code=str(data["code"]), text=str(data["text"]), check=data.get("check"))


@dataclass(frozen=True)
class EngineInfo:
    url: str
    kind: str
    """``sglang``, ``openai`` or ``builtin``."""
    commit: str | None = None


@dataclass(frozen=True)
class RunResult:
    """A whole run: what ``result.json`` holds."""

    verdict: Verdict
    signature: str
    engine: EngineInfo
    checks: tuple[CheckResult, ...]
    diagnosis: tuple[Diagnosis, ...] = ()
    environment: Mapping[str, Any] = field(default_factory=dict)
    """Model, tp, GPU, dtype, ... as shown on the report's environment line."""
    baseline: Mapping[str, Any] | None = None
    """The baseline compared against (run id, engine commit, date), when there was one."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_checks(
        cls,
        checks: Iterable[CheckResult],
        *,
        signature: str,
        engine: EngineInfo,
        **kwargs: Any,
    ) -> RunResult:
        items = tuple(checks)
        return cls(
            verdict=Verdict.combine(c.verdict for c in items),
            signature=signature,
            engine=engine,
            checks=items,
            **kwargs,
        )

    def with_diagnosis(self, diagnosis: Iterable[Diagnosis]) -> RunResult:
        return replace(self, diagnosis=tuple(diagnosis))

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "schema": SCHEMA_VERSION,
                "verdict": self.verdict.value,
                "signature": self.signature,
                "engine": {"url": self.engine.url, "kind": self.engine.kind, "commit": self.engine.commit},
                "checks": [c.to_dict() for c in self.checks],
                "diagnosis": [d.to_dict() for d in self.diagnosis],
                "environment": dict(self.environment),
                "baseline": None if self.baseline is None else dict(self.baseline),
            }
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        schema = data.get("schema")
        if schema != SCHEMA_VERSION:
            raise ValueError(f"result.json schema {schema!r} is not supported (expected {SCHEMA_VERSION})")
        engine = data["engine"]
        known = {"schema", "verdict", "signature", "engine", "checks", "diagnosis", "environment", "baseline"}
        return cls(
            verdict=Verdict(data["verdict"]),
            signature=str(data["signature"]),
            engine=EngineInfo(url=str(engine["url"]), kind=str(engine["kind"]), commit=engine.get("commit")),
            checks=tuple(CheckResult.from_dict(c) for c in data["checks"]),
            diagnosis=tuple(Diagnosis.from_dict(d) for d in data.get("diagnosis", ())),
            environment=dict(data.get("environment") or {}),
            baseline=None if data.get("baseline") is None else dict(data["baseline"]),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_json(self) -> str:
        """Strict JSON (no NaN/Infinity tokens: non-finite floats are written as strings)."""
        return json.dumps(_json_safe(self.to_dict()), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        return cls.from_dict(_json_restore(json.loads(text)))


_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


# Keys whose values are text by nature: a token that reads "NaN" stays a string.
_TEXT_KEYS = frozenset({"token_text", "text", "reasons", "name", "code", "url", "commit", "signature", "kind"})


def _json_restore(value: Any, key: str | None = None) -> Any:
    if isinstance(value, str) and value in _NONFINITE and key not in _TEXT_KEYS:
        return _NONFINITE[value]
    if isinstance(value, dict):
        return {k: _json_restore(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_restore(v, key) for v in value]
    return value
