"""The sliding-window layers' own KV pool, request side (SGLang's ``SWATokenToKVPoolAllocator`` and the
scheduler's out-of-window SWA freeing).

A sliding-window layer's query at position ``p`` sees keys ``(p - W, p]``, so a request needs the SWA KV of
its last ``W`` tokens only. Each request maps its positions to SWA pages (``Request.swa_pages``, page 0 where
it has none): pages of a prefix hit belong to the radix tree (kvcache.py), the request allocates the rest as
its prefill chunks and decode steps reach them, and before each step it frees its own pages that lie wholly
below ``computed - W - page_size`` (page-aligned; SGLang's ``_evict_swa`` keeps the same spare page). A long
generation then holds about ``W / page_size + 2`` SWA pages instead of one per page of context. The attention
kernels read freed positions through the null page 0; they are outside the window and masked, so the
numbers are those of one pool, bit for bit under ``--enable-deterministic-inference``.

Admission reserves a request's peak (``EngineOptions.swa_request_pages``, or less for a short request) so a
later step never finds the pool dry; when it is, unlocked nodes' SWA pages are evicted first (tombstones).

The ``swa-early-evict`` fault lives here: see ``trim_hit``.
"""

from __future__ import annotations

import torch

from precisionbot.builtin.kvcache import Node, PageAllocator, RadixCache
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.request import Request


class SwaMemory:
    """The SWA pool's pages for running requests, next to the full pool's (which the scheduler keeps)."""

    def __init__(self, options: EngineOptions, allocator: PageAllocator, cache: RadixCache) -> None:
        self.options = options
        self.allocator = allocator
        self.cache = cache
        self.ps = options.page_size
        self.window = options.sliding_window_size
        self.stats = {"swa_pages_freed_out_of_window": 0, "max_swa_pages_per_request": 0}

    # ---- admission ----------------------------------------------------------------------------------------
    def reserve(self, req: Request, hit_pages: int, running: list[Request]) -> bool:
        """Reserves ``req``'s peak SWA pages (evicting the tree's unlocked SWA pages if short); False: wait."""
        total = -(-(len(req.input_ids) + req.sampling.max_new_tokens) // self.ps)
        want = min(total - hit_pages, self.options.swa_request_pages)
        spare = self.allocator.free_count - sum(r.swa_reserved - r.swa_held for r in running)
        if spare < want:
            self.cache.evict_swa(want - spare)
            spare = self.allocator.free_count - sum(r.swa_reserved - r.swa_held for r in running)
        if spare < want:
            return False
        req.swa_reserved = want
        return True

    def admit(self, req: Request, path: list[Node], total_pages: int) -> None:
        """Maps ``req``'s positions: the hit's pages from the tree (0 at tombstones), none yet for the rest."""
        req.swa_pages = [node.swa_page for node in path] + [0] * (total_pages - len(path))
        req.swa_own_from = len(path)
        req.swa_evicted = req.cached_tokens if path else 0

    def trim_hit(self, req: Request, path: list[Node]) -> None:
        """``swa-early-evict``: the bug frees the hit's SWA pages that it takes to be out of the window.

        It converts the window to pages and then subtracts that as tokens (``W / page_size`` where ``W`` was
        meant), so every page of the hit below ``cached - W / page_size`` (page-aligned), all but the last page
        of the first new token's window, is tombstoned and freed, walking up from the hit's end, while the
        request's page table still points at them. Its own next pages are those very pages (the free list is
        LIFO, the nearest page first), so its new keys overwrite the recent keys it still reads.
        """
        window_pages = self.window // self.ps
        edge = (req.cached_tokens - window_pages) // self.ps
        if edge > 0:
            self.cache.tombstone(list(reversed(path[:edge])))

    # ---- each step ----------------------------------------------------------------------------------------
    def evict_out_of_window(self, req: Request) -> None:
        """Frees ``req``'s own pages wholly below ``computed - W - page_size`` (page-aligned, as SGLang), but
        keeps the window before its latest recurrent-state checkpoint: a later hit can only end at a
        checkpoint, and only where the window before it is whole, so the next turn resumes there."""
        ps, track = self.ps, self.options.mamba_track_interval
        keep = min(req.computed - self.window - ps, req.computed // track * track - self.window)
        new = max(req.swa_evicted, keep // ps * ps)
        if new <= req.swa_evicted:
            return
        first = max(req.swa_evicted // ps, req.swa_own_from)
        freed = [req.swa_pages[i] for i in range(first, new // ps) if req.swa_pages[i]]
        for i in range(first, new // ps):
            req.swa_pages[i] = 0
        self.allocator.free(freed)
        req.swa_held -= len(freed)
        req.swa_evicted = new
        self.stats["swa_pages_freed_out_of_window"] += len(freed)

    def ensure(self, req: Request, end: int) -> None:
        """Allocates ``req``'s own SWA pages for every position below ``end`` that has none yet."""
        first = max(req.swa_own_from, req.swa_evicted // self.ps)
        need = [i for i in range(first, -(-end // self.ps)) if req.swa_pages[i] == 0]
        if not need:
            return
        if req.swa_held + len(need) > req.swa_reserved:
            raise MemoryError(
                f"request {req.rid} wants {req.swa_held + len(need)} SWA pages, reserved {req.swa_reserved}"
            )
        for i, page in zip(need, self.allocator.alloc(len(need)), strict=True):
            req.swa_pages[i] = page
        req.swa_held += len(need)
        self.stats["max_swa_pages_per_request"] = max(self.stats["max_swa_pages_per_request"], req.swa_held)

    def slots(self, req: Request) -> torch.Tensor:
        """int64 SWA slot of every position ``req`` may use (the null page's slots where it has no page)."""
        pages = torch.tensor(req.swa_pages, dtype=torch.int64)
        return (pages[:, None] * self.ps + torch.arange(self.ps)).flatten()

    def page_slots(self, req: Request, indices: list[int]) -> list[int]:
        """Slots of ``req``'s SWA pages at page ``indices`` that it has (for the KV-rewriting faults)."""
        return [req.swa_pages[i] * self.ps + j for i in indices if req.swa_pages[i] for j in range(self.ps)]

    # ---- the end ------------------------------------------------------------------------------------------
    def owned(self, req: Request, keep: int) -> list[int]:
        """SWA pages of ``req``'s first ``keep`` pages that the tree may adopt (0 where it owns none)."""
        return [p if i >= req.swa_own_from else 0 for i, p in enumerate(req.swa_pages[:keep])]

    def release(self, req: Request, keep: int, duplicates: list[int]) -> None:
        """Frees ``req``'s own SWA pages past ``keep`` and those the tree already had, ends the reservation."""
        rest = [p for i, p in enumerate(req.swa_pages) if i >= max(keep, req.swa_own_from) and p]
        self.allocator.free(rest + duplicates)
        req.swa_pages, req.swa_held, req.swa_reserved = [], 0, 0
