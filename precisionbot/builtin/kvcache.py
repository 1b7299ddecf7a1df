"""The paged KV pool's page allocator and the radix prefix cache over whole pages (LRU eviction).

The cache matches page-aligned token prefixes: one trie node per page of tokens, holding the pool page that
stores that page's KV. Running requests lock the nodes they reuse; unlocked leaves are evicted least
recently used first when the allocator runs dry.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precisionbot.builtin.recurrent import Snapshot


class PageAllocator:
    """Pages ``1 .. n_pages-1`` (page 0 is the null page that pads attention blocks)."""

    def __init__(self, n_pages: int) -> None:
        self.n_pages = n_pages
        # LIFO: a freed page is handed out again first, still holding its old KV (what a stale restore sees).
        self._free = list(range(n_pages - 1, 0, -1))

    @property
    def free_count(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise MemoryError(f"KV pool exhausted: {n} pages wanted, {len(self._free)} free")
        pages = self._free[len(self._free) - n :][::-1]
        del self._free[len(self._free) - n :]
        return pages

    def free(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))


@dataclass(eq=False)
class Node:
    key: tuple[int, ...]
    page: int
    parent: Node | None
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    mamba: Snapshot | None = None
    """Hybrid models: the recurrent + conv state after this node's last token, when that is a checkpoint
    (every ``mamba_track_interval`` tokens); a hit can only resume where a checkpoint is."""


class RadixCache:
    """Prefix cache over pages of ``page_size`` tokens."""

    def __init__(self, allocator: PageAllocator, page_size: int) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.root = Node((), 0, None)
        self._clock = 0
        self.cached_pages = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def match(self, tokens: list[int], max_tokens: int) -> list[Node]:
        """Nodes of the longest cached page-aligned prefix of ``tokens`` no longer than ``max_tokens``."""
        ps, node, path = self.page_size, self.root, []
        now = self._tick()
        for i in range(max(0, max_tokens) // ps):
            child = node.children.get(tuple(tokens[i * ps : (i + 1) * ps]))
            if child is None:
                break
            child.last_access = now
            path.append(child)
            node = child
        return path

    def lock(self, path: list[Node]) -> None:
        for node in path:
            node.lock_ref += 1

    def unlock(self, path: list[Node]) -> None:
        for node in path:
            node.lock_ref -= 1

    def insert(self, tokens: list[int], pages: list[int]) -> tuple[list[int], list[int]]:
        """Adopts ``pages`` (one per full page of ``tokens``) into the tree.

        Returns ``(adopted, duplicates)``: pages now owned by the cache, and pages whose tokens were already
        cached (the caller frees those, unless they are the very pages the tree holds).
        """
        ps, node = self.page_size, self.root
        now = self._tick()
        adopted: list[int] = []
        duplicates: list[int] = []
        for i, page in enumerate(pages):
            key = tuple(tokens[i * ps : (i + 1) * ps])
            child = node.children.get(key)
            if child is None:
                child = Node(key, page, node, last_access=now)
                node.children[key] = child
                self.cached_pages += 1
                adopted.append(page)
            elif child.page != page:
                duplicates.append(page)
            child.last_access = now
            node = child
        return adopted, duplicates

    def evict(self, n_pages: int) -> int:
        """Frees up to ``n_pages`` pages from unlocked leaves, least recently used first; returns how many."""
        heap = [(n.last_access, id(n), n) for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < n_pages:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key]
            self.allocator.free([leaf.page])
            self.cached_pages -= 1
            freed += 1
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return freed

    def reset(self) -> None:
        """Drops every cached page (``/flush_cache``; the caller ensures no request holds a lock)."""
        pages = [n.page for n in self._nodes()]
        self.allocator.free(pages)
        self.root = Node((), 0, None)
        self.cached_pages = 0

    def _nodes(self) -> list[Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
