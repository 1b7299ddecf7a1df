"""Independent references: scipy and float64 numpy on random inputs (hypothesis), with the edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import special, stats

from precisionbot import metrics

finite = st.floats(min_value=-30, max_value=30, allow_nan=False, allow_infinity=False)


def _k3_reference(d: float) -> float:
    # mpmath-free float64 reference: the defining series for small |d|, exp(d) - 1 - d otherwise, with
    # scipy's exprel (expm1(d)/d) giving a second independent route for moderate d.
    if abs(d) < 1e-3:
        return sum(d**n / float(special.factorial(n)) for n in range(2, 10))
    return float(d * (special.exprel(d) - 1.0))


@given(finite)
def test_k3_matches_reference_and_is_nonnegative(d: float) -> None:
    got = float(metrics.k3(d))
    assert got >= 0.0
    assert got == pytest.approx(_k3_reference(d), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("d", [1e-12, -1e-12, 1e-8, -3e-7, 5e-5, 1e-3, 9.99e-3, 1.001e-2])
def test_k3_tiny_delta_has_no_cancellation(d: float) -> None:
    got = float(metrics.k3(d))
    assert got > 0.0
    assert got == pytest.approx(_k3_reference(d), rel=1e-10)


def test_k3_extremes_and_shapes() -> None:
    assert float(metrics.k3(0.0)) == 0.0
    assert np.isinf(metrics.k3(1000.0))
    assert float(metrics.k3(-1000.0)) == pytest.approx(999.0)
    assert metrics.k3(np.zeros((2, 3))).shape == (2, 3)
    assert np.isnan(metrics.k3(np.nan))


rows = hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 40)), elements=finite)


@settings(max_examples=60, deadline=None)
@given(rows, st.integers(0, 2**31 - 1))
def test_kl_divergence_matches_scipy(logits: np.ndarray, seed: int) -> None:
    other = logits + np.random.default_rng(seed).normal(0, 0.5, logits.shape)
    lp, lq = special.log_softmax(logits, axis=-1), special.log_softmax(other, axis=-1)
    ref = special.rel_entr(np.exp(lp), np.exp(lq)).sum(axis=-1)
    got = metrics.kl_divergence(lp, lq)
    assert got == pytest.approx(ref, rel=1e-7, abs=1e-12)
    assert np.all(got >= -1e-12)
    assert metrics.kl_divergence(lp, lp) == pytest.approx(np.zeros(len(lp)), abs=1e-15)


def test_kl_divergence_zero_probabilities() -> None:
    with np.errstate(divide="ignore"):
        lp = np.log([0.5, 0.5, 0.0])
        lq = np.log([0.25, 0.75, 0.0])
        assert float(metrics.kl_divergence(lp, lq)) == pytest.approx(stats.entropy([0.5, 0.5, 0], [0.25, 0.75, 0]))
        assert np.isinf(metrics.kl_divergence(np.log([0.5, 0.5]), np.log([1.0, 0.0])))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bf16"])
def test_kl_from_logits_matches_float64_reference(dtype: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, (37, 5000))
    y = x + rng.normal(0, 0.02, x.shape)
    if dtype == "bf16":
        xs = (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        ys = (y.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        xr = (xs.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        yr = (ys.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        got = metrics.kl_from_logits(xs, ys, bf16=True, chunk_elements=8 * 5000)
    else:
        xs, ys = x.astype(dtype), y.astype(dtype)
        xr, yr = xs.astype(np.float64), ys.astype(np.float64)
        got = metrics.kl_from_logits(xs, ys, chunk_elements=8 * 5000)
    ref = metrics.kl_divergence(special.log_softmax(xr, axis=-1), special.log_softmax(yr, axis=-1))
    assert got == pytest.approx(ref, rel=2e-3, abs=1e-9)


def test_kl_from_logits_resolves_tiny_kl_and_shift_invariance() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0, 4, (4, 20000)).astype(np.float32)
    # A constant shift changes no probability: KL must be ~0, not rounding noise of size eps*|lse|.
    assert np.all(np.abs(metrics.kl_from_logits(x, x + np.float32(7.0))) < 1e-9)
    y = x + rng.normal(0, 1e-3, x.shape).astype(np.float32)
    ref = metrics.kl_divergence(
        special.log_softmax(x.astype(np.float64), axis=-1), special.log_softmax(y.astype(np.float64), axis=-1)
    )
    assert metrics.kl_from_logits(x, y) == pytest.approx(ref, rel=2e-2)


def test_kl_from_logits_masked_entries() -> None:
    x = np.array([[0.0, 1.0, -np.inf]], dtype=np.float32)
    y = np.array([[0.0, 1.0, -np.inf]], dtype=np.float32)
    assert metrics.kl_from_logits(x, y)[0] == pytest.approx(0.0, abs=1e-12)
    assert np.isinf(metrics.kl_from_logits(x, np.array([[0.0, -np.inf, 1.0]], dtype=np.float32))[0])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 10))
def test_topk_rest_kl_is_coarse_graining_of_full_kl(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 2, (8, 60))
    y = x + rng.normal(0, 0.3, x.shape)
    lp, lq = special.log_softmax(x, axis=-1), special.log_softmax(y, axis=-1)
    ids = np.argsort(-lp, axis=-1)[:, :k]
    top_p = np.take_along_axis(lp, ids, axis=1)
    q_at = np.take_along_axis(lq, ids, axis=1)
    coarse = metrics.topk_rest_kl(top_p, q_at)
    full = metrics.kl_divergence(lp, lq)
    assert np.all(coarse >= -1e-12)
    assert np.all(coarse <= full + 1e-9)
    # With every token kept the rest bucket is empty and the coarse KL is the full one.
    all_ids = np.argsort(-lp, axis=-1)
    assert metrics.topk_rest_kl(np.take_along_axis(lp, all_ids, 1), np.take_along_axis(lq, all_ids, 1)) == (
        pytest.approx(full, rel=1e-6, abs=1e-9)
    )


def test_topk_union_kl_identical_lists_is_zero_and_grows_with_shift() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(0, 2, (50, 300))
    lp = special.log_softmax(x, axis=-1)
    ids = np.argsort(-lp, axis=-1)[:, :20]
    top = np.take_along_axis(lp, ids, 1)
    assert metrics.topk_union_kl(ids, top, ids, top) == pytest.approx(np.zeros(50), abs=1e-12)
    small = special.log_softmax(x + rng.normal(0, 0.05, x.shape), axis=-1)
    big = special.log_softmax(x + rng.normal(0, 1.0, x.shape), axis=-1)
    kls = []
    for other in (small, big):
        oid = np.argsort(-other, axis=-1)[:, :20]
        kls.append(metrics.topk_union_kl(ids, top, oid, np.take_along_axis(other, oid, 1)))
        assert np.all(np.isfinite(kls[-1])) and np.all(kls[-1] >= -1e-12)
    assert np.median(kls[0]) < np.median(kls[1])


def test_flips_margin_rank_and_shared_delta() -> None:
    ref_ids = np.array([[5, 7, 9], [1, 2, 3]])
    test_ids = np.array([[7, 5, 9], [1, 3, 8]])
    ref_lp = np.array([[-0.1, -0.5, -3.0], [-0.2, -2.0, -3.0]])
    test_lp = np.array([[-0.3, -0.4, -3.0], [-0.2, -2.5, -4.0]])
    assert metrics.top1_flip(ref_ids, test_ids).tolist() == [True, False]
    assert metrics.margin(ref_lp) == pytest.approx([0.4, 1.8])
    assert metrics.rank_of(ref_ids[:, 0], test_ids).tolist() == [1, 0]
    assert metrics.rank_of(np.array([42, 1]), test_ids).tolist() == [3, 0]
    mx, mean, common = metrics.shared_topk_abs_delta(ref_ids, ref_lp, test_ids, test_lp)
    # row 0: ids 5 (|-0.1+0.4|=0.3), 7 (|-0.5+0.3|=0.2), 9 (0); row 1: ids 1 (0), 3 (|-3+2.5|=0.5)
    assert mx == pytest.approx([0.3, 0.5])
    assert mean == pytest.approx([0.5 / 3, 0.25])
    assert common.tolist() == [3, 2]
    mx, mean, common = metrics.shared_topk_abs_delta(
        np.array([[1]]), np.array([[0.0]]), np.array([[2]]), np.array([[0.0]])
    )
    assert common.tolist() == [0] and np.isnan(mx[0]) and np.isnan(mean[0])
    with pytest.raises(ValueError, match="k>=2"):
        metrics.margin(np.array([[0.0]]))


def test_topk_union_kl_when_the_top_k_holds_all_the_mass() -> None:
    # Two tokens carry everything: the rest buckets are empty (log 0) and nothing may warn or go NaN.
    ids = np.array([[3, 4]])
    lp = np.log(np.array([[0.75, 0.25]]))
    other = np.log(np.array([[0.5, 0.5]]))
    kl = metrics.topk_union_kl(ids, lp, ids, other)
    assert kl == pytest.approx([0.75 * np.log(1.5) + 0.25 * np.log(0.5)], rel=1e-6)


def _union_kl_reference(rid: np.ndarray, rlp: np.ndarray, tid: np.ndarray, tlp: np.ndarray) -> float:
    """The union-KL definition for one row, with dicts: each side's missing ids share its rest mass equally,
    capped at its k-th probability; the rest bucket keeps the remainder (floored at 1e-12)."""
    sides = []
    union = list(dict.fromkeys([*rid.tolist(), *tid.tolist()]))
    for ids, lps in ((rid, rlp), (tid, tlp)):
        own = dict(zip(ids.tolist(), np.exp(lps).tolist(), strict=True))
        rest = max(1.0 - sum(own.values()), 0.0)
        missing = [i for i in union if i not in own]
        share = min(rest / max(len(missing), 1), min(own.values()))
        probs = [own.get(i, max(share, 1e-12)) for i in union]
        sides.append([*probs, max(rest - share * len(missing), 1e-12)])
    p, q = np.array(sides[0]), np.array(sides[1])
    return float(np.sum(np.where(p > 0, p * (np.log(p) - np.log(q)), 0.0)))


def test_topk_union_kl_and_shared_delta_match_a_row_by_row_reference() -> None:
    # Rows of every kind the alignment distinguishes: identical lists, the same ids reordered, lists that
    # share some ids, disjoint lists; each row checked against the per-row dict reference above.
    rng = np.random.default_rng(7)
    x = rng.normal(0, 2, (64, 40))
    lp = special.log_softmax(x, axis=-1)
    ids = np.argsort(-lp, axis=-1)[:, :8]
    top = np.take_along_axis(lp, ids, 1)
    tid, tlp = ids.copy(), top.copy()
    tlp[8:16] -= 0.05  # the same ids in the same order, less mass
    tlp[16:32] += rng.normal(0, 0.3, (16, 8))  # reordered (same ids)
    order = np.argsort(-tlp[16:32], axis=1)
    tid[16:32], tlp[16:32] = np.take_along_axis(tid[16:32], order, 1), np.take_along_axis(tlp[16:32], order, 1)
    other = special.log_softmax(x + rng.normal(0, 1.5, x.shape), axis=-1)  # partly shared
    oid = np.argsort(-other, axis=-1)[:, :8]
    tid[32:48], tlp[32:48] = oid[32:48], np.take_along_axis(other, oid, 1)[32:48]
    tid[48:] = ids[48:] + 1000  # disjoint
    alignment = metrics.align_topk(ids, tid)
    assert alignment.same.tolist() == [True] * 16 + [bool((ids[i] == tid[i]).all()) for i in range(16, 64)]
    kl = metrics.topk_union_kl(ids, top, tid, tlp)
    assert metrics.topk_union_kl(ids, top, tid, tlp, alignment=alignment) == pytest.approx(kl, rel=0, abs=0)
    expected = [_union_kl_reference(ids[i], top[i], tid[i], tlp[i]) for i in range(64)]
    assert kl == pytest.approx(expected, rel=1e-9, abs=1e-15)
    mx, mean, common = metrics.shared_topk_abs_delta(ids, top, tid, tlp, alignment=alignment)
    for i in range(64):
        t = dict(zip(tid[i].tolist(), tlp[i].tolist(), strict=True))
        d = [abs(r - t[j]) for j, r in zip(ids[i].tolist(), top[i].tolist(), strict=True) if j in t]
        assert common[i] == len(d)
        assert (np.isnan(mx[i]) and not d) or mx[i] == pytest.approx(max(d), rel=1e-12)
        assert (np.isnan(mean[i]) and not d) or mean[i] == pytest.approx(sum(d) / len(d), rel=1e-12)


def test_identical_lists_take_the_short_path_to_the_same_numbers() -> None:
    # Every row's lists identical (ids and order): no id match is made, and the numbers are the general ones.
    rng = np.random.default_rng(11)
    lp = special.log_softmax(rng.normal(0, 2, (32, 30)), axis=-1)
    ids = np.argsort(-lp, axis=-1)[:, :6]
    top = np.take_along_axis(lp, ids, 1)
    other = top - rng.uniform(0, 0.01, top.shape)
    alignment = metrics.align_topk(ids, ids)
    assert alignment.same.all() and not alignment.ref_in_test.flags.writeable  # a view: nothing was matched
    mx, mean, common = metrics.shared_topk_abs_delta(ids, top, ids, other, alignment=alignment)
    assert mx == pytest.approx(np.abs(top - other).max(axis=1), rel=1e-12)
    assert mean == pytest.approx(np.abs(top - other).mean(axis=1), rel=1e-12)
    assert common.tolist() == [6] * 32
    expected = [_union_kl_reference(ids[i], top[i], ids[i], other[i]) for i in range(32)]
    assert metrics.topk_union_kl(ids, top, ids, other, alignment=alignment) == pytest.approx(expected, rel=1e-9)
