"""The five settings a tensor dump needs, each of which fails silently when wrong, and the refusals that name
them. Pure: a launch command and environment, or what a running engine reports, in; refusals out.

1. ``DUMPER_ENABLE=0`` at start: enabled at start, the dumper writes every forward, the server's warm-up
   included, until the disk is full (localize enables it only around its own requests);
2. ``DUMPER_SERVER_PORT=reuse``: the literal value registers the hooks *and* the ``/dumper/*`` routes on
   the engine's own port; without the routes dumping cannot be switched on and off;
3. ``DUMPER_NON_INTRUSIVE_MODE=all``: the default ``core`` writes positions, seq_lens, req_pool_indices,
   input_ids and rids, and no module tensor, without an error;
4. ``--disable-cuda-graph`` and 5. ``--disable-prefill-cuda-graph``: hooks do not run inside a replayed CUDA
   graph, so decode (or prefill) forwards would write nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

REQUIRED_ENV = {"DUMPER_ENABLE": "0", "DUMPER_SERVER_PORT": "reuse", "DUMPER_NON_INTRUSIVE_MODE": "all"}
"""The environment localize launches an engine with."""
REQUIRED_FLAGS = ("--disable-cuda-graph", "--disable-prefill-cuda-graph")

_WHY = {
    "DUMPER_ENABLE": "enabled at start, the dumper writes every forward, the warm-up included, and can fill the "
    "disk; localize enables it only around its own requests",
    "DUMPER_SERVER_PORT": "only the literal 'reuse' registers POST /dumper/* on the engine's own port, without "
    "which dumping cannot be switched on around the requests",
    "DUMPER_NON_INTRUSIVE_MODE": "the default 'core' writes only positions, seq_lens, req_pool_indices, "
    "input_ids and rids, no module tensor, and no error",
    "--disable-cuda-graph": "hooks do not run inside a replayed CUDA graph, so decode steps would write nothing",
    "--disable-prefill-cuda-graph": "hooks do not run inside a replayed prefill CUDA graph, so prefill forwards "
    "would write nothing",
}


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true")


def _env_ok(name: str, value: str) -> bool:
    if name == "DUMPER_ENABLE":
        return not _truthy(value)
    return value.strip() == REQUIRED_ENV[name]


def launch_refusals(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Refusals for launching ``argv`` (the rendered launch template) with ``env`` added to the environment:
    an inline ``NAME=value`` in the template wins over ``env``, as it would in ``env NAME=value cmd``."""
    out = []
    values = {name: env.get(name, "") for name in REQUIRED_ENV}
    for token in argv:
        name, sep, value = token.partition("=")
        if sep and name in REQUIRED_ENV:
            values[name] = value
    for name, value in values.items():
        if not _env_ok(name, value):
            out.append(
                f"{name}={REQUIRED_ENV[name]}: the launch template sets {name}={value!r}; {_WHY[name]}. "
                f"Drop it from engine.launch (localize sets {name}={REQUIRED_ENV[name]} itself)"
            )
    for flag in REQUIRED_FLAGS:
        if flag not in argv:
            out.append(
                f"{flag}: the rendered launch command lacks it ({_WHY[flag]}); localize appends it to {{args}}, so "
                "add an {args} placeholder to engine.launch"
            )
    return out


def server_refusals(server_info: Mapping[str, Any], state: Mapping[str, Any] | None) -> list[str]:
    """Refusals for a running engine: ``server_info`` is its ``/server_info``, ``state`` rank 0's answer to
    ``POST /dumper/get_state`` (None when the route answered 404)."""
    out = []
    if state is None:
        out.append(
            f"DUMPER_SERVER_PORT=reuse: POST /dumper/get_state answered 404, so the engine was started without it "
            f"({_WHY['DUMPER_SERVER_PORT']}); restart the engine with DUMPER_SERVER_PORT=reuse"
        )
    else:
        config = state.get("config") or {}
        if config.get("enable"):
            out.append(
                f"DUMPER_ENABLE=0: the engine's dumper is already enabled (dump_index {state.get('dump_index')}): "
                f"{_WHY['DUMPER_ENABLE']}. Restart it with DUMPER_ENABLE=0"
            )
        mode = config.get("non_intrusive_mode")
        if mode != "all":
            out.append(
                f"DUMPER_NON_INTRUSIVE_MODE=all: the engine's dumper runs {mode!r}: {_WHY['DUMPER_NON_INTRUSIVE_MODE']}"
                ". Restart it with DUMPER_NON_INTRUSIVE_MODE=all (configuring it later does not re-register hooks)"
            )
    for flag in REQUIRED_FLAGS:
        key = flag[2:].replace("-", "_")
        if server_info.get(key) is not True:
            shown = "does not report it" if key not in server_info else f"reports {key}={server_info.get(key)!r}"
            out.append(f"{flag}: /server_info {shown}: {_WHY[flag]}. Restart the engine with {flag}")
    return out


def deterministic_refusal(server_info: Mapping[str, Any]) -> str | None:
    """A helper-path localization compares decode (or a cache hit) with prefill bit for bit: without
    ``--enable-deterministic-inference`` the two paths take different kernels by design and the first GEMM
    would always be named."""
    if server_info.get("enable_deterministic_inference") is True:
        return None
    return (
        "--enable-deterministic-inference: /server_info says the engine runs without it, so decode and prefill "
        "take different kernels by design and every op differs between the helper's two paths; restart the "
        "engine with --enable-deterministic-inference, or compare builds with --path golden"
    )
