"""Routing agreement against a plain-Python reading of the definition (sets per token), and its edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from precisionbot.metrics.routing import agreement, noise_floor, pool, split_layers


def _by_sets(a: np.ndarray, b: np.ndarray, top_k: int) -> list[tuple[int, float, float]]:
    """(layer, exact, jaccard) by Python sets, layer by layer, skipping layers with no router."""
    out = []
    for layer in range(a.shape[1] // top_k):
        cols = slice(layer * top_k, (layer + 1) * top_k)
        pairs = [(set(x[cols].tolist()), set(y[cols].tolist())) for x, y in zip(a, b, strict=True)]
        if all(max(x | y) < 0 for x, y in pairs):
            continue
        exact = sum(x == y for x, y in pairs) / len(pairs)
        jaccard = sum(len(x & y) / len(x | y) for x, y in pairs) / len(pairs)
        out.append((layer, exact, jaccard))
    return out


def test_the_docstring_example() -> None:
    a = np.array([[0, 1], [2, 3], [4, 5]], dtype=np.int32)
    b = np.array([[1, 0], [2, 6], [4, 5]], dtype=np.int32)
    (la,) = agreement(a, b, 2)
    assert (la.layer, la.tokens, la.moved) == (0, 3, 1)
    assert la.exact == pytest.approx(2 / 3)
    assert la.jaccard == pytest.approx((1 + 1 / 3 + 1) / 3)


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_matches_sets_on_random_routing(top_k: int) -> None:
    rng = np.random.default_rng(top_k)
    layers, tokens, experts = 3, 200, 8
    a = np.stack([rng.permutation(experts)[:top_k] for _ in range(tokens * layers)]).reshape(tokens, -1)
    b = a.copy()
    moved = rng.random(b.shape[0]) < 0.3
    b[moved] = np.stack([rng.permutation(experts)[:top_k] for _ in range(layers * int(moved.sum()))]).reshape(
        int(moved.sum()), -1
    )
    a[:, top_k : 2 * top_k] = -1  # layer 1 is dense in both runs
    b[:, top_k : 2 * top_k] = -1
    got = [(la.layer, la.exact, la.jaccard) for la in agreement(a.astype(np.int32), b.astype(np.int32), top_k)]
    want = _by_sets(a, b, top_k)
    assert [g[0] for g in got] == [w[0] for w in want] == [0, 2]
    for g, w in zip(got, want, strict=True):
        assert g[1] == pytest.approx(w[1], abs=1e-12)
        assert g[2] == pytest.approx(w[2], abs=1e-12)
    assert got[0][1] < 1.0  # the draw moved some tokens


def test_pool_weights_by_tokens() -> None:
    one = agreement(np.array([[0, 1]], dtype=np.int32), np.array([[0, 2]], dtype=np.int32), 2)
    same = np.tile(np.array([0, 1], dtype=np.int32), (3, 1))
    many = agreement(same, same.copy(), 2)
    (la,) = pool([one, many])
    assert (la.tokens, la.moved) == (4, 1)
    assert la.exact == pytest.approx(0.75)
    assert la.jaccard == pytest.approx((1 / 3 + 3) / 4)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="top-2"):
        split_layers(np.zeros((4, 3), dtype=np.int32), 2)
    with pytest.raises(ValueError, match="do not line up"):
        agreement(np.zeros((4, 4), dtype=np.int32), np.zeros((5, 4), dtype=np.int32), 2)


def test_noise_floor_allows_at_least_one_token() -> None:
    assert noise_floor(1.0, 400) == pytest.approx(1.0 - 1 / 400)
    p, n = 0.9, 1000
    assert noise_floor(p, n) == pytest.approx(p - 3 * (p * (1 - p) / n) ** 0.5)
