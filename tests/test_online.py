"""The online softmax and tiled attention: equal to the full computation, skipping the right tiles, linear memory."""

from __future__ import annotations

import math
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle
from attnlab import (
    TiledResult,
    TiledStats,
    attention,
    causal_mask,
    combine_masks,
    document_mask,
    online_softmax,
    online_softmax_stats,
    padding_mask,
    sliding_window_mask,
    softmax,
    tiled_attention,
)
from helpers import head_counts, make_qkv, plain_float32_attention, seeds

TOL = dict(rtol=1e-12, atol=1e-12)
pytestmark = pytest.mark.usefixtures("tiled_path")  # every test through both paths of tiled_attention (conftest.py)


# --- online softmax -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("S", [1, 7, 113])
def test_online_softmax_equals_softmax_for_every_block_size(S):
    x = 5 * np.random.default_rng(S).standard_normal((3, S))
    x[1, ::3] = -np.inf  # -inf entries act as masked
    x[2] = -np.inf  # an all -inf row gives zeros
    expected = softmax(x)
    for block_size in range(1, S + 3):
        got = online_softmax(x, block_size)
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15, err_msg=f"block_size={block_size}")
        assert np.all(got[x == -np.inf] == 0.0)
    np.testing.assert_allclose(online_softmax(x[:2], 4), oracle.softmax(x[:2]), rtol=1e-12, atol=1e-15)


@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 40)),
                    elements=st.floats(-1e4, 1e4) | st.just(-np.inf)),
       block_size=st.integers(1, 45))
def test_online_softmax_property(x, block_size):
    np.testing.assert_allclose(online_softmax(x, block_size), softmax(x), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_online_softmax_keeps_dtype(dtype):
    x = np.linspace(-3, 3, 10).astype(dtype)
    got = online_softmax(x, 3)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), oracle.softmax(x.astype(np.float64)), rtol=1e-2)


@pytest.mark.parametrize("block_size", [1, 2, 3, 5, 8, 20])
def test_online_softmax_trace(block_size):
    """After each block the running (m, l) are the max and sum of exp(x - max) of everything read so far."""
    x = np.array([[0.5, -1.0, 3.0, 2.0, 7.0, -4.0, 7.5, 1.0]])
    m, l, trace = online_softmax_stats(x, block_size)
    assert len(trace) == math.ceil(x.shape[-1] / block_size)
    for n, (m_t, l_t) in enumerate(trace, start=1):
        seen = x[0, : n * block_size]
        assert m_t.shape == l_t.shape == (1, 1)
        assert m_t[0, 0] == seen.max()
        assert l_t[0, 0] == pytest.approx(math.fsum(math.exp(s - seen.max()) for s in seen), rel=1e-14)
    assert trace[-1][0][0, 0] == m[0, 0] == 7.5
    assert l[0, 0] == pytest.approx(math.fsum(math.exp(s - 7.5) for s in x[0]), rel=1e-14)
    running_max = [t[0][0, 0] for t in trace]
    assert running_max == sorted(running_max), "the running max never decreases"


def test_online_softmax_stats_of_all_masked_row():
    m, l, _ = online_softmax_stats(np.full((1, 4), -np.inf), 3)
    assert m[0, 0] == -np.inf and l[0, 0] == 0.0


# --- tiled attention equals full attention ------------------------------------------------------------------------


@pytest.mark.parametrize("T, S, Br, Bc", [
    (1, 113, 64, 64),   # one decode row, S not a multiple of the block
    (113, 113, 64, 64),  # odd square, tail tiles in both directions
    (5, 17, 64, 64),    # S smaller than the block
    (9, 30, 4, 7),      # T != S, neither divides
    (8, 8, 1, 1),       # single-element tiles
])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_matches_oracle(T, S, Br, Bc, causal):
    q, k, v = make_qkv(H=2, Hkv=1, T=T, S=S, D=4, seed=T + S)
    got = tiled_attention(q, k, v, causal=causal, Br=Br, Bc=Bc)
    np.testing.assert_allclose(got, oracle.attention(q, k, v, causal=causal), **TOL)


MASK_KINDS = ["none", "padding", "padding-left", "document", "window", "random-per-head", "document+padding"]


def make_mask(kind, B, H, T, S, seed):
    g = np.random.default_rng(seed)
    lengths = g.integers(0, S + 1, size=B)
    seg = np.sort(g.integers(0, 3, size=S))
    return {
        "none": None,
        "padding": padding_mask(lengths, S),
        "padding-left": padding_mask(lengths, S, side="left"),
        "document": document_mask(seg[S - T:], seg),
        "window": sliding_window_mask(T, S, int(g.integers(1, S + 1))),
        "random-per-head": g.random((B, H, T, S)) < 0.3,
        "document+padding": combine_masks(document_mask(seg[S - T:], seg), padding_mask(lengths, S)),
    }[kind]


@given(hk=head_counts(), T=st.integers(1, 12), extra=st.integers(0, 12), Br=st.integers(1, 14), Bc=st.integers(1, 14),
       kind=st.sampled_from(MASK_KINDS), causal=st.booleans(), seed=seeds)
def test_tiled_equals_full_under_every_mask(hk, T, extra, Br, Bc, kind, causal, seed):
    H, Hkv = hk
    S = T + extra
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=3, seed=seed)
    mask = make_mask(kind, 2, H, T, S, seed)
    got = tiled_attention(q, k, v, mask, causal=causal, Br=Br, Bc=Bc)
    np.testing.assert_allclose(got, attention(q, k, v, mask, causal=causal), **TOL)


@pytest.mark.parametrize("one_head", [False, True])
def test_one_return_convention_the_output_alone_unless_asked_then_a_named_result(one_head):
    q, k, v = make_qkv(batch=(2,), H=2, T=5, S=7, D=3)
    if one_head:
        q, k, v = q[0, 0], k[0, 0], v[0, 0]
    out = tiled_attention(q, k, v, causal=True, Br=2, Bc=3)
    assert isinstance(out, np.ndarray) and out.shape == q.shape
    full = tiled_attention(q, k, v, causal=True, Br=2, Bc=3, return_lse=True, return_stats=True)
    assert isinstance(full, TiledResult) and isinstance(full.stats, TiledStats)
    assert full.lse.shape == q.shape[:-1] and np.array_equal(full.out, out)
    for flags, names in (({"return_lse": True}, ("out", "lse")), ({"return_stats": True}, ("out", "stats")),
                         ({"return_lse": True, "return_stats": True}, ("out", "lse", "stats"))):
        result = tiled_attention(q, k, v, causal=True, Br=2, Bc=3, **flags)
        unpacked = tuple(result)  # what was asked for, in the order of the flags
        assert len(unpacked) == len(names)
        for name, got in zip(names, unpacked):
            assert got is getattr(result, name)
            expected = getattr(full, name)
            assert got == expected if name == "stats" else np.array_equal(got, expected)
        assert (result.lse is None) != ("lse" in names) and (result.stats is None) != ("stats" in names)


def test_tiled_two_dimensional_inputs_and_scale():
    q, k, v = make_qkv(H=1, T=6, S=10, D=5)
    got = tiled_attention(q[0], k[0], v[0], causal_mask(6, 10), scale=0.3, Br=4, Bc=3)
    assert got.shape == (6, 5)
    np.testing.assert_allclose(got, oracle.attention(q[0], k[0], v[0], causal_mask(6, 10), scale=0.3), **TOL)


@given(T=st.integers(2, 12), extra=st.integers(0, 6), Br=st.integers(1, 6), Bc=st.integers(1, 6), seed=seeds,
       data=st.data())
def test_tiled_causal_future_cannot_change_the_past(T, extra, Br, Bc, seed, data):
    S = T + extra
    i = data.draw(st.integers(0, T - 2))
    cut = S - T + i + 1
    q, k, v = make_qkv(H=2, T=T, S=S, D=3, seed=seed)
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    q2[..., i + 1:, :] += 50
    k2[..., cut:, :] -= 50
    v2[..., cut:, :] *= -7
    before = tiled_attention(q, k, v, causal=True, Br=Br, Bc=Bc)
    after = tiled_attention(q2, k2, v2, causal=True, Br=Br, Bc=Bc)
    assert np.array_equal(before[..., : i + 1, :], after[..., : i + 1, :])


@given(T=st.integers(1, 6), S=st.integers(1, 9), Bc=st.integers(1, 4), seed=seeds)
def test_tiled_float16_logits_near_1e4_stay_finite(T, S, Bc, seed):
    g = np.random.default_rng(seed)
    D = 4
    amp = np.sqrt(1e4 * np.sqrt(D) / D)  # largest logits about 1e4
    q = (amp * g.uniform(-1, 1, (1, T, D))).astype(np.float16)
    k = (amp * g.choice([-1.0, 1.0], (1, S, D))).astype(np.float16)
    v = g.standard_normal((1, S, D)).astype(np.float16)
    got = tiled_attention(q, k, v, Br=2, Bc=Bc)
    assert got.dtype == np.float16 and np.all(np.isfinite(got))
    np.testing.assert_allclose(got.astype(np.float64), attention(q, k, v).astype(np.float64), atol=0.05)


def test_tiled_float32_error_is_at_most_a_few_times_plain_float32():
    q, k, v = make_qkv(H=2, T=40, S=113, D=8, seed=3)
    q, k = 2 * q, 2 * k
    mask = causal_mask(40, 113)
    exact = oracle.attention(q, k, v, mask)
    got = tiled_attention(*(a.astype(np.float32) for a in (q, k, v)), causal=True, Br=16, Bc=16)
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - exact).max()
    err_plain = np.abs(plain_float32_attention(q, k, v, mask).astype(np.float64) - exact).max()
    assert err <= 3 * err_plain + 4 * np.finfo(np.float32).eps, (err, err_plain)


def scores_that_jump(T, S, Bc, step, seed):
    """q, k, v of one head whose scores jump by about ``step`` from one key block to the next, more for some rows than
    for others (negative: they fall), so that the fast path moves some rows' reference maximum and not others."""
    g = np.random.default_rng(seed)
    q = np.zeros((1, T, 2))
    q[0, :, 0] = g.uniform(0.2, 1.5, T)  # how fast each row's scores jump
    q[0, :, 1] = g.standard_normal(T)
    k = np.zeros((1, S, 2))
    k[0, :, 0] = step * (np.arange(S) // Bc) * np.sqrt(2)  # the unit of the scores is 1/sqrt(D)
    k[0, :, 1] = g.standard_normal(S)
    return q, k, g.standard_normal((1, S, 3))


@pytest.mark.parametrize("step", [-400.0, -10.0, 3.0, 9.0, 30.0, 400.0])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_scores_that_jump_between_key_blocks(step, causal):
    """Scores that rise or fall across key blocks by less and more than the fast path's rescaling threshold, and by far
    more than float32 or float64 can hold as exp (400: e^400 overflows both), with and without the causal mask."""
    T, S, Bc = 20, 37, 5
    q, k, v = scores_that_jump(T, S, Bc, step, seed=int(abs(step)))
    mask = causal_mask(T, S) | (not causal)
    exact = oracle.attention(q, k, v, mask)
    s = np.where(mask, q @ np.swapaxes(k, -1, -2) / np.sqrt(2), -np.inf)
    exact_lse = s.max(axis=-1) + np.log(np.exp(s - s.max(axis=-1, keepdims=True)).sum(axis=-1))

    got, lse = tiled_attention(q, k, v, causal=causal, Br=7, Bc=Bc, return_lse=True)
    np.testing.assert_allclose(got, exact, **TOL)
    np.testing.assert_allclose(lse, exact_lse, **TOL)
    # float32: scores in the thousands carry float32's rounding of the scores themselves, so the bound is the error of
    # the plain float32 computation, as for the other float32 tests
    got32, lse32 = tiled_attention(*(a.astype(np.float32) for a in (q, k, v)), causal=causal, Br=7, Bc=Bc,
                                   return_lse=True)
    assert np.all(np.isfinite(got32)) and np.all(np.isfinite(lse32))
    err = np.abs(got32 - exact).max()
    err_plain = np.abs(plain_float32_attention(q, k, v, mask).astype(np.float64) - exact).max()
    assert err <= 3 * err_plain + 4 * np.finfo(np.float32).eps, (err, err_plain)
    np.testing.assert_allclose(lse32, exact_lse, rtol=1e-6, atol=1e-5)


def test_tiled_nan_in_a_query_reaches_only_its_row():
    q, k, v = make_qkv(H=1, T=6, S=6)
    q[0, 4, 1] = np.nan
    got = tiled_attention(q, k, v, Br=2, Bc=2)
    assert np.isnan(got[0, 4]).all()
    assert np.isnan(got).any(axis=-1).sum() == 1


# --- which tiles are computed ---------------------------------------------------------------------------------------


def expected_stats(allowed, Br, Bc):
    """Direct count of the (Br, Bc) tiles of the (T, S) score grid a tiled pass must compute.

    ``allowed (..., T, S)`` is the full boolean mask (causal part included). A tile is needed when some batch element
    and head may attend some score in it. Returns ``(tiles_total, tiles_computed, score_tile_elements)``.
    """
    T, S = allowed.shape[-2:]
    anywhere = allowed.reshape(-1, T, S).any(axis=0)  # (T, S)
    total = computed = 0
    for i in range(0, T, Br):
        for j in range(0, S, Bc):
            total += 1
            computed += bool(anywhere[i:i + Br, j:j + Bc].any())
    return total, computed, min(Br, T) * min(Bc, S)


def check_stats(stats, allowed, Br, Bc):
    total, computed, elements = expected_stats(allowed, Br, Bc)
    assert stats.tiles_total == total
    assert stats.tiles_computed == computed
    assert stats.tiles_skipped == total - computed
    assert stats.score_tile_elements == elements


@pytest.mark.parametrize("T, S, Br, Bc", [(8, 8, 2, 2), (64, 64, 16, 16), (113, 113, 64, 64), (10, 10, 3, 4),
                                          (5, 20, 2, 3), (1, 50, 1, 8), (7, 7, 64, 64)])
def test_causal_skips_exactly_the_tiles_above_the_diagonal(T, S, Br, Bc):
    q, k, v = make_qkv(H=1, T=T, S=S, D=2)
    _, stats = tiled_attention(q, k, v, causal=True, Br=Br, Bc=Bc, return_stats=True)
    check_stats(stats, causal_mask(T, S), Br, Bc)
    assert stats.tiles_total == math.ceil(T / Br) * math.ceil(S / Bc)


@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_causal_square_skips_n_choose_2_tiles(n):
    """T = S = n blocks: the n(n+1)/2 tiles on and below the diagonal are computed, the n(n-1)/2 above skipped."""
    B = 4
    q, k, v = make_qkv(H=1, T=n * B, D=2)
    _, stats = tiled_attention(q, k, v, causal=True, Br=B, Bc=B, return_stats=True)
    assert stats.tiles_computed == n * (n + 1) // 2
    assert stats.tiles_skipped == n * (n - 1) // 2


def test_a_tile_is_skipped_only_when_masked_for_every_batch_element_and_head():
    """Sequence 0 is all padding after 4 keys, sequence 1 is not: the right half of the keys is still needed."""
    q, k, v = make_qkv(batch=(2,), H=4, Hkv=2, T=8, D=2)
    _, stats = tiled_attention(q, k, v, padding_mask([4, 8], 8), Br=4, Bc=4, return_stats=True)
    assert (stats.tiles_total, stats.tiles_computed) == (4, 4)
    _, stats = tiled_attention(q, k, v, padding_mask([4, 3], 8), Br=4, Bc=4, return_stats=True)
    assert (stats.tiles_total, stats.tiles_computed, stats.tiles_skipped) == (4, 2, 2)


def test_no_mask_computes_every_tile():
    q, k, v = make_qkv(H=2, T=9, S=13, D=2)
    _, stats = tiled_attention(q, k, v, Br=4, Bc=5, return_stats=True)
    assert stats.tiles_computed == stats.tiles_total == 3 * 3 and stats.tiles_skipped == 0


@pytest.mark.parametrize("sizes, Br, Bc", [([8, 8, 8, 8], 8, 8), ([5, 11, 3, 13], 4, 4), ([16, 16], 4, 8)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("H, Hkv", [(1, 1), (2, 2), (4, 2)])
def test_document_mask_skips_tiles_between_documents(sizes, Br, Bc, causal, H, Hkv):
    seg = np.repeat(np.arange(len(sizes)), sizes)
    T = len(seg)
    q, k, v = make_qkv(H=H, Hkv=Hkv, T=T, D=2)
    mask = document_mask(seg)
    got, stats = tiled_attention(q, k, v, mask, causal=causal, Br=Br, Bc=Bc, return_stats=True)
    allowed = np.broadcast_to(mask & (causal_mask(T) if causal else True), (H, T, T))
    check_stats(stats, allowed, Br, Bc)
    assert stats.tiles_skipped > 0
    np.testing.assert_allclose(got, attention(q, k, v, mask, causal=causal), **TOL)


def test_four_equal_documents_compute_only_the_diagonal_tiles():
    seg = np.repeat(np.arange(4), 8)
    q, k, v = make_qkv(H=1, T=32, D=2)
    _, stats = tiled_attention(q, k, v, document_mask(seg), Br=8, Bc=8, return_stats=True)
    assert (stats.tiles_total, stats.tiles_computed) == (16, 4)


@given(hk=head_counts(), T=st.integers(1, 10), extra=st.integers(0, 10), Br=st.integers(1, 8), Bc=st.integers(1, 8),
       kind=st.sampled_from(MASK_KINDS), causal=st.booleans(), seed=seeds)
def test_stats_count_exactly_the_tiles_with_an_allowed_score(hk, T, extra, Br, Bc, kind, causal, seed):
    """Under any mask a tile is computed if and only if some score in it may be attended."""
    H, Hkv = hk
    S = T + extra
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=2, seed=seed)
    mask = make_mask(kind, 2, H, T, S, seed)
    _, stats = tiled_attention(q, k, v, mask, causal=causal, Br=Br, Bc=Bc, return_stats=True)
    allowed = np.ones((2, H, T, S), dtype=bool) if mask is None else np.broadcast_to(mask, (2, H, T, S))
    if causal:
        allowed = allowed & causal_mask(T, S)
    check_stats(stats, allowed, Br, Bc)


# --- memory -----------------------------------------------------------------------------------------------------


def peak_bytes(fn, *args, **kwargs):
    """Peak bytes allocated while ``fn`` runs (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fast_path_min_scores", [0, np.inf])
def test_tiled_memory_grows_linearly_full_attention_quadratically(monkeypatch, fast_path_min_scores):
    """S -> 4S: the tiled pass holds O(S) (its output and one tile), the full pass the O(S²) score matrix (in its
    textbook lines and in its blocked fast path alike)."""
    monkeypatch.setattr(sys.modules["attnlab.attention"], "FAST_PATH_MIN_SCORES", fast_path_min_scores)
    S1, S2 = 256, 1024
    small = make_qkv(H=1, T=S1, D=16)
    large = make_qkv(H=1, T=S2, D=16)
    tiles = {"Br": 64, "Bc": 64}  # a fixed tile: the defaults are larger than S1, so the tile itself would grow
    tiled_ratio = (peak_bytes(tiled_attention, *large, causal=True, **tiles)
                   / peak_bytes(tiled_attention, *small, causal=True, **tiles))
    full_ratio = peak_bytes(attention, *large, causal=True) / peak_bytes(attention, *small, causal=True)
    assert tiled_ratio < 6, f"tiled peak grew {tiled_ratio:.1f}x for 4x longer sequences"
    assert full_ratio > 10, f"full peak grew only {full_ratio:.1f}x: is the score matrix still materialised?"
    # and in absolute terms the tiled pass never holds anything close to the S2 x S2 scores
    assert peak_bytes(tiled_attention, *large, **tiles) < S2 * S2 * 8 / 8
