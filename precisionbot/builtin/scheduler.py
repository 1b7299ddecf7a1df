"""The scheduler: one background thread that admits requests, runs chunked prefill and batched decode.

HTTP handler threads only ``submit`` requests and wait on them. Each loop iteration runs at most one
prefill step (up to ``chunked_prefill_size`` prompt tokens across requests) and one decode step (one token
for every decoding request), so concurrent requests share batches and prefill and decode run with
different shapes, as in a real engine. How a request starts from a prefix hit, and the restore and cache-insert
faults, are in restore.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import torch

from precisionbot.builtin.kvcache import Node, PageAllocator, RadixCache
from precisionbot.builtin.model import Model, Segment
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.request import Request
from precisionbot.builtin.restore import PrefixRestore
from precisionbot.builtin.sampling import record_input_logprobs, sample_next
from precisionbot.builtin.speculative import SpecDecoder
from precisionbot.builtin.swa_cache import SwaMemory
from precisionbot.builtin.tokenizer import Vocab

_IDLE_WAIT_S = 0.05


class Scheduler:
    def __init__(self, options: EngineOptions, model: Model, vocab: Vocab, spec: SpecDecoder | None = None) -> None:
        self.options = options
        self.spec = spec
        """Speculative decoding (speculative.py): its ``step`` replaces the plain decode step."""
        self.vocab = vocab
        self.model = model
        self.ps = options.page_size
        self.allocator = PageAllocator(options.kv_pool_tokens // self.ps)
        self.swa: SwaMemory | None = None
        if options.uses_swa_pool:
            swa_allocator = PageAllocator(options.swa_pool_tokens // self.ps, "SWA KV pool")
            self.cache = RadixCache(self.allocator, self.ps, swa_allocator, options.sliding_window_size)
            self.swa = SwaMemory(options, swa_allocator, self.cache)
        else:
            self.cache = RadixCache(self.allocator, self.ps)
        self.restore = PrefixRestore(options, model, self.cache, self.swa, self.ps)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._serial = 0
        self._inbox_lock = threading.Lock()
        self._flushes: list[tuple[list[bool], threading.Event]] = []
        self.stats = {"prefill_steps": 0, "decode_steps": 0, "max_prefill_batch": 0, "max_decode_batch": 0}
        """Counters shown in ``/server_info`` (``internal_states``): evidence that requests share batches."""
        self._inbox: list[Request] = []
        """Submitted requests not yet seen by the scheduler thread (guarded by ``_flush_lock``)."""
        self._thread = threading.Thread(target=self._loop, name="builtin-scheduler", daemon=True)

    # ---- called from HTTP threads -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def submit(self, requests: list[Request]) -> None:
        # Only the scheduler thread touches waiting/running/cache; others hand over through the inbox, so a
        # new request joins the running batch at the next step (continuous batching).
        with self._inbox_lock:
            for req in requests:
                self._serial += 1
                seed = self.options.seed * 1_000_003 + self._serial
                sampling_seed = req.sampling.sampling_seed
                req.generator = torch.Generator().manual_seed(seed if sampling_seed is None else sampling_seed)
                if self.options.has_fault("nondeterministic"):
                    # Seeded per request, so a rerun of the same prompt draws different noise (run-to-run).
                    req.noise = torch.Generator().manual_seed(seed * 7 + 3)
                if self.spec is not None:
                    req.spec_counts = [0, 0, 0]  # a request that ends at its prefill had no verify
                self._inbox.append(req)
        self._wake.set()

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Drops the prefix cache; False (nothing done) while requests are running or waiting.

        The scheduler thread answers between two steps: taking its (unfair) lock from here could starve
        until the queue drains, and a busy server would then look idle.
        """
        ticket: list[bool] = []
        answered = threading.Event()
        with self._inbox_lock:
            self._flushes.append((ticket, answered))
        self._wake.set()
        return answered.wait(timeout_s) and ticket[0]

    def internal_state(self) -> dict[str, float | str]:
        """``/server_info`` ``internal_states``: batch counters and, with an SWA pool, its pages (read without
        the scheduler's lock: a snapshot that may be one step old)."""
        out: dict[str, float | str] = dict(self.stats)
        if self.spec is not None:
            out |= self.spec.internal_state()
        if self.swa is not None:
            free, size = self.swa.allocator.free_count, self.swa.allocator.n_pages - 1
            out |= {
                "swa_token_usage": round(1 - free / size, 6),
                "swa_pool_pages": size,
                "swa_free_pages": free,
                "swa_cached_pages": self.cache.swa_cached_pages,
                "swa_tombstones": self.cache.cached_pages - self.cache.swa_cached_pages,
                **self.cache.stats,
                **self.swa.stats,
            }
        return out

    # ---- the scheduler thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._take_inbox_and_flushes()
            try:
                self._admit()
                busy = self._prefill_step()
                busy = self._decode_step() or busy
            except Exception as exc:  # keep serving: fail what was in flight, with the reason
                self._fail_all(f"engine error: {type(exc).__name__}: {exc}")
                busy = False
            if not busy:
                self._wake.wait(_IDLE_WAIT_S)
                self._wake.clear()

    def _take_inbox_and_flushes(self) -> None:
        with self._inbox_lock:
            pending, self._flushes = self._flushes, []
            self.waiting.extend(self._inbox)
            self._inbox.clear()
        for ticket, answered in pending:
            idle = not self.waiting and not self.running
            if idle:
                self.cache.reset()
            ticket.append(idle)
            answered.set()

    def _fail_all(self, message: str) -> None:
        for req in [*self.running, *self.waiting]:
            req.error = message
            self._release(req, insert=False)
            req.finished_at = time.perf_counter()
            req.done.set()
            req.events.put(-1)
        self.running.clear()
        self.waiting.clear()

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.options.max_running_requests:
            req = self.waiting[0]
            n_in = len(req.input_ids)
            path: list[Node] = []
            if not self.options.disable_radix_cache:
                cap = min(n_in - 1, req.logprob.logprob_start_len) if req.logprob.return_logprob else n_in - 1
                # SGLang's mamba radix cache: a hit resumes at the last checkpoint at or below the match; its
                # SWA radix cache: only where the window before it still has its SWA pages.
                path = self.cache.usable(self.cache.match(req.input_ids, cap), checkpoint=self.options.is_hybrid)
            self.cache.lock(path)
            total_pages = -(-(n_in + req.sampling.max_new_tokens) // self.ps)
            fresh = total_pages - len(path)
            if self.options.has_fault("restore-layer0-only"):
                fresh = total_pages
            elif self.options.has_fault("restore-stale-page") and path:
                fresh += 1
            if self.allocator.free_count < fresh:
                self.cache.evict(fresh - self.allocator.free_count)
            short = self.allocator.free_count < fresh
            owned = 0 if self.options.has_fault("restore-layer0-only") else len(path)  # SWA pages it won't own
            if short or (self.swa is not None and not self.swa.reserve(req, owned, self.running)):
                self.cache.unlock(path)
                if not self.running:
                    pool = "KV pool" if short else "SWA KV pool"
                    raise MemoryError(f"{pool} too small for request {req.rid} ({n_in} prompt tokens)")
                return  # wait for running requests to free pages
            self.waiting.popleft()
            req.cached_tokens = len(path) * self.ps
            req.pages = self.restore.pages(path, self.allocator.alloc(fresh), req)
            if self.swa is not None:
                self.restore.swa_pages(req, total_pages)
            if self.options.is_hybrid:
                req.rstate = self.restore.state(path, req)
            req.computed = req.first_computed = req.cached_tokens
            pages = torch.tensor(req.pages, dtype=torch.int64)
            req.slots = (pages[:, None] * self.ps + torch.arange(self.ps)).flatten()
            if req.logprob.return_logprob:
                start = req.logprob.logprob_start_len
                req.input_logprobs = [(None, req.input_ids[start])]
                req.input_top = [None]
                req.input_ids_lp = [None]
            self.running.append(req)

    def _prefill_step(self) -> bool:
        budget, segments, owners = self.options.chunked_prefill_size, [], []
        chunk_fault = self.options.has_fault("chunk-boundary")
        for req in self.running:
            if budget <= 0:
                break
            if not req.prefilling:
                continue
            n = min(budget, len(req.input_ids) - req.computed)
            assert req.slots is not None
            offset = -1 if chunk_fault and req.computed > req.first_computed else 0
            if self.swa is not None:
                self.swa.evict_out_of_window(req)
                self.swa.ensure(req, req.computed + n)
            segments.append(
                Segment(
                    req.input_ids[req.computed : req.computed + n],
                    req.computed,
                    req.slots,
                    offset,
                    req.noise,
                    state=req.rstate,
                    swa_slots=self.swa.slots(req) if self.swa is not None else None,
                    rid=req.rid,
                )
            )
            owners.append(req)
            budget -= n
        if not segments:
            return False
        self.model.forward(segments)
        self.stats["prefill_steps"] += 1
        self.stats["max_prefill_batch"] = max(self.stats["max_prefill_batch"], len(segments))
        for req, seg in zip(owners, segments, strict=True):
            assert seg.out_logits is not None
            record_input_logprobs(req, seg.start, seg.out_logits)
            req.computed += len(seg.tokens)
            if not req.prefilling:
                if req.sampling.max_new_tokens == 0:
                    self._finish(req, {"type": "length", "length": 0})
                else:
                    self._append(req, seg.out_logits[-1])
        return True

    def _decode_step(self) -> bool:
        batch = [r for r in self.running if not r.prefilling and r.finish_reason is None]
        if not batch:
            return False
        if self.spec is not None:
            return self._spec_step(self.spec, batch)
        segments = []
        for req in batch:
            assert req.slots is not None
            pos = len(req.input_ids) + len(req.output_ids) - 1
            if self.swa is not None:
                self.swa.evict_out_of_window(req)
                self.swa.ensure(req, pos + 1)
            segments.append(
                Segment(
                    [req.output_ids[-1]],
                    pos,
                    req.slots,
                    0,
                    req.noise,
                    decode=True,
                    state=req.rstate,
                    swa_slots=self.swa.slots(req) if self.swa is not None else None,
                    generated=len(req.output_ids),
                    rid=req.rid,
                )
            )
        self.model.forward(segments)
        self.stats["decode_steps"] += 1
        self.stats["max_decode_batch"] = max(self.stats["max_decode_batch"], len(segments))
        for req, seg in zip(batch, segments, strict=True):
            assert seg.out_logits is not None
            req.computed += 1
            self._append(req, seg.out_logits[0])
        return True

    def _spec_step(self, spec: SpecDecoder, batch: list[Request]) -> bool:
        reasons = spec.step(batch, self._swa_room)
        self.stats["decode_steps"] += 1
        self.stats["max_decode_batch"] = max(self.stats["max_decode_batch"], len(batch))
        for req, reason in zip(batch, reasons, strict=True):
            if reason is not None:
                self._finish(req, reason)
            elif req.stream:
                req.events.put(len(req.output_ids))
        return True

    def _swa_room(self, req: Request, end: int) -> torch.Tensor | None:
        """SWA pages for positions below ``end`` (a verify extend's), and the request's SWA slots."""
        if self.swa is None:
            return None
        self.swa.evict_out_of_window(req)
        self.swa.ensure(req, end)
        return self.swa.slots(req)

    def _append(self, req: Request, logits: torch.Tensor) -> None:
        reason = sample_next(req, logits, self.vocab)
        if reason is not None:
            self._finish(req, reason)
        elif req.stream:
            req.events.put(len(req.output_ids))

    def _finish(self, req: Request, reason: dict[str, object]) -> None:
        req.finish_reason = reason
        if req.return_routed_experts and self.model.routed is not None and req.slots is not None:
            # Read before the pages are released: a freed slot is another request's next.
            req.routed_experts = self.model.routed[req.slots[: len(req.seq) - 1]].clone()
        self._release(req, insert=not self.options.disable_radix_cache)
        self.running.remove(req)
        req.finished_at = time.perf_counter()
        req.done.set()
        req.events.put(-1)

    def _release(self, req: Request, *, insert: bool) -> None:
        """Hands a request's full pages to the prefix cache and frees the rest."""
        pages, keep = req.pages, 0
        swa_duplicates: list[int] = []
        if insert and pages:
            keep = min(req.computed // self.ps, len(pages))
            offer = self.swa.owned(req, keep) if self.swa is not None else None
            adopted, duplicates, swa_duplicates = self.cache.insert(req.seq[: keep * self.ps], pages[:keep], offer)
            if self.options.has_fault("cache-decode-kv-rounded"):
                self.restore.round_decode_kv(req, adopted)
            self.allocator.free(duplicates)
            if req.rstate is not None and req.rstate.checkpoints:
                nodes = self.cache.match(req.seq, keep * self.ps)
                for covered, snap in req.rstate.checkpoints.items():
                    index = covered // self.ps - 1
                    if 0 <= index < len(nodes) and nodes[index].mamba is None:
                        nodes[index].mamba = snap
        cached = {node.page for node in req.prefix_path}
        self.allocator.free([p for p in pages[keep:] if p not in cached])
        if self.swa is not None:
            self.swa.release(req, keep, swa_duplicates)
        self.cache.unlock(req.prefix_path)
        req.prefix_path = []
        req.pages = []
