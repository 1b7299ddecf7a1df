"""The dumper's configuration (SGLang's ``DumperConfig`` and its ``DUMPER_*`` variables) and the builtin
engine's other observation-only launch settings. No torch here: ``precisionbot serve`` checks them before
torch loads. The dumper itself is dumper.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from precisionbot.errors import ConfigError

ENV_PREFIX = "DUMPER_"
NAME_PREFIX = "non_intrusive__"
EXP_NAME_PREFIX = "dump_"


class DumperRequestError(ValueError):
    """A bad ``/dumper/*`` call: HTTP 400 ``{"error": [message]}``."""


@dataclass(frozen=True)
class DumperConfig:
    """SGLang's ``DumperConfig`` fields that the builtin engine implements, with SGLang's defaults."""

    enable: bool = False
    """Write tensors now. Off at start is what a localization wants: it enables around its own requests."""
    filter: str | None = None
    """Unsupported here (must stay None)."""
    dir: str = "/tmp/dumper"
    enable_output_file: bool = True
    enable_output_console: bool = True
    """Accepted for SGLang parity; the builtin engine logs nothing per tensor either way."""
    enable_value: bool = True
    exp_name: str | None = None
    """Sub-folder of ``dir``; None picks ``dump_<UTC time>_<ms><random>`` at the first write."""
    cleanup_previous: bool = False
    """Delete ``dir/dump_*`` and ``dir/exp_name`` before the first write."""
    collective_timeout: int = 60
    server_port: str = "-1"
    """``reuse``: the routes on the engine's own port; a positive port: SGLang's standalone control server
    (not supported here); anything else: no routes."""
    non_intrusive_mode: str = "core"
    """``off`` (no hooks), ``core`` (forward-batch fields only) or ``all`` (every module's inputs and output)."""

    @property
    def armed(self) -> bool:
        """SGLang's ``may_enable``: the hooks and the per-forward step are installed."""
        return self.enable or self.routes

    @property
    def routes(self) -> bool:
        return self.server_port == "reuse"


_BOOL_FIELDS = {f.name for f in fields(DumperConfig) if f.type == "bool"}
_INT_FIELDS = {f.name for f in fields(DumperConfig) if f.type == "int"}
_UNSUPPORTED_SGLANG_FIELDS = (
    "enable_grad", "enable_model_value", "enable_model_grad", "source_patcher_config", "grafter_enable",
    "include_parallel_rank_in_filename",
)  # fmt: skip


def _parse(name: str, raw: str, where: str) -> Any:
    if name in _BOOL_FIELDS:
        return raw.lower() in ("true", "1")
    if name in _INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{where} must be an integer (got {raw!r})") from None
    return raw


def config_from_env(env: Mapping[str, str]) -> DumperConfig:
    """The dumper's configuration from ``DUMPER_*`` variables, read as SGLang reads them."""
    values: dict[str, Any] = {}
    for f in fields(DumperConfig):
        raw = env.get(ENV_PREFIX + f.name.upper())
        if raw is not None and raw.strip():
            values[f.name] = _parse(f.name, raw, ENV_PREFIX + f.name.upper())
    for name in _UNSUPPORTED_SGLANG_FIELDS:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw and raw.strip() and raw.lower() not in ("0", "false"):
            raise ConfigError(f"{ENV_PREFIX}{name.upper()} is not supported by the builtin engine's dumper; unset it")
    config = DumperConfig(**values)
    check(config, lambda name: ENV_PREFIX + name.upper(), ConfigError)
    return config


def check(config: DumperConfig, label: Callable[[str], str], error: type[Exception]) -> None:
    """Raises ``error`` for a configuration the builtin dumper cannot honour; ``label`` names a field."""
    if config.filter is not None:
        raise error(
            f"{label('filter')} is not supported by the builtin engine's dumper (SGLang evaluates it as Python)"
        )
    port = config.server_port.strip()
    if port != "reuse":
        try:
            number = int(port)
        except ValueError:
            raise error(f"{label('server_port')} must be 'reuse' or a port number (got {port!r})") from None
        if number > 0:
            raise error(
                f"{label('server_port')}={number}: the builtin engine has no standalone dumper server; "
                "use 'reuse' (the routes on the engine's own port)"
            )


def configured(config: DumperConfig, changes: Mapping[str, Any]) -> DumperConfig:
    """``config`` with ``POST /dumper/configure``'s ``changes`` applied, each field's type checked as SGLang's
    dumper checks it; a ``DumperRequestError`` names an unknown field or a wrong type (the route's 400)."""
    known = {f.name: f.type for f in fields(DumperConfig)}
    for key, value in changes.items():
        kind = known.get(key)
        if kind is None:
            raise DumperRequestError(f"configure: unknown field {key!r}; valid fields: {', '.join(known)}")
        ok = (
            (kind == "bool" and isinstance(value, bool))
            or (kind == "int" and isinstance(value, int) and not isinstance(value, bool))
            or (kind == "str" and isinstance(value, str))
            or (kind == "str | None" and (value is None or isinstance(value, str)))
        )
        if not ok:
            raise DumperRequestError(f"DumperConfig.{key}: expected {kind}, got {type(value).__name__}")
    new = replace(config, **changes)
    check(new, lambda name: f"configure: {name}", DumperRequestError)
    return new


@dataclass(frozen=True)
class RuntimeFlags:
    """Launch settings of the builtin engine that never change the numbers (so they are not ``EngineOptions``,
    which a baseline signature hashes)."""

    disable_cuda_graph: bool = False
    """SGLang's ``--disable-cuda-graph``, reported in ``/server_info`` as given. The builtin engine has no CUDA
    graphs: every forward runs the dumper's hooks whatever this says (an SGLang server on CUDA replays decode
    batches from a graph, where no hook runs, unless it is set). Reported as given, so that localize's guard,
    which refuses a real server without it, reads from ``serve`` what it would read from that server."""
    disable_prefill_cuda_graph: bool = False
    """SGLang's ``--disable-prefill-cuda-graph``: the same for prefill batches (SGLang 0.5.23 captures them as a
    breakable graph on CUDA by default)."""
    dumper: DumperConfig = field(default_factory=DumperConfig)
