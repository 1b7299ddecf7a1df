"""The rows and lines of one section of the report view: the check table, the worst positions, the
environment line and the headline. Pure: every value comes out formatted and escaped."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from precisionbot.fmt import count, logprob, percent, ratio, short_sha, sig, signed
from precisionbot.metrics.rerun_stats import MainComparison, describe
from precisionbot.metrics.routing import share
from precisionbot.report import evidence
from precisionbot.report.diagnosis import BaselineStats
from precisionbot.report.escape import label_text, markdown_text, prose, token_cell, visible
from precisionbot.report.evidence import (
    NEAR_TIE_NAME,
    SYSTEMATIC_GAP_NAME,
    SYSTEMATIC_GAP_NATS,
    UNATTRIBUTABLE_GAP_NATS,
)
from precisionbot.report.golden_positions import GoldenPosition, golden_positions
from precisionbot.report.noise_words import UNKNOWN, NoiseScale
from precisionbot.results import CheckResult, PositionRecord, RunResult, Verdict, WorstPosition
from precisionbot.results.cost import PRICES_AS_OF

ICONS = {Verdict.PASS: "✅", Verdict.FAIL: "❌", Verdict.INCONCLUSIVE: "⚠️"}
FRAC_KEY = "1e-2"
"""The ``frac_over`` threshold shown in the table (the default per-token "over" threshold, ``token_k3``)."""


def legend(noise: NoiseScale, *, golden: bool = False) -> str:
    """The table's legend, already Markdown (no untrusted text); the noise scale is the run's precision's. It
    names each flip threshold the comment prints, so none reads as a bare number; ``golden``: what golden's rows
    and its confident-flip margin are."""
    text = (
        "k3: per token, e^δ − 1 − δ ≈ δ²/2 of the logprob difference δ = lp\\_ref − lp\\_test, in nats "
        "(natural-log units). Mean of k3: SGLang's mean, the mean over samples of each sample's mean k3, what "
        "SGLang's `kl_div` threshold gates. KL (golden): the divergence of the two next-token distributions over "
        "the baseline's top-k tokens plus the rest; its mean is over positions. Top-2 gap (margin): the "
        "reference's top-1 minus top-2 logprob, the push a top-1 flip needs, against "
        f"{markdown_text(noise.words, spaces=False)}; a flip across more than {SYSTEMATIC_GAP_NATS:g} nats "
        f"({SYSTEMATIC_GAP_NAME}) needs a systematic shift, one under {UNATTRIBUTABLE_GAP_NATS:g} nats is "
        f"{NEAR_TIE_NAME} that noise flips."
    )
    if golden:
        text += (
            " Golden's rows are its own corpus rows (each document teacher-forced, then its decode continuation), "
            "not the helpers' samples; golden fails on a flip at a baseline margin above its confident-flip "
            "margin (`confident_flip_margin`, or the noise band's largest flip margin)."
        )
    return text


LEGEND = legend(UNKNOWN)
"""The legend when the run's precision is unknown."""


@dataclass(frozen=True)
class CheckRow:
    name: str
    icon: str
    verdict: str
    positions: str
    measure: str
    """What the mean / p99 / max cells measure: per-token k3 (SGLang's mean) or golden's KL."""
    mean: str
    p99: str
    max: str
    frac_over: str
    flips: str
    vs_baseline: str
    vs_previous: str
    vs_main: str = ""
    """A helper against main's reruns: ``2.1× main, p < 0.001`` or ``within main's noise (...)``; "" if none."""
    numbers: str = "–"
    """``k3 0.33 · 4.7 · 8.1``: the measure and its mean · p99 · max in one cell."""
    acceptance: str = ""
    """``spec_decode``: mean accepted length main → PR (``acceptance 1.81 → 1.50 tokens``); "" elsewhere."""
    why: str = "–"
    """The first reason, cut to what it measured against its limit (:func:`short_reason`); an inconclusive
    check's whole first reason (its fix is the point)."""
    reasons: tuple[str, ...] = ()
    """Every reason in full (the details list them under "Every reason")."""


@dataclass(frozen=True)
class WorstRow:
    check: str
    sample: str
    position: str
    token: str
    lp_ref: str
    lp_test: str
    delta: str
    k3: str
    gap: str
    flip: str
    reading: str
    where: str = ""
    """``2 · 79``: sample and position in one cell (the comment's table stays at seven columns)."""
    logprobs: str = ""
    """``-9.71 → -0.642``: reference → test."""
    delta_k3: str = ""
    """``-9.1 · 8.1``: Δ and k3."""
    gap_flip: str = ""
    """``5.7 · flip``: the top-2 gap, and whether the top-1 token changed."""
    before: str = ""
    """Context: the text of a few tokens before (escaped like the token; shown by the HTML report)."""
    after: str = ""
    topk_ref: str = ""
    """Golden: the baseline's top entries at the position (the HTML report shows both sides), when stored."""
    topk_test: str = ""


def _stat(stats: Mapping[str, Any], key: str) -> float | None:
    v = stats.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def versus(now: float | None, then: float | None, then_word: str = "baseline") -> str:
    """A comparison cell that reads on its own next to the row's p99: ``×12 ↑ (baseline 0.047)``,
    ``≈ (was 0.48)``, ``0 (baseline 3e-05)``, ``both 0``; ``–`` when either side is unknown."""
    if now is None or then is None or math.isnan(now) or math.isnan(then):
        return "–"
    if then == 0.0 or now == 0.0:
        return "both 0" if now == then else f"{sig(now)} ({then_word} {sig(then)})"
    return f"{ratio(now, then)} ({then_word} {sig(then)})"


def baseline_info(run: RunResult) -> Mapping[str, Any] | None:
    """The baseline compared against: ``run.baseline``, else what the golden check recorded about it."""
    if run.baseline is not None:
        return run.baseline
    golden = run.check("golden")
    info = golden.extra.get("baseline") if golden is not None else None
    return info if isinstance(info, Mapping) else None


def check_row(
    c: CheckResult, base: BaselineStats | None, previous: RunResult | None, base_word: str = "baseline"
) -> CheckRow:
    """One row of the check table; the "vs" cells compare the row's p99 (golden: KL p99)."""
    s = c.stats
    m = c.measure
    kl = m.name == "KL"
    # A check that compared nothing (0 positions, e.g. too few cache hits) shows only its cache cell, or "–".
    cells = [count(_stat(s, "positions"))] if s.get("positions") else []
    if c.cache is not None:
        cells.append(f"{c.cache.kept}/{c.cache.total} cache hits")
    positions = " · ".join(cells) or "–"
    frac = s.get("frac_over")
    # ``frac_over`` is of per-token k3; a golden row shows KL, so a k3 fraction there would mix measures.
    frac_cell = percent(_stat(frac, FRAC_KEY)) if isinstance(frac, Mapping) and FRAC_KEY in frac and not kl else "–"
    flips = "–"
    if "flips" in s:
        flips = count(_stat(s, "flips"))
        if "confident_flips" in s:
            flips += f" ({count(_stat(s, 'confident_flips'))} confident)"
    key = m.p99_key
    vs_base = "–"
    if base is not None and c.name in base and c.verdict is not Verdict.INCONCLUSIVE:
        vs_base = versus(_stat(s, key), _stat(base[c.name], key), base_word)
    vs_prev = "–"
    before = previous.check(c.name) if previous is not None else None
    if before is not None:
        vs_prev = (
            f"{before.verdict} → {c.verdict}"
            if before.verdict is not c.verdict
            else versus(_stat(s, key), _stat(before.stats, key), "was")
        )
    mean = sig(_stat(s, m.mean_key))
    p99 = sig(_stat(s, m.p99_key))
    top = sig(_stat(s, m.max_key))
    # A check that measured nothing has no measure to name.
    measure = "–" if mean == p99 == top == "–" else m.name
    return CheckRow(
        name=label_text(c.name),
        icon=ICONS[c.verdict],
        verdict=str(c.verdict),
        positions=positions,
        measure=measure,
        numbers=routing_cell(c) or ("–" if measure == "–" else f"{measure} {mean} · {p99} · {top}"),
        why=why_cell(c),
        reasons=tuple(prose(r) for r in c.reasons),
        mean=mean,
        p99=p99,
        max=top,
        frac_over=frac_cell,
        flips=flips,
        vs_baseline=vs_base,
        vs_previous=vs_prev,
        vs_main=vs_main_cell(c),
        acceptance=acceptance_cell(c),
    )


def routing_cell(c: CheckResult) -> str:
    """``routing``'s lowest per-layer agreement and the first layer whose routing moved; "" elsewhere."""
    low, first = c.stats.get("min_exact"), c.stats.get("first_moved_layer")
    if c.name != "routing" or not isinstance(low, int | float):
        return ""
    moved = f" · first moved: layer {first}" if isinstance(first, int) else ""
    return f"top-k agreement ≥ {share(low)}{moved}"


def acceptance_cell(c: CheckResult) -> str:
    """``spec_decode``'s mean accepted length (tokens per verify), main → PR when main's is known, over the
    samples compared (those whose text is main's, when the engine reports acceptance per request)."""
    pr, main = c.stats.get("accept_length"), c.stats.get("main_accept_length")
    if c.name != "spec_decode" or not isinstance(pr, int | float):
        return ""
    skipped = c.extra.get("main_acceptance")
    unused = ""
    if isinstance(skipped, Mapping) and skipped.get("brief"):  # a stored figure was set up, yet not used
        unused = f" (main's stored figure not used: {prose(str(skipped['brief']))})"
    compared, samples = c.stats.get("accept_samples_compared"), c.stats.get("arm_samples")
    if compared == 0:
        return f"acceptance {pr:.2f} tokens (not judged: no sample kept main's text){unused}"
    partial = isinstance(compared, int) and isinstance(samples, int) and compared < samples
    judged = c.stats.get("accept_length_compared", pr)
    if partial and isinstance(judged, int | float):
        scope = f" on the {compared} of {samples} samples with main's text"
        shown = f"{main:.2f} → {judged:.2f}" if isinstance(main, int | float) and main != judged else f"{judged:.2f}"
        return f"acceptance {shown} tokens{scope}{unused}"
    if isinstance(main, int | float) and main != pr:
        return f"acceptance {main:.2f} → {pr:.2f} tokens{unused}"
    return f"acceptance {pr:.2f} tokens{unused}"


def why_cell(c: CheckResult) -> str:
    """The Why cell: the first reason cut short (an inconclusive check's whole: its fix is the point), and how
    many more a failing check has (listed in full under "Every reason")."""
    if not c.reasons:
        return "–"
    if c.verdict is Verdict.INCONCLUSIVE:
        return prose(c.reasons[0])
    more = len(c.reasons) - 1
    tail = f" (+{more} more below)" if c.verdict is Verdict.FAIL and more else ""
    return prose(short_reason(c.reasons[0]) + tail)


SEPARATORS = ("; ", ": ", " (")
MIN_WORDS = 3


def short_reason(reason: str) -> str:
    """What a reason measured against its limit, without the explanation after it: the text up to the first
    ``; ``, ``: `` or `` (``, joined with the next piece while that leaves fewer than three words
    (``regression: per-sample mean k3 is 3.51× main's, above the 1.5× floor``). The reasons in ``scoring/`` put
    the figure and its limit first for this."""
    cut = 0
    while True:
        found = [(reason.find(sep, cut), sep) for sep in SEPARATORS if reason.find(sep, cut) >= 0]
        if not found:
            return reason
        at, sep = min(found)
        head = reason[:at]
        if len(head.split()) >= MIN_WORDS:
            return head
        cut = at + len(sep)


def vs_main_cell(c: CheckResult) -> str:
    """The helper's comparison with main's reruns (``metrics.rerun_stats.describe``), re-derived from the numbers
    ``result.json`` carries rather than its stored text."""

    info = c.extra.get("vs_main")
    if isinstance(info, Mapping) and info.get("brief") and "p_value" not in info:
        return f"not compared with main's noise: {prose(str(info['brief']))}"  # set up, yet skipped
    if not isinstance(info, Mapping) or "p_value" not in info:
        return ""
    try:
        low, high = (float(x) for x in info["ci95"])
        comparison = MainComparison(
            ratio=float(info["ratio"]),
            ci_low=low,
            ci_high=high,
            p_value=float(info["p_value"]),
            reruns=int(info["reruns"]),
            samples=int(info["samples"]),
            ratio_of_means=float(info.get("ratio_of_means", math.nan)),
            alpha=float(info["alpha"]),
            min_ratio=float(info["min_ratio"]),
        )
    except (KeyError, TypeError, ValueError):
        return ""
    return prose(describe(comparison))


def token_label(token_id: int, text: str, texts: Mapping[int, str] | None = None, flip: bool | None = None) -> str:
    """The token cell: its text, else the same id's text seen elsewhere in the run, else ``id N``; ``flip``
    (golden's flips only: golden takes token text from the candidate's output, which took another token at a
    decode divergence) adds why there is no text."""
    if text:
        return token_cell(text)
    known = (texts or {}).get(token_id)
    if known:
        return f"{token_cell(known)} (id {token_id})"
    return f"id {token_id} (no text: test took another token)" if flip else f"id {token_id}"


def worst_rows(
    checks: Sequence[CheckResult],
    limit: int,
    texts: Mapping[int, str] | None = None,
    *,
    passing: bool = True,
    records: Mapping[str, PositionRecord] | None = None,
) -> tuple[tuple[WorstRow, ...], int]:
    """The worst positions of each check, failing checks first; ``passing=False`` leaves out passing checks'
    (their positions are within the thresholds: the comment has no room for rows that explain nothing).
    ``records``: the per-position arrays, from which golden's rows get their KL and both sides' top-k."""
    rows: list[WorstRow] = []
    omitted = 0
    ordered = sorted(checks, key=lambda c: c.verdict is not Verdict.FAIL)
    for c in ordered:
        if not passing and c.verdict is Verdict.PASS:
            continue
        # A position with no difference at all (bit-identical paths) tells the reader nothing.
        shown = tuple(w for w in c.worst if not (w.delta == 0.0 and w.k3 == 0.0 and not w.flip))
        golden = c.name == "golden"
        extra = golden_positions((records or {}).get(c.name), shown, texts or {}) if golden else {}
        # Golden is judged by KL (and chose these rows by it): its rows keep that order when the KL is known.
        worst = sorted(shown, key=lambda w: -_order_key(w, extra.get((w.sample, w.position))))
        omitted += max(0, len(worst) - limit)
        for w in worst[:limit]:
            rows.append(_worst_row(c, w, texts, extra.get((w.sample, w.position))))
    return tuple(rows), omitted


def _order_key(w: WorstPosition, extra: GoldenPosition | None) -> float:
    value = extra.kl if extra is not None else w.k3
    return value if math.isfinite(value) else math.inf


def _worst_row(
    c: CheckResult, w: WorstPosition, texts: Mapping[int, str] | None, extra: GoldenPosition | None
) -> WorstRow:
    golden = c.name == "golden"
    kl_limit = _stat(c.stats, "kl_limit_nats") if golden else None
    ev = evidence.read_position(w, kl=None if extra is None else extra.kl, kl_limit=kl_limit)
    reading = f"{ev.reading} ({ev.why})"
    if c.verdict is Verdict.PASS and ev.reading is evidence.Reading.BUG:
        # The check's thresholds judged these positions together and passed them: one position's size
        # alone does not make a bug of a passing check.
        reading = f"{evidence.Reading.UNCLEAR} ({ev.why}, but {c.name} passed)"
    flip = "–" if w.flip is None else ("yes" if w.flip else "no")
    gap = sig(w.margin_ref)
    measure = f"KL {sig(extra.kl)}" if extra is not None else sig(w.k3)
    # Golden's rows are its corpus rows, not the helpers' samples: "row 7" cannot pass for a sample of a 4-sample run.
    where = f"{'row ' if golden else ''}{w.sample} · {count(w.position)}"
    return WorstRow(
        check=label_text(c.name),
        sample=str(w.sample),
        position=count(w.position),
        # No text (the engine gave none): the id is still something to grep for.
        token=token_label(w.token_id, w.token_text, texts, golden and bool(w.flip)),
        lp_ref=logprob(w.lp_ref),
        lp_test=logprob(w.lp_test),
        delta=signed(w.delta),
        k3=measure,
        gap=gap,
        flip=flip,
        reading=prose(reading),
        where=where,
        logprobs=f"{logprob(w.lp_ref)} → {logprob(w.lp_test)}",
        delta_k3=f"{signed(w.delta)} · {measure}",
        gap_flip=f"{gap} · flip" if w.flip else gap,
        before=markdown_text(visible(w.context_before)) if w.context_before else "",
        after=markdown_text(visible(w.context_after)) if w.context_after else "",
        topk_ref="" if extra is None else extra.topk_ref,
        topk_test="" if extra is None else extra.topk_test,
    )


def environment_line(run: RunResult) -> str:
    """Model, hardware, engine, baseline and what the run cost; a field the run does not know is left out
    (never printed as ``–``)."""
    env = run.environment
    parts = []
    model = env.get("model") or env.get("model_path")
    if model:
        parts.append(f"model {label_text(str(model))}")
    for key, name in (("tp", "tp"), ("gpu", "GPU"), ("dtype", "dtype"), ("suite", "suite")):
        if env.get(key) not in (None, "", "auto"):
            parts.append(f"{name} {label_text(str(env[key]))}")
    engine = " ".join(
        label_text(v) for v in (run.engine.kind, short_sha(run.engine.commit) if run.engine.commit else "") if v
    )
    if engine:
        parts.append(f"engine {engine}")
    b = baseline_info(run)
    ab = run.extra.get("ab")
    if isinstance(ab, Mapping):
        parts.append(ab_text(ab))
    elif b is None:
        parts.append("no baseline")
    else:
        sha = b.get("engine_commit") or b.get("commit")
        when = b.get("date") or b.get("created") or b.get("recorded_at")
        text = "baseline"
        if sha:
            text += f" {label_text(short_sha(str(sha)))}"
        if when:
            text += f" from {label_text(str(when)[:10])}"
        parts.append(text if text != "baseline" else "baseline of unknown origin")
    cost = cost_text(run.extra.get("timing"))
    if cost:
        parts.append(cost)
    return " · ".join(parts)


def cost_text(timing: Any) -> str:
    """``checks 4.1 GPU-min on g6e.xlarge ≈ 0.13 USD (on-demand list price 2025-06)``, or the wall time alone when
    the machine is unknown; "" without a timing."""
    if not isinstance(timing, Mapping):
        return ""
    wall = _stat(timing, "wall_s")
    if wall is None or wall < 0:
        return ""
    minutes = wall / 60.0
    gpu_minutes = _stat(timing, "gpu_minutes")
    kind = timing.get("instance_type")
    if gpu_minutes is None or not isinstance(kind, str) or not kind:
        return f"checks took {_minutes(minutes)}"
    text = f"checks took {_minutes(minutes)}, {_minutes(gpu_minutes, 'GPU-min')} on {label_text(kind)}"
    usd = _stat(timing, "usd")
    if usd is not None:
        source = timing.get("price_source")
        where = label_text(str(source)) if isinstance(source, str) and source else f"list price {PRICES_AS_OF}"
        # "USD", not "$": GitHub renders text between two dollar signs as math.
        text += f" ≈ {usd:.2f} USD ({where})"
    return text


def _minutes(value: float, unit: str = "min") -> str:
    if unit == "min" and value < 1.0:
        return f"{value * 60:.0f} s"
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def ab_text(ab: Mapping[str, Any]) -> str:
    """``A/B on one runner against merge-base abc1234 (0.4 GPU minutes)`` and, when the stored baseline of
    the signature was made elsewhere, how (the difference the A/B stepped round)."""
    minutes = ab.get("gpu_minutes")
    cost = f" ({minutes:.2g} GPU minutes)" if isinstance(minutes, (int, float)) else ""
    text = f"A/B on one runner against merge-base {label_text(str(ab.get('merge_base') or '')[:7])}{cost}"
    diff = ab.get("stored_fingerprint_diff")
    if isinstance(diff, list) and diff:
        text += f"; the stored baseline was recorded in another environment: {label_text('; '.join(map(str, diff)))}"
    return text


def headline(run: RunResult) -> str:
    """``prefill_cache_hit, decode_cache_hit, golden diverged; match within thresholds (1 flip at a near-tie)``:
    a passing check is called clean only when it has no top-1 flip (a flip is a difference, however small)."""
    by = {v: [c for c in run.checks if c.verdict is v] for v in Verdict}
    if run.verdict is Verdict.FAIL:
        text = f"{', '.join(c.name for c in by[Verdict.FAIL])} diverged"
        clean = [c.name for c in by[Verdict.PASS] if not _flip_count(c)]
        flipped = [_passed_with_flips(c) for c in by[Verdict.PASS] if _flip_count(c)]
        if clean:
            text += f"; {', '.join(clean)} clean"
        if flipped:
            text += f"; {', '.join(flipped)}"
    elif run.verdict is Verdict.INCONCLUSIVE:
        names = ", ".join(c.name for c in by[Verdict.INCONCLUSIVE])
        text = f"could not judge {names}" if names else "no checks ran"
    else:
        text = f"{len(run.checks)} check{'s' if len(run.checks) != 1 else ''} within thresholds"
    return prose(text)


def _flip_count(c: CheckResult) -> int:
    flips = _stat(c.stats, "flips")
    return int(flips) if flips is not None and math.isfinite(flips) else 0


def _passed_with_flips(c: CheckResult) -> str:
    """``match within thresholds (2 flips at near-ties)``: near-ties when every flip is among the worst positions
    and each sits at a top-2 gap under the near-tie gap (below which noise flips a token)."""
    n = _flip_count(c)
    flips = [w for w in c.worst if w.flip]
    ties = len(flips) == n and all(w.margin_ref is not None and w.margin_ref < UNATTRIBUTABLE_GAP_NATS for w in flips)
    what = f"{count(n)} flip{'s' if n != 1 else ''}"
    where = (" at near-ties" if n != 1 else " at a near-tie") if ties else ""
    return f"{c.name} within thresholds ({what}{where})"
