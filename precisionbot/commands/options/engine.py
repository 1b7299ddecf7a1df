"""The engine options every engine-driving command shares: the flags, the one rule that picks the engine, and
opening it.

``check``, ``baseline record``, ``thresholds suggest`` and ``bisect`` each take an engine from the same flags
(``--engine-url``, also ``--base-url`` as SGLang's and vLLM's benchmark tools spell it, ``--engine builtin|launch``,
``--engine-kind``, the builtin engine's ``--fault`` and numerics) and the config's ``engine:``. The flags are read
once, by :func:`engine_choice`, into an :class:`EngineChoice`; nothing below a command's handler sees argparse.
:func:`open_engine` opens the chosen engine, :func:`engine_at` builds and launches the configured one at a commit
(bisect, the merge-base A/B), and :func:`unusable` is the one-line setup error for an engine that never answered.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precisionbot.commands.options.builtin import add_engine_flags, engine_kwargs
from precisionbot.commands.options.builtin import given as builtin_flags_given
from precisionbot.config import Config, ModelConfig
from precisionbot.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from precisionbot.engines.checkout import Checkout

URL_KINDS = ("sglang", "vllm", "openai", "builtin", "llamacpp")
"""``--engine-kind`` choices, in the order ``--help`` lists them: the config's ``ENGINE_KINDS``, every one with a
client in ``engines.clients.CLIENTS`` (tests/engines/test_clients.py)."""


def add_engine_options(parser: Any, *, source: Any = None, hide_radix_flag: bool = False) -> None:
    """``--engine-url`` / ``--engine`` (mutually exclusive, in ``source`` when the command groups them with
    another source such as ``--store``), ``--engine-kind``, and the builtin engine's ``--fault``,
    ``--disable-radix-cache`` and numerics flags."""
    src = source if source is not None else parser.add_mutually_exclusive_group()
    add_engine_url_flag(src, help="an engine that is already running")
    src.add_argument(
        "--engine",
        metavar="{builtin,launch}",  # checked by engine_mode: a wrong guess is one line, not argparse's usage
        help="builtin: the builtin reference engine in-process; launch: start engine.launch from the config "
        "(a server that is already running: --engine-url URL --engine-kind KIND)",
    )
    parser.add_argument("--engine-kind", choices=URL_KINDS, help="client for --engine-url")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME[=VALUE]", help="builtin engine fault")
    parser.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help=argparse.SUPPRESS if hide_radix_flag else "builtin engine: no prefix cache",
    )
    add_engine_flags(parser)


ENGINE_MODES = ("builtin", "launch")
"""What ``--engine`` takes; a running server is ``--engine-url`` (with ``--engine-kind``)."""
KIND_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "openai": "OpenAI-compatible", "llamacpp": "llama.cpp"}


def add_engine_url_flag(group: Any, *, help: str) -> None:
    """``--engine-url URL``, also spelled ``--base-url`` (what SGLang's and vLLM's benchmark tools call it)."""
    group.add_argument("--engine-url", "--base-url", dest="engine_url", metavar="URL", help=help)


def engine_mode(value: str | None) -> str | None:
    """``--engine`` as given, checked: ``builtin``, ``launch`` or not given. An engine kind there (``--engine
    sglang``, the natural guess) is a setup error that says how to name a running server."""
    if value is None or value in ENGINE_MODES:
        return value
    if value in KIND_NAMES:
        fix = f"for a running {KIND_NAMES[value]} server pass --engine-url URL --engine-kind {value}"
    else:
        fix = "for a server that is already running pass --engine-url URL (and --engine-kind KIND)"
    raise ConfigError(f"--engine takes builtin or launch (got {value!r}); {fix}")


@dataclass(frozen=True)
class EngineChoice:
    """Which engine a command talks to, decided once from its flags and the config (:func:`engine_choice`)."""

    mode: str
    """``builtin`` (in-process), ``launch`` (``engine.launch`` from the config) or ``url`` (already running)."""
    kind: str
    """The client's kind: ``builtin`` in-process, else the kind that speaks to the URL or the launched server."""
    url: str | None = None
    """``url`` mode: where the engine is."""
    faults: tuple[str, ...] = ()
    disable_radix_cache: bool = False
    builtin: dict[str, Any] = field(default_factory=dict)
    """The builtin engine's numerics and model (``EngineOptions`` keyword arguments)."""
    flags: tuple[str, ...] = ()
    """The command-line flags that select this engine again (``baseline record``'s hint after a run)."""


def engine_choice(args: argparse.Namespace, config: Config) -> EngineChoice:
    """The rule: ``--engine-url`` or ``--engine`` when given; else the config's ``engine.url``; else
    ``engine.launch`` for a launched kind; else the builtin engine. The builtin engine's flags with any other
    engine are a setup error, said before anything starts."""
    e = config.engine
    engine_url = getattr(args, "engine_url", None)
    engine = engine_mode(getattr(args, "engine", None))
    engine_kind = getattr(args, "engine_kind", None)
    faults = tuple(getattr(args, "fault", None) or ())
    no_radix = bool(getattr(args, "disable_radix_cache", False))
    url = engine_url or (None if engine else e.url)
    mode = engine or ("url" if url else ("launch" if e.launch and e.kind != "builtin" else e.kind))
    if (faults or no_radix or builtin_flags_given(args)) and mode != "builtin":
        raise ConfigError(
            "--fault and --disable-radix-cache are for the builtin engine (so are --enable-deterministic-inference "
            "and --model-preset); add --engine builtin"
        )
    if mode == "builtin":
        builtin = engine_kwargs(args)
        flags = ["--engine builtin"]
        if builtin["enable_deterministic_inference"]:
            flags.append("--enable-deterministic-inference")
        flags += [
            f"--{flag} {getattr(args, attr)}"
            for flag, attr in (("model-preset", "model_preset"), ("vocab", "vocab"))
            if getattr(args, attr, None)
        ]
        if no_radix:
            flags.append("--disable-radix-cache")
        return EngineChoice(
            "builtin", "builtin", faults=faults or e.faults, disable_radix_cache=no_radix, builtin=builtin,
            flags=tuple(flags),
        )  # fmt: skip
    if mode == "launch":
        return EngineChoice("launch", e.kind, flags=("--engine launch",))
    if not url:
        raise ConfigError("no engine: pass --engine-url URL or --engine builtin (or set engine.url in the config)")
    _check_url(url, "--engine-url" if engine_url else "engine.url in the config")
    # A URL speaks an HTTP API: the builtin default kind means "SGLang-compatible" there.
    kind = engine_kind or ("sglang" if e.kind == "builtin" else e.kind)
    given = [f"--engine-url {url}", *([f"--engine-kind {engine_kind}"] if engine_kind else [])]
    return EngineChoice("url", kind, url=url, flags=tuple(given))


def select_model(config: Config, name: str | None) -> ModelConfig | None:
    """``--model NAME`` from the config's models; without it, the config's only model (or none)."""
    if name:
        return config.model(name)
    return config.models[0] if len(config.models) == 1 else None


def client_options(config: Config) -> dict[str, Any]:
    """The client settings every engine kind takes from ``engine:`` in the config."""
    e = config.engine
    return {"batch_size": e.batch_size, "concurrency": e.concurrency, "request_timeout_s": e.request_timeout_s}


@contextmanager
def spec_arm(config: Config, choice: EngineChoice, checks: Sequence[str]) -> Iterator[Any]:
    """The ``spec_decode`` check's spec arm: a client of ``engine.spec_url`` (``--spec-engine-url``), of the
    plain arm's kind, when the check runs and the engine is a URL one; else None (the builtin engine starts
    its own arms; a launched engine has one launch)."""
    from precisionbot.engines.clients import client

    url = config.engine.spec_url
    if url is None or "spec_decode" not in checks:
        yield None
        return
    if choice.mode != "url":
        fix = (
            "the builtin engine starts both arms itself"
            if choice.mode == "builtin"
            else "start the two servers and pass --engine-url and --spec-engine-url"
        )
        raise ConfigError(
            f"engine.spec_url (--spec-engine-url) is the spec arm of an engine at a URL; with --engine "
            f"{choice.mode} drop it ({fix})"
        )
    _check_url(url, "--spec-engine-url / engine.spec_url")
    engine = client(choice.kind, url, **client_options(config))
    try:
        yield engine
    finally:
        engine.close()


@contextmanager
def open_engine(config: Config, choice: EngineChoice, model: ModelConfig | None, log_dir: Path) -> Iterator[Any]:
    """The chosen engine, closed (and stopped, if we started it) on exit. A launched engine logs to
    ``log_dir/engine.log``; the builtin engine carries the dumper routes when ``localize:`` is on."""
    from precisionbot.engines.clients import client

    e = config.engine
    common = client_options(config)
    if choice.mode == "builtin":
        from precisionbot.engines.builtin import BuiltinEngine

        engine: Any = BuiltinEngine(
            faults=choice.faults,
            disable_radix_cache=choice.disable_radix_cache,
            flags=_dumper_flags() if config.localize.enabled else None,
            **choice.builtin,
            **common,
        )
        try:
            yield engine
        finally:
            engine.close()
        return
    if choice.mode == "launch":
        if not e.launch or model is None:
            raise ConfigError("--engine launch needs engine.launch and one model in the config (or --model NAME)")
        from precisionbot.engines.allocation import slurm_allocation
        from precisionbot.engines.launcher import Launcher

        launcher = Launcher(
            e.launch,
            model=model.path,
            tp=model.tp,
            args=config.launch_args(model),
            log_path=log_dir / "engine.log",
            health_timeout_s=e.health_timeout_s,
            allocation=slurm_allocation(os.environ),
        )
        launcher.start()
        try:
            engine = client(choice.kind, launcher.url, **common)
            try:
                yield engine
            finally:
                engine.close()
        finally:
            launcher.stop()
        return
    engine = client(choice.kind, str(choice.url), **common)
    try:
        yield engine
    finally:
        engine.close()


@contextmanager
def engine_at(config: Config, model: ModelConfig, checkout: Checkout, sha: str, log_dir: Path) -> Iterator[Any]:
    """A client of the configured engine built (``engine.install``) and launched (``engine.launch``) at commit
    ``sha`` of ``checkout``: how bisect starts each commit and the A/B its merge base. Stopped on exit."""
    from precisionbot.engines.checkout import launched_at
    from precisionbot.engines.clients import client

    e = config.engine
    with launched_at(
        checkout,
        sha,
        install_command=e.install,
        launch=str(e.launch),
        model=model.path,
        tp=model.tp,
        args=config.launch_args(model),
        log_dir=log_dir,
        health_timeout_s=e.health_timeout_s,
    ) as url:
        engine = client(e.kind, url, **client_options(config))
        try:
            yield engine
        finally:
            engine.close()


def unusable(exc: EngineError, choice: EngineChoice) -> EngineError:
    """The one-line setup error for an engine that was not usable before any check ran."""
    first = str(exc).splitlines()[0].rstrip(":").replace("; log tail (", "; engine log (")
    first = first.removesuffix("; is the engine running?")
    launched = choice.mode != "url"
    fix = (
        "fix engine.launch in the config (or start the server yourself and pass --engine-url)"
        if launched
        else "start the server or fix --engine-url"
    )
    if launched and "; its log says: " in first:
        # The engine said why (a model that is not there or not GGUF, a directory its arguments name that does
        # not exist): that is the cause, not the template.
        fix = "fix what the engine's log names (the model path, a directory in the engine's arguments: create it)"
    return EngineError(f"the engine is not usable, no check ran: {first}; {fix}")


def record_hint(
    choice: EngineChoice, *, config_path: str | None, suite: str, sizes: tuple[str, ...], model: str | None
) -> str:
    """The ``baseline record`` flags (all but ``--store``) that reach the engine this run used, with its config,
    suite, sizes and model: an engine precisionbot started (builtin, launch) is started again rather than named
    by a port that is dead once the run ends, and without ``--config``/``--suite`` the recorded signature
    differs."""
    parts = list(choice.flags)
    if config_path:
        parts.append(f"--config {config_path}")
    parts.append(f"--suite {suite}")
    parts += sizes
    if model:
        parts.append(f"--model {model}")
    return " ".join(parts)


def _dumper_flags() -> Any:
    """The builtin engine launched as localize needs it (docs/localize.md): routes, all modules, no graphs."""
    from precisionbot.builtin.dumper_config import DumperConfig, RuntimeFlags

    return RuntimeFlags(True, True, DumperConfig(server_port="reuse", non_intrusive_mode="all"))


def _check_url(url: str, source: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{source} {url!r} is not an http(s) URL; write it as http://HOST:PORT")
    try:
        parts.port  # noqa: B018  (a property that validates the port)
    except ValueError as exc:
        raise ConfigError(f"{source} {url!r}: {exc}; write it as http://HOST:PORT") from exc
