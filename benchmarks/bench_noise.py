"""Noise-relative helper verdicts: false alarms, power and suggested thresholds' flake rate.

    .venv/bin/python benchmarks/bench_noise.py simulate [--pairs 2000] [--reruns 5 8] [--samples 32]
    .venv/bin/python benchmarks/bench_noise.py engine [--main-fault nondeterministic] \\
        [--pr-fault batch-variant] [--reruns 8] [--prs 20] [--samples 16] [--max-new-tokens 32]

``simulate`` draws per-sample mean k3 from a model with the structure real runs have (a prompt effect shared
by every run, a whole-run effect, heavy-tailed per-sample noise; all multiplicative) and runs the pure
``metrics.rerun_stats`` test on clean PR/main pairs (false-alarm rate at each significance) and on PRs whose noise is
``--factor`` times main's (power); then fits thresholds on R clean reruns and counts how often held-out clean
reruns exceed them.

``engine`` does the same on the builtin engine: main's noise is the fault(s) given by ``--main-fault`` (the
builtin engine's production numerics rerun bit-identically, so ``--main-fault ''`` gives a zero run-to-run
spread; ``nondeterministic``, the default, adds run-to-run noise on top of them), clean PRs are further
reruns of the same engine, and the noisier PR adds ``--pr-fault`` on top (a second engine instance), and
planted shifts multiply the clean PR runs' per-sample mean k3 by each ``--scale`` factor (main's real noise,
a known doubling). It prints each helper's measured ratio, how often the rule flags it, and the suggested
thresholds' held-out flake rate.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Sequence

import numpy as np

from precisionbot.metrics import rerun_stats as ns


def _run_model(
    rng: np.random.Generator, prompt: np.ndarray, factor: float, run_sd: float, sample_sd: float
) -> np.ndarray:
    return factor * np.exp(prompt + rng.normal(0, run_sd) + sample_sd * rng.standard_t(4, prompt.size))


def simulate(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    print(
        f"simulated runs: {args.samples} samples, per-sample noise {args.sample_sd} x t(4) in log space, "
        f"whole-run effect sd {args.run_sd}, {args.pairs} pairs per row, min_ratio {args.min_ratio}"
    )
    print(
        f"{'R':>3} {'alpha':>6} {'clean p<alpha':>14} {'false alarms':>13} {'power x' + str(args.factor):>10} "
        f"{'median ratio':>13}"
    )
    for reruns in args.reruns:
        for alpha in args.alpha:
            false = power = below = 0
            ratios = []
            for _ in range(args.pairs):
                prompt = rng.normal(math.log(1e-3), 1.0, args.samples)
                main = np.stack([_run_model(rng, prompt, 1, args.run_sd, args.sample_sd) for _ in range(reruns)])
                clean = ns.compare_to_main(
                    main, _run_model(rng, prompt, 1, args.run_sd, args.sample_sd), alpha=alpha, min_ratio=args.min_ratio
                )
                worse = ns.compare_to_main(
                    main,
                    _run_model(rng, prompt, args.factor, args.run_sd, args.sample_sd),
                    alpha=alpha,
                    min_ratio=args.min_ratio,
                )
                assert clean is not None and worse is not None
                false += clean.regression
                below += clean.p_value < alpha
                power += worse.regression
                ratios.append(worse.ratio)
            print(
                f"{reruns:>3} {alpha:>6} {below / args.pairs:>14.4f} {false / args.pairs:>13.4f} "
                f"{power / args.pairs:>10.3f} {np.median(ratios):>13.2f}"
            )
    print()
    print(f"suggested thresholds (log-normal run means, sd {args.threshold_sd}); held-out clean runs: 100,000 per fit")
    print(f"{'R':>4} {'rate':>7} {'fits':>5} {'mean held-out rate':>19} {'fits over rate':>15}")
    for reruns, rate in ((30, 0.01), (100, 0.001), (300, 0.001)):
        exceed = []
        for _ in range(args.fits):
            fit = ns.suggest(np.exp(rng.normal(-7, args.threshold_sd, reruns)), rate)
            assert fit.threshold is not None
            exceed.append(float(np.mean(np.exp(rng.normal(-7, args.threshold_sd, 100_000)) > fit.threshold)))
        print(
            f"{reruns:>4} {rate:>7} {args.fits:>5} {np.mean(exceed):>19.5f} {np.mean(np.array(exceed) > rate):>15.2f}"
        )


def engine(args: argparse.Namespace) -> None:
    from precisionbot.checks.rerun import rerun_helpers
    from precisionbot.config import from_mapping
    from precisionbot.engines.builtin import BuiltinEngine

    config = from_mapping(
        {
            "suites": {
                "consistency": {
                    "samples": args.samples,
                    "max_new_tokens": args.max_new_tokens,
                    "prompt_tokens": list(args.prompt_tokens),
                }
            }
        }
    )
    suite = config.suite("consistency")
    main_faults = tuple(f for f in args.main_fault if f)
    t0 = time.perf_counter()
    noisy = BuiltinEngine(faults=main_faults)
    try:
        main = rerun_helpers(noisy, config, suite, None, args.reruns)
        clean = rerun_helpers(noisy, config, suite, None, args.prs)
        held = rerun_helpers(noisy, config, suite, None, args.held_out) if args.held_out else None
    finally:
        noisy.close()
    pr_engine = BuiltinEngine(faults=(*main_faults, *args.pr_fault))
    try:
        worse = rerun_helpers(pr_engine, config, suite, None, args.prs)
    finally:
        pr_engine.close()
    wall = time.perf_counter() - t0
    print(
        f"builtin engine: main = faults {list(main_faults) or 'none'}, noisier PR = + {args.pr_fault}; "
        f"{args.samples} samples x {args.max_new_tokens} tokens, prompts {'..'.join(map(str, args.prompt_tokens))};"
        f" R = {args.reruns} main reruns, {args.prs} PR runs of each kind; {wall:.0f} s"
    )
    print(
        "main's run-to-run spread (sd of each rerun's trimmed-mean log-ratio to main's average): "
        + ", ".join(f"{h} {_spread(main.per_sample[h]):.3g}" for h in main.helpers)
    )
    print(
        f"{'helper':<18} {'alpha':>6} {'clean flagged':>14} {'noisier flagged':>16} {'noisier ratio (median)':>23} "
        f"{'mean_k3 main':>13} {'mean_k3 noisier':>16}"
    )
    for h in main.helpers:
        for alpha in args.alpha:
            flagged_clean = _flags(main.per_sample[h], clean.per_sample.get(h), alpha, args.min_ratio)
            flagged_worse = _flags(main.per_sample[h], worse.per_sample.get(h), alpha, args.min_ratio)
            ratios = _ratios(main.per_sample[h], worse.per_sample.get(h))
            print(
                f"{h:<18} {alpha:>6} {flagged_clean:>14} {flagged_worse:>16} {np.median(ratios):>23.2f} "
                f"{np.median(main.run_stats[h]['mean_k3']):>13.3g} {np.median(worse.run_stats[h]['mean_k3']):>16.3g}"
            )
    print("\nclean PR reruns with every per-sample mean k3 multiplied by a planted factor (real noise, known shift):")
    print(f"{'helper':<18} {'alpha':>6} " + " ".join(f"{'x' + str(f) + ' flagged':>14}" for f in args.scale))
    for h in main.helpers:
        for alpha in args.alpha:
            cells = [_flags(main.per_sample[h], clean.per_sample[h] * f, alpha, args.min_ratio) for f in args.scale]
            print(f"{h:<18} {alpha:>6} " + " ".join(f"{c:>14}" for c in cells))
    if held is not None:
        rate = args.flake_rate / (len(main.helpers) * 2)
        pooled = {
            h: np.concatenate([main.run_stats[h]["mean_k3"], clean.run_stats[h]["mean_k3"]]) for h in main.helpers
        }
        print(
            f"\nthresholds fitted on {args.reruns + args.prs} clean reruns at {rate:.3g} per gate "
            f"(flake rate {args.flake_rate} over {len(main.helpers) * 2} gates), checked on {args.held_out} held-out:"
        )
        for h in main.helpers:
            for stat in ("mean_k3", "max"):
                values = (
                    pooled[h]
                    if stat == "mean_k3"
                    else np.concatenate([main.run_stats[h][stat], clean.run_stats[h][stat]])
                )
                fit = ns.suggest(values, rate)
                over = "-" if fit.threshold is None else int(np.sum(held.run_stats[h][stat] > fit.threshold))
                print(
                    f"  {h:<18} {stat:<8} threshold {'-' if fit.threshold is None else f'{fit.threshold:.3g}'}"
                    f" (largest seen {fit.largest_seen:.3g}); held-out runs over it: {over}"
                    + (f"  [{fit.refused}]" if fit.refused else "")
                )


def _spread(main: np.ndarray) -> float:
    y = np.log(np.maximum(main, ns.FLOOR_K3))
    ref = np.nanmean(y, axis=0)
    e = [ns.trimmed_mean((row - ref)[np.isfinite(row - ref)]) for row in y]
    return float(np.std(e, ddof=1))


def _flags(main: np.ndarray, prs: np.ndarray | None, alpha: float, min_ratio: float) -> str:
    if prs is None:
        return "-"
    results = [ns.compare_to_main(main, pr, alpha=alpha, min_ratio=min_ratio) for pr in prs]
    judged = [r for r in results if r is not None]
    return f"{sum(r.regression for r in judged)}/{len(judged)}"


def _ratios(main: np.ndarray, prs: np.ndarray | None) -> Sequence[float]:
    if prs is None:
        return [math.nan]
    results = [ns.compare_to_main(main, pr) for pr in prs]
    return [r.ratio for r in results if r is not None] or [math.nan]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    sim = sub.add_parser("simulate")
    sim.add_argument("--pairs", type=int, default=2000)
    sim.add_argument("--reruns", type=int, nargs="+", default=[3, 5, 8, 16])
    sim.add_argument("--samples", type=int, default=32)
    sim.add_argument("--alpha", type=float, nargs="+", default=[0.01, 0.001])
    sim.add_argument("--min-ratio", type=float, default=1.5)
    sim.add_argument("--factor", type=float, default=2.0)
    sim.add_argument("--sample-sd", type=float, default=0.3)
    sim.add_argument("--run-sd", type=float, default=0.1)
    sim.add_argument("--threshold-sd", type=float, default=0.4)
    sim.add_argument("--fits", type=int, default=200)
    sim.add_argument("--seed", type=int, default=0)
    eng = sub.add_parser("engine")
    eng.add_argument("--main-fault", action="append", default=None, help="main's noise source (repeatable; '' = none)")
    eng.add_argument("--pr-fault", action="append", default=None, help="added on the noisier PR (repeatable)")
    eng.add_argument("--reruns", type=int, default=8)
    eng.add_argument("--prs", type=int, default=20)
    eng.add_argument("--held-out", type=int, default=0, help="further clean reruns to check fitted thresholds on")
    eng.add_argument("--flake-rate", type=float, default=0.06)
    eng.add_argument("--samples", type=int, default=16)
    eng.add_argument("--max-new-tokens", type=int, default=32)
    eng.add_argument("--prompt-tokens", type=int, nargs=2, default=[128, 256])
    eng.add_argument("--alpha", type=float, nargs="+", default=[0.01, 0.001])
    eng.add_argument("--min-ratio", type=float, default=1.5)
    eng.add_argument("--scale", type=float, nargs="+", default=[1.5, 2.0], help="planted factors on clean PR runs")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.python_version()}, numpy {np.__version__}")
    if args.mode == "simulate":
        simulate(args)
    else:
        args.main_fault = args.main_fault if args.main_fault is not None else ["nondeterministic"]
        args.pr_fault = args.pr_fault if args.pr_fault is not None else ["batch-variant"]
        engine(args)


if __name__ == "__main__":
    main()
