"""How a request starts from a prefix hit: its KV pages, its recurrent state and its SWA pages — and the faults
that break exactly that (``restore-layer0-only``, ``restore-stale-page``, ``mamba-stale-checkpoint``,
``conv-state-shift``, ``swa-early-evict``) or the KV a finished request leaves to the cache
(``cache-decode-kv-rounded``). Called by the scheduler thread only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from precisionbot.builtin.kvcache import Node
from precisionbot.builtin.recurrent import RecurrentState
from precisionbot.builtin.request import Request

if TYPE_CHECKING:
    from precisionbot.builtin.scheduler import Scheduler


def pages(sched: Scheduler, path: list[Node], fresh: list[int], req: Request) -> list[int]:
    """The pages a request starts from: the cached prefix's pages, then fresh ones."""
    cached = [node.page for node in path]
    if sched.options.has_fault("restore-layer0-only") and path:
        # The bug: copying the cached prefix into the request's own pages restores layer 0 only.
        own = fresh[: len(path)]
        src, dst = _page_slots(sched, cached), _page_slots(sched, own)
        sched.model.k_pool[:, dst] = 0
        sched.model.v_pool[:, dst] = 0
        sched.model.k_pool[0, dst] = sched.model.k_pool[0, src]
        sched.model.v_pool[0, dst] = sched.model.v_pool[0, src]
        sched.cache.unlock(path)
        path.clear()
        return fresh
    req.prefix_path = path
    if sched.options.has_fault("restore-stale-page") and path:
        # The bug: the last restored page is a freshly allocated one whose old contents were never
        # overwritten with the cached KV (stale data of whatever used that page before).
        return cached[:-1] + fresh
    return cached + fresh


def state(sched: Scheduler, path: list[Node], req: Request) -> RecurrentState:
    """The recurrent state a hybrid request starts from: the checkpoint at the end of its hit, or zeros."""
    o = sched.options
    if not path or req.cached_tokens == 0:
        return RecurrentState()  # also restore-layer0-only: "the rest is zero" includes the state
    snap = path[-1].mamba
    if o.has_fault("mamba-stale-checkpoint"):
        # The bug: the previous checkpoint's state is restored, but the hit still reports the later length.
        snap = next((n.mamba for n in reversed(path[:-1]) if n.mamba is not None), None)
        if snap is None:
            return RecurrentState()
    assert snap is not None
    return snap.restore(conv_shift=o.has_fault("conv-state-shift"))


def swa_pages(sched: Scheduler, req: Request, total_pages: int) -> None:
    """The SWA pool's side of a restore: the hit's SWA pages from the tree, and the SWA faults."""
    assert sched.swa is not None
    sched.swa.admit(req, req.prefix_path, total_pages)
    if sched.options.has_fault("swa-early-evict") and req.prefix_path:
        sched.swa.trim_hit(req, req.prefix_path)
    if sched.options.has_fault("restore-layer0-only") and req.cached_tokens:
        # The same bug in the SWA pool: the window's pages of the "restored" prefix are zero.
        w = sched.options.sliding_window_size
        req.swa_evicted = max(0, (req.cached_tokens - w - sched.ps) // sched.ps * sched.ps)
        sched.swa.ensure(req, req.cached_tokens)
        s = sched.swa.page_slots(req, list(range(req.cached_tokens // sched.ps)))
        index = torch.tensor(s, dtype=torch.int64, device=sched.model.device)
        for pool in (sched.model.swa_k_pool, sched.model.swa_v_pool):
            pool[:, index] = 0


def _page_slots(sched: Scheduler, pages: list[int]) -> torch.Tensor:
    p = torch.tensor(pages, dtype=torch.int64)
    return (p[:, None] * sched.ps + torch.arange(sched.ps)).flatten().to(sched.model.device)


def round_decode_kv(sched: Scheduler, req: Request, adopted: list[int]) -> None:
    """The bug: KV written by decode steps is stored into the prefix cache rounded to fp8 e4m3."""
    first_decode = len(req.input_ids)
    index = {page: i for i, page in enumerate(req.pages)}
    at = [(index[page], j) for page in adopted for j in range(sched.ps) if index[page] * sched.ps + j >= first_decode]
    pools = [(sched.model.k_pool, [req.pages[i] * sched.ps + j for i, j in at])]
    pools.append((sched.model.v_pool, pools[0][1]))
    if sched.swa is not None:
        # The SWA pages the tree adopted with those nodes (a page the request no longer has is a tombstone).
        swa = [req.swa_pages[i] * sched.ps + j for i, j in at if req.swa_pages[i] and i >= req.swa_own_from]
        pools += [(sched.model.swa_k_pool, swa), (sched.model.swa_v_pool, swa)]
    for pool, slots in pools:
        if slots:
            s = torch.tensor(slots, dtype=torch.int64, device=sched.model.device)
            pool[:, s] = pool[:, s].to(torch.float8_e4m3fn).to(pool.dtype)
