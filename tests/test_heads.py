"""Multi-head layers: split/merge, projections, the layer against a per-head oracle loop, and KV-cache decoding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oracle
from attnlab import (
    KVCache,
    attention,
    causal_mask,
    decode,
    decode_step,
    init_weights,
    merge_heads,
    multi_head_attention,
    padding_mask,
    project_qkv,
    split_heads,
)
from helpers import head_counts, seeds

TOL = dict(rtol=1e-12, atol=1e-12)


@given(batch=st.lists(st.integers(1, 3), max_size=2), T=st.integers(1, 6), H=st.integers(1, 4), D=st.integers(1, 5),
       seed=seeds)
def test_split_and_merge_are_inverse(batch, T, H, D, seed):
    x = np.random.default_rng(seed).standard_normal((*batch, T, H * D))
    heads = split_heads(x, H)
    assert heads.shape == (*batch, H, T, D)
    for h in range(H):  # head h is the h-th block of D columns
        assert np.array_equal(heads[..., h, :, :], x[..., :, h * D:(h + 1) * D])
    assert np.array_equal(merge_heads(heads), x)
    assert np.array_equal(split_heads(merge_heads(heads), H), heads)


@pytest.mark.parametrize("H, Hkv, kind", [(4, 4, "MHA"), (4, 2, "GQA"), (4, 1, "MQA")])
def test_init_weights_shapes_and_scale(H, Hkv, kind):
    d_model = 64
    w = init_weights(d_model, H, Hkv, seed=1)
    D = d_model // H
    assert (w.H, w.Hkv, w.D, w.d_model) == (H, Hkv, D, d_model)
    assert w.W_q.shape == (d_model, H * D) and w.W_o.shape == (H * D, d_model)
    assert w.W_k.shape == w.W_v.shape == (d_model, Hkv * D)
    assert w.n_params == 2 * d_model * H * D + 2 * d_model * Hkv * D
    assert 0.8 / d_model < w.W_q.var() < 1.2 / d_model, "variance 1 / fan_in keeps activations at unit scale"
    again = init_weights(d_model, H, Hkv, seed=1)
    assert np.array_equal(w.W_k, again.W_k), "same seed, same weights"
    assert not np.array_equal(w.W_q, init_weights(d_model, H, Hkv, seed=2).W_q)


def test_init_weights_dtype():
    assert init_weights(8, 2, dtype=np.float32).W_v.dtype == np.float32


def test_project_qkv():
    w = init_weights(12, 3, 1, seed=0)
    x = np.random.default_rng(0).standard_normal((2, 5, 12))
    q, k, v = project_qkv(x, w)
    assert q.shape == (2, 3, 5, 4) and k.shape == v.shape == (2, 1, 5, 4)
    np.testing.assert_allclose(q[:, 1], x @ w.W_q[:, 4:8], **TOL)
    np.testing.assert_allclose(v[:, 0], x @ w.W_v, **TOL)


def per_head_oracle(x, w, mask=None, causal=False):
    """The layer written head by head with the loop oracle: head h uses K/V head h // G and its own column block."""
    H, Hkv, D = w.H, w.Hkv, w.D
    G = H // Hkv
    heads = []
    for h in range(H):
        g = h // G
        q = x @ w.W_q[:, h * D:(h + 1) * D]  # (..., T, D)
        k = x @ w.W_k[:, g * D:(g + 1) * D]
        v = x @ w.W_v[:, g * D:(g + 1) * D]
        m = None if mask is None else np.broadcast_to(mask, (*x.shape[:-2], H, x.shape[-2], x.shape[-2]))[..., h, :, :]
        heads.append(oracle.attention(q[..., None, :, :], k[..., None, :, :], v[..., None, :, :],
                                      None if m is None else m[..., None, :, :], causal=causal)[..., 0, :, :])
    return np.concatenate(heads, axis=-1) @ w.W_o  # (..., T, d_model)


@pytest.mark.parametrize("H, Hkv", [(4, 4), (4, 2), (6, 3), (3, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_layer_matches_per_head_oracle(H, Hkv, causal):
    d_model, T = 4 * H, 7
    w = init_weights(d_model, H, Hkv, seed=H + Hkv)
    x = np.random.default_rng(H).standard_normal((2, T, d_model))
    mask = padding_mask([7, 4], T)
    out, attn = multi_head_attention(x, w, mask, causal=causal, return_weights=True)
    assert out.shape == x.shape and attn.shape == (2, H, T, T)
    np.testing.assert_allclose(out, per_head_oracle(x, w, mask, causal), **TOL)
    np.testing.assert_allclose(attn.sum(axis=-1), 1.0, rtol=1e-12)
    if causal:
        assert np.all(attn[..., ~causal_mask(T)] == 0.0)


def test_layer_without_batch_axis():
    w = init_weights(8, 2, seed=0)
    x = np.random.default_rng(1).standard_normal((5, 8))
    np.testing.assert_allclose(multi_head_attention(x, w, causal=True), per_head_oracle(x, w, causal=True), **TOL)


@given(H=st.integers(1, 4), D=st.integers(1, 4), T=st.integers(1, 7), causal=st.booleans(), seed=seeds)
def test_gqa_with_hkv_equal_h_is_mha(H, D, T, causal, seed):
    """Hkv = H is plain multi-head attention: every head on its own, one independent attention per head.

    Passing Hkv = H explicitly or leaving the default builds the same layer with bit-identical outputs.
    """
    x = np.random.default_rng(seed).standard_normal((2, T, H * D))
    w = init_weights(H * D, H, H, seed=seed % 1000)
    out, attn = multi_head_attention(x, w, causal=causal, return_weights=True)
    assert np.array_equal(out, multi_head_attention(x, init_weights(H * D, H, seed=seed % 1000), causal=causal))
    q, k, v = project_qkv(x, w)
    for h in range(H):  # head h alone, as single-head attention
        _, alone = attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], causal=causal, return_weights=True)
        np.testing.assert_allclose(attn[:, h], alone[:, 0], **TOL)
    heads = [attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], causal=causal)[:, 0] for h in range(H)]  # (2, T, D)
    np.testing.assert_allclose(out, np.concatenate(heads, axis=-1) @ w.W_o, **TOL)


@given(T=st.integers(2, 8), hk=head_counts(), seed=seeds, data=st.data())
def test_layer_future_cannot_change_the_past(T, hk, seed, data):
    H, Hkv = hk
    w = init_weights(2 * H, H, Hkv, seed=seed % 1000)
    x = np.random.default_rng(seed).standard_normal((2, T, 2 * H))
    i = data.draw(st.integers(0, T - 2))
    x2 = x.copy()
    x2[:, i + 1:] = 10 * np.random.default_rng(seed + 1).standard_normal(x2[:, i + 1:].shape)
    before, after = multi_head_attention(x, w, causal=True), multi_head_attention(x2, w, causal=True)
    assert np.array_equal(before[:, : i + 1], after[:, : i + 1])
    assert not np.array_equal(before[:, i + 1:], after[:, i + 1:])


@given(batch=st.lists(st.integers(1, 2), max_size=2), T=st.integers(1, 9), hk=head_counts(), D=st.integers(1, 4),
       seed=seeds)
def test_incremental_decode_equals_full_causal_pass(batch, T, hk, D, seed):
    """Token-by-token decoding with a KV cache == one causal pass over the whole sequence.

    Equal to rtol = atol = 1e-12, not bit for bit: each decode step multiplies a single query row, and BLAS may sum a
    1-row matmul (and the 1-row projections) in a different order than the same row inside a T-row matmul, so the
    last bits can differ. The mathematics is identical; that is what this test checks.
    """
    H, Hkv = hk
    w = init_weights(H * D, H, Hkv, seed=seed % 997)
    x = np.random.default_rng(seed).standard_normal((*batch, T, H * D))
    full = multi_head_attention(x, w, causal=True)
    step_by_step = decode(x, w)
    assert step_by_step.shape == full.shape
    np.testing.assert_allclose(step_by_step, full, rtol=1e-12, atol=1e-12)


def test_decode_matches_oracle():
    w = init_weights(12, 6, 2, seed=5)
    x = np.random.default_rng(5).standard_normal((9, 12))
    np.testing.assert_allclose(decode(x, w), per_head_oracle(x, w, causal=True), **TOL)


def test_prefill_then_decode_steps():
    """A prompt of 5 tokens in one decode_step (chunked prefill), then one token at a time."""
    w = init_weights(8, 4, 2, seed=0)
    x = np.random.default_rng(2).standard_normal((3, 8, 8))
    cache = KVCache(w.Hkv, w.D, 8, batch_shape=(3,))
    parts = [decode_step(x[:, :5], w, cache)]
    assert cache.length == 5
    parts += [decode_step(x[:, t:t + 1], w, cache) for t in range(5, 8)]
    assert cache.length == 8
    np.testing.assert_allclose(np.concatenate(parts, axis=-2), multi_head_attention(x, w, causal=True), **TOL)


def test_kv_cache_holds_what_was_appended():
    cache = KVCache(Hkv=2, D=3, max_len=5)
    assert cache.length == 0 and cache.k.shape == (2, 0, 3) and cache.nbytes == 0
    g = np.random.default_rng(0)
    k1, v1 = g.standard_normal((2, 2, 3)), g.standard_normal((2, 2, 3))
    k2, v2 = g.standard_normal((2, 1, 3)), g.standard_normal((2, 1, 3))
    cache.append(k1, v1)
    cache.append(k2, v2)
    assert cache.length == 3 and cache.max_len == 5
    assert np.array_equal(cache.k, np.concatenate([k1, k2], axis=1))
    assert np.array_equal(cache.v, np.concatenate([v1, v2], axis=1))
    assert cache.nbytes == 2 * 2 * 3 * 3 * 8


def test_kv_cache_errors_when_full():
    cache = KVCache(1, 2, max_len=3)
    cache.append(np.zeros((1, 2, 2)), np.zeros((1, 2, 2)))
    with pytest.raises(ValueError, match=r"cache is full: 2 \+ 2 positions exceed max_len=3"):
        cache.append(np.zeros((1, 2, 2)), np.zeros((1, 2, 2)))
    assert cache.length == 2, "a refused append leaves the cache as it was"
    cache.append(np.ones((1, 1, 2)), np.ones((1, 1, 2)))
    with pytest.raises(ValueError, match="cache is full"):
        cache.append(np.zeros((1, 1, 2)), np.zeros((1, 1, 2)))


def test_decode_step_past_max_len_raises():
    w = init_weights(4, 2, seed=0)
    cache = KVCache(w.Hkv, w.D, max_len=2)
    x = np.ones((3, 4))
    decode_step(x[:1], w, cache)
    decode_step(x[1:2], w, cache)
    with pytest.raises(ValueError, match=r"cache is full: 2 \+ 1 positions exceed max_len=2"):
        decode_step(x[2:3], w, cache)
