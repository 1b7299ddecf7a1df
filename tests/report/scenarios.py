"""Hand-built run results for the report tests: one per comment path (they are data, not engine output).

The numbers are chosen to look like the real thing (the cache bug of docs/background.md for the restore bug, bf16-noise
magnitudes for clean checks) and to be deterministic: the golden Markdown files depend on every digit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from precisionbot.report import ReportSection
from precisionbot.results import (
    CacheStats,
    CheckResult,
    EngineInfo,
    PositionRecord,
    RunResult,
    SampleSummary,
    Verdict,
    WorstPosition,
)

ENGINE = EngineInfo(url="http://127.0.0.1:30000", kind="sglang", commit="9f3c2e1d4b5a69788766554433221100ffeeddcc")
ENV = {"model": "Qwen/Qwen3-8B", "tp": 2, "gpu": "NVIDIA H100 80GB HBM3", "dtype": "bfloat16"}
BASELINE = {
    "engine_commit": "1a2b3c4d5e6f77889900aabbccddeeff00112233",
    "date": "2026-11-20T04:12:00Z",
    "run_id": "r-17",
}


def stats(mean_k3: float, p99: float, mx: float, frac: float, positions: int = 16384, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "positions": positions,
        "samples": 32,
        "mean_k3": mean_k3,
        "p50": mean_k3 / 10,
        "p99": p99,
        "p999": (p99 + mx) / 2,
        "max": mx,
        "frac_over": {"1e-4": min(1.0, frac * 20), "1e-3": min(1.0, frac * 5), "1e-2": frac},
    }
    out.update(extra)
    return out


def samples(
    n: int, diverging: Sequence[int] = (), *, onset: int = 0, contiguous: bool = True
) -> tuple[SampleSummary, ...]:
    return tuple(
        SampleSummary(
            sample=i,
            prompt_tokens=1536 + 97 * i,
            positions=512,
            mean_k3=0.08 if i in diverging else 2e-7,
            max_k3=0.9 - 0.01 * i if i in diverging else 4e-6,
            onset=(onset if i in diverging else None),
            contiguous_from_first=contiguous and i in diverging,
            cached_tokens=1024 + 64 * i,
        )
        for i in range(n)
    )


def worst(
    check_rows: Sequence[tuple[int, int, str, float, float, float | None, bool | None]],
) -> tuple[WorstPosition, ...]:
    out = []
    for sample, position, text, lp_ref, lp_test, margin, flip in check_rows:
        d = lp_ref - lp_test
        out.append(
            WorstPosition(
                sample=sample,
                position=position,
                token_id=1000 + position,
                token_text=text,
                lp_ref=lp_ref,
                lp_test=lp_test,
                delta=d,
                k3=float(np.expm1(d) - d),
                margin_ref=margin,
                flip=flip,
            )
        )
    return tuple(out)


def clean(name: str, *, cache: bool = False) -> CheckResult:
    return CheckResult(
        name=name,
        verdict=Verdict.PASS,
        stats=stats(3.1e-7, 2.4e-6, 1.9e-5, 0.0),
        cache=CacheStats(kept=31, total=32) if cache else None,
        worst=worst([(4, 2051, " the", -0.0123, -0.0184, 2.3, False)]),
        samples=samples(32),
    )


def golden_clean() -> CheckResult:
    return CheckResult(
        name="golden",
        verdict=Verdict.PASS,
        stats=stats(
            2.2e-6,
            1.5e-5,
            3.1e-4,
            0.0,
            positions=65536,
            kl_p50=2.5e-6,
            kl_p99=4.0e-5,
            kl_max=6.1e-4,
            flips=2,
            confident_flips=0,
            expected_flips=3.4,
            flips_by_margin={
                "[0, 0.1)": {"flips": 2, "positions": 812, "band_rate": 0.004},
                "[0.1, 0.3)": {"flips": 0, "positions": 2210, "band_rate": 0.0},
                "[0.3, 1)": {"flips": 0, "positions": 9120, "band_rate": 0.0},
                "[1, inf)": {"flips": 0, "positions": 53394, "band_rate": 0.0},
            },
        ),
        worst=worst([(2, 733, "def", -1.61, -1.63, 0.03, True)]),
        samples=samples(8),
    )


def baseline_stats() -> dict[str, Mapping[str, Any]]:
    return {
        "match": stats(2.9e-7, 2.2e-6, 1.5e-5, 0.0),
        "prefill_cache_hit": stats(3.0e-7, 2.5e-6, 2.0e-5, 0.0),
        "decode_cache_hit": stats(3.3e-7, 2.6e-6, 2.2e-5, 0.0),
        "golden": {"kl_p99": 3.8e-5, "p99": 1.4e-5},
    }


def run(checks: Sequence[CheckResult], *, baseline: Mapping[str, Any] | None = BASELINE, **env: Any) -> RunResult:
    return RunResult.from_checks(
        checks, signature="5e1f0c", engine=ENGINE, environment={**ENV, **env}, baseline=baseline
    )


def all_pass() -> list[ReportSection]:
    checks = [
        clean("match"),
        clean("prefill_cache_hit", cache=True),
        clean("decode_cache_hit", cache=True),
        golden_clean(),
    ]
    return [ReportSection("Qwen3-8B tp2", run(checks), baseline_stats=baseline_stats())]


def restore_record(n_samples: int = 4, n_pos: int = 200, broken: bool = True) -> PositionRecord:
    """Per-position arrays where every generated token is shifted from the first one (the Falcon picture)."""
    rng = np.random.default_rng(7)
    sample = np.repeat(np.arange(n_samples), n_pos).astype(np.int32)
    position = np.tile(np.arange(n_pos) + 1536, n_samples).astype(np.int32)
    lp_test = -np.abs(rng.normal(0.0, 1.0, n_samples * n_pos))
    shift = rng.uniform(0.2, 0.5, n_samples * n_pos) * rng.choice([-1.0, 1.0], n_samples * n_pos)
    noise = rng.normal(0.0, 1e-3, n_samples * n_pos)
    lp_ref = lp_test + (shift if broken else noise)
    return PositionRecord(
        sample=sample, position=position, token_id=np.zeros_like(sample), lp_ref=lp_ref, lp_test=lp_test
    )


def prefill_restore() -> list[ReportSection]:
    # Seed 001's numbers: cross-path Δ −0.20/+0.28/−0.36/+0.51 at every step, a flip at gap 0.455.
    bad_worst = worst(
        [
            (0, 1541, " Artificial", -0.53, -1.04, 0.455, True),
            (0, 1537, ":", -0.02, -0.30, 5.1, False),
            (1, 1539, " stands", -0.01, -0.37, 8.5, False),
            (2, 1536, " Answer", -1.30, -1.10, 0.003, False),
        ]
    )
    prefill = CheckResult(
        name="prefill_cache_hit",
        verdict=Verdict.FAIL,
        reasons=("mean k3 0.081 ≥ kl_div 0.0025; 41% of positions over 1e-2; max k3 0.91 > 0.5",),
        stats=stats(0.081, 0.62, 0.91, 0.41),
        cache=CacheStats(kept=32, total=32),
        worst=bad_worst,
        samples=samples(32, diverging=range(32), onset=0),
    )
    decode = CheckResult(
        name="decode_cache_hit",
        verdict=Verdict.FAIL,
        reasons=("mean k3 0.064 ≥ kl_div 0.0025",),
        stats=stats(0.064, 0.55, 0.88, 0.37),
        cache=CacheStats(kept=30, total=32),
        worst=bad_worst[:2],
        samples=samples(32, diverging=range(32), onset=0),
    )
    checks = [clean("match"), prefill, decode, golden_clean()]
    records = {"prefill_cache_hit": restore_record(), "match": restore_record(broken=False)}
    return [ReportSection("Qwen3-8B tp2", run(checks), baseline_stats=baseline_stats(), records=records)]


def golden_failure() -> list[ReportSection]:
    golden = CheckResult(
        name="golden",
        verdict=Verdict.FAIL,
        reasons=("3 confident flips (margin > 1.0 nats)", "KL p99 2.1e-03 is 55× the noise band's 3.8e-05"),
        stats=stats(
            4.1e-3,
            2.2e-2,
            1.7,
            0.031,
            positions=65536,
            kl_mean=6.2e-4,
            kl_p50=3.1e-4,
            kl_p99=2.1e-3,
            kl_max=1.2,
            flips=41,
            confident_flips=3,
            expected_flips=4.2,
            flips_p_value=3.3e-21,
            # The golden check's own shapes (precisionbot.metrics.flips / scoring.golden_judge).
            flips_by_margin=[
                {"bucket": "[0, 0.1)", "lo": 0.0, "hi": 0.1, "positions": 812, "flips": 22, "rate": 22 / 812},
                {"bucket": "[0.1, 0.3)", "lo": 0.1, "hi": 0.3, "positions": 2210, "flips": 12, "rate": 12 / 2210},
                {"bucket": "[0.3, 1)", "lo": 0.3, "hi": 1.0, "positions": 9120, "flips": 4, "rate": 4 / 9120},
                {"bucket": "[1, ∞)", "lo": 1.0, "hi": math.inf, "positions": 53394, "flips": 3, "rate": 3 / 53394},
            ],
            band={
                "pairs": 3,
                "max_flip_margin_nats": 0.21,
                "flip_rate_by_bucket": {"[0, 0.1)": 0.004, "[0.1, 0.3)": 0.0005, "[0.3, 1)": 0.0, "[1, ∞)": 0.0},
                "kl_p50": 2.4e-6,
                "kl_p99": 3.8e-5,
                "sigma_nats": 2.1e-3,
            },
            by_phase={
                "prefill": {"positions": 65280, "kl_p50": 3e-4, "kl_p99": 2e-3, "kl_max": 1.2, "flips": 40},
                "decode": {"positions": 256, "kl_p50": 4e-4, "kl_p99": 3e-3, "kl_max": 0.3, "flips": 1},
            },
            by_depth=[
                {
                    "depth": "[0, 1024)",
                    "positions": 16384,
                    "kl_p50": 9e-6,
                    "kl_p99": 1.1e-4,
                    "kl_max": 0.02,
                    "flips": 2,
                },
                {
                    "depth": "[1024, 8192)",
                    "positions": 32768,
                    "kl_p50": 2.2e-4,
                    "kl_p99": 1.9e-3,
                    "kl_max": 0.4,
                    "flips": 14,
                },
                {
                    "depth": "[8192, ∞)",
                    "positions": 16384,
                    "kl_p50": 1.4e-3,
                    "kl_p99": 8.8e-3,
                    "kl_max": 1.2,
                    "flips": 25,
                },
            ],
        ),
        worst=worst(
            [
                (5, 30211, " return", -0.21, -1.93, 1.34, True),
                (5, 30188, "self", -0.05, -0.96, 0.46, True),
                (3, 18022, " Artificial", -0.61, -0.84, 0.18, True),
                (1, 912, " of", -0.003, -0.0041, 4.2, False),
            ]
        ),
        samples=samples(8, diverging=(3, 5), onset=140, contiguous=False),
    )
    checks = [clean("match"), clean("prefill_cache_hit", cache=True), clean("decode_cache_hit", cache=True), golden]
    previous = run([clean("match"), golden_clean()])
    return [ReportSection("Qwen3-8B tp2 · attn fp8", run(checks), previous=previous, baseline_stats=baseline_stats())]


def matrix() -> list[ReportSection]:
    a = all_pass()[0]
    concentrated = CheckResult(
        name="decode_cache_hit",
        verdict=Verdict.FAIL,
        reasons=("max k3 0.74 > 0.5",),
        stats=stats(4.2e-3, 3.1e-2, 0.74, 0.012),
        cache=CacheStats(kept=32, total=32),
        worst=worst([(17, 4410, " window", -0.4, -1.55, 0.7, True)]),
        samples=samples(32, diverging=(17, 29), onset=212, contiguous=False),
    )
    checks = [clean("match"), clean("prefill_cache_hit", cache=True), concentrated]
    b = ReportSection("Llama-3.1-70B tp8", run(checks, model="meta-llama/Llama-3.1-70B", tp=8), baseline_stats=None)
    return [a, b]


def inconclusive() -> list[ReportSection]:
    checks = [
        clean("match"),
        CheckResult.inconclusive(
            "prefill_cache_hit",
            "too few cache hits: 3 of 32 prompts had cached_tokens > 0 (need more than half); is the radix cache on?",
            cache=CacheStats(kept=3, total=32),
        ),
        CheckResult.inconclusive(
            "decode_cache_hit",
            "engine error: POST /generate returned HTTP 500 for request 7 (batch of 8): "
            "<html>Internal Server Error</html> @oncall see #4411",
        ),
        CheckResult.inconclusive("golden", "no baseline for this signature (5e1f0c); run /precision baseline"),
    ]
    return [ReportSection("Qwen3-8B tp2", run(checks, baseline=None))]


NASTY_TOKENS = (
    "a|b||c",
    "```js",
    "<script>alert(1)</script>",
    "@octocat",
    "#12",
    "line1\nline2\r\n",
    "\x07\x1b[31mred\x00",
    "\u202eevil\u200b",
    "<!-- precisionbot:comment -->",
    "[click](https://evil.example/x) **bold** _i_ ~~s~~ $x^2$",
    "x" * 300,
    "\t \u00a0",
    "",
)


def nasty() -> list[ReportSection]:
    rows = [(i, 100 + i, text, -0.5, -1.5 - 0.1 * i, 0.2, i % 2 == 0) for i, text in enumerate(NASTY_TOKENS)]
    check = CheckResult(
        name="match",
        verdict=Verdict.FAIL,
        reasons=("max k3 | 1.2 > 0.5 <b>bold</b> @admin",),
        stats=stats(0.01, 0.2, 1.2, 0.05),
        worst=worst(rows),
        samples=samples(13, diverging=range(13), onset=3, contiguous=False),
    )
    return [ReportSection("model|<b>x</b> @team #1", run([check], model="evil|`model`<i>", gpu="GPU\n# heading"))]


def oversized(n_sections: int = 3, n_worst: int = 400) -> list[ReportSection]:
    out = []
    for k in range(n_sections):
        rows = [(i % 32, 2000 + i, f"tok{i}|" + "é" * 30, -0.1, -0.9 - i * 1e-3, 0.5, True) for i in range(n_worst)]
        check = CheckResult(
            name="golden",
            verdict=Verdict.FAIL,
            reasons=("many flips",),
            stats=stats(1e-2, 0.1, 2.0, 0.2, flips=n_worst, confident_flips=n_worst // 2, expected_flips=1.0),
            worst=worst(rows),
            samples=samples(32, diverging=range(32)),
        )
        records = {"golden": restore_record(n_samples=8, n_pos=400)}
        out.append(ReportSection(f"model-{k} tp{k % 8 + 1}", run([clean("match"), check]), records=records))
    return out


SCENARIOS = {
    "all_pass": all_pass,
    "prefill_restore": prefill_restore,
    "golden_failure": golden_failure,
    "matrix": matrix,
    "inconclusive": inconclusive,
    "nasty_tokens": nasty,
    "oversized": oversized,
}
