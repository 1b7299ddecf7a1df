"""How a request starts from a prefix hit: its KV pages, its recurrent state and its SWA pages — and the faults
that break exactly that (``restore-layer0-only``, ``restore-stale-page``, ``mamba-stale-checkpoint``,
``conv-state-shift``, ``swa-early-evict``) or the KV a finished request leaves to the cache
(``cache-decode-kv-rounded``). The scheduler owns one ``PrefixRestore`` and calls it from its thread only;
it sees the pools, the prefix cache and the options, never the scheduler itself."""

from __future__ import annotations

import torch

from precisionbot.builtin.kvcache import Node, RadixCache
from precisionbot.builtin.model import Model
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.recurrent import RecurrentState
from precisionbot.builtin.request import Request
from precisionbot.builtin.swa_cache import SwaMemory


class PrefixRestore:
    """The restore path of one engine: its model's pools, its prefix cache, its SWA pool (None without one)."""

    def __init__(
        self, options: EngineOptions, model: Model, cache: RadixCache, swa: SwaMemory | None, page_size: int
    ) -> None:
        self.options = options
        self.model = model
        self.cache = cache
        self.swa = swa
        self.ps = page_size

    def pages(self, path: list[Node], fresh: list[int], req: Request) -> list[int]:
        """The pages a request starts from: the cached prefix's pages, then fresh ones."""
        cached = [node.page for node in path]
        if self.options.has_fault("restore-layer0-only") and path:
            # The bug: copying the cached prefix into the request's own pages restores layer 0 only.
            own = fresh[: len(path)]
            src, dst = self._page_slots(cached), self._page_slots(own)
            self.model.k_pool[:, dst] = 0
            self.model.v_pool[:, dst] = 0
            self.model.k_pool[0, dst] = self.model.k_pool[0, src]
            self.model.v_pool[0, dst] = self.model.v_pool[0, src]
            self.cache.unlock(path)
            path.clear()
            return fresh
        req.prefix_path = path
        if self.options.has_fault("restore-stale-page") and path:
            # The bug: the last restored page is a freshly allocated one whose old contents were never
            # overwritten with the cached KV (stale data of whatever used that page before).
            return cached[:-1] + fresh
        return cached + fresh

    def state(self, path: list[Node], req: Request) -> RecurrentState:
        """The recurrent state a hybrid request starts from: the checkpoint at the end of its hit, or zeros."""
        o = self.options
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

    def swa_pages(self, req: Request, total_pages: int) -> None:
        """The SWA pool's side of a restore: the hit's SWA pages from the tree, and the SWA faults."""
        assert self.swa is not None
        self.swa.admit(req, req.prefix_path, total_pages)
        if self.options.has_fault("swa-early-evict") and req.prefix_path:
            self.swa.trim_hit(req, req.prefix_path)
        if self.options.has_fault("restore-layer0-only") and req.cached_tokens:
            # The same bug in the SWA pool: the window's pages of the "restored" prefix are zero.
            w = self.options.sliding_window_size
            req.swa_evicted = max(0, (req.cached_tokens - w - self.ps) // self.ps * self.ps)
            self.swa.ensure(req, req.cached_tokens)
            s = self.swa.page_slots(req, list(range(req.cached_tokens // self.ps)))
            index = torch.tensor(s, dtype=torch.int64, device=self.model.device)
            for pool in (self.model.swa_k_pool, self.model.swa_v_pool):
                pool[:, index] = 0

    def _page_slots(self, pages: list[int]) -> torch.Tensor:
        p = torch.tensor(pages, dtype=torch.int64)
        return (p[:, None] * self.ps + torch.arange(self.ps)).flatten().to(self.model.device)

    def round_decode_kv(self, req: Request, adopted: list[int]) -> None:
        """The bug: KV written by decode steps is stored into the prefix cache rounded to fp8 e4m3."""
        first_decode = len(req.input_ids)
        index = {page: i for i, page in enumerate(req.pages)}
        at = [(index[page], j) for page in adopted for j in range(self.ps) if index[page] * self.ps + j >= first_decode]
        pools = [(self.model.k_pool, [req.pages[i] * self.ps + j for i, j in at])]
        pools.append((self.model.v_pool, pools[0][1]))
        if self.swa is not None:
            # The SWA pages the tree adopted with those nodes (a page the request no longer has is a tombstone).
            swa = [req.swa_pages[i] * self.ps + j for i, j in at if req.swa_pages[i] and i >= req.swa_own_from]
            pools += [(self.model.swa_k_pool, swa), (self.model.swa_v_pool, swa)]
        for pool, slots in pools:
            if slots:
                s = torch.tensor(slots, dtype=torch.int64, device=self.model.device)
                pool[:, s] = pool[:, s].to(torch.float8_e4m3fn).to(pool.dtype)
