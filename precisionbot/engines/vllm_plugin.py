"""The vLLM plugin that speaks SGLang's tensor dumper, so ``precisionbot localize --engine-kind vllm`` works
against a vLLM server (docs/localize.md, "vLLM"). Loaded by vLLM, never by precisionbot: vLLM, torch and
FastAPI are imported inside the functions that run in vLLM's processes.

Two entry points, both named ``precisionbot_dumper`` (pyproject.toml), because vLLM 0.32 splits a plugin that
adds HTTP routes into the two halves it loads in different processes:

* ``vllm.general_plugins`` -> :func:`register`, run by vLLM in every process (the API server, the engine core,
  each worker). It is a no-op unless the ``DUMPER_*`` variables arm the dumper (``DUMPER_SERVER_PORT=reuse``
  or ``DUMPER_ENABLE=1``, read as SGLang reads them). Armed, it wraps the worker's ``load_model`` so the loaded
  model's modules are hooked (``WorkerDumper``), and gives the worker a method ``precisionbot_dumper`` that
  answers ``/dumper/*`` for that rank;
* ``vllm.endpoint_plugins`` -> :class:`DumperEndpoints`, instantiated in the API server only, and only when
  ``VLLM_PLUGINS`` names it (vLLM refuses route-adding plugins otherwise). It adds ``POST /dumper/{configure,
  get_state,reset}`` when ``DUMPER_SERVER_PORT=reuse`` (SGLang's condition) and forwards each call to every
  worker through ``engine_client.collective_rpc``, the path vLLM documents for an endpoint plugin's engine
  side. The answer is the workers' list, one object per rank, as SGLang's is.

The control therefore needs neither ``VLLM_SERVER_DEV_MODE`` (its ``/collective_rpc`` route) nor a file the
worker polls: a ``configure`` returns only after every worker applied it, and vLLM's engine core runs it
between two forwards, so the request sent next is the first forward that writes.
"""

from __future__ import annotations

import glob
import importlib
import os
import shutil
from pathlib import Path
from typing import Any

from precisionbot.engines.vllm_dumper import (
    METHODS,
    PLUGIN_NAME,
    RPC_METHOD,
    DumperState,
    armed_config,
    layer_id,
    sglang_module_name,
    tensor_name,
)

_DUMPER_ATTR = "_precisionbot_dumper"


def register() -> None:
    """``vllm.general_plugins``: hook the worker's model when ``DUMPER_*`` arm the dumper (else nothing)."""
    config = armed_config(os.environ)
    if config is None:
        return
    worker_cls = importlib.import_module("vllm.v1.worker.gpu_worker").Worker  # CPU and XPU workers derive from it
    if hasattr(worker_cls, RPC_METHOD):  # vLLM loads plugins once per process; a second call changes nothing
        return
    load_model = worker_cls.load_model

    def load_and_hook(self: Any, *args: Any, **kwargs: Any) -> None:
        load_model(self, *args, **kwargs)
        setattr(self, _DUMPER_ATTR, WorkerDumper(self, config))

    def answer(self: Any, method: str, body: Any) -> dict[str, Any]:
        dumper = getattr(self, _DUMPER_ATTR, None)
        if dumper is None:
            return {"error": "the model is not loaded yet"}
        result: dict[str, Any] = dumper.handle(method, body)
        return result

    worker_cls.load_model = load_and_hook
    setattr(worker_cls, RPC_METHOD, answer)


def _facts(vllm_config: Any, hooked: int, compiled: bool) -> dict[str, Any]:
    compilation = vllm_config.compilation_config
    return {
        "enforce_eager": bool(vllm_config.model_config.enforce_eager),
        "compilation_mode": int(compilation.mode),
        "cudagraph_mode": str(getattr(compilation.cudagraph_mode, "name", compilation.cudagraph_mode)),
        "hooked_modules": hooked,
        "module_hooks_skipped_for_compilation": compiled,
    }


class WorkerDumper:
    """One worker's hooks and dumper state. The root model's pre-hook opens a forward (the configuration it
    writes with, the batch's ``input_ids`` and ``positions``); each hooked module's pre-hook writes its inputs
    and its hook its output, immediately (vLLM's fused-residual norms overwrite their inputs in place); the
    root's hook closes the forward.

    Only real rows are written: vLLM may pad a batch (``ForwardContext.is_padding``), and a padded row would
    read as a second copy of position 0. Module hooks are not registered when vLLM compiles the model
    (``compilation_mode`` not 0): torch.compile would trace them into its graph, and a replayed graph runs no
    Python. ``get_state`` reports it and localize refuses, naming ``-O0`` and ``--enforce-eager``."""

    def __init__(self, worker: Any, config: Any) -> None:
        self._torch = importlib.import_module("torch")
        self._context = importlib.import_module("vllm.forward_context")
        vllm_config = worker.vllm_config
        rank = int(getattr(worker, "rank", 0))
        world = int(vllm_config.parallel_config.world_size)
        self.handles: list[Any] = []
        self._real: int | None = None
        self._padded: int | None = None
        model = worker.model_runner.get_model()
        compiled = int(vllm_config.compilation_config.mode) != 0
        hooked = 0
        if config.non_intrusive_mode != "off":
            self.handles.append(model.register_forward_pre_hook(self._open, with_kwargs=True))
            self.handles.append(model.register_forward_hook(self._close))
            if config.non_intrusive_mode == "all" and not compiled:
                hooked = self._hook_modules(model)
        self.state = DumperState(config, rank, world, _facts(vllm_config, hooked, compiled and hooked == 0))

    def _hook_modules(self, model: Any) -> int:
        count = 0
        for name, module in model.named_modules():
            sglang = sglang_module_name(name) if name else None
            if sglang is None:
                continue
            self.handles.append(module.register_forward_pre_hook(self._inputs_hook(sglang), with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._output_hook(sglang)))
            count += 1
        return count

    def handle(self, method: str, body: Any) -> dict[str, Any]:
        answer = self.state.handle(method, body)
        if self.state.reset_requested:
            # SGLang's reset removes the module hooks: later forwards write nothing.
            for handle in self.handles:
                handle.remove()
            self.handles.clear()
            self.state.reset_requested = False
        return answer

    # ---- hooks ---------------------------------------------------------------------------------------------
    def _open(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self.state.begin_forward():
            return
        self._real = self._padded = None
        if self._context.is_forward_context_available():
            padding = self._context.get_forward_context().is_padding
            if padding is not None:
                self._padded, self._real = int(padding.numel()), int((~padding).sum())
        for name in ("input_ids", "positions"):
            value = kwargs.get(name)
            if isinstance(value, self._torch.Tensor):
                self._write(name, value, None)

    def _close(self, _module: Any, _args: Any, _output: Any) -> None:
        self.state.end_forward()

    def _inputs_hook(self, module: str) -> Any:
        def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            for i, value in enumerate((*args, *kwargs.values())):
                if isinstance(value, self._torch.Tensor):
                    self._write(tensor_name(module, f"inputs.{i}"), value, layer_id(module, "inputs"))

        return hook

    def _output_hook(self, module: str) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            if isinstance(output, self._torch.Tensor):
                self._write(tensor_name(module, "output"), output, layer_id(module, "output"))
            elif isinstance(output, (tuple, list)):
                for i, value in enumerate(output):
                    if isinstance(value, self._torch.Tensor):
                        self._write(tensor_name(module, f"output.{i}"), value, layer_id(module, f"output.{i}"))

        return hook

    def _write(self, name: str, value: Any, layer: int | None) -> None:
        pending = self.state.next_file(name, layer)
        if pending is None:
            return
        for pattern in pending.cleanup:
            for old in glob.glob(pattern):
                shutil.rmtree(old, ignore_errors=True)
        if self._real is not None and value.dim() >= 1 and value.shape[0] == self._padded:
            value = value[: self._real]
        folder = Path(pending.exp_dir)
        folder.mkdir(parents=True, exist_ok=True)
        # A view would save its whole storage; a clone of the CPU copy saves the rows only.
        tensor = value.detach().to("cpu").clone()
        self._torch.save({"value": tensor, "meta": pending.meta}, folder / pending.name)


class DumperEndpoints:
    """``vllm.endpoint_plugins``: ``POST /dumper/{method}`` on vLLM's own port, answered by every worker."""

    name = PLUGIN_NAME
    required_tasks = None
    """Any server that generates; on vLLM's engine-less render server the routes answer 503."""

    def __init__(self) -> None:
        self.engine_client: Any = None

    def attach_router(self, app: Any) -> None:
        config = armed_config(os.environ)
        if config is not None and config.routes:
            app.router.add_route("/dumper/{method}", self._route, methods=["POST"])

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        self.engine_client = engine_client

    async def _route(self, request: Any) -> Any:
        responses = importlib.import_module("starlette.responses")
        method = request.path_params.get("method", "")
        if method not in METHODS:
            return responses.JSONResponse({"error": [f"Unknown dumper control method: {method!r}"]}, 400)
        if self.engine_client is None:
            return responses.JSONResponse({"error": ["this vLLM server has no engine"]}, 503)
        try:
            body = await request.json() if await request.body() else {}
        except ValueError as exc:
            return responses.JSONResponse({"error": [f"Request body is not JSON: {exc}"]}, 400)
        answers = await self.engine_client.collective_rpc(RPC_METHOD, args=(method, body))
        errors = [a["error"] for a in answers if isinstance(a, dict) and "error" in a]
        if errors:
            return responses.JSONResponse({"error": errors}, 400)
        return responses.JSONResponse(list(answers))
