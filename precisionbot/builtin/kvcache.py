"""The paged KV pools' page allocator and the radix prefix cache over whole pages (LRU eviction).

The cache matches page-aligned token prefixes: one trie node per page of tokens, holding the pool page that
stores that page's KV. Running requests lock the nodes they reuse; unlocked leaves are evicted least
recently used first when the allocator runs dry.

With a separate sliding-window pool (swa_cache.py; SGLang's ``SWARadixCache``) a node also holds the page of
the SWA layers' KV for its tokens, or a *tombstone* (0) once that page was freed: the full-attention KV is
still there, the window's is not. SWA pages are evicted on their own, LRU first, from nodes no request
SWA-locks (an unlocked leaf goes whole), and a match is usable only where the ``sliding_window_size`` tokens
before its end all still have SWA pages (``valid_length``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precisionbot.builtin.recurrent import Snapshot


class PageAllocator:
    """Pages ``1 .. n_pages-1`` (page 0 is the null page that pads attention blocks)."""

    def __init__(self, n_pages: int, name: str = "KV pool") -> None:
        self.n_pages = n_pages
        self.name = name
        # LIFO: a freed page is handed out again first, still holding its old KV (what a stale restore sees).
        self._free = list(range(n_pages - 1, 0, -1))

    @property
    def free_count(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise MemoryError(f"{self.name} exhausted: {n} pages wanted, {len(self._free)} free")
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
    swa_page: int = 0
    """The SWA pool's page of these tokens; 0 is a tombstone (freed, or never kept: out of a window)."""
    swa_lock_ref: int = 0
    """Requests whose window reaches this node (SGLang: the SWA lock covers only the window's nodes)."""


class RadixCache:
    """Prefix cache over pages of ``page_size`` tokens."""

    def __init__(
        self, allocator: PageAllocator, page_size: int, swa: PageAllocator | None = None, window: int = 0
    ) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.swa = swa
        """The SWA pool's allocator; None: the sliding-window layers (if any) share the full pool."""
        self.window = window
        self.root = Node((), 0, None)
        self._clock = 0
        self.cached_pages = 0
        self.swa_cached_pages = 0
        self.stats = {"swa_evicted_pages": 0, "swa_tombstoned_nodes": 0, "full_evicted_pages": 0}
        """Pages freed by tree eviction, by kind (``/server_info`` ``internal_states``)."""

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

    def usable(self, path: list[Node], *, checkpoint: bool) -> list[Node]:
        """The longest head of ``path`` a hit may use. SGLang's SWA rule: it must end where the ``window``
        tokens before it all have SWA pages (no tombstone there; without any tombstone every end is valid);
        with ``checkpoint`` (hybrid models) it must also end at a node holding a recurrent-state checkpoint."""
        best, since = 0, None  # tokens since the last tombstone; None = none yet
        for i, node in enumerate(path):
            if self.swa is not None and node.swa_page == 0:
                since = 0
                continue
            since = None if since is None else since + self.page_size
            if (since is None or since >= self.window) and (node.mamba is not None or not checkpoint):
                best = i + 1
        return path[:best]

    def _swa_locked(self, path: list[Node]) -> list[Node]:
        """The trailing nodes of a hit that its first new token's window reaches (SGLang's swa lock)."""
        return path[max(0, len(path) - -(-self.window // self.page_size)) :] if self.swa is not None else []

    def lock(self, path: list[Node]) -> None:
        for node in path:
            node.lock_ref += 1
        for node in self._swa_locked(path):
            node.swa_lock_ref += 1

    def unlock(self, path: list[Node]) -> None:
        for node in path:
            node.lock_ref -= 1
        for node in self._swa_locked(path):
            node.swa_lock_ref -= 1

    def insert(
        self, tokens: list[int], pages: list[int], swa_pages: list[int] | None = None
    ) -> tuple[list[int], list[int], list[int]]:
        """Adopts ``pages`` (one per full page of ``tokens``) and their ``swa_pages`` (0: none) into the tree.

        Returns ``(adopted, duplicates, swa_duplicates)``: full pages now owned by the cache, and full and SWA
        pages whose tokens were already cached (the caller frees those; the tree's own pages never appear
        there). A tombstoned node takes a live SWA page offered for it (revived, as SGLang's insert does).
        """
        ps, node = self.page_size, self.root
        now = self._tick()
        adopted: list[int] = []
        duplicates: list[int] = []
        swa_duplicates: list[int] = []
        for i, page in enumerate(pages):
            swa_page = swa_pages[i] if swa_pages is not None else 0
            key = tuple(tokens[i * ps : (i + 1) * ps])
            child = node.children.get(key)
            if child is None:
                child = Node(key, page, node, last_access=now, swa_page=swa_page)
                node.children[key] = child
                self.cached_pages += 1
                self.swa_cached_pages += swa_page != 0
                adopted.append(page)
            else:
                if child.page != page:
                    duplicates.append(page)
                if swa_page and child.swa_page == 0:
                    child.swa_page = swa_page
                    self.swa_cached_pages += 1
                elif swa_page and child.swa_page != swa_page:
                    swa_duplicates.append(swa_page)
            child.last_access = now
            node = child
        return adopted, duplicates, swa_duplicates

    def tombstone(self, nodes: list[Node]) -> None:
        """Frees the SWA pages of ``nodes`` (in that order) and leaves their full-attention pages cached."""
        assert self.swa is not None
        freed = [n.swa_page for n in nodes if n.swa_page]
        for node in nodes:
            if node.swa_page:
                node.swa_page = 0
                self.stats["swa_tombstoned_nodes"] += 1
        self.swa.free(freed)
        self.swa_cached_pages -= len(freed)
        self.stats["swa_evicted_pages"] += len(freed)

    def evict_swa(self, n_pages: int) -> int:
        """Frees up to ``n_pages`` SWA pages of nodes no window locks, least recently used first: an unlocked
        leaf is deleted whole, any other node is tombstoned (SGLang's SWA eviction); returns how many."""
        assert self.swa is not None
        # Among nodes used at the same time, the one nearer the root first (SGLang's SWA LRU list holds an
        # insert's new nodes root to leaf): the deeper nodes, the ones a longer hit needs, stay.
        heap = [(n.last_access, depth, id(n), n) for n, depth in self._depths() if n.swa_page and not n.swa_lock_ref]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < n_pages:
            node = heapq.heappop(heap)[-1]
            if not node.children and node.lock_ref == 0:
                self._delete_leaf(node)
            else:
                self.tombstone([node])
            freed += 1
        return freed

    def evict(self, n_pages: int) -> int:
        """Frees up to ``n_pages`` pages from unlocked leaves, least recently used first; returns how many."""
        heap = [(n.last_access, id(n), n) for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < n_pages:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            self._delete_leaf(leaf)
            freed += 1
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return freed

    def _delete_leaf(self, leaf: Node) -> None:
        parent = leaf.parent
        assert parent is not None and not leaf.children
        del parent.children[leaf.key]
        self.allocator.free([leaf.page])
        self.cached_pages -= 1
        self.stats["full_evicted_pages"] += 1
        if leaf.swa_page:
            assert self.swa is not None
            self.swa.free([leaf.swa_page])
            self.swa_cached_pages -= 1
            self.stats["swa_evicted_pages"] += 1

    def reset(self) -> None:
        """Drops every cached page (``/flush_cache``; the caller ensures no request holds a lock)."""
        nodes = self._nodes()
        self.allocator.free([n.page for n in nodes])
        if self.swa is not None:
            self.swa.free([n.swa_page for n in nodes if n.swa_page])
        self.root = Node((), 0, None)
        self.cached_pages = self.swa_cached_pages = 0

    def _nodes(self) -> list[Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def _depths(self) -> list[tuple[Node, int]]:
        out, stack = [], [(n, 1) for n in self.root.children.values()]
        while stack:
            node, depth = stack.pop()
            out.append((node, depth))
            stack.extend((child, depth + 1) for child in node.children.values())
        return out
