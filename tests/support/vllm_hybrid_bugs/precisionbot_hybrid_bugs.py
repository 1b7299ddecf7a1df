"""Planted hybrid-state bugs in a real vLLM server (a ``vllm.general_plugins`` plugin; tests only).

The file named by ``PRECISIONBOT_HYBRID_BUG_FILE`` in the server's environment says which one is live, read
afresh at every hook, so that one server (vLLM starts in minutes on 2 cores) serves all three in turn; an empty
file plants nothing. Each touches only requests that hit the prefix cache, so a computation without a hit
(``match``, every replay) stays clean:

* ``other-state``: the hit's recurrent (gated delta-net) state is another cached block's (the scheduler hands
  the mamba group a state block that another prefix wrote); the attention KV is the hit's own;
* ``conv-shift``: the hit's state is restored, but its conv window is shifted by one token (rolled along the
  kernel axis in the worker, right after vLLM copies the hit's state into the request's running block);
* ``stale-kv``: the recurrent state is the hit's own, but the last attention block of the hit is another
  cached block's KV, i.e. the state was restored and the attention KV was not;
* ``swa-stale-window``: on a model with a sliding-window KV cache group (the hybrid-SWA model), the last block
  of the window that the hit restores is another cached block's KV, while the full-attention group's blocks are
  the hit's own (a window page evicted and its slot reused while the prefix still counts it as cached).

The scheduler-side bugs wrap ``KVCacheManager.get_computed_blocks`` (vLLM 0.32's align-mode hybrid cache:
one list of blocks per cache group, the mamba group's list ``[null] * i + [state block]``); the worker-side one
wraps ``mamba_utils.preprocess_mamba``, which restores a new request's state ("copy the mamba state of the
previous step to the last block"). ``register`` prints one line so a test can tell the plugin loaded.
"""

from __future__ import annotations

import os
import sys
from typing import Any

BUGS = ("other-state", "conv-shift", "stale-kv", "swa-stale-window")


def register() -> None:
    if not os.environ.get("PRECISIONBOT_HYBRID_BUG_FILE"):
        raise ValueError("PRECISIONBOT_HYBRID_BUG_FILE is not set: name a file holding one of " + ", ".join(BUGS))
    _live()  # a bad name fails the server's start, not a request
    _swap_hit_block()
    _conv_shift()
    print("precisionbot hybrid bugs registered", file=sys.stderr, flush=True)


def _live() -> str:
    """The bug named in the file ("" for none)."""
    path = os.environ["PRECISIONBOT_HYBRID_BUG_FILE"]
    with open(path, encoding="utf-8") as f:
        bug = f.read().strip()
    if bug and bug not in BUGS:
        raise ValueError(f"{path} names {bug!r}: write one of {', '.join(BUGS)}, or nothing")
    return bug


def _swap_hit_block() -> None:
    """On a hit, the last block of each mamba group (``other-state``), of each attention group (``stale-kv``) or
    of each sliding-window group (``swa-stale-window``) is replaced by another cached block of the same group."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_group_id
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager, SlidingWindowManager

    original = KVCacheManager.get_computed_blocks

    def get_computed_blocks(self: Any, request: Any) -> Any:
        blocks, hit, *rest = original(self, request)
        bug = _live()
        if hit <= 0 or bug not in ("other-state", "stale-kv", "swa-stale-window"):
            return (blocks, hit, *rest)
        managers = self.coordinator.single_type_managers
        kinds = {"other-state": MambaManager, "swa-stale-window": SlidingWindowManager}

        def targeted(manager: Any) -> bool:
            if bug == "stale-kv":
                return not isinstance(manager, MambaManager)
            return isinstance(manager, kinds[bug])

        cached = self.block_pool.cached_block_hash_to_block._cache
        groups = []
        for gid, group in enumerate(blocks.blocks):
            group = list(group)
            if group and targeted(managers[gid]):
                mine = {b.block_id for b in group}
                for key, entry in cached.items():
                    if get_group_id(key) != gid:
                        continue
                    other = next(
                        (b for b in (entry.values() if isinstance(entry, dict) else [entry]) if b.block_id not in mine),
                        None,
                    )
                    if other is not None and not other.is_null:
                        print(
                            f"precisionbot hybrid bug {bug}: hit of {hit} tokens, group {gid} block "
                            f"{group[-1].block_id} -> {other.block_id}",
                            file=sys.stderr,
                            flush=True,
                        )
                        group[-1] = other
                        break
            groups.append(group)
        return (self.create_kv_cache_blocks(tuple(groups)), hit, *rest)

    KVCacheManager.get_computed_blocks = get_computed_blocks


def _conv_shift() -> None:
    """After vLLM restores a hit's state into a new request's running block, roll each delta-net layer's conv
    state by one token along the kernel axis (its ``conv_kernel - 1`` past inputs)."""
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec
    from vllm.v1.worker import mamba_utils

    original = mamba_utils.preprocess_mamba

    def preprocess_mamba(
        scheduler_output: Any,
        kv_cache_config: Any,
        cache_config: Any,
        mamba_state_idx: dict[str, int],
        input_batch: Any,
        requests: dict[str, Any],
        forward_context: dict[str, Any],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        live = _live() == "conv-shift"
        restored = [
            r for r in input_batch.req_ids if live and r not in mamba_state_idx and requests[r].num_computed_tokens > 0
        ]
        out = original(
            scheduler_output,
            kv_cache_config,
            cache_config,
            mamba_state_idx,
            input_batch,
            requests,
            forward_context,
            *args,
            **kwargs,
        )
        for req_id in restored:
            req, idx = requests[req_id], mamba_state_idx[req_id]
            for gid, group in enumerate(kv_cache_config.kv_cache_groups):
                if not isinstance(group.kv_cache_spec, MambaSpec):
                    continue
                block_id = req.block_ids[gid][idx]
                for layer in group.layer_names:
                    conv = forward_context[layer].kv_cache[0][block_id]
                    axis = min(range(conv.dim()), key=lambda d: conv.shape[d])  # the kernel axis is the short one
                    conv.copy_(torch.roll(conv.clone(), 1, dims=axis))
        return out

    mamba_utils.preprocess_mamba = preprocess_mamba
