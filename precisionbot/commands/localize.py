"""``precisionbot localize``: which op. Drives the engine's SGLang-style dumper around its own requests and
prints the first module whose inputs are bit-identical and whose output differs (docs/localize.md).

Exit 0: every aligned row agrees; 1: a diverging op was found; 3: a refusal (a setting that would make the
dump silently empty or misleading) or a setup error. torch is imported inside the handler.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precisionbot.builtin.options import FAULT_NAMES, SPEC_FAULTS, EngineOptions, parse_fault
from precisionbot.commands.options.builtin import add_engine_flags, engine_kwargs
from precisionbot.commands.options.engine import URL_KINDS, add_engine_url_flag, engine_mode
from precisionbot.config import load_config_or_default
from precisionbot.errors import ConfigError

if TYPE_CHECKING:
    from precisionbot.localize.run import Outcome

DEFAULT_OUT = "precisionbot-localize"
PATHS = ("decode", "prefill-cache-hit", "decode-cache-hit", "golden", "spec-decode")
SPEC_URL_REFUSAL = (
    "--path spec-decode runs on the builtin engine only (--engine builtin): it compares a verify (an extend of "
    "k+1 tokens) with a plain decode op by op, which names a bug only where the two take the same kernels bit for "
    "bit, as the builtin engine's --enable-deterministic-inference does; vLLM has no such mode (its CPU build's "
    "verify and decode differed by up to 4e-6 in a logprob on a clean fp32 pair, so the first op would be named "
    "for no bug), and SGLang's speculative workers (their draft forwards and verify batches) are not mapped onto "
    "its dumper's rows; localize the spec_decode failure's fault on the builtin engine, or compare builds with "
    "--path golden on the server"
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "localize",
        help="name the first op whose inputs agree and whose output differs (SGLang's dumper)",
        description="Captures every module's inputs and outputs with the engine's tensor dumper (SGLang's "
        "DUMPER_* settings) on two runs that must agree row for row, and prints 'first diverging op: MODULE'. "
        "Writes DIR/comparison.jsonl (SGLang comparator records), DIR/localization.json and the dumps. Exit 0 "
        "no difference, 1 a diverging op, 3 a refusal or setup error.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    add_engine_url_flag(src, help="a running engine started with the dumper settings")
    src.add_argument(
        "--engine",
        metavar="{builtin,launch}",  # checked by engine_mode in run: a wrong guess is one line
        help="builtin: the builtin engine in-process; launch: engine.launch from the config, with the settings added",
    )
    p.add_argument("--baseline-url", metavar="URL", help="--path golden with --engine-url: the baseline build")
    p.add_argument(
        "--engine-kind",
        choices=URL_KINDS,
        help="client for --engine-url / --engine launch (default sglang; vllm: a vLLM server with precisionbot's "
        "dumper plugin, docs/localize.md)",
    )
    p.add_argument(
        "--path",
        choices=PATHS,
        default="decode",
        help="decode (default): decode steps vs a fresh prefill; prefill-cache-hit / decode-cache-hit: a prefix-cache "
        "hit vs a fresh prefill; golden: the PR build vs the baseline build on the same tokens; spec-decode: the "
        "speculative arm's verify vs the plain arm's decode on the same prompt (--engine builtin)",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help=f"builtin engine fault (repeatable): {', '.join(FAULT_NAMES)}",
    )
    p.add_argument("--sliding-window-size", type=int, default=256, help="builtin engine: sliding-window keys")
    p.add_argument("--chunked-prefill-size", type=int, default=512, help="builtin engine: prefill chunk (default 512)")
    p.add_argument("--prompt-tokens", type=int, default=96, metavar="N", help="prompt length (default 96)")
    p.add_argument("--max-new-tokens", type=int, default=8, metavar="N", help="decode steps captured (default 8)")
    p.add_argument(
        "--suffix-tokens", type=int, default=24, metavar="N", help="cache-hit paths: new tokens after the hit"
    )
    p.add_argument("--disk-floor-gib", type=float, default=5.0, help="stop dumping below this free disk (default 5)")
    p.add_argument("--config", metavar="FILE", help="YAML config (--engine launch: engine.launch, engine.args)")
    p.add_argument("--model", help="model name from the config (--engine launch)")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    add_engine_flags(p)
    p.set_defaults(handler=run)


@dataclass(frozen=True)
class _Engines:
    target: str
    baseline: str | None


def _builtin_options(args: argparse.Namespace, faults: tuple[str, ...]) -> EngineOptions:
    return path_options(
        args.path,
        faults,
        {
            **engine_kwargs(args),
            "sliding_window_size": args.sliding_window_size,
            "chunked_prefill_size": args.chunked_prefill_size,
        },
    )


def spec_arms(options: EngineOptions) -> tuple[EngineOptions, EngineOptions]:
    """(plain, spec) arms of ``options``, as the ``spec_decode`` check launches them: the plain arm without
    speculation and without the spec faults, the spec arm with the options' algorithm (or the one a spec fault
    needs), else NGRAM."""
    from precisionbot.checks.spec_decode import DEFAULT_ALGORITHM

    kept = tuple(f for f in options.faults if f.name not in SPEC_FAULTS)
    plain = dataclasses.replace(options, speculative_algorithm=None, faults=kept)
    if options.spec_algorithm is not None:
        return plain, options
    return plain, dataclasses.replace(options, speculative_algorithm=DEFAULT_ALGORITHM)


def path_options(path: str, faults: Sequence[str], kwargs: Mapping[str, Any]) -> EngineOptions:
    """The builtin engine's options for localizing on ``path``."""
    if path != "golden":
        # The helper paths compare decode (or a cache hit) with prefill bit for bit: only meaningful where the
        # two paths take the same kernels.
        kwargs = {**kwargs, "enable_deterministic_inference": True}
    return EngineOptions(faults=tuple(parse_fault(f) for f in faults), **kwargs)


@contextmanager
def builtin_engines(target: EngineOptions, baseline: EngineOptions | None, out: Path) -> Iterator[_Engines]:
    """The builtin engine with the dumper on (and, for golden, a clean baseline build beside it; for spec-decode,
    the plain arm beside the spec arm), served on free ports with every setting the guards require; dumps go to
    ``out/dumps``."""
    from precisionbot.builtin.dumper_config import DumperConfig, RuntimeFlags
    from precisionbot.builtin.server import BuiltinServer

    dumper = DumperConfig(server_port="reuse", non_intrusive_mode="all", dir=str(out / "dumps"))
    runtime = RuntimeFlags(disable_cuda_graph=True, disable_prefill_cuda_graph=True, dumper=dumper)
    with ExitStack() as stack:
        served = stack.enter_context(BuiltinServer(target, flags=runtime))
        clean = None if baseline is None else stack.enter_context(BuiltinServer(baseline, flags=runtime)).url
        yield _Engines(served.url, clean)


def localize_builtin_fault(fault: str, path: str, prompt_tokens: int, max_new_tokens: int, flags: Mapping[str, Any],
                           out: Path) -> Outcome:  # fmt: skip
    """One builtin fault localized on ``path`` (what ``calibrate --localize`` runs per op-level fault)."""
    from precisionbot.localize.run import Settings, localize_engines

    target = path_options(path, (fault,), flags)
    baseline = path_options(path, (), flags) if path == "golden" else None
    if path == "spec-decode":
        baseline, target = spec_arms(target)
    started = time.monotonic()
    with builtin_engines(target, baseline, out) as engines:
        return localize_engines(engines.target, engines.baseline, Settings(path, prompt_tokens, max_new_tokens), out,
                                started)  # fmt: skip


@contextmanager
def _engines(args: argparse.Namespace, out: Path) -> Iterator[_Engines]:
    if args.engine == "builtin":
        if args.path == "golden" and not args.fault:
            raise ConfigError(
                "--path golden with --engine builtin compares a faulted build with a clean one: add --fault"
            )
        target = _builtin_options(args, tuple(args.fault))
        baseline = _builtin_options(args, ()) if args.path == "golden" else None
        if args.path == "spec-decode":
            baseline, target = spec_arms(target)
        with builtin_engines(target, baseline, out) as engines:
            yield engines
        return
    if args.fault:
        raise ConfigError("--fault is for the builtin engine; add --engine builtin")
    if args.path == "spec-decode":
        raise ConfigError(SPEC_URL_REFUSAL)
    if args.engine == "launch":
        yield from _launched(args, out)
        return
    if args.path == "golden" and not args.baseline_url:
        raise ConfigError("--path golden with --engine-url needs --baseline-url URL (the baseline build's engine)")
    yield _Engines(args.engine_url, args.baseline_url if args.path == "golden" else None)


def _launched(args: argparse.Namespace, out: Path) -> Iterator[_Engines]:
    from precisionbot.engines.launcher import Launcher, render_command
    from precisionbot.localize.guards import launch_env, launch_refusals, required_flags

    config = load_config_or_default(args.config)
    e = config.engine
    models = [m for m in config.models if args.model in (None, m.name)]
    if not e.launch or len(models) != 1:
        raise ConfigError("--engine launch needs engine.launch and one model in the config (or --model NAME)")
    if args.path == "golden":
        raise ConfigError(
            "--path golden launches two builds: start them yourself and pass --engine-url and --baseline-url"
        )
    model = models[0]
    given = config.launch_args(model)
    kind = _kind(args)
    extra = " ".join(f for f in required_flags(kind) if f not in given.split())
    launch_args = f"{given} {extra}".strip()
    argv = render_command(e.launch, model=model.path, tp=model.tp, port=0, args=launch_args)
    env = launch_env(kind, os.environ)
    refusals = launch_refusals(argv, env, kind)
    if refusals:
        raise ConfigError("localize refuses this launch template: " + "; ".join(refusals))
    launcher = Launcher(
        e.launch,
        model=model.path,
        tp=model.tp,
        args=launch_args,
        log_path=out / "engine.log",
        health_timeout_s=e.health_timeout_s,
        env=env,
    )
    launcher.start()
    try:
        yield _Engines(launcher.url, None)
    finally:
        launcher.stop()


def _kind(args: argparse.Namespace) -> str:
    """The engines' client kind: ``--engine-kind``, sglang by default (the builtin engine speaks SGLang's API)."""
    kind: str = args.engine_kind or "sglang"
    return kind


def run(args: argparse.Namespace) -> int:
    engine_mode(args.engine)
    if args.engine == "builtin" and args.engine_kind not in (None, "sglang", "builtin"):
        raise ConfigError(
            f"--engine-kind {args.engine_kind} is for --engine-url or --engine launch, not --engine builtin"
        )
    for flag in ("prompt_tokens", "max_new_tokens", "suffix_tokens"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 1 (got {getattr(args, flag)})")
    if args.baseline_url and args.path != "golden":
        raise ConfigError("--baseline-url is for --path golden")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.engine == "builtin":
        _builtin_options(args, tuple(args.fault))  # bad faults and options fail before torch loads
    started = time.monotonic()
    with _engines(args, out) as engines:
        return _localize(args, engines, out, started)


def _localize(args: argparse.Namespace, engines: _Engines, out: Path, started: float) -> int:
    from precisionbot.localize.run import Settings, localize_engines

    settings = Settings(args.path, args.prompt_tokens, args.max_new_tokens, args.suffix_tokens, args.disk_floor_gib)
    outcome = localize_engines(engines.target, engines.baseline, settings, out, started, kind=_kind(args))
    print(outcome.line)
    if outcome.inherit is not None:
        print(outcome.inherit)
    summary = outcome.summary
    print(
        f"{outcome.tensors} tensors compared ({summary['dump_bytes'] / 1e6:.1f} MB of dumps, "
        f"{summary['seconds']:.1f} s); details in {out}/comparison.jsonl",
        file=sys.stderr,
    )
    return 0 if summary["first_diverging_op"] is None else 1
