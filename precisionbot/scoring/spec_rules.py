"""The ``spec_decode`` check's own limits and its acceptance rule, shared by the check and the comment side's
re-derivation of its verdict (report/verify.py), so both judge a run by the same numbers. Pure: no I/O.

**When acceptance fell.** Main's figure is either one measurement (the clean builtin engine's spec arm, run in
the same check) or R reruns of main stored with the golden baseline (``baseline record``). A PR's mean
accepted length fell when it is below :func:`acceptance_floor` of main's figures: main's mean less the larger
of two allowances,

* ``ACCEPT_REL_TOL`` of it (vLLM's default tolerance on the mean accepted length), and
* what main's own reruns' spread allows: the one-sided prediction bound for one more rerun of main,
  ``mean - t(1 - ACCEPT_ALPHA; R - 1) * s * sqrt(1 + 1/R)`` (``s``: the reruns' standard deviation).

The second is the test the helpers' main-noise rule makes (``metrics.rerun_stats``): under "the PR is one
more rerun of main" it false-alarms at ``ACCEPT_ALPHA``, exactly for normal per-run figures, and a mean
accepted length is an average over hundreds of verify steps, so close to normal. It widens by itself when
there are few reruns (Student's t with R - 1 degrees of freedom), which "the lowest rerun less a margin"
does not: with 3 reruns the lowest is a poor estimate of how low main goes, and no margin states a false-alarm
rate. On an engine whose reruns agree to the bit (the builtin engine's, one process) ``s`` is 0 and the 5 %
tolerance alone applies, as before.

**Which samples.** Acceptance is a function of the text: with greedy verification the emitted tokens are the
target's argmax, and an n-gram proposer drafts from the text, so a PR whose numerics move a near tie changes
what is drafted after it and moves acceptance with no draft at fault (measured on the builtin engine: a harmless
fp8-scaled attention fell 1.81 → 1.62 over 4 samples, two of whose texts had changed, and read 1.85 = 1.85 on
the other two). Where the engine reports acceptance per request (SGLang's ``meta_info``, the builtin engine's)
and main's per-sample figures are known, the rule compares only the samples whose generated text is main's in
every rerun (:meth:`MainAcceptance.paired`): a draft regression shows there in full, and a changed text is
judged by the check's token and target-logprob parts, not twice. Without per-request figures (vLLM's
server-wide ``/metrics``) the whole run is compared, as before.
"""

from __future__ import annotations

import functools
import hashlib
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from precisionbot.metrics.rerun_stats import t_ppf

ACCEPT_REL_TOL = 0.05
"""vLLM's default relative tolerance on the mean accepted length (``test_acceptance_length.py``)."""
ACCEPT_ALPHA = 0.01
"""False-alarm rate of the spread allowance: a clean PR is one more rerun of main, and falls below the bound
this often (``baselines.vs_main_alpha``'s default, the helpers' main-noise rule)."""
SAMPLED_ALPHA = 1e-3
"""False-alarm rate of the sampled-path test (one chi-square over every tested context)."""


@dataclass(frozen=True)
class Acceptance:
    """A spec arm's acceptance counters over one run: verify steps, drafted tokens, accepted drafted tokens."""

    verify_steps: int
    drafts: int
    accepted: int

    @property
    def mean_length(self) -> float:
        """Tokens per verify, the bonus included (vLLM's ``1 + accepted / drafts``, SGLang's
        ``avg_spec_accept_length``)."""
        return 1.0 + self.accepted / self.verify_steps if self.verify_steps else 1.0

    @property
    def rate(self) -> float:
        return self.accepted / self.drafts if self.drafts else 0.0


def pooled(counts: Iterable[Acceptance]) -> Acceptance:
    """The counters of several requests (or runs) added up: one figure over all their verify steps."""
    verify = drafts = accepted = 0
    for c in counts:
        verify, drafts, accepted = verify + c.verify_steps, drafts + c.drafts, accepted + c.accepted
    return Acceptance(verify, drafts, accepted)


def text_key(output_ids: Sequence[int]) -> str:
    """A short digest of a sample's generated token ids: what says two runs generated the same text (stored
    with main's per-sample acceptance instead of the tokens themselves)."""
    return hashlib.sha256(",".join(map(str, output_ids)).encode("ascii")).hexdigest()[:16]


@dataclass(frozen=True)
class SampleAcceptance:
    """One sample's acceptance counters and the digest of the text it generated (:func:`text_key`)."""

    text: str
    counts: Acceptance


def acceptance_floor(main_lengths: Sequence[float]) -> float:
    """The lowest mean accepted length that is not a fall below main's ``main_lengths`` (one per rerun; one
    figure: the relative tolerance alone). See the module docstring."""
    n = len(main_lengths)
    if n == 0:
        raise ValueError("main's acceptance has no figure")
    mean = math.fsum(main_lengths) / n
    relative = mean * (1 - ACCEPT_REL_TOL)
    if n < 2:
        return relative
    spread = statistics.stdev(main_lengths)
    bound = mean - _t_quantile(n - 1) * spread * math.sqrt(1 + 1 / n)
    return min(relative, bound)


@functools.lru_cache(maxsize=64)
def _t_quantile(df: int) -> float:
    """Student's t at ``1 - ACCEPT_ALPHA`` with ``df`` degrees of freedom (a bisection: kept per df)."""
    return t_ppf(1 - ACCEPT_ALPHA, df)


def acceptance_fell(pr_tokens: float, main_tokens: float | Sequence[float]) -> bool:
    """Whether the mean accepted length fell below main's: one figure (more than ``ACCEPT_REL_TOL`` below it)
    or main's reruns (below :func:`acceptance_floor`)."""
    lengths = [main_tokens] if isinstance(main_tokens, (int, float)) else list(main_tokens)
    return pr_tokens < acceptance_floor(lengths)


@dataclass(frozen=True)
class MainAcceptance:
    """Main's acceptance the PR's is judged against: one figure per rerun, and where they came from."""

    lengths: tuple[float, ...]
    """Mean accepted length per rerun (one entry: a single measurement)."""
    rates: tuple[float, ...]
    stored: bool = False
    """True: main's reruns stored with the golden baseline; False: measured in this check."""
    baseline: str | None = None
    """The stored baseline's run id."""
    samples: tuple[tuple[SampleAcceptance, ...], ...] = ()
    """Per rerun, each sample's counters and text, where the engine reported them per request (else empty)."""

    @classmethod
    def measured(cls, acceptance: Acceptance, samples: Sequence[SampleAcceptance] | None = None) -> MainAcceptance:
        """One figure measured in the check itself (the clean builtin engine's spec arm), with its per-sample
        figures when the engine gave them."""
        return cls((acceptance.mean_length,), (acceptance.rate,), samples=(tuple(samples),) if samples else ())

    def paired(self, pr: Sequence[SampleAcceptance] | None) -> PairedAcceptance | None:
        """Main's and the PR's acceptance over the samples whose text is main's in every rerun (module
        docstring); None when either side lacks per-sample figures, or they are of other sample counts (the
        whole run is compared then)."""
        if not pr or not self.samples or any(len(rerun) != len(pr) for rerun in self.samples):
            return None
        same = [i for i, s in enumerate(pr) if all(rerun[i].text == s.text for rerun in self.samples)]
        pr_counts = pooled(pr[i].counts for i in same)
        reruns = [pooled(rerun[i].counts for i in same) for rerun in self.samples]
        main = MainAcceptance(
            tuple(r.mean_length for r in reruns),
            tuple(r.rate for r in reruns),
            stored=self.stored,
            baseline=self.baseline,
        )
        return PairedAcceptance(main=main, pr=pr_counts, compared=len(same), samples=len(pr))

    @property
    def length(self) -> float:
        return math.fsum(self.lengths) / len(self.lengths)

    @property
    def rate(self) -> float:
        return math.fsum(self.rates) / len(self.rates)

    @property
    def floor(self) -> float:
        return acceptance_floor(self.lengths)

    def fell(self, pr_tokens: float) -> bool:
        return pr_tokens < self.floor

    def tolerance_text(self) -> str:
        """How far below main counts as a fall, in words (the reason's parenthesis)."""
        if not self.stored:
            return f"more than {100 * ACCEPT_REL_TOL:g} % below main"
        relative = self.length * (1 - ACCEPT_REL_TOL)
        by = (
            f"{100 * ACCEPT_REL_TOL:g} %"
            if self.floor >= relative
            else f"their spread (alpha {ACCEPT_ALPHA:g}), wider than {100 * ACCEPT_REL_TOL:g} %"
        )
        return f"below the floor {self.floor:.2f}: main's {len(self.lengths)} stored reruns less {by}"


@dataclass(frozen=True)
class PairedAcceptance:
    """Main's and the PR's acceptance over the ``compared`` of ``samples`` samples whose text is main's."""

    main: MainAcceptance
    pr: Acceptance
    compared: int
    samples: int

    @property
    def judged(self) -> bool:
        """False when no sample kept main's text (nothing to compare: the text change is what moved)."""
        return self.compared > 0

    def fell(self) -> bool:
        return self.judged and self.main.fell(self.pr.mean_length)

    def scope_text(self) -> str:
        """Which samples the figures are over, in words ("" when all)."""
        if self.compared == self.samples:
            return ""
        return f"over the {self.compared} of {self.samples} samples whose text is main's"
