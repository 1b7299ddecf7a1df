"""Helper baselines: R reruns of the consistency helpers on main, stored with a golden run record.

Per helper the record keeps a ``[R, S]`` matrix of per-sample mean k3 (``S`` = the suite's samples, NaN where
a rerun did not keep that sample: a cache helper keeps only prompts that hit the cache) and, per rerun, the
statistics the thresholds gate (``mean_k3``, ``p99``, ``max``, ``frac_over`` at ``token_k3``). They live in
the run's ``helpers.npz``; ``meta.json``'s ``extra.helpers`` says which suite parameters produced them, since
a helper's noise depends on them (samples, tokens, prompt lengths, corpus, seed) and the golden signature
does not cover them. Pure apart from ``load_helpers`` / ``select_helper_baseline``, which read a ``Store``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionbot.baselines.catalog import list_runs, load_arrays
from precisionbot.baselines.record import META_NAME, RunMeta
from precisionbot.baselines.skips import warn_skipped
from precisionbot.baselines.store import CorruptObject, Store
from precisionbot.config import SuiteConfig
from precisionbot.metrics import threshold_key
from precisionbot.results import CONSISTENCY_CHECKS, CheckResult, RunResult, Verdict

ARRAYS = "helpers"

SIZES_DIFFER = "main's reruns were recorded at other sizes"
"""How the reason starts when the newest helper baseline's suite parameters are not this run's (the comment and
``check``'s stderr show that reason: the comparison the user set up did not happen)."""

HELPERS_CORRUPT = "main's helper reruns of these sizes are corrupt"
"""How the reason starts when every helper baseline of the run's sizes was skipped as corrupt (shown as well)."""
RUN_STATS = ("mean_k3", "p99", "max", "frac_over")
"""Per-rerun statistics kept for each helper (what ``kl_div``, ``max_token_k3`` and ``max_frac_over`` gate)."""

Matrix = npt.NDArray[np.float64]


def helper_params(suite: SuiteConfig) -> dict[str, Any]:
    """What a helper's numbers depend on besides the golden signature (JSON-native, compared for equality)."""
    return {
        "samples": suite.samples,
        "max_new_tokens": suite.max_new_tokens,
        "prompt_tokens": list(suite.prompt_tokens),
        "corpus": suite.corpus or "builtin",
        "seed": suite.seed,
    }


@dataclass(frozen=True)
class HelperRuns:
    """R reruns of some helpers with the same suite parameters."""

    params: Mapping[str, Any]
    token_k3: float
    """The per-token k3 ``frac_over`` was counted at."""
    per_sample: Mapping[str, Matrix]
    """helper → ``[R, S]`` per-sample mean k3."""
    run_stats: Mapping[str, Mapping[str, Matrix]]
    """helper → statistic (``RUN_STATS``) → ``[R]``."""

    @property
    def helpers(self) -> tuple[str, ...]:
        return tuple(h for h in CONSISTENCY_CHECKS if h in self.per_sample)

    def reruns(self, helper: str) -> int:
        return int(self.per_sample[helper].shape[0])

    def summary(self) -> dict[str, Any]:
        """Per helper: reruns and the median over reruns of each statistic (for ``meta.json`` stats)."""
        out: dict[str, Any] = {}
        for h in self.helpers:
            out[h] = {"reruns": self.reruns(h)}
            for stat, values in self.run_stats[h].items():
                finite = values[np.isfinite(values)]
                out[h][f"{stat}_median"] = float(np.median(finite)) if finite.size else None
        return out

    def to_arrays(self) -> dict[str, Matrix]:
        out = {f"{h}.per_sample": self.per_sample[h] for h in self.helpers}
        for h in self.helpers:
            out.update({f"{h}.{stat}": values for stat, values in self.run_stats[h].items()})
        return out

    def to_extra(self) -> dict[str, Any]:
        return {
            "params": dict(self.params),
            "token_k3": self.token_k3,
            "checks": list(self.helpers),
            "reruns": {h: self.reruns(h) for h in self.helpers},
        }

    @classmethod
    def from_stored(cls, extra: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]], where: str) -> HelperRuns:
        try:
            helpers = [str(h) for h in extra["checks"]]
            return cls(
                params=dict(extra["params"]),
                token_k3=float(extra["token_k3"]),
                per_sample={h: np.asarray(arrays[f"{h}.per_sample"], dtype=np.float64) for h in helpers},
                run_stats={
                    h: {s: np.asarray(arrays[f"{h}.{s}"], dtype=np.float64) for s in RUN_STATS} for h in helpers
                },
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptObject(f"helper baseline {where} is incomplete ({exc!r})") from exc

    @classmethod
    def from_results(cls, results: Sequence[RunResult], params: Mapping[str, Any], token_k3: float) -> HelperRuns:
        """Collect each helper's reruns; a rerun where a helper compared nothing (INCONCLUSIVE) is left out of
        that helper, and a helper with fewer than two usable reruns is left out altogether."""
        samples = int(params["samples"])
        key = threshold_key(token_k3)
        per_sample: dict[str, Matrix] = {}
        run_stats: dict[str, dict[str, Matrix]] = {}
        for h in CONSISTENCY_CHECKS:
            checks = [c for c in (r.check(h) for r in results) if c is not None and _usable(c)]
            if len(checks) < 2:
                continue
            per_sample[h] = np.stack([sample_vector(c, samples) for c in checks])
            run_stats[h] = {s: np.array([_run_stat(c, s, key) for c in checks]) for s in RUN_STATS}
        return cls(params=dict(params), token_k3=token_k3, per_sample=per_sample, run_stats=run_stats)


def _usable(c: CheckResult) -> bool:
    return c.verdict is not Verdict.INCONCLUSIVE and bool(c.samples)


def sample_vector(c: CheckResult, samples: int) -> Matrix:
    """``[samples]`` per-sample mean k3 of a helper result by sample id (NaN where not compared)."""
    out = np.full(samples, np.nan)
    for s in c.samples:
        if 0 <= s.sample < samples:
            out[s.sample] = s.mean_k3
    return out


def _run_stat(c: CheckResult, stat: str, frac_key: str) -> float:
    value = c.stats.get("frac_over", {}).get(frac_key) if stat == "frac_over" else c.stats.get(stat)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def load_helpers(store: Store, meta: RunMeta) -> HelperRuns | None:
    """The helper reruns stored with ``meta``; None when it was recorded without any."""
    extra = meta.extra.get("helpers")
    if not isinstance(extra, Mapping):
        return None
    return HelperRuns.from_stored(extra, load_arrays(store, meta, ARRAYS), f"{store.uri}/{meta.prefix}")


def params_diff(recorded: Any, wanted: Mapping[str, Any]) -> str:
    """``"key main's vs this run's"`` for each parameter that differs (``recorded`` as stored: a mapping, or
    anything else read as empty)."""
    theirs = recorded if isinstance(recorded, Mapping) else {}
    return ", ".join(
        f"{k} {theirs.get(k)} vs {wanted.get(k)}"
        for k in sorted(set(theirs) | set(wanted))
        if theirs.get(k) != wanted.get(k)
    )


def select_helper_baseline(
    store: Store, model: str, signature: str, params: Mapping[str, Any]
) -> tuple[RunMeta, HelperRuns] | tuple[None, str]:
    """The newest good run of ``model`` / ``signature`` with helper reruns recorded under ``params``; else
    ``(None, why)``."""
    runs = [r for r in list_runs(store, model, signature) if r.label != "failed"]
    with_helpers = [r for r in runs if isinstance(r.extra.get("helpers"), Mapping)]
    wanted = dict(params)
    corrupt: list[str] = []
    for run in with_helpers:
        if run.extra["helpers"].get("params") == wanted:
            try:
                helpers = load_helpers(store, run)
            except CorruptObject as exc:  # the next good run serves (see baselines/catalog.py)
                warn_skipped(store, run.prefix + META_NAME, str(exc))
                corrupt.append(run.prefix + META_NAME)
                continue
            if helpers is not None:
                return run, helpers
    if corrupt:
        return None, f"{HELPERS_CORRUPT}: {', '.join(corrupt)} (skipped; see the warning on stderr)"
    if with_helpers:
        other = with_helpers[0].extra["helpers"].get("params")
        return None, (
            f"{SIZES_DIFFER} ({params_diff(other, wanted)}, main's vs this run's): the newest helper baseline "
            f"({with_helpers[0].run_id}) was recorded with suite parameters {other}, this run uses {wanted}"
        )
    if runs:
        return None, f"the baseline {runs[0].run_id} has no helper reruns (record with --reruns R)"
    return None, f"no baseline of model {model!r} with signature {signature} in {store.uri}"
