"""Main's speculative-decoding acceptance, stored with a golden run record.

When ``baseline record`` runs a suite with ``spec_decode``, the spec arm of main's build generates the suite's
prompts R times (``--reruns``) and each rerun's acceptance counters (verify steps, drafted and accepted
tokens) are kept in ``meta.json``'s ``extra.spec_acceptance``, with the mean accepted length and acceptance rate
they give and the parameters they depend on: the suite's samples, new tokens, prompt lengths, corpus and seed
(the prompts and how long each is generated), and the spec arm's ``speculative_algorithm`` and
``speculative_num_draft_tokens`` where its ``/server_info`` says them (SGLang's and the builtin engine's; None
otherwise). Where the engine reports acceptance per request (SGLang's ``meta_info``, the builtin engine's), each
rerun also keeps every sample's counters and a digest of the text it generated (``samples``: rows of ``[text,
verify_steps, drafts, accepted]``), so a PR is compared on the samples whose text is main's
(``scoring.spec_rules.MainAcceptance.paired``). A PR's ``spec_decode`` is judged against the newest good run of
its signature whose parameters are the same (``scoring.spec_rules``). The entry is versioned (``VERSION``; the
per-sample rows are optional, so a version 1 entry without them still reads); a run recorded before it has
none and reads as "no acceptance recorded". Pure apart from :func:`select_acceptance`, which reads a ``Store``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from precisionbot.baselines.catalog import list_runs
from precisionbot.baselines.helper_reruns import helper_params, params_diff
from precisionbot.baselines.record import META_NAME, RunMeta
from precisionbot.baselines.skips import warn_skipped
from precisionbot.baselines.store import CorruptObject, Store
from precisionbot.config import SuiteConfig
from precisionbot.metrics.rerun_stats import MIN_RERUNS
from precisionbot.scoring.spec_rules import Acceptance, MainAcceptance, SampleAcceptance

KEY = "spec_acceptance"
"""``meta.json`` ``extra`` (and ``stats``) key."""
VERSION = 1

SPEC_KEYS = ("speculative_algorithm", "speculative_num_draft_tokens")
"""The spec arm's ``/server_info`` keys (SGLang's names) that acceptance depends on, kept where known."""

SIZES_DIFFER = "main's acceptance was recorded at other sizes"
"""How the reason starts when the newest stored acceptance of the signature has other parameters."""
UNUSABLE = "main's stored acceptance of these sizes is unusable"
"""How the reason starts when every stored acceptance of the run's parameters was corrupt or unreadable."""
NOT_RECORDED = "has no acceptance recorded"


def acceptance_params(suite: SuiteConfig, spec_server: Mapping[str, Any]) -> dict[str, Any]:
    """What main's acceptance depends on besides the golden signature (JSON-native, compared for equality):
    the suite's prompts and lengths (``helper_params``) and the spec arm's speculation settings where its
    ``/server_info`` (``spec_server``) says them."""
    out = helper_params(suite)
    for key in SPEC_KEYS:
        value = spec_server.get(key)
        out[key] = value if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    return out


@dataclass(frozen=True)
class AcceptanceReruns:
    """R reruns of main's spec arm on one suite's prompts."""

    params: Mapping[str, Any]
    reruns: tuple[Acceptance, ...]
    samples: tuple[tuple[SampleAcceptance, ...], ...] = ()
    """Per rerun, each sample's counters and text digest; empty when the engine has no per-request counters."""

    @property
    def lengths(self) -> tuple[float, ...]:
        return tuple(a.mean_length for a in self.reruns)

    @property
    def rates(self) -> tuple[float, ...]:
        return tuple(a.rate for a in self.reruns)

    def main(self, baseline: str) -> MainAcceptance:
        """Main's figure for judging a PR (``scoring.spec_rules``)."""
        return MainAcceptance(self.lengths, self.rates, stored=True, baseline=baseline, samples=self.samples)

    def summary(self) -> dict[str, Any]:
        """For ``meta.json`` ``stats``: reruns and the mean, lowest and highest mean accepted length, mean rate."""
        lengths = self.lengths
        return {
            "reruns": len(self.reruns),
            "accept_length_mean": math.fsum(lengths) / len(lengths),
            "accept_length_min": min(lengths),
            "accept_length_max": max(lengths),
            "accept_rate_mean": math.fsum(self.rates) / len(self.rates),
        }

    def to_extra(self) -> dict[str, Any]:
        rows: list[dict[str, Any]] = [
            {
                "verify_steps": a.verify_steps,
                "drafts": a.drafts,
                "accepted": a.accepted,
                "accept_length": a.mean_length,
                "accept_rate": a.rate,
            }
            for a in self.reruns
        ]
        for row, samples in zip(rows, self.samples, strict=False):
            row["samples"] = [[s.text, s.counts.verify_steps, s.counts.drafts, s.counts.accepted] for s in samples]
        return {"version": VERSION, "params": dict(self.params), "reruns": rows}

    @classmethod
    def from_extra(cls, extra: Any, where: str) -> AcceptanceReruns:
        """The stored entry, checked: ``CorruptObject`` naming what is wrong (an unknown version included)."""
        if not isinstance(extra, Mapping):
            raise CorruptObject(f"stored acceptance {where} is not an object")
        if extra.get("version") != VERSION:
            raise CorruptObject(
                f"stored acceptance {where} has format version {extra.get('version')!r}; this precisionbot reads "
                f"version {VERSION}"
            )
        params, rows = extra.get("params"), extra.get("reruns")
        if not isinstance(params, Mapping) or not isinstance(rows, list):
            raise CorruptObject(f"stored acceptance {where} lacks its params or reruns")
        if len(rows) < MIN_RERUNS:
            raise CorruptObject(
                f"stored acceptance {where} has {len(rows)} rerun(s); main's spread needs at least {MIN_RERUNS}"
            )
        reruns = tuple(_rerun(row, f"{where} rerun {i + 1}") for i, row in enumerate(rows))
        return cls(params=dict(params), reruns=reruns, samples=_samples(rows, where))


def _samples(rows: list[Any], where: str) -> tuple[tuple[SampleAcceptance, ...], ...]:
    """Every rerun's per-sample rows (``[text, verify_steps, drafts, accepted]``), or none when no rerun has
    them (an engine without per-request counters, or a run recorded before they were kept)."""
    kept = [row.get("samples") for row in rows]
    if all(k is None for k in kept):
        return ()
    out = []
    for i, samples in enumerate(kept):
        at = f"stored acceptance {where} rerun {i + 1} samples"
        if not isinstance(samples, list) or not samples or len(samples) != len(kept[0] or ()):
            raise CorruptObject(f"{at}: every rerun must list the same number of samples")
        parsed = []
        for j, entry in enumerate(samples):
            if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)):
                raise CorruptObject(f"{at}[{j}]: expected [text digest, verify_steps, drafts, accepted]")
            counts = entry[1:]
            if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
                raise CorruptObject(f"{at}[{j}]: verify_steps, drafts, accepted must be whole numbers ≥ 0")
            if counts[2] > counts[1]:
                raise CorruptObject(f"{at}[{j}]: more tokens accepted than drafted")
            parsed.append(SampleAcceptance(entry[0], Acceptance(*counts)))
        out.append(tuple(parsed))
    return tuple(out)


def _rerun(row: Any, where: str) -> Acceptance:
    """One stored rerun: whole counters (accepted ≤ drafted) whose figures are the ones stored beside them."""
    if not isinstance(row, Mapping):
        raise CorruptObject(f"stored acceptance {where} is not an object")
    counts = [row.get(k) for k in ("verify_steps", "drafts", "accepted")]
    whole = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    if len(whole) != len(counts):
        raise CorruptObject(f"stored acceptance {where}: verify_steps, drafts, accepted must be whole numbers ≥ 0")
    acceptance = Acceptance(*whole)
    if acceptance.accepted > acceptance.drafts:
        raise CorruptObject(f"stored acceptance {where}: more tokens accepted than drafted")
    for key, value in (("accept_length", acceptance.mean_length), ("accept_rate", acceptance.rate)):
        stored = row.get(key)
        if not isinstance(stored, (int, float)) or isinstance(stored, bool) or not math.isclose(stored, value):
            raise CorruptObject(f"stored acceptance {where}: {key} {stored!r} is not what its counters give")
    return acceptance


def select_acceptance(
    store: Store, model: str, signature: str, params: Mapping[str, Any]
) -> tuple[RunMeta, AcceptanceReruns] | tuple[None, str]:
    """The newest good run of ``model`` / ``signature`` with main's acceptance recorded under ``params``;
    else ``(None, why)``. A corrupt entry is warned about and the next run serves (as for helper reruns)."""
    runs = [r for r in list_runs(store, model, signature) if r.label != "failed"]
    recorded = [r for r in runs if KEY in r.extra]
    wanted = dict(params)
    unusable: list[str] = []
    for run in recorded:
        entry = run.extra[KEY]
        if not isinstance(entry, Mapping) or entry.get("params") != wanted:
            continue
        try:
            return run, AcceptanceReruns.from_extra(entry, f"{store.uri}/{run.prefix}")
        except CorruptObject as exc:
            warn_skipped(store, run.prefix + META_NAME, str(exc))
            unusable.append(f"{run.prefix}{META_NAME} ({exc})")
    if unusable:
        return None, f"{UNUSABLE}: {'; '.join(unusable)} (skipped)"
    if recorded:
        entry = recorded[0].extra[KEY]
        other = entry.get("params") if isinstance(entry, Mapping) else None
        theirs = other if isinstance(other, Mapping) else {}
        diff = params_diff(theirs, wanted)
        return None, (
            f"{SIZES_DIFFER} ({diff or 'unreadable parameters'}, main's vs this run's): the newest "
            f"({recorded[0].run_id}) was recorded with {dict(sorted(theirs.items()))}, this run uses "
            f"{dict(sorted(wanted.items()))}"
        )
    if runs:
        return None, (
            f"the baseline {runs[0].run_id} {NOT_RECORDED} (`baseline record` stores it when the PR suite runs "
            "spec_decode and --reruns is at least 3)"
        )
    return None, f"no baseline of model {model!r} with signature {signature} in {store.uri}"
