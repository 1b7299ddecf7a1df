"""Run results for the HTML report's tests: one with every chart, one whose untrusted text attacks the page.

Hand-built like ``scenarios.py`` (data, not engine output), with per-position arrays: a golden record with
top-k logprobs (so the scatter, the KL lines and the CDF have something to draw) and a broken prefix restore.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from precisionbot.report import ReportSection
from precisionbot.results import CheckResult, PositionRecord, Verdict, WorstPosition
from tests.report import scenarios


def golden_record(n_samples: int = 6, n_pos: int = 700, k: int = 8, shift_from: int = 300) -> PositionRecord:
    """Teacher-forced positions with top-k on both sides; past ``shift_from`` the candidate's logits drift
    more with depth (the fp8 attention picture), so some top-1s flip."""
    rng = np.random.default_rng(3)
    n = n_samples * n_pos
    sample = np.repeat(np.arange(n_samples), n_pos).astype(np.int32)
    position = np.tile(np.arange(n_pos), n_samples).astype(np.int32)
    logits = rng.normal(0.0, 2.0, (n, k + 4))
    ids = np.tile(np.arange(k + 4), (n, 1))
    drift = np.where(position >= shift_from, 0.02 * (position - shift_from) / 100.0, 0.0)[:, None]
    test_logits = logits + rng.normal(0.0, 1e-3, logits.shape) + drift * rng.normal(0.0, 3.0, logits.shape)

    def topk(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lp = x - np.log(np.sum(np.exp(x), axis=1, keepdims=True))
        order = np.argsort(-lp, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(ids, order, axis=1).astype(np.int32), np.take_along_axis(lp, order, axis=1)

    rid, rlp = topk(logits)
    tid, tlp = topk(test_logits)
    return PositionRecord(
        sample=sample,
        position=position,
        token_id=rid[:, 0].copy(),
        lp_ref=rlp[:, 0].copy(),
        lp_test=tlp[:, 0].copy(),
        top_ids_ref=rid,
        top_lp_ref=rlp.astype(np.float32),
        top_ids_test=tid,
        top_lp_test=tlp.astype(np.float32),
    )


def charts() -> list[ReportSection]:
    """Every chart: per-position lines for three checks, golden's scatter, buckets, depth and prose/code CDF."""
    base = scenarios.prefill_restore()[0]
    golden_fail = scenarios.golden_failure()[0].run.check("golden")
    assert golden_fail is not None
    golden = replace(
        golden_fail,
        stats={**golden_fail.stats, "confident_flip_limit_nats": 0.42},
        extra={"sample_kinds": ["prose", "code", "prose", "code", "prose", "code"]},
    )
    checks = tuple(golden if c.name == "golden" else c for c in base.run.checks)
    run = replace(base.run, checks=checks, environment={**base.run.environment, "chunked_prefill_size": 64})
    records = {**base.records, "golden": golden_record()}
    return [replace(base, run=run, records=records)]


def hostile_texts(base_url: str) -> tuple[str, ...]:
    """Token text that tries to run script, load something from ``base_url``, or break out of the markup."""
    return (
        f"<script>window.__pwned=1;fetch('{base_url}/script')</script>",
        f'<img src="{base_url}/img" onerror="window.__pwned=2">',
        f"<svg onload=\"window.__pwned=3\"><image href='{base_url}/svg'/></svg>",
        f"<style>@import url({base_url}/css);</style>",
        f'<link rel="stylesheet" href="{base_url}/link">',
        f'<iframe src="{base_url}/iframe"></iframe>',
        f'<meta http-equiv="refresh" content="0;url={base_url}/refresh">',
        f'"><a href="javascript:window.__pwned=4">x</a><img src="{base_url}/attr',
        "]]></text></svg><script>window.__pwned=5</script>",
        "{{ 7*7 }} {% raw %}",
        "@octocat #12 \u202eevil\x07",
    )


def hostile(base_url: str) -> list[ReportSection]:
    texts = hostile_texts(base_url)
    worst = tuple(
        WorstPosition(
            sample=i,
            position=100 + i,
            token_id=i,
            token_text=text,
            lp_ref=-0.5,
            lp_test=-1.5 - 0.1 * i,
            delta=1.0 + 0.1 * i,
            k3=0.7 + 0.01 * i,
            margin_ref=0.6,
            flip=i % 2 == 0,
            context_before=texts[(i + 1) % len(texts)],
            context_after=texts[(i + 2) % len(texts)],
        )
        for i, text in enumerate(texts)
    )
    check = CheckResult(
        name="match",
        verdict=Verdict.FAIL,
        reasons=(f"max k3 1.2 > 0.5 {texts[0]}", texts[1]),
        stats=scenarios.stats(0.01, 0.2, 1.2, 0.05),
        worst=worst,
        samples=scenarios.samples(len(texts), diverging=range(len(texts)), onset=3, contiguous=False),
    )
    hostile_name = CheckResult(
        name=f"<img src={base_url}/name>",
        verdict=Verdict.FAIL,
        reasons=(texts[2],),
        stats=scenarios.stats(0.01, 0.2, 1.2, 0.05),
    )
    # Labels a chart draws (golden's depth buckets) are result-file text too: math text and markup.
    depth = [
        {"depth": label, "positions": 100, "kl_p50": 1e-5, "kl_p99": 1e-3, "kl_max": 0.1, "flips": 1}
        for label in ("$\\frac{1}{0}$", texts[0], "$x^{")
    ]
    golden = CheckResult(
        name="golden",
        verdict=Verdict.PASS,
        stats=scenarios.stats(1e-6, 1e-5, 1e-4, 0.0, kl_p50=1e-6, kl_p99=1e-5, kl_max=1e-4, by_depth=depth),
    )
    record = scenarios.restore_record(n_samples=2, n_pos=50)
    run = scenarios.run([check, hostile_name, golden], model=texts[0], gpu=texts[3])
    records = {"match": record, hostile_name.name: record}
    return [ReportSection(label=texts[1], run=run, records=records)]
