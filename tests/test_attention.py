"""attnlab.attention against the float64 loop oracle, under every mask, head layout and odd size; and its properties."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oracle
from attnlab import (
    attention,
    causal_mask,
    combine_masks,
    document_mask,
    padding_mask,
    repeat_kv,
    sliding_window_mask,
)
from helpers import head_counts, make_qkv, plain_float32_attention, seeds, segments

# float64 against the correctly rounded oracle: outputs are O(1), errors a few ulp times the number of terms
TOL = dict(rtol=1e-12, atol=1e-12)

# (batch, H, Hkv, T, S, D, Dv): one head, T = 1, S = 113, T != S, MHA / GQA / MQA, batch axes, Dv != D
SIZES = [
    pytest.param((), 1, 1, 1, 1, 3, 3, id="T=S=1"),
    pytest.param((), 1, 1, 1, 113, 8, 8, id="T=1,S=113"),
    pytest.param((), 1, 1, 113, 113, 4, 4, id="T=S=113"),
    pytest.param((2,), 2, 2, 5, 17, 6, 6, id="MHA,T<S"),
    pytest.param((2,), 4, 2, 7, 7, 4, 4, id="GQA"),
    pytest.param((3,), 3, 1, 6, 9, 5, 5, id="MQA"),
    pytest.param((2, 2), 6, 3, 4, 11, 3, 5, id="GQA,batch(2,2),Dv!=D"),
]


@pytest.fixture(params=["textbook", "fast"])
def path(request, monkeypatch):
    """Run a test through the textbook lines of ``attention`` or through its blocked fast path, whatever the size."""
    threshold = 0 if request.param == "fast" else np.inf
    monkeypatch.setattr(sys.modules["attnlab.attention"], "FAST_PATH_MIN_SCORES", threshold)
    return request.param


@pytest.mark.parametrize("batch, H, Hkv, T, S, D, Dv", SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_oracle(batch, H, Hkv, T, S, D, Dv, causal, path):
    q, k, v = make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D, Dv=Dv, seed=T * S + H)
    out, w = attention(q, k, v, causal=causal, return_weights=True)
    ref, ref_w = oracle.attention(q, k, v, causal=causal, return_weights=True)
    assert out.shape == (*batch, H, T, Dv) and w.shape == (*batch, H, T, S)
    np.testing.assert_allclose(out, ref, **TOL)
    np.testing.assert_allclose(w, ref_w, **TOL)


def masks_for(B, H, T, S, rng):
    """Every mask type, each broadcastable to (B, H, T, S), alone and combined."""
    lengths = np.array([S, max(1, S // 2)][:B])
    pad_right, pad_left = padding_mask(lengths, S), padding_mask(lengths, S, side="left")
    # documents of a packed sequence; queries are the last T of S positions, so slice the query ids accordingly
    seg = np.repeat(np.arange(4), [3, 1, S - 6, 2])
    doc = document_mask(seg[S - T:], seg)  # (1, T, S)
    window = sliding_window_mask(T, S, 3)
    causal = causal_mask(T, S)
    random_heads = rng.random((B, H, T, S)) < 0.5  # a different mask per head, with some fully masked rows
    random_heads[:, :, 0, :] = False
    return {
        "padding-right": pad_right,
        "padding-left": pad_left,
        "document": doc,
        "sliding-window": window,
        "per-head-random": random_heads,
        "causal+padding": combine_masks(causal, pad_right),
        "document+causal": combine_masks(doc, causal),
        "window+padding-left": combine_masks(window, pad_left),
        "document+padding+window": combine_masks(doc, pad_right, window),
    }


MASK_NAMES = list(masks_for(2, 4, 5, 9, np.random.default_rng(0)))


@pytest.mark.parametrize("name", MASK_NAMES)
@pytest.mark.parametrize("H, Hkv, T, S", [(4, 4, 9, 9), (4, 2, 5, 9), (4, 1, 1, 9), (2, 1, 9, 13)])
def test_every_mask_matches_oracle(name, H, Hkv, T, S):
    rng = np.random.default_rng(S)
    mask = masks_for(2, H, T, S, rng)[name]
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=4, seed=7)
    for causal in (False, True):
        out, w = attention(q, k, v, mask, causal=causal, return_weights=True)
        ref, ref_w = oracle.attention(q, k, v, mask, causal=causal, return_weights=True)
        np.testing.assert_allclose(out, ref, **TOL)
        np.testing.assert_allclose(w, ref_w, **TOL)
        allowed = np.broadcast_to(mask, w.shape) & (causal_mask(T, S) if causal else True)
        assert np.all(w[~allowed] == 0.0), "masked keys get weight exactly 0"


@pytest.mark.parametrize("name", MASK_NAMES)
@pytest.mark.parametrize("H, Hkv, T, S", [(4, 4, 9, 9), (4, 2, 5, 9), (2, 1, 9, 13)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_fast_path_agrees_with_the_textbook_lines(monkeypatch, name, H, Hkv, T, S, dtype):
    """The blocked, multi-threaded path computes what the textbook lines compute, to rounding, with exact zeros where
    the mask forbids; block sizes of a few rows and a 2-D single head included."""
    module = sys.modules["attnlab.attention"]
    mask = masks_for(2, H, T, S, np.random.default_rng(S))[name]
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=4, seed=3, dtype=dtype)
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == np.float64 else dict(rtol=2e-6, atol=1e-6)
    if dtype == np.float16:
        tol = dict(rtol=0, atol=2e-3)  # both compute in float32 and round to float16: at most an ulp apart
    for causal in (False, True):
        monkeypatch.setattr(module, "FAST_PATH_MIN_SCORES", np.inf)
        textbook = attention(q, k, v, mask, causal=causal, return_weights=True)
        monkeypatch.setattr(module, "FAST_PATH_MIN_SCORES", 0)
        for block in (2 * S, 1 << 18):  # a block of a few query rows, and every row of a head in one block
            monkeypatch.setattr(module, "ROW_BLOCK_ELEMENTS", block)
            fast = attention(q, k, v, mask, causal=causal, return_weights=True)
            for a, b in zip(fast, textbook):
                assert a.dtype == b.dtype == dtype and a.shape == b.shape
                np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), **tol)
            assert np.array_equal(fast[1] == 0, textbook[1] == 0), "the same weights are exactly zero"
    monkeypatch.setattr(module, "FAST_PATH_MIN_SCORES", 0)
    one = attention(q[0, 0], k[0, 0], v[0, 0], causal=True)
    monkeypatch.setattr(module, "FAST_PATH_MIN_SCORES", np.inf)
    np.testing.assert_allclose(one.astype(np.float64), attention(q[0, 0], k[0, 0], v[0, 0], causal=True), **tol)


def test_large_inputs_take_the_fast_path(monkeypatch):
    module = sys.modules["attnlab.attention"]
    calls = []
    real = module._attention_blocked
    monkeypatch.setattr(module, "_attention_blocked", lambda *a: calls.append(1) or real(*a))
    attention(*make_qkv(H=1, T=8, S=8))
    assert calls == []
    T = int(np.sqrt(module.FAST_PATH_MIN_SCORES)) + 1
    attention(*make_qkv(H=1, T=T, S=T, D=2, dtype=np.float32))
    assert calls == [1]


def test_fully_masked_rows_give_zero_output(path):
    q, k, v = make_qkv(H=2, T=3, S=4)
    mask = np.ones((2, 3, 4), dtype=bool)
    mask[1, 2] = False  # head 1, query 2 may attend nothing
    out, w = attention(q, k, v, mask, return_weights=True)
    assert np.array_equal(out[1, 2], np.zeros(4)) and np.array_equal(w[1, 2], np.zeros(4))
    assert np.all(np.abs(out[0]).sum(axis=-1) > 0)


def test_default_scale_and_explicit_scale():
    q, k, v = make_qkv(H=2, T=4, S=6, D=9)
    np.testing.assert_allclose(attention(q, k, v), oracle.attention(q, k, v, scale=1 / 3), **TOL)
    np.testing.assert_allclose(attention(q, k, v, scale=0.7), oracle.attention(q, k, v, scale=0.7), **TOL)
    assert not np.allclose(attention(q, k, v, scale=0.7), attention(q, k, v)), "the scale must matter"


def test_two_dimensional_inputs_are_one_head():
    q, k, v = make_qkv(H=1, T=4, S=6)
    mask = causal_mask(4, 6)
    out, w = attention(q[0], k[0], v[0], mask, return_weights=True)
    assert out.shape == (4, 4) and w.shape == (4, 6)
    ref, ref_w = oracle.attention(q[0], k[0], v[0], mask, return_weights=True)
    np.testing.assert_allclose(out, ref, **TOL)
    np.testing.assert_allclose(w, ref_w, **TOL)


def test_inputs_are_not_modified():
    q, k, v = make_qkv(H=2, T=4, S=6)
    mask = causal_mask(4, 6)
    copies = [a.copy() for a in (q, k, v, mask)]
    attention(q, k, v, mask, causal=True)
    assert all(np.array_equal(a, c) for a, c in zip((q, k, v, mask), copies))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_output_dtype_follows_input(dtype):
    q, k, v = make_qkv(H=2, T=3, S=5, dtype=dtype)
    out, w = attention(q, k, v, return_weights=True)
    assert out.dtype == dtype and w.dtype == dtype


def test_gqa_by_reshape_never_copies_keys_and_values_per_head():
    """With H = 8 query heads on one K/V head, repeating K and V would allocate 8 copies; the reshape allocates none.

    One decode-like query row keeps the score matrix tiny, so the peak is dominated by whatever K/V copies are made.
    """
    H, S, D = 8, 4096, 64
    q, k, v = make_qkv(H=H, Hkv=1, T=1, S=S, D=D)
    tracemalloc.start()
    try:
        attention(q, k, v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    one_head_of_k_and_v = k.nbytes + v.nbytes
    assert peak < one_head_of_k_and_v, f"peak {peak} bytes: K and V were copied"
    assert repeat_kv(k, H).nbytes + repeat_kv(v, H).nbytes == H * one_head_of_k_and_v  # what a copy would cost


# --- properties -------------------------------------------------------------------------------------------------


@given(hk=head_counts(), T=st.integers(1, 9), extra=st.integers(0, 6), D=st.integers(1, 6), seed=seeds)
def test_gqa_equals_repeat_kv_and_not_tile(hk, T, extra, D, seed):
    """Grouped-query attention == the same keys and values repeated with np.repeat (query head h reads K/V h // G)."""
    H, Hkv = hk
    S = T + extra
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=D, seed=seed)
    mask = padding_mask([S, max(1, S - 2)], S)
    got = attention(q, k, v, mask, causal=True)
    mha = attention(q, repeat_kv(k, H), repeat_kv(v, H), mask, causal=True)
    np.testing.assert_allclose(got, mha, rtol=1e-12, atol=1e-12)
    if 1 < Hkv < H:  # np.tile pairs query heads with the wrong K/V heads; make sure the test would notice
        tiled = np.tile(k, (1, H // Hkv, 1, 1)), np.tile(v, (1, H // Hkv, 1, 1))
        assert not np.allclose(got, attention(q, *tiled, mask, causal=True))


@given(T=st.integers(1, 10), extra=st.integers(0, 5), hk=head_counts(), seed=seeds, data=st.data())
def test_rows_of_weights_sum_to_one_or_zero(T, extra, hk, seed, data):
    H, Hkv = hk
    S = T + extra
    q, k, v = make_qkv(H=H, Hkv=Hkv, T=T, S=S, D=3, seed=seed)
    mask = np.random.default_rng(seed).random((H, T, S)) < data.draw(st.sampled_from([0.0, 0.2, 0.7, 1.0]))
    out, w = attention(q, k, v, mask, return_weights=True)
    alive = mask.any(axis=-1)
    np.testing.assert_allclose(w.sum(axis=-1)[alive], 1.0, rtol=1e-12)
    assert np.all(w.sum(axis=-1)[~alive] == 0.0)
    assert np.all(out[~alive] == 0.0)
    assert np.all(w[~mask] == 0.0)


@given(T=st.integers(2, 10), extra=st.integers(0, 4), hk=head_counts(), seed=seeds, data=st.data())
def test_causal_future_cannot_change_the_past(T, extra, hk, seed, data):
    """With a causal mask, changing q, k and v at positions after i leaves outputs at positions <= i bit-for-bit equal.

    Query i sits at absolute position S - T + i; everything at absolute positions > that may change.
    """
    H, Hkv = hk
    S = T + extra
    i = data.draw(st.integers(0, T - 2))
    cut = S - T + i + 1  # first absolute position that query i must not see
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=4, seed=seed)
    q2, k2, v2 = (a.copy() for a in (q, k, v))
    g = np.random.default_rng(seed + 1)
    q2[..., i + 1:, :] = 100 * g.standard_normal(q2[..., i + 1:, :].shape)
    k2[..., cut:, :] = 100 * g.standard_normal(k2[..., cut:, :].shape)
    v2[..., cut:, :] = 100 * g.standard_normal(v2[..., cut:, :].shape)
    for mask in (None, padding_mask([S, S - 1], S)):
        before = attention(q, k, v, mask, causal=True)
        after = attention(q2, k2, v2, mask, causal=True)
        assert np.array_equal(before[..., : i + 1, :], after[..., : i + 1, :])
        assert not np.array_equal(before[..., i + 1:, :], after[..., i + 1:, :])  # the change did reach the future


@given(ls=st.lists(st.integers(1, 9), min_size=1, max_size=3), extra=st.integers(0, 5), hk=head_counts(), seed=seeds)
def test_padded_keys_get_zero_weight_and_change_nothing(ls, extra, hk, seed):
    """Right padding: padded keys get weight exactly 0, garbage in them changes no output bit, and the result equals
    attention over the real keys alone."""
    H, Hkv = hk
    lengths = np.array(ls)
    S = lengths.max() + extra
    B, T = len(ls), 3
    q, k, v = make_qkv(batch=(B,), H=H, Hkv=Hkv, T=T, S=S, D=4, seed=seed)
    mask = padding_mask(lengths, S)
    out, w = attention(q, k, v, mask, return_weights=True)
    k2, v2 = k.copy(), v.copy()
    for b, n in enumerate(lengths):
        assert np.all(w[b, ..., n:] == 0.0)
        k2[b, :, n:], v2[b, :, n:] = 1e3, -1e3
        alone = attention(q[b], k[b, :, :n], v[b, :, :n])
        np.testing.assert_allclose(out[b], alone, rtol=1e-12, atol=1e-12)
    assert np.array_equal(attention(q, k2, v2, mask), out)


@given(seg=segments(), H=st.integers(1, 3), causal=st.booleans(), seed=seeds)
def test_document_mask_equals_each_document_alone(seg, H, causal, seed):
    """Packing documents into one sequence with a document mask == running attention on each document separately."""
    T = len(seg)
    q, k, v = make_qkv(H=H, T=T, D=4, seed=seed)
    packed = attention(q, k, v, document_mask(seg), causal=causal)
    for doc in np.unique(seg):
        idx = np.flatnonzero(seg == doc)
        alone = attention(q[:, idx], k[:, idx], v[:, idx], causal=causal)
        np.testing.assert_allclose(packed[:, idx], alone, rtol=1e-12, atol=1e-12)


@given(T=st.integers(1, 6), S=st.integers(1, 8), D=st.integers(1, 8), seed=seeds)
def test_float16_logits_near_1e4_stay_finite(T, S, D, seed):
    """float16 inputs whose logits q·k/sqrt(D) reach about ±1e4: computed in float32, so finite and normalised."""
    g = np.random.default_rng(seed)
    # |q_d k_d| up to 1e4 * sqrt(D) / D per term makes the largest logits about 1e4 (values stay far below 65504)
    amp = np.sqrt(1e4 * np.sqrt(D) / D)
    q = (amp * g.uniform(-1, 1, (2, T, D))).astype(np.float16)
    k = (amp * g.choice([-1.0, 1.0], (2, S, D))).astype(np.float16)
    v = g.standard_normal((2, S, D)).astype(np.float16)
    out, w = attention(q, k, v, return_weights=True)
    assert out.dtype == np.float16 and np.all(np.isfinite(out)) and np.all(np.isfinite(w))
    np.testing.assert_allclose(w.astype(np.float64).sum(axis=-1), 1.0, atol=S * 1e-3)
    ref = oracle.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=0.05 * np.abs(v).max() + 1e-3)


def test_float16_logits_actually_reach_1e4():
    """The construction above really produces logits of about 1e4 (checked once, for D = 4)."""
    D = 4
    amp = np.sqrt(1e4 * np.sqrt(D) / D)
    logits = (np.full(D, amp) @ np.full(D, amp)) / np.sqrt(D)
    assert 0.9e4 <= logits <= 1.1e4


# --- float32 accuracy relative to a plain float32 implementation ---------------------------------------------------


@pytest.mark.parametrize("T, S, causal", [(1, 113, False), (37, 113, True), (64, 64, False)])
def test_float32_error_is_at_most_a_few_times_plain_float32(T, S, causal):
    q, k, v = make_qkv(H=2, T=T, S=S, D=8, seed=3)
    q, k = 2 * q, 2 * k  # peaky weights, where rounding matters most
    mask = causal_mask(T, S) if causal else np.ones((T, S), dtype=bool)
    exact = oracle.attention(q, k, v, mask)
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    err = np.abs(attention(*f32, mask).astype(np.float64) - exact).max()
    err_plain = np.abs(plain_float32_attention(q, k, v, mask).astype(np.float64) - exact).max()
    assert attention(*f32, mask).dtype == np.float32
    assert err <= 3 * err_plain + 4 * np.finfo(np.float32).eps, (err, err_plain)


# --- NaN is not hidden --------------------------------------------------------------------------------------------


def test_nan_in_a_query_reaches_only_its_row():
    q, k, v = make_qkv(H=2, T=4, S=5)
    q[1, 2, 0] = np.nan
    out = attention(q, k, v)
    assert np.isnan(out[1, 2]).all()
    nan_rows = np.isnan(out).any(axis=-1)
    assert nan_rows.sum() == 1


def test_nan_in_a_key_reaches_every_query_allowed_to_see_it():
    """Documented: NaN propagates; under a causal mask queries before the NaN key never read it and stay finite."""
    q, k, v = make_qkv(H=1, T=6, S=6)
    k[0, 3, 1] = np.nan
    out = attention(q, k, v, causal=True)
    assert np.all(np.isfinite(out[0, :3]))
    assert np.isnan(out[0, 3:]).all()


def test_nan_in_a_value_reaches_the_rows_that_weigh_it():
    q, k, v = make_qkv(H=1, T=3, S=4)
    v[0, 2, 0] = np.nan
    out = attention(q, k, v)
    assert np.isnan(out[0, :, 0]).all()
    assert np.all(np.isfinite(out[0, :, 1:])), "other value columns are untouched"
