"""attnlab.limit_threads pins attnlab's own thread pool (for timings), and the one-matmul-per-K/V-head path of
grouped-query attention (decode: one query row per head) agrees with the repeat_kv cross-check."""

import sys

import numpy as np
import pytest

import attnlab
from attnlab import _parallel


def test_limit_threads_sets_and_restores_the_worker_count():
    before = _parallel.workers()
    with attnlab.limit_threads(1):
        assert _parallel.workers() == 1
        with attnlab.limit_threads(4):  # nested: never more than the enclosing limit
            assert _parallel.workers() == 1
        assert _parallel.workers() == 1
    assert _parallel.workers() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_limit_threads_rejects_a_bad_count(bad):
    with pytest.raises(ValueError, match="n must be"):
        with attnlab.limit_threads(bad):
            pass


def test_limit_threads_runs_a_large_problem_in_one_thread_with_the_same_result(monkeypatch):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 2, 1024, 16))  # 2 * 1024 * 1024 scores: above MIN_PARALLEL_ELEMENTS
    expected = attnlab.attention(q, k, v, causal=True)
    calls = []
    monkeypatch.setattr(_parallel, "ThreadPoolExecutor", lambda *a, **kw: calls.append(a) or pytest.fail("pool"))
    monkeypatch.setattr(_parallel, "_pool", None)
    with attnlab.limit_threads(1):
        got = attnlab.attention(q, k, v, causal=True)
    assert calls == []
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("T, S", [(1, 1), (1, 37), (3, 37), (5, 5)])
@pytest.mark.parametrize("Hkv", [1, 2, 6])
def test_grouped_query_heads_share_one_product_and_match_repeat_kv(T, S, Hkv):
    rng = np.random.default_rng(T * 100 + S + Hkv)
    q = rng.standard_normal((2, 6, T, 8))
    k, v = rng.standard_normal((2, 2, Hkv, S, 8))
    expected = attnlab.attention(q, attnlab.repeat_kv(k, 6), attnlab.repeat_kv(v, 6), causal=True)
    np.testing.assert_allclose(attnlab.attention(q, k, v, causal=True), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("block_elements", [8, 64, 1 << 18])
def test_every_row_block_layout_matches_repeat_kv(monkeypatch, block_elements):
    # small blocks of query rows take the (G, r, D) @ (D, S) path, whole rows the folded (G·r, D) @ (D, S) one; the
    # inputs are small, so the blocked fast path is switched on by hand
    monkeypatch.setattr(sys.modules["attnlab.attention"], "ROW_BLOCK_ELEMENTS", block_elements)
    monkeypatch.setattr(sys.modules["attnlab.attention"], "FAST_PATH_MIN_SCORES", 0)
    rng = np.random.default_rng(block_elements)
    q = rng.standard_normal((6, 7, 4))
    k, v = rng.standard_normal((2, 2, 9, 4))
    expected = attnlab.attention(q, attnlab.repeat_kv(k, 6), attnlab.repeat_kv(v, 6), causal=True)
    out, weights = attnlab.attention(q, k, v, causal=True, return_weights=True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
