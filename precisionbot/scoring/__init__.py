"""Scoring: every verdict rule, once and pure (numbers in, a verdict and its reasons out; no I/O).

::

    k3.py              the consistency helpers' per-token k3 statistics and rules (SGLang's ``mean_k3 <
                       kl_div`` plus the tail rules), and the cache helpers' judgement against match's noise
    window_step.py     match's window-step rule: a step in the error at the sliding window's edge
    cache_rules.py     the server's prefix-cache rules (page size, mamba checkpoints), to size prompts and
                       explain a miss
    golden_compare.py  golden: the run's teacher-forced record against the baseline's, position by position
    golden_judge.py    golden: the tail, flip and NLL rules on that comparison

The checks (``precisionbot.checks``) call these rules on what they measured; ``report.verify`` calls the same
functions on the numbers a result directory carries, so a verdict re-derived on the trusted side cannot drift
from the one the check gave.
"""
