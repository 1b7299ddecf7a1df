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

A vLLM server speaks the dumper through precisionbot's plugin (``engines/vllm_plugin.py``), with the same three
variables and ``VLLM_PLUGINS`` naming the plugin; its one flag is ``--enforce-eager`` (no CUDA graph, and in
vLLM 0.32 no torch.compile, ``-O0``, which would trace the hooks into a graph). vLLM's ``/server_info`` (what
``VLLMEngine.server_info`` reads: the model, vLLM's version, the cache configuration from ``/metrics``) says
neither, so the plugin reports them in ``get_state``'s ``vllm`` object and the guards read them there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

REQUIRED_ENV = {"DUMPER_ENABLE": "0", "DUMPER_SERVER_PORT": "reuse", "DUMPER_NON_INTRUSIVE_MODE": "all"}
"""The environment localize launches an engine with."""
REQUIRED_FLAGS = ("--disable-cuda-graph", "--disable-prefill-cuda-graph")
VLLM_PLUGIN = "precisionbot_dumper"
"""The plugin's entry-point name, which ``VLLM_PLUGINS`` must list (engines/vllm_dumper.py ``PLUGIN_NAME``)."""
VLLM_REQUIRED_FLAGS = ("--enforce-eager",)

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
    "--enforce-eager": "without it vLLM replays CUDA graphs, in which no hook runs, and compiles the model with "
    "torch.compile, which would trace the hooks into its graph (the plugin then registers none)",
}
_VLLM_INSTALL = (
    f"install precisionbot into vLLM's environment (pip install --no-deps precisionbot) and start vLLM with "
    f"VLLM_PLUGINS={VLLM_PLUGIN} (plus any other plugin it loads) and DUMPER_SERVER_PORT=reuse"
)


def engine_kind(server_info: Mapping[str, Any], kind: str | None) -> str:
    """``kind`` when given, else ``vllm`` for what ``VLLMEngine.server_info`` returns and ``sglang`` for the
    rest: the guards of each kind read different reports."""
    if kind is not None:
        return kind
    return "vllm" if server_info.get("prefix_cache_rules") == "vllm" else "sglang"


def required_flags(kind: str) -> tuple[str, ...]:
    """The launch flags without which the hooks do not run (``launch_refusals`` checks them)."""
    return VLLM_REQUIRED_FLAGS if kind == "vllm" else REQUIRED_FLAGS


def launch_env(kind: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment localize adds to a launch: ``REQUIRED_ENV``, and for vLLM ``VLLM_PLUGINS`` with the plugin
    added to any list ``environ`` already has (vLLM then loads only the plugins listed)."""
    env = dict(REQUIRED_ENV)
    if kind == "vllm":
        listed = [p for p in environ.get("VLLM_PLUGINS", "").split(",") if p.strip()]
        env["VLLM_PLUGINS"] = ",".join(dict.fromkeys([*listed, VLLM_PLUGIN]))
    return env


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true")


def _env_ok(name: str, value: str) -> bool:
    if name == "DUMPER_ENABLE":
        return not _truthy(value)
    return value.strip() == REQUIRED_ENV[name]


def launch_refusals(argv: Sequence[str], env: Mapping[str, str], kind: str = "sglang") -> list[str]:
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
    for flag in required_flags(kind):
        if flag not in argv:
            out.append(
                f"{flag}: the rendered launch command lacks it ({_WHY[flag]}); localize appends it to {{args}}, so "
                "add an {args} placeholder to engine.launch"
            )
    return out


def server_refusals(
    server_info: Mapping[str, Any], state: Mapping[str, Any] | None, kind: str | None = None
) -> list[str]:
    """Refusals for a running engine: ``server_info`` is its ``/server_info``, ``state`` rank 0's answer to
    ``POST /dumper/get_state`` (None when the route answered 404), ``kind`` the engine kind (None: read off
    ``server_info``, ``engine_kind``)."""
    out = []
    vllm = engine_kind(server_info, kind) == "vllm"
    if state is None and vllm:
        out.append(
            "DUMPER_SERVER_PORT=reuse: POST /dumper/get_state answered 404, so this vLLM server runs without "
            f"precisionbot's dumper plugin or without its routes ({_WHY['DUMPER_SERVER_PORT']}); {_VLLM_INSTALL}"
        )
    elif state is None:
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
    if vllm:
        return out + ([] if state is None else _vllm_refusals(state))
    for flag in REQUIRED_FLAGS:
        key = flag[2:].replace("-", "_")
        if server_info.get(key) is not True:
            shown = "does not report it" if key not in server_info else f"reports {key}={server_info.get(key)!r}"
            out.append(f"{flag}: /server_info {shown}: {_WHY[flag]}. Restart the engine with {flag}")
    return out


def _vllm_refusals(state: Mapping[str, Any]) -> list[str]:
    """What the vLLM plugin reports (``get_state``'s ``vllm`` object) that would leave the dump empty."""
    facts = state.get("vllm")
    if not isinstance(facts, Mapping):
        return [
            "the /dumper/get_state answer has no 'vllm' object, so the routes are not precisionbot's vLLM dumper "
            f"plugin's; {_VLLM_INSTALL}"
        ]
    out = []
    if facts.get("enforce_eager") is not True or facts.get("compilation_mode") != 0:
        out.append(
            f"--enforce-eager: the vLLM dumper plugin reports enforce_eager={facts.get('enforce_eager')!r}, "
            f"compilation_mode={facts.get('compilation_mode')!r} (-O level, 0 wanted): {_WHY['--enforce-eager']}. "
            "Restart vLLM with --enforce-eager"
        )
    elif (state.get("config") or {}).get("non_intrusive_mode") == "all" and not facts.get("hooked_modules"):
        out.append(
            "the vLLM dumper plugin hooked no module: none of this model's module names maps to SGLang's "
            "model.embed_tokens / model.layers.N.* / model.norm (engines/vllm_dumper.py sglang_module_name), so "
            "the dump would hold no module tensor"
        )
    return out


def deterministic_refusal(server_info: Mapping[str, Any], kind: str | None = None) -> str | None:
    """A helper-path localization compares decode (or a cache hit) with prefill bit for bit: without
    ``--enable-deterministic-inference`` the two paths take different kernels by design and the first GEMM
    would always be named. vLLM has no such mode (``VLLM_BATCH_INVARIANT=1`` makes a sequence's numbers
    independent of its batch, on the GPU kernels that implement it, not a decode step equal to a prefill): its
    two paths agree bit for bit only where its kernels happen to (its CPU build did, in fp32, on the tiny test
    model; its CUDA decode and prefill attention kernels differ), and nothing the server reports says which.
    An answer that may name the first GEMM for no bug is refused."""
    if engine_kind(server_info, kind) == "vllm":
        return (
            "--path decode / prefill-cache-hit / decode-cache-hit on vLLM: vLLM has no "
            "--enable-deterministic-inference (VLLM_BATCH_INVARIANT=1 makes batches invariant, not a decode step "
            "equal to a prefill), so nothing guarantees that its helper's two paths take the same kernels and a "
            "difference would not point to a bug; compare builds with --path golden (--engine-url PR "
            "--baseline-url BASE)"
        )
    if server_info.get("enable_deterministic_inference") is True:
        return None
    return (
        "--enable-deterministic-inference: /server_info says the engine runs without it, so decode and prefill "
        "take different kernels by design and every op differs between the helper's two paths; restart the "
        "engine with --enable-deterministic-inference, or compare builds with --path golden"
    )
