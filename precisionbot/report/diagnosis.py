"""What a run's numbers point to (docs/background.md: which path diverged, noise or bug): stable codes
plus one sentence each.

Pure: data in, :class:`~precisionbot.results.Diagnosis` tuples out; no I/O. The sentences are plain text
(the report escapes them); token text inside them is made visible (a leading space reads ``·``).

The codes are stable (result.json's ``diagnosis[].code``; more may be added, none renamed): each is spelled once,
as a constant here (the hybrid models' two in :mod:`~precisionbot.report.diagnosis_hybrid`), and
:data:`DIAGNOSIS_CODES` lists them all with what each points to; docs/architecture.md lists the same, in order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from precisionbot.fmt import count, plain, sig
from precisionbot.report import diagnosis_hybrid, evidence
from precisionbot.report.diagnosis_hybrid import RECURRENT_STATE, WINDOW_HANDOFF
from precisionbot.report.escape import cap, visible
from precisionbot.report.noise_words import NoiseScale, noise_scale
from precisionbot.results import (
    CONSISTENCY_CHECKS,
    CheckResult,
    Diagnosis,
    RunResult,
    SampleSummary,
    Verdict,
    WorstPosition,
)

PREFILL_RESTORE = "prefill_restore"
DECODE_STATE = "decode_state"
ARITHMETIC = "arithmetic"
ONSET_FIRST_TOKEN = "onset_first_token"
ONSET_MID_GENERATION = "onset_mid_generation"
CONCENTRATED = "concentrated"
GLOBAL = "global"
SYSTEMATIC_FLIP = "systematic_flip"
EXCESS_FLIPS = "excess_flips"
NOISE = "noise"
VS_BASELINE = "vs_baseline"
VS_PREVIOUS = "vs_previous"
FIRST_DIVERGING_OP = "first_diverging_op"
GOLDEN_ONLY = "golden_only"

DIAGNOSIS_CODES: Mapping[str, str] = {
    # Which helper diverged.
    PREFILL_RESTORE: "the prefix-cache restore path (prefill_cache_hit diverged, match did not)",
    DECODE_STATE: "state written during decode, wrong when a later request reuses it (only decode_cache_hit)",
    ARITHMETIC: "a kernel computing another function for decode and prefill shapes (match or batch_invariance)",
    GOLDEN_ONLY: "only golden diverged, the helpers agree: a shared op's numerics changed on every path",
    # Where in the sequence.
    ONSET_FIRST_TOKEN: "the state was already wrong when generation began",
    ONSET_MID_GENERATION: "something changes during decode: a window hand-off, a checkpoint rotation, an eviction",
    # Which requests.
    CONCENTRATED: "a few requests carry the divergence: compare them",
    GLOBAL: "every request is shifted: a cause they share",
    # Noise or bug.
    SYSTEMATIC_FLIP: "a top-1 flip across a top-2 gap that noise cannot cross",
    EXCESS_FLIPS: "more top-1 flips than noise explains",
    NOISE: "within the noise band",
    # Against other runs.
    VS_BASELINE: "the headline tail moved 2x or more against the baseline",
    VS_PREVIOUS: "a verdict changed, or the headline tail moved 2x or more, since the previous run",
    # Hybrid models (the engine reports SGLang's mamba_track_interval or sliding_window_size).
    RECURRENT_STATE: "the recurrent/conv state restored at a checkpoint-boundary cache hit is wrong",
    WINDOW_HANDOFF: "the hand-off to the sliding window differs between decode and prefill",
    # Which op (a run localized with the engine's tensor dumper, ``localize:``).
    FIRST_DIVERGING_OP: "the op whose inputs agree and output does not on the two paths, or why none was found",
}
"""Every code a :class:`~precisionbot.results.Diagnosis` here can carry, in the order docs/architecture.md lists
them, with what it points to."""

CONCENTRATED_MAX_FRACTION = 0.25
"""At most this fraction of the samples diverging (and at least one) reads as "a few requests trigger it"."""
NAMED_SAMPLES = 5
NOTABLE_RATIO = 2.0
"""A statistic that moved by this factor (either way) against the baseline or the previous run is mentioned."""

BaselineStats = Mapping[str, Mapping[str, Any]]
"""Per check name, the baseline run's own ``stats`` for that check."""


def diagnose(
    checks: Sequence[CheckResult],
    *,
    baseline_stats: BaselineStats | None = None,
    previous: RunResult | None = None,
    environment: Mapping[str, Any] | None = None,
    localization: Any = None,
) -> tuple[Diagnosis, ...]:
    """The findings for one run, most telling first. ``environment``: the run's (server args such as
    ``mamba_track_interval`` and ``sliding_window_size`` name the hybrid codes' boundaries); ``localization``:
    result.json's ``localization`` list (one record per localized check; an older run's single object is read
    too), when the run localized a failure (docs/localize.md)."""
    by_name = {c.name: c for c in checks}
    out: list[Diagnosis] = []
    records = [localization] if isinstance(localization, Mapping) else localization
    for record in records if isinstance(records, list) else ():
        op = _first_diverging_op(record)
        if op is not None:
            out.append(op)
    noise = noise_scale(environment)
    primary = _which_helper(by_name, out, noise)
    if primary is None and _failed(by_name.get("golden")):
        primary = by_name["golden"]
        out.append(golden_only(primary, by_name))
    if primary is not None:
        if primary.name in CONSISTENCY_CHECKS:
            # Where the divergence starts first, then what the hybrid boundaries add to it (said once each).
            _onset(primary, out)
            diagnosis_hybrid.state_and_window(primary, by_name.get("match"), environment or {}, out)
        _spread(primary, out)
    # A token id seen with its text anywhere in the run names a text-less worst position too.
    texts = known_token_texts(checks)
    # One sentence for every check's systematic flips: the reason (noise cannot push a token across such a
    # gap) is the same for all of them, so it is said once.
    systematic = _systematic_flips(checks, texts, noise)
    if systematic is not None:
        out.append(systematic)
    for c in checks:
        _flips(c, out)
    if not any(c.verdict is Verdict.FAIL for c in checks) and any(c.verdict is Verdict.PASS for c in checks):
        out.append(_noise(checks))
    if baseline_stats:
        out.extend(_vs_baseline(checks, baseline_stats))
    if previous is not None:
        out.extend(_vs_previous(checks, previous))
    return tuple(out)


def known_token_texts(checks: Sequence[CheckResult]) -> dict[int, str]:
    """Token id → text from every worst position in the run that has one. At a decode divergence the
    candidate generated another token, so the baseline's token there may come without text; the same id
    seen elsewhere in the run gives it one."""
    texts: dict[int, str] = {}
    for c in checks:
        for w in c.worst:
            if w.token_text:
                texts.setdefault(w.token_id, w.token_text)
    return texts


def plain_or_dash(value: float | None) -> str:
    """3 significant figures, so a number compared with a threshold in a sentence shows which side it is on
    (a gap of 1.04 against a margin of 1, not "1 > 1")."""
    return "–" if value is None else plain(value)


def _failed(c: CheckResult | None) -> bool:
    return c is not None and c.verdict is Verdict.FAIL


def _stat(c: CheckResult, key: str) -> float | None:
    value = c.stats.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _max_abs_delta(c: CheckResult, noise: NoiseScale) -> str:
    deltas = [abs(w.delta) for w in c.worst if math.isfinite(w.delta)]
    if not deltas:
        return ""
    d = max(deltas)
    if d > evidence.BUG_DELTA_NATS:
        return f"; its largest cross-path |Δ| is {sig(d)} nats, far above {noise.words}"
    return f"; its largest cross-path |Δ| is {sig(d)} nats"


def _which_helper(by_name: Mapping[str, CheckResult], out: list[Diagnosis], noise: NoiseScale) -> CheckResult | None:
    """Seed 002: only one helper diverging localises the bug. Returns the check the rest of the reading uses."""
    match, prefill, decode = (by_name.get(n) for n in CONSISTENCY_CHECKS)
    batch = by_name.get("batch_invariance")
    if _failed(match) and match is not None:
        out.append(
            Diagnosis(
                ARITHMETIC,
                "match diverged with no cache involved: a kernel computes a different function for decode and "
                "prefill shapes (batch variance or a wrong kernel), and every helper inherits it"
                + _max_abs_delta(match, noise)
                + ".",
                "match",
            )
        )
        return match
    if _failed(batch) and batch is not None:
        out.append(
            Diagnosis(
                ARITHMETIC,
                "batch_invariance failed: the same prompt gives different numbers in different batch shapes "
                "(a reduction that depends on the batch size).",
                "batch_invariance",
            )
        )
    if _failed(prefill) and prefill is not None:
        if match is not None and match.verdict is Verdict.PASS:
            why = "while match passes: the prefix-cache restore path is wrong, not the arithmetic"
        else:
            state = "was not run" if match is None else "is inconclusive"
            why = f"(match {state}, so the arithmetic is not ruled out): suspect the prefix-cache restore path"
        also = (
            " decode_cache_hit diverges too, as its second turn also restores a cached prefix."
            if _failed(decode)
            else ""
        )
        out.append(
            Diagnosis(
                PREFILL_RESTORE,
                f"prefill_cache_hit diverged {why}{_max_abs_delta(prefill, noise)}.{also}",
                prefill.name,
            )
        )
        return prefill
    if _failed(decode) and decode is not None:
        clean = (
            "match and prefill_cache_hit pass"
            if (
                match is not None
                and match.verdict is Verdict.PASS
                and prefill is not None
                and prefill.verdict is Verdict.PASS
            )
            else "the other helpers did not diverge"
        )
        out.append(
            Diagnosis(
                DECODE_STATE,
                f"only decode_cache_hit diverged ({clean}): state written during decode — KV of generated "
                "tokens, a sliding-window handoff or a checkpoint — is wrong when a later request reuses it"
                + _max_abs_delta(decode, noise)
                + ".",
                decode.name,
            )
        )
        return decode
    return batch if _failed(batch) else None


def golden_only(golden: CheckResult, by_name: Mapping[str, CheckResult]) -> Diagnosis:
    """Golden failed and no helper did: prefill and decode agree with each other (and a cache hit with both), so
    the change is one that every path computes alike — a shared op's numerics (attention, GEMM, a norm) against
    the baseline's build — not a cache or state path. Says where golden's KL concentrates."""
    ran = [by_name[n] for n in CONSISTENCY_CHECKS if n in by_name]
    passed = [c.name for c in ran if c.verdict is Verdict.PASS]
    if passed and len(passed) == len(ran):
        why = (
            f"only golden diverged while {', '.join(passed)} pass{'es' if len(passed) == 1 else ''}: prefill and "
            "decode agree with each other, so the change is the same on every path — a shared op's numerics "
            "(attention, GEMM, a norm, a fused kernel) against the baseline's build — not a cache or state path"
        )
    else:
        state = "did not run" if not ran else "could not all be judged"
        why = (
            f"golden diverged and the consistency helpers {state}: a shared op's numerics changed against the "
            "baseline's build, or a cache or state path did (run match and the cache helpers to tell them apart)"
        )
    return Diagnosis(GOLDEN_ONLY, f"{why}; {_golden_where(golden)}.", golden.name)


def _golden_where(golden: CheckResult) -> str:
    """Where golden's KL concentrates: the depth bucket (or decode tail) with the largest KL p99, the kind
    (prose or code) when one stands out, and a drift of the corpus tokens' logprob spread over every position."""
    buckets = [
        (f"context depth {b.get('depth')}", b)
        for b in golden.stats.get("by_depth") or ()
        if isinstance(b, Mapping) and b.get("positions")
    ]
    phases = golden.stats.get("by_phase")
    decode = phases.get("decode") if isinstance(phases, Mapping) else None
    if isinstance(decode, Mapping) and decode.get("positions"):
        buckets.append(("the decode tail", decode))
    scored = [(name, float(b["kl_p99"])) for name, b in buckets if isinstance(b.get("kl_p99"), (int, float))]
    parts = []
    if scored:
        name, top = max(scored, key=lambda x: x[1])
        low = min(v for _, v in scored)
        if top > 0 and (low == 0 or top >= NOTABLE_RATIO * low):
            parts.append(f"its KL concentrates in {name} (KL p99 {sig(top)}, at least {sig(NOTABLE_RATIO)}× the rest)")
        else:
            spread = "its KL is spread across the depths and the decode tail"
            parts.append(f"{spread} (largest KL p99 {sig(top)} in {name})")
    kinds = golden.stats.get("by_kind")
    if isinstance(kinds, Mapping) and len(kinds) > 1:
        p99 = {k: float(v["kl_p99"]) for k, v in kinds.items() if isinstance(v, Mapping) and "kl_p99" in v}
        if len(p99) > 1 and min(p99.values()) > 0 and max(p99.values()) >= NOTABLE_RATIO * min(p99.values()):
            kind = max(p99, key=lambda k: p99[k])
            parts.append(f"{kind} more than the rest (KL p99 {sig(p99[kind])})")
    nll, se = _stat(golden, "nll_increase"), _stat(golden, "nll_increase_se")
    if nll is not None and se is not None and any(r.startswith("systematic drift") for r in golden.reasons):
        parts.append(f"a systematic drift of {sig(nll)} nats/token over every position (a bias, not a few outliers)")
    return "; ".join(parts) if parts else "see golden's KL by depth below"


def _diverging(c: CheckResult) -> list[SampleSummary]:
    return [s for s in c.samples if s.onset is not None]


def _onset(c: CheckResult, out: list[Diagnosis]) -> None:
    """Seed 002: from the first generated token = the state was wrong before generation began."""
    div = _diverging(c)
    if not div:
        return
    first = [s for s in div if s.onset == 0 or s.contiguous_from_first]
    if 2 * len(first) >= len(div):
        out.append(
            Diagnosis(
                ONSET_FIRST_TOKEN,
                f"{c.name}: in {len(first)} of {len(div)} diverging samples the divergence starts at the first "
                "generated token and stays: the state was already wrong when generation began (a restored "
                "prefix or prefill state), not something that happened during decode.",
                c.name,
            )
        )
        return
    onsets = sorted(s.onset for s in div if s.onset is not None and s.onset > 0)
    if onsets[0] == onsets[-1]:
        where = f"at generated token {onsets[0]} in every such sample"
    else:
        where = f"median at generated token {onsets[len(onsets) // 2]}, range {onsets[0]}–{onsets[-1]}"
    out.append(
        Diagnosis(
            ONSET_MID_GENERATION,
            f"{c.name}: the divergence starts mid-generation ({where}): something changes during decode — "
            "a sliding-window handoff, a checkpoint rotation or an eviction.",
            c.name,
        )
    )


def _describe(s: SampleSummary, unit: str = "sample") -> str:
    cached = "" if s.cached_tokens is None else f", {count(s.cached_tokens)} cached"
    return f"{unit} {s.sample} (prompt {count(s.prompt_tokens)} tokens{cached}, max k3 {sig(s.max_k3)})"


def _spread(c: CheckResult, out: list[Diagnosis]) -> None:
    """Seed 002: a few requests trigger it (compare them) vs every request is shifted (a shared cause)."""
    total = len(c.samples)
    div = sorted(_diverging(c), key=lambda s: -s.max_k3)
    if total < 2 or not div:
        return
    # Golden's rows are its corpus rows, not the helpers' samples (they number differently).
    unit = "row" if c.name == "golden" else "sample"
    if len(div) == total:
        out.append(
            Diagnosis(
                GLOBAL,
                f"{c.name}: every {unit} diverges ({total} of {total}): a shift shared by all requests "
                "(a common state or kernel), not a trigger in a few.",
                c.name,
            )
        )
    elif len(div) <= max(1, int(CONCENTRATED_MAX_FRACTION * total)):
        named = ", ".join(_describe(s, unit) for s in div[:NAMED_SAMPLES])
        more = f" and {len(div) - NAMED_SAMPLES} more" if len(div) > NAMED_SAMPLES else ""
        out.append(
            Diagnosis(
                CONCENTRATED,
                f"{c.name}: {len(div)} of {total} {unit}s carry the divergence — {named}{more}; the rest match. "
                "Compare their prompt lengths, cached tokens and page or chunk remainders.",
                c.name,
            )
        )


def _systematic(c: CheckResult) -> list[WorstPosition]:
    return [w for w in c.worst if evidence.read_position(w).systematic_flip]


def _systematic_flips(checks: Sequence[CheckResult], texts: Mapping[int, str], noise: NoiseScale) -> Diagnosis | None:
    """Seed 001: a flip across a gap above 0.4 nats needs a systematic shift. Per check, its widest such flip."""
    parts = []
    for c in checks:
        systematic = _systematic(c)
        if not systematic:
            continue
        w = max(systematic, key=lambda x: x.margin_ref or 0.0)
        text = w.token_text or texts.get(w.token_id, "")
        token = f"\u201c{visible(cap(text, 24))}\u201d" if text else f"id {w.token_id}"
        extra = f"; {len(systematic)} such flips among its worst positions" if len(systematic) > 1 else ""
        where = f"row {w.sample}" if c.name == "golden" else f"sample {w.sample}"
        parts.append(
            f"{c.name} at {where}, position {w.position} (scored token {token}, gap "
            f"{plain_or_dash(w.margin_ref)} nats{extra})"
        )
    if not parts:
        return None
    names = [c.name for c in checks if _systematic(c)]
    return Diagnosis(
        SYSTEMATIC_FLIP,
        f"the top-1 token flips across a top-2 gap above {evidence.SYSTEMATIC_GAP_NATS:g} nats "
        f"({evidence.SYSTEMATIC_GAP_NAME}) that {noise.words} cannot cross, only a systematic logit "
        f"shift can: {'; '.join(parts)}.",
        names[0] if len(names) == 1 else None,
    )


def _flips(c: CheckResult, out: list[Diagnosis]) -> None:
    """Seed 001: many small-gap flips add up — observed flips against the number noise explains."""
    systematic = _systematic(c)
    observed = c.stats.get("flips")
    expected = c.stats.get("expected_flips")
    ev = evidence.flip_evidence(
        int(observed) if isinstance(observed, (int, float)) and math.isfinite(observed) else None,
        float(expected) if isinstance(expected, (int, float)) else None,
        # The golden check's exact Poisson-binomial tail, when it computed one; else a Poisson tail here.
        p_value=_stat(c, "flips_p_value"),
    )
    if ev is None or ev.observed == 0:
        return
    if ev.excess:
        p = "p < 1e-12" if ev.p_value < 1e-12 else f"p = {sig(ev.p_value)}"
        out.append(
            Diagnosis(
                EXCESS_FLIPS,
                f"{c.name}: {count(ev.observed)} top-1 flips where noise explains {sig(ev.expected)} ({p}).",
                c.name,
            )
        )
    elif not systematic:
        out.append(
            Diagnosis(
                NOISE,
                f"{c.name}: {count(ev.observed)} top-1 flips, about what noise explains "
                f"({sig(ev.expected)} expected from the margins).",
                c.name,
            )
        )


def _noise(checks: Sequence[CheckResult]) -> Diagnosis:
    passed = [c for c in checks if c.verdict is Verdict.PASS]
    worst = max(passed, key=lambda c: _stat(c, "max") or 0.0)
    largest = _stat(worst, "max")
    if largest == 0.0:
        subject = "The compared paths" if len(passed) == len(checks) else "Where the checks could judge, the paths"
        return Diagnosis(NOISE, f"{subject} are bit-identical: every per-token k3 is exactly 0.")
    where = "" if largest is None else f" (largest per-token k3 {sig(largest)}, in {worst.name})"
    subject = "The differences" if len(passed) == len(checks) else "Where the checks could judge, the differences"
    return Diagnosis(NOISE, f"{subject} are within the noise band{where}.")


def _moved(now: float | None, then: float | None) -> float | None:
    if now is None or then is None or then <= 0.0 or now <= 0.0:
        return None
    r = now / then
    return r if (r >= NOTABLE_RATIO or r <= 1.0 / NOTABLE_RATIO) else None


def _vs_baseline(checks: Sequence[CheckResult], baseline_stats: BaselineStats) -> list[Diagnosis]:
    out = []
    for c in checks:
        base = baseline_stats.get(c.name)
        if base is None or c.verdict is Verdict.INCONCLUSIVE:
            continue
        key = c.measure.p99_key
        raw = base.get(key)
        then = float(raw) if isinstance(raw, (int, float)) else None
        now = _stat(c, key)
        r = _moved(now, then)
        if r is None:
            continue
        label = "KL p99" if key == "kl_p99" else "p99 k3"
        out.append(
            Diagnosis(
                VS_BASELINE,
                f"{c.name}: {label} is {sig(r)}× the baseline's ({sig(now)} vs {sig(then)}).",
                c.name,
            )
        )
    return out


def _vs_previous(checks: Sequence[CheckResult], previous: RunResult) -> list[Diagnosis]:
    out = []
    for c in checks:
        before = previous.check(c.name)
        if before is None:
            continue
        key = c.measure.p99_key
        now, then = _stat(c, key), _stat(before, key)
        label = "KL p99" if key == "kl_p99" else "p99 k3"
        numbers = f"{label} {sig(then)} → {sig(now)}" if now is not None and then is not None else ""
        if before.verdict is not c.verdict:
            tail = f" ({numbers})" if numbers else ""
            text = f"{c.name}: {before.verdict} → {c.verdict} since the previous run{tail}."
        elif _moved(now, then) is not None:
            text = f"{c.name}: still {c.verdict}; {numbers} since the previous run."
        else:
            continue
        out.append(Diagnosis(VS_PREVIOUS, text, c.name))
    return out


def _first_diverging_op(localization: Any) -> Diagnosis | None:
    """The op a localization named, as the comment's first finding: "first diverging op: layers.1.linear_attn
    (recurrent mixer) at decode step 3: inputs identical, output rel_diff 4.1e-2". A localization that could
    not answer says why; one that found nothing says that too."""
    if not isinstance(localization, Mapping):
        return None
    check = localization.get("check") if isinstance(localization.get("check"), str) else None
    sample = localization.get("sample")
    # Which sample it re-ran: the check's own failing one, by index ("of match's sample 2").
    of = f" of {check}'s sample {sample}" if check and isinstance(sample, int) and not isinstance(sample, bool) else ""
    if of and isinstance(localization.get("baseline_run"), str):
        of += " (against the baseline build's stored tensors)"
    error = localization.get("error")
    if isinstance(error, str):
        label = f"{check} " if check else ""
        return Diagnosis(FIRST_DIVERGING_OP, cap(f"{label}not localized: {error}", 300), check)
    first = localization.get("first_diverging_op")
    if first is None:
        n = localization.get("aligned_positions")
        return Diagnosis(FIRST_DIVERGING_OP, f"localized{of}: no op differs at the {n} positions re-run", check)
    if not isinstance(first, Mapping) or not isinstance(first.get("module"), str):
        return None
    rel = first.get("rel_diff")
    differs = first.get("differs")
    if not isinstance(differs, str):  # an older result.json
        differs = f"inputs identical, output rel_diff {sig(rel) if isinstance(rel, (int, float)) else '?'}"
    where = first.get("where", "?")
    text = f"first diverging op: {first['module']} ({first.get('kind', 'module')}) at {where}{of}: {differs}"
    return Diagnosis(FIRST_DIVERGING_OP, text, check)
