from __future__ import annotations

import pytest

from precisionbot.builtin.kvcache import PageAllocator, RadixCache


def test_allocator_is_lifo_and_never_hands_out_the_null_page() -> None:
    alloc = PageAllocator(5)
    pages = alloc.alloc(4)
    assert sorted(pages) == [1, 2, 3, 4] and alloc.free_count == 0
    with pytest.raises(MemoryError):
        alloc.alloc(1)
    alloc.free([3, 1])
    assert alloc.alloc(2) == [3, 1]  # freed pages come back first (with their stale contents)


def test_match_is_page_aligned_and_capped() -> None:
    alloc = PageAllocator(64)
    cache = RadixCache(alloc, page_size=4)
    tokens = list(range(10))
    pages = alloc.alloc(2)
    adopted, dupes, _ = cache.insert(tokens[:8], pages)
    assert adopted == pages and dupes == []
    assert [n.page for n in cache.match(tokens, 100)] == pages
    assert len(cache.match(tokens, 7)) == 1  # a cap inside page 2 only reuses page 1
    assert [n.page for n in cache.match([0, 1, 2, 3, 4, 99, 6, 7], 100)] == pages[:1]
    assert cache.match([9, 9, 9, 9], 100) == []


def test_duplicates_are_returned_and_shared_pages_are_not() -> None:
    alloc = PageAllocator(64)
    cache = RadixCache(alloc, page_size=2)
    first = alloc.alloc(2)
    cache.insert([1, 2, 3, 4], first)
    other = alloc.alloc(3)
    adopted, dupes, _ = cache.insert([1, 2, 3, 4, 5, 6], [first[0], other[1], other[2]])
    assert adopted == [other[2]] and dupes == [other[1]]


def test_lru_eviction_skips_locked_paths() -> None:
    alloc = PageAllocator(8)
    cache = RadixCache(alloc, page_size=1)
    a, b = alloc.alloc(2), alloc.alloc(2)
    cache.insert([1, 2], a)
    cache.insert([7, 8], b)
    cache.match([1, 2], 2)  # touch a: b is now least recently used
    locked = cache.match([1, 2], 2)
    cache.lock(locked)
    free_before = alloc.free_count
    assert cache.evict(10) == 2  # only b's two pages (leaf first, then its parent)
    assert alloc.free_count == free_before + 2
    assert cache.match([7, 8], 2) == [] and len(cache.match([1, 2], 2)) == 2
    cache.unlock(locked)
    cache.reset()
    assert cache.cached_pages == 0 and alloc.free_count == 7
