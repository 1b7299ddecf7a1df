"""``precisionbot baseline record | publish | list | show``: golden baselines in a store (local directory or S3).

``record`` runs the golden corpus through an engine and stores a new run (``--label``, default
``baseline_established``; ``--producer NAME`` adds a known-good variant to the same baseline's noise band).
Nothing is ever overwritten: re-baselining is recording a newer run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from precisionbot import envvars
from precisionbot.commands.options.engine import add_engine_options
from precisionbot.commands.options.store import add_store_option
from precisionbot.commands.options.suite import SuiteFlags, add_size_flags
from precisionbot.fmt import sig

CONFIG_STORE = "baselines.store"
"""``--replaces-from`` given alone: read the replaced baseline from the config's ``baselines.store``."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("baseline", help="record, list, show and trace golden and helper baselines")
    sub = parser.add_subparsers(dest="baseline_command", metavar="ACTION")
    sub.required = True
    _register_record(sub)
    _register_publish(sub)
    _register_reading(sub)
    _register_quarantine(sub)


def _register_quarantine(sub: Any) -> None:
    q = sub.add_parser(
        "quarantine",
        help="take a corrupt or wrong run out of selection for good (an append-only marker: no delete needed)",
        description="Writes quarantine/<run id>.json (reason, who, when) into the store, create-only as every "
        "write, since the recommended IAM policy forbids deletes. Listing and selection then skip the run "
        "silently; `baseline list` shows it as quarantined.",
    )
    q.add_argument("run", metavar="RUN", help="run id (or a unique prefix of it, or its key), as a warning names it")
    q.add_argument("--reason", required=True, metavar="TEXT", help="why (kept in the marker)")
    q.add_argument("--by", metavar="LOGIN", help="who quarantines it (default: $GITHUB_ACTOR or the user)")
    add_store_option(q)
    q.set_defaults(handler=_quarantine)


def _quarantine(args: argparse.Namespace) -> int:
    import getpass

    from precisionbot.baselines import now_utc
    from precisionbot.baselines.catalog import find_run_key
    from precisionbot.baselines.quarantine import write_marker

    store = _existing_store(_store_uri(args))
    key = find_run_key(store, args.run)
    by = args.by or os.environ.get("GITHUB_ACTOR") or getpass.getuser()
    marker = write_marker(store, key, reason=args.reason, by=by, when=now_utc())
    print(f"quarantined {marker.run_id} ({key}) in {store.uri}: listing and selection skip it from now on")
    return 0


def _register_record(sub: Any) -> None:
    rec = sub.add_parser("record", help="run the golden corpus through an engine and store it as a baseline")
    add_engine_options(rec)
    add_store_option(rec, help="s3://bucket/prefix, file:///dir or a directory")
    rec.add_argument("--label", default="baseline_established", choices=["baseline_established", "passed", "failed"])
    rec.add_argument("--producer", default="default", metavar="NAME", help="a known-good variant's name (noise band)")
    rec.add_argument(
        "--engine-commit", metavar="SHA", help=f"the engine build's commit (default: ${envvars.ENGINE_COMMIT})"
    )
    rec.add_argument("--config", metavar="FILE", help="precisionbot YAML config")
    rec.add_argument(
        "--suite",
        metavar="NAME",
        help="suite whose golden options to use (default: the baseline suite); its helpers, if it has any, must "
        "run with the PR suite's sizes",
    )
    rec.add_argument("--model", metavar="NAME", help="model name (from the config's models); default: the engine's")
    rec.add_argument(
        "--reruns",
        type=int,
        metavar="R",
        help="also run the consistency helpers R times and store their noise with the run, and, when the PR "
        "suite runs spec_decode, main's speculative acceptance R times (default: baselines.helper_reruns, 8; "
        "0 = golden only)",
    )
    rec.add_argument(
        "--spec-engine-url",
        metavar="URL",
        help="spec_decode: the same build served with speculative decoding (engine.spec_url), whose acceptance "
        "is stored; --engine-url is the plain arm (the builtin engine starts its own)",
    )
    rec.add_argument(
        "--accept-reason",
        metavar="TEXT",
        help="record this run as an accepted numerics change (/precision accept): why the numbers changed",
    )
    rec.add_argument("--accepted-by", metavar="LOGIN", help="with --accept-reason: the maintainer who accepted it")
    rec.add_argument("--pr", type=int, metavar="N", help="with --accept-reason: the merged PR whose numbers these are")
    sizes = rec.add_argument_group(
        "sizes",
        "as `check` takes them: the helper reruns use the PR suite's sizes with these overrides, which "
        "must be what the PR's check runs with (a PR is compared only with reruns of the same sizes)",
    )
    add_size_flags(sizes, golden_help="golden's context depths (tokens)")
    rec.add_argument("--quiet", action="store_true", help="no progress on stderr")
    rec.add_argument(
        "--replaces-from",
        nargs="?",
        const=CONFIG_STORE,
        metavar="URI",
        help="with --accept-reason: the store whose current baseline the accepted run replaces (default: --store; "
        "alone: the config's baselines.store, where `baseline publish` writes a staged run)",
    )
    rec.set_defaults(handler=_record, checks=None)


def _register_publish(sub: Any) -> None:
    pub = sub.add_parser(
        "publish", help="verify runs recorded into staging stores and copy them into the store (create-only)"
    )
    pub.add_argument("staging", nargs="+", metavar="DIR", help="staging stores written by `baseline record --store`")
    add_store_option(pub, help="the real store (default: baselines.store in the config)")
    pub.add_argument("--config", metavar="FILE", help="precisionbot YAML config")
    plan = pub.add_argument_group(
        "the plan", "what the runs must be (the plan's outputs): anything else is refused and nothing is written"
    )
    # Required, but checked in _publish rather than by argparse: workflows written before the plan check call
    # `baseline publish` without them, and the error must say what to add.
    plan.add_argument("--sha", metavar="SHA", help="required: the commit the runs were recorded at (sha)")
    plan.add_argument(
        "--models",
        metavar="NAME,...",
        help="required: the model of each matrix cell, comma-separated: exactly one run per cell",
    )
    plan.add_argument(
        "--mode", choices=("baseline", "accept"), default="baseline", help="accept: every run accepts --pr at --sha"
    )
    plan.add_argument(
        "--pr", type=int, metavar="N", help="--mode accept: the accepted PR (ignored otherwise: the plan's pr output)"
    )
    pub.set_defaults(handler=_publish)


def _register_reading(sub: Any) -> None:
    """``list``, ``history`` and ``show``: what a store holds."""
    lst = sub.add_parser("list", help="list the runs in a store, newest first")
    add_store_option(lst)
    lst.add_argument("--model", metavar="NAME")
    lst.add_argument("--json", action="store_true", help="one JSON object per line")
    lst.set_defaults(handler=_list)

    hist = sub.add_parser(
        "history", help="each baseline's golden and helper statistics over time, vs the previous and the first"
    )
    add_store_option(hist)
    hist.add_argument("--model", metavar="NAME")
    hist.add_argument("--json", action="store_true", help="one JSON object per line (same as --format json)")
    hist.add_argument(
        "--format",
        choices=("text", "json", "html"),
        default="text",
        help="html: one self-contained page of charts (golden drift, helper mean k3, thresholds, accepted changes)",
    )
    hist.add_argument("--out", metavar="FILE", help="write the output here instead of stdout")
    hist.add_argument("--config", metavar="FILE", help="precisionbot YAML config (the thresholds the page draws)")
    hist.set_defaults(handler=_history)

    show = sub.add_parser("show", help="show one run's meta, signature parts, files and stats")
    show.add_argument("run", metavar="RUN", help="run id (or a unique prefix of it)")
    add_store_option(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)


def _store_uri(args: argparse.Namespace, config: Any = None) -> str:
    if args.store:
        return str(args.store)
    if config is not None:
        return str(config.baselines.store)
    from precisionbot.baselines import DEFAULT_STORE_URI

    return DEFAULT_STORE_URI


def _record(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from precisionbot import corpus
    from precisionbot.baselines import open_store
    from precisionbot.baselines.accept import KEY as ACCEPT_KEY
    from precisionbot.baselines.golden_recording import golden_target, record_golden
    from precisionbot.checks.progress import TerminalProgress
    from precisionbot.commands.localize_failures import module_capture
    from precisionbot.commands.options.engine import engine_choice, open_engine, select_model, spec_arm, unusable
    from precisionbot.commands.options.store import preflight_record_store
    from precisionbot.commands.options.suite import refuse_misfits, suite_flags
    from precisionbot.config import load_config_or_default
    from precisionbot.errors import ConfigError, EngineError, EngineStartError

    config = load_config_or_default(args.config)
    if args.spec_engine_url:
        config = dataclasses.replace(config, engine=dataclasses.replace(config.engine, spec_url=args.spec_engine_url))
    flags = suite_flags(args)
    suite = flags.apply(config.suite(args.suite or config.github.baseline_suite))
    model = select_model(config, args.model)
    choice = engine_choice(args, config)
    store = open_store(_store_uri(args, config))
    documents = corpus.suite_documents(suite.corpus)
    commit = args.engine_commit or os.environ.get(envvars.ENGINE_COMMIT) or None
    reruns = config.baselines.helper_reruns if args.reruns is None else args.reruns
    if reruns < 0 or reruns in (1, 2):
        raise ConfigError(f"--reruns {reruns}: use 0 (golden only) or at least 3 (main's noise needs 3 reruns)")
    accept = _acceptance(args, config)
    helper_suite = rerun_suite(config, suite, flags) if reruns else None
    # main's acceptance, when the suite a PR runs (else the one recorded) has spec_decode (reruns 0: golden only)
    spec_suite = next((s for s in (helper_suite, suite) if reruns and s and "spec_decode" in s.checks), None)
    # The store verified before the engine starts: a probe written (and the replaced baseline's store read).
    reference = None if accept is None else (open_store(accept.reference_uri) if accept.reference_uri else store)
    preflight_record_store(store, reference, model)
    progress = TerminalProgress(sys.stderr)
    progress.enabled = not args.quiet
    with tempfile.TemporaryDirectory(prefix="precisionbot-engine-") as logs:
        try:
            with (
                open_engine(config, choice, model, Path(logs)) as engine,
                spec_arm(config, choice, spec_suite.checks if spec_suite is not None else ()) as spec_engine,
            ):
                try:
                    engine.server_info()
                except EngineError as exc:
                    raise unusable(exc, choice) from exc
                # Before minutes of work: sizes the engine's context cannot hold would store nothing.
                helper_part = [] if helper_suite is None else [(helper_suite, _helpers_of(helper_suite))]
                refuse_misfits(engine, *helper_part, (suite, ("golden",)))
                target = golden_target(engine, config, suite.golden, model, documents)
                audit = None if accept is None else accept.audit(store, target, commit)
                helpers = _helper_reruns(engine, config, helper_suite, model, reruns, progress)
                acceptance = _acceptance_reruns(engine, config, spec_suite, model, reruns, spec_engine)
                if not args.quiet:
                    depths = ", ".join(map(str, suite.golden.context_depths))
                    print(f"golden: recording at depths {depths}", file=sys.stderr)
                meta = record_golden(
                    target,
                    store,
                    label=args.label,
                    producer=args.producer,
                    engine_commit=commit,
                    helpers=helpers,
                    acceptance=acceptance,
                    extra=None if audit is None else {ACCEPT_KEY: audit},
                    progress=GoldenProgress(progress),
                    modules=module_capture(engine, config, Path(logs) / "module-dumps"),
                )
                progress.close()
        except EngineStartError as exc:
            raise unusable(exc, choice) from exc
    _print_recorded(meta, helpers, store.uri, audit, acceptance)
    return 0


class _Acceptance:
    """``--accept-reason``: the run is an accepted numerics change, recorded with who accepted it, for which
    PR, and which baseline it replaces (read from ``reference``, the store it will join)."""

    def __init__(self, reason: str, by: str, pr: int, reference_uri: str | None) -> None:
        self.reason, self.by, self.pr, self.reference_uri = reason, by, pr, reference_uri

    def audit(self, store: Any, target: Any, commit: str | None) -> dict[str, Any]:
        from precisionbot.baselines import now_utc, open_store, select_baseline
        from precisionbot.baselines.accept import audit_record

        # A CI run records into a staging store that `baseline publish` copies into baselines.store later: the
        # reference it replaces is the one in the store it will join, not the (empty) staging one.
        reference = store if self.reference_uri is None else open_store(self.reference_uri)
        replaced = select_baseline(reference, target.model, target.signature().digest)
        return audit_record(
            reason=self.reason, by=self.by, pr=self.pr, replaces=replaced, when=now_utc(), commit=commit
        )


def _acceptance(args: argparse.Namespace, config: Any) -> _Acceptance | None:
    """The ``--accept-reason`` flags checked together (None when the run is not an acceptance)."""
    from precisionbot.baselines.accept import check_reason
    from precisionbot.errors import ConfigError

    if args.accept_reason is None:
        return None
    if args.accepted_by is None or args.pr is None or args.label != "baseline_established":
        raise ConfigError(
            "--accept-reason needs --accepted-by LOGIN and --pr N, and the default --label baseline_established"
        )
    check_reason(args.accept_reason)
    uri = None
    if args.replaces_from is not None:
        uri = str(config.baselines.store if args.replaces_from == CONFIG_STORE else args.replaces_from)
    return _Acceptance(args.accept_reason, args.accepted_by, args.pr, uri)


def _helper_reruns(engine: Any, config: Any, suite: Any, model: Any, reruns: int, progress: Any) -> Any:
    """main's helper noise: the consistency helpers rerun ``reruns`` times (None without a helper suite)."""
    from precisionbot.checks.main_noise import skipped_up_front
    from precisionbot.checks.rerun import rerun_helpers

    if suite is None:
        return None
    up_front = skipped_up_front(suite.samples, reruns)
    if up_front:
        # Said before the reruns are spent, not only in the PR's result.json afterwards.
        print(f"note: {up_front}", file=sys.stderr)
    helpers = rerun_helpers(
        engine, config, suite, model, reruns, on_rerun=_rerun_line, progress=RerunsProgress(progress, reruns)
    )
    progress.close()
    if not helpers.helpers:
        print("  no helper rerun was usable (reasons above): no helper noise stored", file=sys.stderr)
    return helpers


def _acceptance_reruns(engine: Any, config: Any, suite: Any, model: Any, reruns: int, spec_engine: Any) -> Any:
    """main's speculative acceptance, rerun ``reruns`` times on the spec arm (None without a suite that runs
    spec_decode, or without a spec arm: then a note on stderr says why nothing is stored)."""
    from precisionbot.checks.rerun import rerun_acceptance
    from precisionbot.errors import EngineError

    if suite is None:
        return None
    print(f"spec_decode: main's acceptance, {reruns} reruns of the spec arm", file=sys.stderr)
    try:
        found = rerun_acceptance(
            engine, config, suite, model, reruns, spec_engine=spec_engine, on_rerun=_acceptance_line
        )
    except EngineError as exc:
        found = f"the spec arm failed: {exc}"
    if isinstance(found, str):
        print(f"note: spec_decode: main's acceptance not recorded: {found}", file=sys.stderr)
        return None
    return found


def _acceptance_line(index: int, acceptance: Any) -> None:
    clear = "\r\x1b[2K" if sys.stderr.isatty() else ""
    print(
        f"{clear}  acceptance rerun {index + 1}: {acceptance.mean_length:.3f} tokens per verify "
        f"(rate {acceptance.rate:.3f}; {acceptance.verify_steps} verify steps)",
        file=sys.stderr,
    )


def _print_recorded(
    meta: Any, helpers: Any, store_uri: str, audit: dict[str, Any] | None, acceptance: Any = None
) -> None:
    print(f"recorded {meta.run_id} ({meta.label}, producer {meta.producer}, {meta.stats['positions']} positions)")
    if helpers is not None:
        kept = ", ".join(f"{h} x{helpers.reruns(h)}" for h in helpers.helpers) or "none usable"
        print(f"  helper reruns: {kept}")
    if acceptance is not None:
        summary = acceptance.summary()
        print(
            f"  spec_decode acceptance: x{summary['reruns']}, {summary['accept_length_mean']:.2f} tokens per verify "
            f"(range {summary['accept_length_min']:.2f}–{summary['accept_length_max']:.2f}, rate "
            f"{summary['accept_rate_mean']:.2f})"
        )
    print(f"  {store_uri}/{meta.prefix}")
    print(f"  model {meta.model}, signature {meta.signature}")
    if audit is not None:
        was = audit["replaces"]["run_id"] if audit["replaces"] else "no earlier baseline"
        print(f"  accepted by {audit['by']} (PR #{audit['pr']}): {audit['reason']}; replaces {was}")


def _helpers_of(suite: Any) -> tuple[str, ...]:
    from precisionbot.results import CONSISTENCY_CHECKS

    return tuple(c for c in suite.checks if c in CONSISTENCY_CHECKS) or CONSISTENCY_CHECKS


def rerun_suite(config: Any, suite: Any, flags: SuiteFlags) -> Any:
    """The suite main's helper reruns run with: the PR suite's (``github.pr_suite``) with the size flags, since
    a PR's check is compared only with reruns of its own sizes (``helper_params``). A ``--suite`` that runs
    helpers with other sizes would record noise no PR is ever compared with: refused, naming the difference."""
    from precisionbot.baselines.helper_reruns import helper_params
    from precisionbot.errors import ConfigError
    from precisionbot.results import CONSISTENCY_CHECKS

    pr = flags.apply(config.suite(config.github.pr_suite))
    if suite.name == pr.name or not any(c in CONSISTENCY_CHECKS for c in suite.checks):
        return pr
    mine, theirs = helper_params(suite), helper_params(pr)
    diff = [f"{k} {mine[k]} vs {theirs[k]}" for k in mine if mine[k] != theirs.get(k)]
    if diff:
        raise ConfigError(
            f"--suite {suite.name} runs the helpers with other sizes than the PR suite {pr.name!r} "
            f"({'; '.join(diff)}): a PR is compared only with reruns of its own sizes; record with --suite "
            f"{pr.name} (or the same --samples/--max-new-tokens/--prompt-tokens as the PR's check), or --reruns 0"
        )
    return suite


class RerunsProgress:
    """One bar (or one plain line every 30 s in CI) over all reruns: each rerun's ``run_suite`` starts its own
    count, which this adds up, so the ETA covers the reruns still to come."""

    def __init__(self, bar: Any, reruns: int) -> None:
        self.bar, self.reruns, self.index, self.started = bar, reruns, 0, False

    def start(self, total: int) -> None:
        if not self.started:
            self.bar.start(total * self.reruns)
            self.started = True
        else:
            self.index += 1

    def phase(self, label: str) -> None:
        self.bar.phase(f"helper rerun {self.index + 1}/{self.reruns}: {label}")

    def advance(self, n: int) -> None:
        self.bar.advance(n)


class GoldenProgress:
    """golden's requests (prefill, then decode, one per document) on the same bar."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def start(self, total: int) -> None:
        self.bar.start(total)
        self.bar.phase("golden")

    def __call__(self, n: int) -> None:
        self.bar.advance(n)


def _publish(args: argparse.Namespace) -> int:
    from precisionbot.baselines import now_utc, open_store
    from precisionbot.baselines.publish import Plan, check_plan, check_staged, write_checked
    from precisionbot.config import load_config_or_default
    from precisionbot.errors import ConfigError

    missing = [flag for flag, value in (("--sha", args.sha), ("--models", args.models)) if value is None]
    if missing:
        raise ConfigError(
            f"baseline publish needs the plan it publishes against: add {' and '.join(missing)}, e.g. in the "
            "publish job's `with:` `sha: ${{ needs.plan.outputs.sha }}` and "
            "`args: --mode ${{ needs.plan.outputs.mode }} "
            "--models ${{ join(fromJSON(needs.plan.outputs.matrix).include.*.model, ',') }}`, or by hand "
            "`--sha <the 40-hex commit recorded> --models org/model-a,org/model-b` "
            "(docs/baselines.md, Upgrading)"
        )
    accepting = args.mode == "accept"
    if accepting and args.pr is None:
        raise ConfigError("--mode accept needs --pr N: the PR whose numbers were accepted")
    models = tuple(name.strip() for name in args.models.split(","))
    if not all(models):
        raise ConfigError(f"--models {args.models!r}: give each matrix cell's model, comma-separated")
    # A `/precision baseline` run names the PR it was asked on too: only an accept carries its record.
    plan = Plan(commit=args.sha, models=models, accepted_pr=args.pr if accepting else None)
    config = load_config_or_default(args.config)
    target = open_store(_store_uri(args, config))
    stages = [_existing_store(path) for path in args.staging]
    now = now_utc()
    # Every staging store verified, and all of them together against the plan, before the first write.
    staged = [check_staged(stage, now) for stage in stages]
    check_plan([run for runs in staged for run in runs], plan)
    for runs in staged:
        for meta in write_checked(runs, target):
            print(f"published {meta.run_id} ({meta.label}, model {meta.model}) to {target.uri}/{meta.prefix}")
    return 0


def rerun_line(index: int, result: Any) -> str:
    """``helper rerun 1: match pass mean_k3 2.4e-11; ...``: numbers formatted like the report's, and an
    inconclusive helper's reason (why it cannot count as one of main's reruns)."""
    cells = []
    for c in result.checks:
        value = c.stats.get("mean_k3")
        cell = f"{c.name} {c.verdict} mean_k3 {sig(value) if isinstance(value, (int, float)) else '–'}"
        if str(c.verdict) == "inconclusive" and c.reasons:
            cell += f" ({c.reasons[0]})"
        cells.append(cell)
    return f"  helper rerun {index + 1}: " + "; ".join(cells)


def _rerun_line(index: int, result: Any) -> None:
    clear = "\r\x1b[2K" if sys.stderr.isatty() else ""  # over the progress bar, on a terminal
    print(clear + rerun_line(index, result), file=sys.stderr)


def _existing_store(uri: str) -> Any:
    """The store for ``list``/``show``/``history``/``publish``: a local directory that does not exist is a typo,
    not an empty store (``record`` creates it), the same setup error ``check`` gives for golden."""
    from precisionbot.baselines import open_store
    from precisionbot.commands.options.store import require_existing_store

    store = open_store(uri)
    require_existing_store(store, "--store")
    return store


def _list(args: argparse.Namespace) -> int:
    from precisionbot.baselines import list_runs
    from precisionbot.baselines.quarantine import read_markers

    store = _existing_store(_store_uri(args))
    runs = list_runs(store, args.model)  # corrupt runs: skipped, one warning each on stderr
    markers = read_markers(store)
    if args.json:
        for run in runs:
            print(json.dumps(run.to_dict(), sort_keys=True))
        for m in markers:  # a line of its own shape: {"quarantined": {...}}
            print(json.dumps({"quarantined": m.__dict__}, sort_keys=True))
        return 0
    for m in markers:
        print(f"quarantined {m.run_id} ({m.key}) by {m.by} at {m.at}: {m.reason}")
    if not runs:
        print(f"no runs in {store.uri}")
        return 0
    rows = [("run", "date", "label", "producer", "commit", "model", "signature", "positions")]
    for r in runs:
        rows.append(
            (
                r.run_id,
                r.date,
                r.label,
                r.producer,
                (r.engine_commit or "-")[:12],
                r.model,
                r.signature,
                str(r.stats.get("positions", "-")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _history(args: argparse.Namespace) -> int:
    from precisionbot.baselines.history import history, table
    from precisionbot.config import load_config_or_default
    from precisionbot.report.history_page import history_page

    config = load_config_or_default(args.config)
    store = _existing_store(_store_uri(args, config if args.config else None))
    rows = history(store, args.model)
    fmt = "json" if args.json else args.format
    if fmt == "html":
        text = history_page(rows, config.thresholds_for(args.model, None), store.uri)
    elif fmt == "json":
        text = "".join(json.dumps(row.to_dict(), sort_keys=True, allow_nan=False) + "\n" for row in rows)
    elif not rows:
        text = f"no runs in {store.uri}\n"
    else:
        cells = table(rows)
        widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
        text = "".join(
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in cells
        )
    if args.out:
        from pathlib import Path

        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out} ({len(rows)} runs)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _show(args: argparse.Namespace) -> int:
    from precisionbot.baselines import find_run
    from precisionbot.baselines.quarantine import read_markers

    store = _existing_store(_store_uri(args))
    run = find_run(store, args.run)
    # A quarantined run is still shown (its marker says why listing and selection skip it).
    marker = next((m for m in read_markers(store) if m.run_id == run.run_id), None)
    if args.json:
        shown = run.to_dict() | ({} if marker is None else {"quarantined": marker.__dict__})
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    out = sys.stdout
    out.write(f"run        {run.run_id}\n")
    if marker is not None:
        out.write(f"quarantined by {marker.by} at {marker.at}: {marker.reason} (listing and selection skip it)\n")
    out.write(f"key        {store.uri}/{run.prefix}\n")
    out.write(f"model      {run.model}\n")
    out.write(f"created    {run.created}\n")
    out.write(f"label      {run.label}\n")
    out.write(f"producer   {run.producer}\n")
    out.write(f"commit     {run.engine_commit or '-'}\n")
    out.write(f"signature  {run.signature}\n")
    for key, value in run.signature_parts.items():
        out.write(f"  {key:<13} {value if value is not None else '(unknown)'}\n")
    out.write("files\n")
    for name, info in run.files.items():
        out.write(f"  {name}  {info.get('bytes')} bytes  sha256 {info.get('sha256')}\n")
    out.write("stats\n")
    for key, value in run.stats.items():
        out.write(f"  {key:<22} {value}\n")
    return 0
