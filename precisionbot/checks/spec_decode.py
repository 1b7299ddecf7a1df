"""The ``spec_decode`` check: the same build serves the same greedy prompts with speculative decoding and
without, and the sampled path is tested against the target's own probabilities.

Golden's teacher-forced prefill never runs draft and verify, so a spec-decode PR passes it by construction.
Upstream tests each cover one corner: SGLang's greedy parity (exact text), target logprobs
equal to two decimals, vLLM's ``isclose`` per token with the same rank, a floor or a 5 % tolerance on the
mean accepted length, and (vLLM only) the sampled path. This check runs them together on two *arms*, engines
that differ only in the speculative launch option, and says which part caught what:

* **tokens**: the divergence onset per sample. The spec arm verifies with an extend (prefill-like numerics),
  the plain arm decodes, so on a near tie the two may pick differently: a divergence is explained when the
  plain arm's top-2 margin at the onset is below twice the largest |Δ logprob| the arms showed on common
  tokens. The spec arm emitting a token that its own reported distribution does not rank first is never
  noise: acceptance let a non-greedy token through;
* **target logprobs**: k3 per common token (before the onset), plain decode as the reference, with the tails,
  worst positions and per-sample onsets of the other helpers, judged with ``match``'s thresholds (both paths
  differ by the same prefill/decode kernels ``match`` measures);
* **acceptance**: mean accepted length (tokens per verify, the bonus included, vLLM's ``1 + accepted /
  drafts``) and acceptance rate, from the spec arm's ``/server_info`` counters over this run. Main's figure
  is the reference: main's reruns stored with the golden baseline of the run's signature when ``baseline
  record`` kept them at the same sizes and speculation (``checks.spec_main``), else, on the builtin engine,
  the clean engine's spec arm measured here. A fall below ``scoring.spec_rules.acceptance_floor`` (the larger
  of ``ACCEPT_REL_TOL``, vLLM's default, and what main's reruns' spread allows) with the other parts passing
  is a draft regression, not a precision bug, and the finding says so;
* **sampled path**: at ``SAMPLED_TEMPERATURE``, ``SAMPLED_DRAWS`` seeded draws of ``SAMPLED_NEW_TOKENS``
  tokens on ``SAMPLED_PROMPTS`` short prompts (a snippet and the model's greedy continuation, so drafts exist
  and are often the argmax). The second token of each draw (the first verify's, drawn against a draft) is
  grouped by its context; each group's frequencies are compared with the target's probabilities of that
  context (a prefill on the plain arm, top ``SAMPLED_TOP`` ids plus the rest) by a G-test; the groups' G and
  degrees of freedom add up to one chi-square test whose false-alarm rate is ``SAMPLED_ALPHA``.
  Verification that accepts greedily while sampling (sglang#31214) passes every greedy part and fails here.

Arms: the builtin engine launches the arm it is not (its options with or without ``speculative_algorithm``;
spec faults live only on the spec arm). An engine at a URL is one launch (speculation is fixed at launch): with
``engine.spec_url`` (``--spec-engine-url``) naming the same build started with speculation, the two servers are
the arms, and acceptance is read from the spec server (vLLM's ``/metrics`` counters) and judged against main's
stored reruns when there are some, else reported, not judged, with the reason why; without it the check is
INCONCLUSIVE with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from precisionbot.builtin.options import SPEC_FAULTS, EngineOptions
from precisionbot.checks.context import CheckContext
from precisionbot.checks.spec_main import SKIPPED_SHOWN, stored_main
from precisionbot.engines.base import Engine, GenerateRequest, Generation
from precisionbot.engines.builtin import BuiltinEngine
from precisionbot.errors import EngineError
from precisionbot.fmt import plain
from precisionbot.results import CheckOutput, CheckResult, SampleTokens, Verdict
from precisionbot.scoring.k3 import AlignedSample, compare
from precisionbot.scoring.spec_rules import (
    SAMPLED_ALPHA,
    Acceptance,
    MainAcceptance,
    PairedAcceptance,
    SampleAcceptance,
    text_key,
)

NAME = "spec_decode"
DEFAULT_ALGORITHM = "NGRAM"
"""The spec arm's algorithm when the engine under test has none (SGLang's name; no draft model needed)."""
TOP_K = 2
SAMPLED_TEMPERATURE = 1.0
SAMPLED_PROMPTS = 4
SAMPLED_DRAWS = 96
"""Draws per prompt."""
SAMPLED_NEW_TOKENS = 3
"""The first token comes from the prefill; the draft can only propose while tokens are left after it."""
SAMPLED_SNIPPET_TOKENS = 12
SAMPLED_TOP = 8
MIN_EXPECTED = 5.0
"""Bins expecting fewer draws are merged into the rest (the chi-square approximation needs about five)."""
MIN_GROUP = 20
"""Contexts drawn fewer times are left out of the test."""


def _counters(engine: Engine) -> tuple[int, int, int]:
    """The spec arm's cumulative counters (verify steps, drafted tokens, accepted tokens), read fresh
    (``Engine.server_info`` is read once and kept): a client's own ``spec_counters`` (vLLM's ``/metrics``),
    else SGLang's ``/server_info`` ``internal_states`` (the builtin engine's)."""
    own = getattr(engine, "spec_counters", None)
    if callable(own):
        verify_steps, drafts, accepted = own()
        return int(verify_steps), int(drafts), int(accepted)
    http = getattr(engine, "http", None)
    if http is None:
        raise EngineError(f"the {engine.kind} spec arm has no HTTP client to read /server_info from")
    raw = http.json_call("GET", "/server_info", what="/server_info (speculative counters)")
    states = (raw.get("internal_states") if isinstance(raw, dict) else None) or [{}]
    state = states[0] if isinstance(states[0], dict) else {}
    keys = ("spec_verify_ct", "spec_draft_token_num", "spec_accept_token_num")
    if not all(isinstance(state.get(k), int) for k in keys):
        raise EngineError(f"the spec arm's /server_info internal_states lack {', '.join(keys)}")
    return state[keys[0]], state[keys[1]], state[keys[2]]


def measure_acceptance(engine: Engine, requests: Sequence[GenerateRequest]) -> tuple[list[Generation], Acceptance]:
    """Generates ``requests`` and reads the acceptance counters' change over them."""
    before = _counters(engine)
    gens = engine.generate(requests)
    after = _counters(engine)
    return gens, Acceptance(*(b - a for a, b in zip(before, after, strict=True)))


def per_sample(gens: Sequence[Generation]) -> tuple[SampleAcceptance, ...] | None:
    """Each sample's own acceptance and text digest, when the engine reported counters for every request
    (SGLang's and the builtin engine's ``meta_info``); None otherwise (vLLM)."""
    out = []
    for g in gens:
        if g.spec_counts is None:
            return None
        out.append(SampleAcceptance(text_key(g.output_ids), Acceptance(*g.spec_counts)))
    return tuple(out)


def arm_options(engine: Engine) -> tuple[EngineOptions, EngineOptions] | str:
    """(plain, spec) options of the two arms, or why there are not two."""
    options = getattr(engine, "options", None)
    if engine.kind != "builtin" or not isinstance(options, EngineOptions):
        return (
            f"spec_decode needs the same build launched with and without speculation, and precisionbot launches "
            f"both arms only for the builtin engine: this {engine.kind} engine is one launch (speculation is fixed "
            "at launch), so only one arm is available: start the same build with speculative decoding too and pass "
            "it as --spec-engine-url (engine.spec_url)"
        )
    kept = tuple(f for f in options.faults if f.name not in SPEC_FAULTS)
    plain_arm = dataclasses.replace(options, speculative_algorithm=None, faults=kept)
    if options.spec_algorithm is not None:
        return plain_arm, options  # the engine under test is the spec arm
    return plain_arm, dataclasses.replace(options, speculative_algorithm=DEFAULT_ALGORITHM)


@contextlib.contextmanager
def launched_arm(ctx_engine: Engine, options: EngineOptions) -> Iterator[Engine]:
    """The builtin engine with ``options``: ``ctx_engine`` itself when it has them, else one launched here and
    closed on exit."""
    if getattr(ctx_engine, "options", None) == options:
        yield ctx_engine
        return
    engine = BuiltinEngine(options=options)
    try:
        yield engine
    finally:
        engine.close()


def onset(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where the token lists differ (None: identical)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def g_test(groups: Sequence[tuple[Counter[int], dict[int, float]]]) -> tuple[float, int, float]:
    """(G, degrees of freedom, p-value) of observed counts against probabilities, summed over groups.

    Per group, ``probs`` holds some ids' probabilities; the rest of the mass is one bin, and bins expecting
    fewer than ``MIN_EXPECTED`` draws join it. ``G = 2 Σ O ln(O / E)``, chi-square with ``bins - 1`` df.
    """
    g_total, df_total = 0.0, 0
    for counts, probs in groups:
        n = sum(counts.values())
        bins = {t: p for t, p in probs.items() if p * n >= MIN_EXPECTED}
        rest = max(0.0, 1.0 - sum(bins.values()))
        observed = [counts.get(t, 0) for t in bins]
        expected = [p * n for p in bins.values()]
        if rest * n >= MIN_EXPECTED or n - sum(observed):
            observed.append(n - sum(observed))
            expected.append(max(rest, 1e-12) * n)
        if len(observed) < 2:
            continue
        g_total += 2.0 * sum(o * math.log(o / e) for o, e in zip(observed, expected, strict=True) if o)
        df_total += len(observed) - 1
    return g_total, df_total, chi2_sf(g_total, df_total) if df_total else 1.0


def chi2_sf(x: float, df: int) -> float:
    """``P(X > x)`` for X chi-square with ``df`` degrees of freedom: the regularized upper incomplete gamma
    ``Q(df / 2, x / 2)``, by its series below ``a + 1`` and its continued fraction (modified Lentz) above,
    where each converges fast (Numerical Recipes' split). Tested against scipy."""
    a, z = df / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    log_front = -z + a * math.log(z) - math.lgamma(a)
    if z < a + 1:
        term = total = 1.0 / a
        n = 0
        while abs(term) > abs(total) * 1e-15 and n < 10_000:
            n += 1
            term *= z / (a + n)
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = z + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return min(1.0, h * math.exp(log_front))


def _sampled_prompts(plain_arm: Engine, prompts: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Short contexts where drafts exist and are often the target's argmax at a modest probability: a snippet
    and the model's own greedy continuation. The n-gram proposer then drafts the token that followed the last
    one before, which in greedy text is what the target ranked first there; a repeated passage would make
    drafts right where the target is already sure (p ~ 1), which no acceptance bug can change."""
    heads = [(*p[:1], *p[-SAMPLED_SNIPPET_TOKENS:]) for p in prompts[:SAMPLED_PROMPTS]]
    greedy = plain_arm.generate([GenerateRequest(h, SAMPLED_SNIPPET_TOKENS) for h in heads])
    out = []
    for head, g in zip(heads, greedy, strict=True):
        out.append((*head, *g.output_ids))
    return out


def sampled_path(spec: Engine, plain_arm: Engine, prompts: Sequence[tuple[int, ...]]) -> dict[str, Any]:
    """The sampled-path test (module docstring); returns its statistics."""
    short = _sampled_prompts(plain_arm, prompts)
    requests = [
        GenerateRequest(p, SAMPLED_NEW_TOKENS, temperature=SAMPLED_TEMPERATURE, sampling_seed=7919 * i + d + 1)
        for i, p in enumerate(short)
        for d in range(SAMPLED_DRAWS)
    ]
    # The counters say whether speculation took part at all: with no draft proposed (an n-gram proposer finding
    # no match in these short contexts) every draw is a plain sample, and the test judges the sampler, not the
    # verification (measured on vLLM's CPU build with a tiny random model: the same tokens as the plain arm).
    gens, acceptance = measure_acceptance(spec, requests)
    draws: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
    for r, g in zip(requests, gens, strict=True):
        if len(g.output_ids) >= 2:
            # The second token: the first verify's, drawn against a draft (the first comes from the prefill).
            draws[(*r.input_ids, g.output_ids[0])][g.output_ids[1]] += 1
    contexts = [c for c, n in draws.items() if sum(n.values()) >= MIN_GROUP]
    scored = plain_arm.generate(
        [GenerateRequest(c, 1, temperature=SAMPLED_TEMPERATURE, top_logprobs_num=SAMPLED_TOP) for c in contexts]
    )
    groups = []
    for c, g in zip(contexts, scored, strict=True):
        if g.output_top is None:
            raise EngineError("the plain arm returned no top logprobs for the sampled-path contexts")
        probs = {int(t): float(np.exp(lp)) for t, lp in zip(g.output_top.ids[0], g.output_top.logprobs[0], strict=True)}
        groups.append((draws[c], probs))
    g_stat, df, p = g_test(groups)
    return {
        "temperature": SAMPLED_TEMPERATURE,
        "draws": len(requests),
        "contexts": len(groups),
        "g": g_stat,
        "df": df,
        "p_value": p,
        "alpha": SAMPLED_ALPHA,
        "verify_steps": acceptance.verify_steps,
        "drafts": acceptance.drafts,
    }


def _top1(g: Generation) -> np.ndarray[Any, Any]:
    if g.output_top is None:
        raise EngineError("an arm returned no output top logprobs")
    return g.output_top.ids[:, 0]


def greedy_parts(
    plain_gens: Sequence[Generation], spec_gens: Sequence[Generation], prompts: Sequence[tuple[int, ...]]
) -> tuple[list[AlignedSample], dict[str, Any]]:
    """The tokens part's figures and the aligned common tokens for the logprob part."""
    aligned, onsets, violations, margins = [], [], 0, []
    for i, (p, a, b) in enumerate(zip(prompts, plain_gens, spec_gens, strict=True)):
        at = onset(a.output_ids, b.output_ids)
        n = len(a.output_ids) if at is None else at
        onsets.append(at)
        spec_top1 = _top1(b)
        violations += int(np.count_nonzero(spec_top1 != np.asarray(b.output_ids)))
        if at is not None and a.output_top is not None and at < len(a.output_ids):
            lps = a.output_top.logprobs[at]
            margins.append(float(lps[0] - lps[1]) if len(lps) > 1 else math.inf)
        aligned.append(
            AlignedSample(
                sample=i,
                prompt_tokens=len(p),
                position=np.arange(len(p), len(p) + n),
                token_id=np.asarray(a.output_ids[:n], dtype=np.int32),
                lp_ref=a.output_logprobs[:n],
                lp_test=b.output_logprobs[:n],
                top1_ref=spec_top1[:n],
                margin_ref=None
                if a.output_top is None
                else a.output_top.logprobs[:n, 0] - a.output_top.logprobs[:n, 1],
            )
        )
    deltas = [np.abs(s.lp_ref - s.lp_test) for s in aligned if len(s.position)]
    noise = float(max((float(np.max(d)) for d in deltas), default=0.0))
    unexplained = sum(m > 2 * noise for m in margins)
    return aligned, {
        "onsets": onsets,
        "identical_samples": sum(o is None for o in onsets),
        "divergences": len(margins),
        "unexplained_divergences": unexplained,
        "tie_bound_nats": 2 * noise,
        "greedy_violations": violations,
    }


def judge(
    logprob_out: CheckOutput,
    tokens: dict[str, Any],
    acceptance: Acceptance,
    main_acceptance: MainAcceptance | Acceptance | None,
    sampled: dict[str, Any],
    *,
    acceptance_note: str | None = None,
    samples: Sequence[SampleAcceptance] | None = None,
) -> CheckOutput:
    """One verdict from the four parts; every failed part is a reason that names it, and ``caught_by`` lists
    them (the diagnosis reads it). ``main_acceptance``: main's figure (an ``Acceptance`` is one measured in
    the check), None when there is none to judge against; ``samples``: the spec arm's per-sample acceptance
    (``per_sample``), which pairs it with main's sample by sample where main has them too
    (``MainAcceptance.paired``); ``acceptance_note``: a last reason saying where main's figure came from or
    why there is none."""
    main = MainAcceptance.measured(main_acceptance) if isinstance(main_acceptance, Acceptance) else main_acceptance
    paired = None if main is None else main.paired(samples)
    by_sample = paired is not None
    if main is not None and paired is None:  # no per-sample figures: the whole run against main's
        paired = PairedAcceptance(main, acceptance, len(tokens["onsets"]), len(tokens["onsets"]))
    result = logprob_out.result
    reasons: list[str] = []
    caught: list[str] = []
    if result.verdict is Verdict.FAIL:
        caught.append("target logprobs")
        reasons += [f"target logprobs: {r}" for r in result.reasons]
    if tokens["greedy_violations"]:
        caught.append("tokens")
        reasons.append(
            f"tokens: the spec arm emitted {tokens['greedy_violations']} token(s) its own target distribution does "
            "not rank first at temperature 0 (acceptance let a non-greedy token through)"
        )
    if tokens["unexplained_divergences"]:
        caught.append("tokens")
        reasons.append(
            f"tokens: {tokens['unexplained_divergences']} of {len(tokens['onsets'])} samples diverge from the plain "
            f"arm where its top-2 margin exceeds {plain(tokens['tie_bound_nats'])} nats (not a near tie)"
        )
    precision_ok = not caught
    if paired is not None and paired.fell():
        caught.append("acceptance")
        what = "outputs unchanged: a draft regression, not a precision bug" if precision_ok else "outputs changed too"
        scope = f" {paired.scope_text()}" if paired.scope_text() else ""
        reasons.append(
            f"acceptance: acceptance fell {paired.main.length:.2f} → {paired.pr.mean_length:.2f} tokens per verify"
            f"{scope} (rate {paired.main.rate:.2f} → {paired.pr.rate:.2f}; {paired.main.tolerance_text()}), {what}"
        )
    if paired is not None and not paired.judged:
        acceptance_unjudged = (
            f"acceptance: not judged: none of the {paired.samples} samples generated main's text, and acceptance "
            "depends on the text (the tokens and target-logprob parts judge the change)"
        )
        reasons.append(acceptance_unjudged)
    if not sampled["p_value"] >= sampled["alpha"]:
        caught.append("sampled path")
        reasons.append(
            f"sampled path: the emitted tokens' frequencies differ from the target's probabilities at temperature "
            f"{sampled['temperature']:g} (G = {sampled['g']:.1f} on {sampled['df']} df, p = {sampled['p_value']:.2g} "
            f"< alpha {sampled['alpha']:g}, {sampled['draws']} draws over {sampled['contexts']} contexts)"
        )
    # What the sampled path could not judge, said whether or not the check passed (a p of 1 alone reads as a
    # clean verification).
    sampled_notes = []
    if not sampled["df"]:
        sampled_notes.append("sampled path: no context was drawn often enough to test (nothing judged there)")
    if sampled.get("drafts") == 0:
        sampled_notes.append(
            f"sampled path: the spec arm drafted no token in its {sampled['draws']} draws, so no draw went through "
            "verification (nothing of speculation judged there: longer or more repetitive contexts give the "
            "proposer matches)"
        )
    reasons += sampled_notes
    stats = dict(result.stats)
    stats.update(
        arm_samples=len(tokens["onsets"]),
        identical_samples=tokens["identical_samples"],
        divergences=tokens["divergences"],
        unexplained_divergences=tokens["unexplained_divergences"],
        greedy_violations=tokens["greedy_violations"],
        accept_length=acceptance.mean_length,
        accept_rate=acceptance.rate,
        **_main_stats(paired, by_sample),
        sampled_p_value=sampled["p_value"],
        caught_by=sorted(set(caught), key=caught.index),
    )
    if caught:
        verdict = Verdict.FAIL
    else:
        verdict = result.verdict
        reasons = [
            *(f"target logprobs: {r}" for r in result.reasons),
            f"tokens: {tokens['identical_samples']} of {len(tokens['onsets'])} samples identical, every divergence "
            "at a near tie",
            _acceptance_words(acceptance, paired),
            *([acceptance_unjudged] if paired is not None and not paired.judged else []),
            f"sampled path: p = {sampled['p_value']:.2g} ≥ alpha {sampled['alpha']:g} ({sampled['draws']} draws)",
            *sampled_notes,
        ]
    if acceptance_note:
        reasons.append(acceptance_note)
    extra = {**result.extra, "tokens": {k: v for k, v in tokens.items() if k != "onsets"}, "sampled": sampled}
    if main is not None and main.stored:
        extra["main_acceptance"] = {"baseline": main.baseline, "reruns": list(main.lengths), "rates": list(main.rates)}
    return dataclasses.replace(
        logprob_out,
        result=dataclasses.replace(result, verdict=verdict, reasons=tuple(reasons), stats=stats, extra=extra),
    )


def _main_stats(paired: PairedAcceptance | None, by_sample: bool) -> dict[str, Any]:
    """``main_accept_length`` / ``_rate`` (None: nothing to judge against), and the figures the comment side
    re-derives the floor from: ``main_accept_reruns`` (one per rerun, one entry for a figure measured here)
    and, when the samples were paired (``by_sample``), ``accept_length_compared``, the PR's over the
    ``accept_samples_compared`` samples whose text is main's (else the PR's figure is ``accept_length``)."""
    if paired is None:
        return {"main_accept_length": None, "main_accept_rate": None}
    if not paired.judged:
        return {"main_accept_length": None, "main_accept_rate": None, "accept_samples_compared": 0}
    main = paired.main
    out = {
        "main_accept_length": main.length,
        "main_accept_rate": main.rate,
        "main_accept_reruns": list(main.lengths),
        "main_accept_floor": main.floor,
        "main_accept_stored": main.stored,
    }
    if by_sample:
        out |= {"accept_length_compared": paired.pr.mean_length, "accept_samples_compared": paired.compared}
    return out


def _acceptance_words(acceptance: Acceptance, paired: PairedAcceptance | None) -> str:
    """The acceptance part of a passing run's reasons: the PR's figure over the samples compared, main's."""
    whole = f"{acceptance.mean_length:.2f} tokens per verify"
    if paired is None or not paired.judged:
        return f"acceptance: {whole}"
    main = paired.main
    of_main = f"main {main.length:.2f}"
    if main.stored:
        of_main += f" over {len(main.lengths)} stored reruns; floor {main.floor:.2f}"
    if not paired.scope_text():
        return f"acceptance: {whole} ({of_main})"
    return (
        f"acceptance: {paired.pr.mean_length:.2f} tokens per verify {paired.scope_text()} ({of_main}); "
        f"{acceptance.mean_length:.2f} over all {paired.samples}"
    )


def check_spec_decode(ctx: CheckContext) -> CheckOutput:
    if ctx.spec_engine is not None:
        return _check_two_servers(ctx, ctx.spec_engine)
    arms = arm_options(ctx.engine)
    if isinstance(arms, str):
        return CheckOutput(CheckResult.inconclusive(NAME, arms))
    plain_options, spec_options = arms
    prompts = ctx.prompts()
    requests = spec_requests(prompts, ctx.suite.max_new_tokens)
    with launched_arm(ctx.engine, plain_options) as plain_arm:
        ctx.progress.phase(f"{NAME}: plain arm")
        plain_arm.flush_cache()
        plain_gens = plain_arm.generate(requests, progress=ctx.progress.advance)
        with launched_arm(ctx.engine, spec_options) as spec_arm:
            ctx.progress.phase(f"{NAME}: spec arm")
            spec_arm.flush_cache()
            spec_gens, acceptance = measure_acceptance(spec_arm, requests)
            ctx.progress.phase(f"{NAME}: sampled path")
            sampled = sampled_path(spec_arm, plain_arm, prompts)
            stored = stored_main(ctx, spec_arm)
        note = None
        if isinstance(stored, MainAcceptance):
            main_acceptance: MainAcceptance | Acceptance = stored
        elif spec_options.faults:
            # Main: the same speculation without the faults (a spec fault may be what switched it on).
            main_options = dataclasses.replace(
                spec_options, faults=(), speculative_algorithm=spec_options.spec_algorithm
            )
            ctx.progress.phase(f"{NAME}: main's acceptance")
            with launched_arm(ctx.engine, main_options) as main_arm:
                main_arm.flush_cache()
                main_gens, main_counts = measure_acceptance(main_arm, requests)
            main_acceptance = MainAcceptance.measured(main_counts, per_sample(main_gens))
            note = f"acceptance: main's figure is the clean engine's spec arm, run here (no stored figure: {stored})"
        else:
            # No spec fault: this spec arm is the clean engine's.
            main_acceptance = MainAcceptance.measured(acceptance, per_sample(spec_gens))
            note = f"acceptance: main's figure is this clean spec arm's own (no stored figure: {stored})"
    aligned, tokens = greedy_parts(plain_gens, spec_gens, prompts)
    limits = ctx.thresholds.for_check("match")
    extra = {"profile": ctx.profile, "speculative_algorithm": spec_options.spec_algorithm}
    # The plain arm's tokens per sample: what the job's localization re-runs on both arms (localize.failing).
    pairs = enumerate(zip(prompts, plain_gens, strict=True))
    samples = {i: SampleTokens(tuple(p) + g.output_ids, len(p)) for i, (p, g) in pairs}
    out = dataclasses.replace(compare(NAME, aligned, limits, extra=extra), samples=samples)
    own = per_sample(spec_gens)
    judged = judge(out, tokens, acceptance, main_acceptance, sampled, acceptance_note=note, samples=own)
    return judged if isinstance(stored, MainAcceptance) else _skipped(judged, stored)


def spec_requests(prompts: Sequence[tuple[int, ...]], max_new_tokens: int) -> list[GenerateRequest]:
    """The greedy requests both arms serve (and main's acceptance reruns repeat, ``checks.rerun``)."""
    return [GenerateRequest(p, max_new_tokens, top_logprobs_num=TOP_K) for p in prompts]


def _check_two_servers(ctx: CheckContext, spec_arm: Engine) -> CheckOutput:
    """The arms as two running servers of one build: ``ctx.engine`` (plain) and ``spec_arm`` (speculative,
    ``engine.spec_url``). Acceptance is judged against main's stored reruns when the baseline has them for this
    run's sizes and speculation; otherwise it is measured and reported, not judged, and the reasons say why."""
    prompts = ctx.prompts()
    requests = spec_requests(prompts, ctx.suite.max_new_tokens)
    ctx.progress.phase(f"{NAME}: plain arm")
    ctx.engine.flush_cache()
    plain_gens = ctx.engine.generate(requests, progress=ctx.progress.advance)
    ctx.progress.phase(f"{NAME}: spec arm")
    spec_arm.flush_cache()
    spec_gens, acceptance = measure_acceptance(spec_arm, requests)
    ctx.progress.phase(f"{NAME}: sampled path")
    sampled = sampled_path(spec_arm, ctx.engine, prompts)
    aligned, tokens = greedy_parts(plain_gens, spec_gens, prompts)
    extra = {"profile": ctx.profile, "spec_url": spec_arm.url}
    out = compare(NAME, aligned, ctx.thresholds.for_check("match"), extra=extra)
    stored = stored_main(ctx, spec_arm)
    if isinstance(stored, MainAcceptance):
        return judge(out, tokens, acceptance, stored, sampled, samples=per_sample(spec_gens))
    note = f"acceptance: not judged (no stored figure of main's: {stored}; the mean accepted length is reported)"
    return _skipped(judge(out, tokens, acceptance, None, sampled, acceptance_note=note), stored)


def _skipped(out: CheckOutput, why: str) -> CheckOutput:
    """``extra["main_acceptance"]["skipped"]``: why main's stored acceptance was not used, with a ``brief`` (the
    words ``check``'s stderr and the comment show) when a stored figure was set up and still did not serve:
    recorded at other sizes, unusable, or a store that failed. No stored acceptance at all stays quiet."""
    info = {"skipped": why}
    if why.startswith(SKIPPED_SHOWN):
        info["brief"] = why.split(" (")[0].split(":")[0]
    result = out.result
    return dataclasses.replace(out, result=dataclasses.replace(result, extra={**result.extra, "main_acceptance": info}))
