"""``precisionbot thresholds suggest``: helper thresholds from measured reruns of a clean engine.

The reruns come from a stored helper baseline (``--store``; ``baseline record --reruns R`` writes them) or
are run now against a live engine (``--engine-url URL --reruns R``, or ``--engine builtin``). Each helper's
per-run ``mean_k3``, ``max`` and ``frac_over`` are fitted with a log-normal distribution; the suggested
threshold is the upper 90 % confidence bound of the quantile that one clean run exceeds with probability
``--flake-rate / gates`` (Bonferroni over the helpers × statistics gated, so the whole run flakes at most at
``--flake-rate``). A rate that R reruns cannot support is refused, with the reruns it needs. Prints the
``thresholds.overrides."<model>@tp<N>"`` YAML to paste into the config; exit 0 when every gate got a
threshold, 2 when some were refused or not fitted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from precisionbot.commands.options.engine import add_engine_options
from precisionbot.commands.options.store import add_store_option
from precisionbot.fmt import plain

STAT_KEYS = {"mean_k3": "kl_div", "max": "max_token_k3", "frac_over": "max_frac_over"}
"""Per-run statistic → the threshold key that gates it."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("thresholds", help="suggest helper thresholds from measured clean reruns")
    sub = parser.add_subparsers(dest="thresholds_command", metavar="ACTION")
    sub.required = True
    s = sub.add_parser(
        "suggest",
        help="fit the helpers' rerun distribution and print thresholds with a stated false-alarm rate",
        description="Fits each consistency helper's per-run mean_k3, max k3 and fraction over token_k3 from R "
        "clean reruns (a stored helper baseline, or run now) and prints the thresholds YAML that keeps a clean "
        "run's false-alarm rate below --flake-rate. Exit 0, or 2 when R reruns cannot support the rate.",
    )
    source = s.add_mutually_exclusive_group(required=True)
    add_store_option(source, help="a baseline store with helper reruns (baseline record --reruns)")
    s.add_argument("--run", metavar="RUN", help="with --store: this run (default: the newest with helper reruns)")
    s.add_argument("--model", metavar="NAME", help="with --store: the model's runs; live: a model of the config")
    s.add_argument("--reruns", type=int, default=20, metavar="R", help="live engine: helper reruns (default 20)")
    # A live engine to rerun the helpers on (a clean one), or --store above.
    add_engine_options(s, source=source, hide_radix_flag=True)
    s.add_argument("--config", metavar="FILE", help="precisionbot YAML config")
    s.add_argument("--suite", metavar="NAME", help="live engine: the suite whose helper parameters to use")
    s.add_argument("--flake-rate", type=float, default=0.001, metavar="F", help="false alarms per clean run (0.001)")
    s.add_argument(
        "--stats",
        default="mean_k3,max,frac_over",
        metavar="LIST",
        help="statistics to fit: mean_k3 (kl_div), max (max_token_k3), frac_over (max_frac_over)",
    )
    s.add_argument("--json", action="store_true", help="the fits as JSON instead of YAML")
    s.set_defaults(handler=_suggest)


def _stats(text: str) -> list[str]:
    from precisionbot.errors import ConfigError

    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in STAT_KEYS]
    if bad or not names:
        raise ConfigError(f"--stats {text!r}: use a comma-separated subset of {', '.join(STAT_KEYS)}")
    return names


def _from_store(args: argparse.Namespace) -> tuple[Any, str, Any, str]:
    from precisionbot.baselines import find_run, list_runs, open_store
    from precisionbot.baselines.helper_reruns import load_helpers
    from precisionbot.errors import StoreError

    store = open_store(args.store)
    if args.run:
        run = find_run(store, args.run)
    else:
        runs = [r for r in list_runs(store, args.model) if r.label != "failed" and "helpers" in r.extra]
        if not runs:
            raise StoreError(
                f"no run with helper reruns in {store.uri}"
                + (f" for model {args.model!r}" if args.model else "")
                + "; record one with `precisionbot baseline record --reruns 20 --store URI` or use --engine-url"
            )
        run = runs[0]
    helpers = load_helpers(store, run)
    if helpers is None:
        raise StoreError(f"run {run.run_id} in {store.uri} has no helper reruns; record with --reruns R")
    tp = run.signature_parts.get("tp")
    key = f"{run.model}@tp{tp}" if tp is not None else run.model
    return helpers, key, run.run_id, f"run {run.run_id} in {store.uri}"


def _live(args: argparse.Namespace) -> tuple[Any, str, Any, str]:
    import tempfile
    from pathlib import Path

    from precisionbot.checks.rerun import rerun_helpers
    from precisionbot.commands.options.engine import engine_choice, open_engine, select_model
    from precisionbot.config import load_config_or_default
    from precisionbot.errors import ConfigError

    if args.reruns < 3:
        raise ConfigError(f"--reruns {args.reruns}: a fit needs at least 3 reruns (20 or more for useful rates)")
    config = load_config_or_default(args.config)
    suite = config.suite(args.suite or config.github.pr_suite)
    model = select_model(config, args.model)
    choice = engine_choice(args, config)
    with (
        tempfile.TemporaryDirectory(prefix="precisionbot-engine-") as logs,
        open_engine(config, choice, model, Path(logs)) as engine,
    ):
        name = model.name if model is not None else (engine.server_info().model_path or engine.kind)
        tp = model.tp if model is not None else (engine.server_info().tp_size or 1)
        helpers = rerun_helpers(
            engine,
            config,
            suite,
            model,
            args.reruns,
            on_rerun=lambda i, _r: print(f"  rerun {i + 1}/{args.reruns} done", file=sys.stderr),
        )
        url = engine.url
    return helpers, f"{name}@tp{tp}", None, f"{args.reruns} reruns of {url}"


def _suggest(args: argparse.Namespace) -> int:
    from precisionbot.errors import ConfigError
    from precisionbot.metrics.rerun_stats import EXTRAPOLATION, suggest

    if not 0.0 < args.flake_rate < 0.5:
        raise ConfigError(f"--flake-rate {args.flake_rate}: use a rate per run in (0, 0.5), e.g. 0.001")
    stats = _stats(args.stats)
    helpers, key, run_id, source = _from_store(args) if args.store else _live(args)
    if not helpers.helpers:
        raise ConfigError(f"{source}: no helper compared anything in two or more reruns; nothing to fit")
    gates = len(helpers.helpers) * len(stats)
    rate = args.flake_rate / gates
    fits = {h: {s: suggest(helpers.run_stats[h][s], rate) for s in stats} for h in helpers.helpers}
    if args.json:
        print(json.dumps(_as_json(fits, key, run_id, args.flake_rate, rate, helpers.token_k3), indent=2))
    else:
        sys.stdout.write(_as_yaml(fits, key, source, args.flake_rate, rate, gates, helpers.token_k3))
    refused = [(h, s, f) for h, per in fits.items() for s, f in per.items() if f.threshold is None]
    for h, s, f in refused:
        print(f"precisionbot: {h} {s}: {f.refused}", file=sys.stderr)
    short = [(h, s, f) for h, s, f in refused if f.reruns < f.needed_reruns]
    if short:
        reruns = min(f.reruns for _h, _s, f in short)
        best = gates / (EXTRAPOLATION * reruns) if reruns else math.inf
        print(
            f"precisionbot: {reruns} reruns support --flake-rate {plain(best)} or more over these {gates} gates; "
            f"--flake-rate {plain(args.flake_rate)} needs {max(f.needed_reruns for _h, _s, f in short)} reruns",
            file=sys.stderr,
        )
    return 2 if refused else 0


def _as_json(fits: Mapping[str, Any], key: str, run_id: Any, flake: float, rate: float, token_k3: float) -> Any:
    return {
        "key": key,
        "run": run_id,
        "flake_rate": flake,
        "rate_per_gate": rate,
        "token_k3": token_k3,
        "fits": {h: {s: {k: _num(v) for k, v in vars(f).items()} for s, f in per.items()} for h, per in fits.items()},
    }


def _num(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _as_yaml(
    fits: Mapping[str, Any], key: str, source: str, flake: float, rate: float, gates: int, token_k3: float
) -> str:
    reruns = max(f.reruns for per in fits.values() for f in per.values())
    lines = [
        f"# precisionbot thresholds suggest: {reruns} clean reruns ({source})",
        f"# false alarms per clean run <= {plain(flake)}: {plain(rate)} per gate over {gates} gates (helpers x "
        "statistics); each value is the upper 90 % bound of the log-normal fit's quantile",
        "thresholds:",
        "  overrides:",
        f"    {json.dumps(key)}:",
    ]
    stats = list(next(iter(fits.values())))
    for stat in stats:
        threshold_key = STAT_KEYS[stat]
        values = [per[stat] for per in fits.values()]
        ok = [f.threshold for f in values if f.threshold is not None]
        detail = "; ".join(f"{h} {_detail(per[stat])}" for h, per in fits.items())
        if len(ok) == len(values):
            lines.append(f"      {threshold_key}: {float(f'{max(ok):.3g}')!r}  # {detail}")
        else:
            lines.append(f"      # {threshold_key}: not suggested: {detail}")
    if "frac_over" in stats:
        lines.append(f"      token_k3: {token_k3!r}  # max_frac_over counts positions over this")
    return "\n".join(lines) + "\n"


def _detail(f: Any) -> str:
    if f.threshold is None:
        return f"refused ({f.refused}; largest seen {plain(f.largest_seen)})"
    return f"{plain(f.threshold)} (fit {plain(f.point)}, largest seen {plain(f.largest_seen)}, R={f.reruns})"
