"""``precisionbot bisect --good SHA --bad SHA``: the first engine commit whose numbers went bad.

Every tested commit is built (``engine.install``) and launched (``engine.launch``) from its own worktree of
the engine's clone (``engine.checkout`` or ``--checkout``), and the suite's checks judge it: FAIL is bad, PASS
good; a commit that does not build or start, or whose checks are inconclusive, is skipped. Outcomes are cached
in the baseline store. Exit 0 when one commit is named, 2 when skipped commits leave several candidates, 3 on
a setup error.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from precisionbot.commands.options.store import add_store_option

DEFAULT_SUITE = "consistency"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bisect",
        help="find the first engine commit between --good and --bad whose checks fail",
        description="Builds and launches the engine at commits between --good and --bad (engine.install and "
        "engine.launch, each in its own worktree of the engine's clone), runs the suite's checks on each and "
        "names the first bad commit in at most ceil(log2 n) + skips steps. Exit 0 named, 2 ambiguous (skips), "
        "3 setup error.",
    )
    p.add_argument("--good", required=True, metavar="SHA", help="a commit whose checks pass")
    p.add_argument("--bad", required=True, metavar="SHA", help="a later commit whose checks fail")
    p.add_argument("--checkout", metavar="DIR", help="the engine's git clone (default: engine.checkout, '.')")
    p.add_argument("--config", metavar="FILE", help="YAML config (engine.launch, engine.install, models)")
    p.add_argument("--suite", help=f"suite from the config (default {DEFAULT_SUITE})")
    p.add_argument("--model", help="model name from the config")
    p.add_argument("--checks", metavar="a,b", help="checks to run at each commit")
    p.add_argument("--samples", type=int, metavar="N")
    p.add_argument("--max-new-tokens", type=int, metavar="N")
    p.add_argument("--prompt-tokens", metavar="N|LO..HI")
    p.add_argument("--profile", choices=("default", "deterministic"), help="threshold profile")
    add_store_option(p, help="baseline store: golden's baselines and the per-commit cache")
    p.add_argument(
        "--cache",
        metavar="URI",
        help="where the per-commit outcomes are cached (default: the baseline store); a CI job whose store is "
        "read-only names a folder of its own here",
    )
    p.add_argument(
        "--log-dir", metavar="DIR", default="precisionbot-out/bisect", help="install and engine logs per commit"
    )
    p.add_argument("--out", metavar="FILE", help="also write the steps and the answer as JSON (for a PR comment)")
    p.add_argument("--comment", metavar="FILE", help="also write the PR comment (Markdown) for /precision bisect")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from precisionbot.baselines.store import open_store
    from precisionbot.checks.bisect import bisect, cache_key, evaluate_commit
    from precisionbot.checks.bisect_search import Bisection, Step
    from precisionbot.commands.options.engine import engine_at, select_model
    from precisionbot.commands.options.suite import suite_flags
    from precisionbot.config import load_config_or_default
    from precisionbot.engines.checkout import Checkout
    from precisionbot.errors import ConfigError

    config = load_config_or_default(args.config)
    suite = suite_flags(args).apply(config.suite(args.suite or DEFAULT_SUITE))
    model = select_model(config, args.model)
    e = config.engine
    if not e.launch or model is None:
        raise ConfigError(
            "bisect needs engine.launch and one model in the config (or --model NAME) to start each commit"
        )
    checkout = Checkout(args.checkout or e.checkout)
    good, bad = checkout.resolve(args.good, "--good"), checkout.resolve(args.bad, "--bad")
    commits = checkout.between(good, bad)
    store = open_store(args.store or config.baselines.store)
    key = cache_key(
        {
            "suite": repr(suite),
            "thresholds": repr(config.thresholds),
            "profile": args.profile or config.thresholds.profile,
            "model": repr(model),
            "install": e.install,
            "launch": e.launch,
            "args": e.args,
        }
    )
    logs = Path(args.log_dir)

    def open_at(sha: str) -> AbstractContextManager[Any]:
        return engine_at(config, model, checkout, sha, logs)

    search = Bisection(commits)
    print(
        f"bisecting {len(commits)} commits after {good[:12]} up to {bad[:12]}: at most {search.max_steps} steps "
        "plus one per skipped commit",
        file=sys.stderr,
    )

    def line(number: int, step: Step) -> None:
        cached = " (cached)" if step.cached else ""
        print(
            f"step {number}: {step.sha[:12]} {checkout.subject(step.sha)!r}: {step.outcome} "
            f"({step.verdict}){cached} {numbers_text(step)}{' ' + step.note if step.note else ''}",
            file=sys.stderr,
        )

    def test(sha: str) -> Step:
        return evaluate_commit(
            open_at, sha, config, suite, model=model, store=store, profile=args.profile or config.thresholds.profile
        )

    cache = open_store(args.cache) if args.cache else store
    bisect(search, test, cache=cache, key=key, on_step=line)
    answer = search.first_bad()
    steps = "; ".join(f"{s.sha[:12]} {s.outcome} {numbers_text(s)}".rstrip() for s in search.steps) or "none"
    bound = f"{len(search.steps)} steps (bound {search.max_steps})"
    if len(answer) == 1:
        print(f"first bad commit: {answer[0]} {checkout.subject(answer[0])!r} after {bound}; steps: {steps}")
    else:
        print(
            f"first bad commit is one of {', '.join(a[:12] for a in answer)} (skipped commits could not be tested) "
            f"after {bound}; steps: {steps}"
        )
    if args.out or args.comment:
        payload = {
            "good": good,
            "bad": bad,
            "commits": len(commits),
            "first_bad": answer,
            "max_steps": search.max_steps,
            "steps": [{**s.to_dict(), "cached": s.cached, "subject": checkout.subject(s.sha)} for s in search.steps],
        }
        if args.out:
            Path(args.out).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        if args.comment:
            from precisionbot.report.bisect_comment import bisect_comment

            Path(args.comment).write_text(bisect_comment(payload), encoding="utf-8")
    return 0 if len(answer) == 1 else 2


def numbers_text(step: Any) -> str:
    """``match k3 1.2e-14, golden KL p99 3e-3``: each check's headline numbers, compactly."""
    from precisionbot.fmt import plain

    cells = []
    for check, numbers in step.numbers.items():
        for stat, value in numbers.items():
            cells.append(f"{check} {'KL p99' if stat == 'kl_p99' else 'k3'} {plain(value)}")
    return ", ".join(cells)
