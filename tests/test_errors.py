"""Bad input: every public function raises ValueError with a message naming what it expected and what it got.

One test per case (a row of ``CASES``). Each message is matched literally, so a vaguer message fails the test.
``test_every_public_name_has_a_bad_input_case`` keeps the table honest: a new public function without a row fails it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import attnlab
from attnlab import (
    AttentionWeights,
    KVCache,
    attention,
    attention_backward,
    attention_flops,
    causal_mask,
    causal_pairs,
    combine_masks,
    crossover_length,
    decode,
    decode_step,
    decode_step_cost,
    document_mask,
    format_bytes,
    init_weights,
    kv_cache_bytes,
    matmul_flops,
    merge_heads,
    multi_head_attention,
    online_softmax,
    online_softmax_stats,
    padding_mask,
    plot,
    position_ids,
    project_qkv,
    projection_flops,
    repeat_kv,
    score_bytes,
    sliding_window_mask,
    softmax,
    softmax_backward,
    split_heads,
    tiled_attention,
    tiled_attention_backward,
)
from attnlab.widgets import explorer

# public names that take no input: a constant, and the record tiled_attention returns
NOTHING_TO_CHECK = {"GiB", "TiledStats"}


def f(*shape):
    """A float64 array of ones."""
    return np.ones(shape)


def i(*shape):
    """An int64 array of ones."""
    return np.ones(shape, dtype=np.int64)


W = init_weights(8, 4, 2, seed=0)  # d_model 8, H 4, Hkv 2, D 2


def cache_with(length, max_len=3):
    cache = KVCache(1, 2, max_len)
    for _ in range(length):
        cache.append(f(1, 1, 2), f(1, 1, 2))
    return cache


CASES = [
    # softmax
    ("softmax", lambda: softmax(np.arange(4)),
     "scores must be a floating-point array (float16/32/64), got dtype int64"),
    ("softmax", lambda: softmax(f(2, 4), f(2, 4)),
     "mask must be a boolean array with True = may attend, got dtype float64"),
    ("softmax", lambda: softmax(f(2, 4), np.ones(3, bool)), "mask of shape (3,) does not broadcast to (2, 4)"),
    ("softmax", lambda: softmax(f(2, 4), axis=2), "axis must be in [-2, 2) for scores of shape (2, 4), got 2"),
    ("softmax", lambda: softmax(np.float64(3.0)), "scores must have at least 1 dimension(s), got shape ()"),
    ("softmax", lambda: softmax([[1.0, 2.0], [3.0]]), "scores must be a floating-point array, got list"),
    # masks
    ("causal_mask", lambda: causal_mask(0), "T must be >= 1, got 0"),
    ("causal_mask", lambda: causal_mask(5, 3),
     "T=5 queries cannot be the last T positions of S=3 keys; expected T <= S"),
    ("causal_mask", lambda: causal_mask(2.5), "T must be an integer, got 2.5"),
    ("causal_mask", lambda: causal_mask(True), "T must be an integer, got True"),
    ("sliding_window_mask", lambda: sliding_window_mask(4, window=0), "window must be >= 1, got 0"),
    ("sliding_window_mask", lambda: sliding_window_mask(4, 2, window=2),
     "T=4 queries cannot be the last T positions of S=2 keys; expected T <= S"),
    ("padding_mask", lambda: padding_mask([2, -1], 4), "lengths must be >= 0, got -1"),
    ("padding_mask", lambda: padding_mask([2, 5], 4), "lengths must be <= S=4, got 5"),
    ("padding_mask", lambda: padding_mask([2.0, 3.0], 4),
     "lengths must be a 1-D integer array (one length per sequence), got float64 of shape (2,)"),
    ("padding_mask", lambda: padding_mask(3, 4),
     "lengths must be a 1-D integer array (one length per sequence), got int64 of shape ()"),
    ("padding_mask", lambda: padding_mask([2, 3], 4, side="middle"),
     "side must be \"right\" or \"left\", got 'middle'"),
    ("padding_mask", lambda: padding_mask([2], 0), "S must be >= 1, got 0"),
    ("position_ids", lambda: position_ids([1], 3, side="top"), "side must be \"right\" or \"left\", got 'top'"),
    ("position_ids", lambda: position_ids([-2], 3), "lengths must be >= 0, got -2"),
    ("position_ids", lambda: position_ids([4], 3), "lengths must be <= S=3, got 4"),
    ("document_mask", lambda: document_mask([0.0, 1.0]),
     "segment_ids must be an integer array of shape (..., T), got float64 of shape (2,)"),
    ("document_mask", lambda: document_mask([[0, 1]], [[0, 1], [1, 1]]),
     "kv_segment_ids batch shape (2,) does not match segment_ids batch shape (1,)"),
    ("document_mask", lambda: document_mask(np.int64(3)),
     "segment_ids must be an integer array of shape (..., T), got int64 of shape ()"),
    ("combine_masks", lambda: combine_masks(), "combine_masks needs at least one mask, got none"),
    ("combine_masks", lambda: combine_masks(None, None), "combine_masks needs at least one mask, got none"),
    ("combine_masks", lambda: combine_masks(causal_mask(3), np.ones((3, 3))),
     "mask 1 must be a boolean array with True = may attend, got dtype float64"),
    ("combine_masks", lambda: combine_masks(causal_mask(3), causal_mask(4)),
     "masks of shapes (3, 3), (4, 4) do not broadcast together"),
    # attention
    ("attention", lambda: attention(f(2, 4, 3, 64), f(2, 4, 7, 32), f(2, 4, 7, 32)), "k has D=32 but q has D=64"),
    ("attention", lambda: attention(f(6, 3, 8), f(4, 5, 8), f(4, 5, 8)), "H=6 is not a multiple of Hkv=4"),
    ("attention", lambda: attention(f(2, 4, 3, 8), f(2, 2, 7, 8), f(2, 2, 7, 8), np.ones((3, 5), bool)),
     "mask of shape (3, 5) does not broadcast to (2, 4, 3, 7)"),
    ("attention", lambda: attention(f(1, 3, 4), f(1, 5, 4), f(1, 5, 4), np.ones((2, 3, 5), bool)),
     "mask of shape (2, 3, 5) does not broadcast to (1, 3, 5)"),
    ("attention", lambda: attention(f(3, 4), f(6, 4), f(6, 4), np.ones((3, 3), bool)),
     "mask of shape (3, 3) does not broadcast to (3, 6)"),
    ("attention", lambda: attention(i(2, 3, 4), f(2, 5, 4), f(2, 5, 4)),
     "q must be a floating-point array (float16/32/64), got dtype int64"),
    ("attention", lambda: attention(f(2, 3, 4), i(2, 5, 4), f(2, 5, 4)),
     "k must be a floating-point array (float16/32/64), got dtype int64"),
    ("attention", lambda: attention(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4).astype(complex)),
     "v must be a floating-point array (float16/32/64), got dtype complex128"),
    ("attention", lambda: attention(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), np.ones((3, 5))),
     "mask must be a boolean array with True = may attend, got dtype float64"),
    ("attention", lambda: attention(f(2, 5, 4), f(2, 3, 4), f(2, 3, 4), causal=True),
     "T=5 queries cannot be the last T positions of S=3 keys; expected T <= S"),
    ("attention", lambda: attention(f(2, 1, 3, 4), f(3, 1, 5, 4), f(3, 1, 5, 4)),
     "batch shape of k (3,) does not match batch shape of q (2,)"),
    ("attention", lambda: attention(f(2, 3, 4), f(2, 5, 4), f(2, 6, 4)),
     "v of shape (2, 6, 4) must match k of shape (2, 5, 4) in all but the last axis (S and Hkv)"),
    ("attention", lambda: attention(f(2, 3, 4), f(2, 5, 4), f(1, 5, 4)),
     "v of shape (1, 5, 4) must match k of shape (2, 5, 4) in all but the last axis (S and Hkv)"),
    ("attention", lambda: attention(f(2, 3, 4), f(2, 5, 4), f(5, 4)),
     "q, k and v must have the same number of dimensions, got shapes (2, 3, 4), (2, 5, 4), (5, 4)"),
    ("attention", lambda: attention(f(4), f(4), f(4)), "q must have at least 2 dimension(s), got shape (4,)"),
    ("attention", lambda: attention(f(2, 0, 4), f(2, 5, 4), f(2, 5, 4)),
     "T, S and D must be >= 1, got q (2, 0, 4) and k (2, 5, 4)"),
    ("attention", lambda: attention(f(3, 4), f(5, 4), f(5, 4), scale=0),
     "scale must be a positive finite number, got 0"),
    ("attention", lambda: attention(f(3, 4), f(5, 4), f(5, 4), scale=-0.5),
     "scale must be a positive finite number, got -0.5"),
    ("attention", lambda: attention(f(3, 4), f(5, 4), f(5, 4), scale=float("nan")),
     "scale must be a positive finite number, got nan"),
    ("attention", lambda: attention(f(3, 4), f(5, 4), f(5, 4), scale=np.inf),
     "scale must be a positive finite number, got inf"),
    ("attention", lambda: attention(f(3, 4), f(5, 4), f(5, 4), scale="0.5"),
     "scale must be a positive finite number, got '0.5'"),
    ("repeat_kv", lambda: repeat_kv(f(4, 5, 2), 6), "H=6 is not a multiple of Hkv=4"),
    ("repeat_kv", lambda: repeat_kv(f(2, 5, 2), 0), "H must be >= 1, got 0"),
    ("repeat_kv", lambda: repeat_kv(f(5, 2), 2), "x must have at least 3 dimension(s), got shape (5, 2)"),
    ("repeat_kv", lambda: repeat_kv(i(1, 5, 2), 2),
     "x must be a floating-point array (float16/32/64), got dtype int64"),
    # online softmax and tiled attention
    ("online_softmax", lambda: online_softmax(f(5), block_size=0), "block_size must be >= 1, got 0"),
    ("online_softmax", lambda: online_softmax(np.arange(5)), "x must be a floating-point array (float16/32/64)"),
    ("online_softmax_stats", lambda: online_softmax_stats(f(5), block_size=-3), "block_size must be >= 1, got -3"),
    ("online_softmax_stats", lambda: online_softmax_stats(f(5), block_size=1.5),
     "block_size must be an integer, got 1.5"),
    ("tiled_attention", lambda: tiled_attention(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), Br=0), "Br must be >= 1, got 0"),
    ("tiled_attention", lambda: tiled_attention(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), Bc=0), "Bc must be >= 1, got 0"),
    ("tiled_attention", lambda: tiled_attention(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), Bc=-2), "Bc must be >= 1, got -2"),
    ("tiled_attention", lambda: tiled_attention(f(2, 5, 4), f(2, 3, 4), f(2, 3, 4), causal=True),
     "T=5 queries cannot be the last T positions of S=3 keys; expected T <= S"),
    ("tiled_attention", lambda: tiled_attention(f(2, 4, 3, 64), f(2, 4, 7, 32), f(2, 4, 7, 32)),
     "k has D=32 but q has D=64"),
    ("tiled_attention", lambda: tiled_attention(f(6, 3, 8), f(4, 5, 8), f(4, 5, 8)), "H=6 is not a multiple of Hkv=4"),
    ("tiled_attention", lambda: tiled_attention(f(2, 4, 3, 8), f(2, 2, 7, 8), f(2, 2, 7, 8), np.ones((3, 5), bool)),
     "mask of shape (3, 5) does not broadcast to (2, 4, 3, 7)"),
    ("tiled_attention", lambda: tiled_attention(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), np.ones((2, 3, 5), int)),
     "mask must be a boolean array with True = may attend, got dtype int64"),
    ("tiled_attention", lambda: tiled_attention(f(3, 4), f(5, 4), f(5, 4), scale=0),
     "scale must be a positive finite number, got 0"),
    ("tiled_attention", lambda: tiled_attention(i(3, 4), f(5, 4), f(5, 4)), "q must be a floating-point array"),
    # backward passes
    ("softmax_backward", lambda: softmax_backward(i(2, 4), f(2, 4)),
     "weights must be a floating-point array (float16/32/64), got dtype int64"),
    ("softmax_backward", lambda: softmax_backward(f(2, 4), i(2, 4)),
     "dweights must be a floating-point array (float16/32/64), got dtype int64"),
    ("softmax_backward", lambda: softmax_backward(f(2, 4), f(2, 3)),
     "dweights must have the shape of weights (2, 4), got (2, 3)"),
    ("softmax_backward", lambda: softmax_backward(f(2, 4), f(4)),
     "dweights must have the shape of weights (2, 4), got (4,)"),
    ("softmax_backward", lambda: softmax_backward(f(2, 4), f(2, 4), axis=2),
     "axis must be an integer in [-2, 2) for weights of shape (2, 4), got 2"),
    ("softmax_backward", lambda: softmax_backward(f(2, 4), f(2, 4), axis=1.0),
     "axis must be an integer in [-2, 2) for weights of shape (2, 4), got 1.0"),
    ("attention_backward", lambda: attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 6), f(2, 3, 4)),
     "dout must have shape (2, 3, 6) (the output's: q's (..., H, T) and v's Dv), got (2, 3, 4)"),
    ("attention_backward", lambda: attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), i(2, 3, 4)),
     "dout must be a floating-point array (float16/32/64), got dtype int64"),
    ("attention_backward", lambda: attention_backward(f(2, 3, 64), f(2, 5, 32), f(2, 5, 4), f(2, 3, 4)),
     "k has D=32 but q has D=64"),
    ("attention_backward", lambda: attention_backward(f(6, 3, 8), f(4, 5, 8), f(4, 5, 8), f(6, 3, 8)),
     "H=6 is not a multiple of Hkv=4"),
    ("attention_backward", lambda: attention_backward(f(2, 5, 4), f(2, 3, 4), f(2, 3, 4), f(2, 5, 4), causal=True),
     "T=5 queries cannot be the last T positions of S=3 keys; expected T <= S"),
    ("attention_backward", lambda: attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                      np.ones((3, 3), bool)),
     "mask of shape (3, 3) does not broadcast to (2, 3, 5)"),
    ("attention_backward", lambda: attention_backward(f(3, 4), f(5, 4), f(5, 4), f(3, 4), np.ones((3, 5))),
     "mask must be a boolean array with True = may attend, got dtype float64"),
    ("attention_backward", lambda: attention_backward(f(3, 4), f(5, 4), f(5, 4), f(3, 4), scale=0),
     "scale must be a positive finite number, got 0"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 3, 4), f(2, 3, 1)),
     "lse must have shape (2, 3) (q's (..., H, T): one log-sum-exp per query row), got (2, 3, 1)"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 3, 4), i(2, 3)),
     "lse must be a floating-point array (float16/32/64), got dtype int64"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 2), f(2, 3, 4),
                                                                  f(2, 3, 2), f(2, 3)),
     "out must have shape (2, 3, 2) (the output's: q's (..., H, T) and v's Dv), got (2, 3, 4)"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 4, 4), f(2, 3)),
     "dout must have shape (2, 3, 4) (the output's: q's (..., H, T) and v's Dv), got (2, 4, 4)"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), i(2, 3, 4),
                                                                  f(2, 3, 4), f(2, 3)),
     "out must be a floating-point array (float16/32/64), got dtype int64"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 3, 4), f(2, 3), Br=0),
     "Br must be >= 1, got 0"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 3, 4), f(2, 3), Bc=2.5),
     "Bc must be an integer, got 2.5"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 5, 4), f(2, 3, 4), f(2, 3, 4), f(2, 5, 4),
                                                                  f(2, 5, 4), f(2, 5), causal=True),
     "T=5 queries cannot be the last T positions of S=3 keys; expected T <= S"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 4), f(2, 5, 4), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 3, 4), f(2, 3), np.ones((2, 5, 5), bool)),
     "mask of shape (2, 5, 5) does not broadcast to (2, 3, 5)"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(2, 3, 64), f(2, 5, 32), f(2, 5, 4), f(2, 3, 4),
                                                                  f(2, 3, 4), f(2, 3)),
     "k has D=32 but q has D=64"),
    ("tiled_attention_backward", lambda: tiled_attention_backward(f(3, 4), f(5, 4), f(5, 4), f(3, 4), f(3, 4), f(3),
                                                                  scale=-1.0),
     "scale must be a positive finite number, got -1.0"),
    # heads
    ("split_heads", lambda: split_heads(f(5, 10), 3), "last axis of x (10) is not a multiple of H=3"),
    ("split_heads", lambda: split_heads(f(5, 10), 0), "H must be >= 1, got 0"),
    ("split_heads", lambda: split_heads(f(10), 2), "x must have at least 2 dimension(s), got shape (10,)"),
    ("split_heads", lambda: split_heads(i(5, 10), 2),
     "x must be a floating-point array (float16/32/64), got dtype int64"),
    ("merge_heads", lambda: merge_heads(f(5, 4)), "x must have at least 3 dimension(s), got shape (5, 4)"),
    ("merge_heads", lambda: merge_heads(i(2, 5, 4)),
     "x must be a floating-point array (float16/32/64), got dtype int64"),
    ("init_weights", lambda: init_weights(10, 3), "d_model=10 is not a multiple of H=3"),
    ("init_weights", lambda: init_weights(12, 6, 4), "H=6 is not a multiple of Hkv=4"),
    ("init_weights", lambda: init_weights(0, 1), "d_model must be >= 1, got 0"),
    ("init_weights", lambda: init_weights(8, 2, dtype=np.int32),
     "dtype must be a floating-point type (float16/32/64), got <class 'numpy.int32'>"),
    ("AttentionWeights", lambda: AttentionWeights(W.W_q, W.W_k, W.W_v, W.W_o, H=4, Hkv=3),
     "H=4 is not a multiple of Hkv=3"),
    ("AttentionWeights", lambda: AttentionWeights(W.W_q, W.W_q, W.W_v, W.W_o, H=4, Hkv=2),
     "W_k must have shape (8, 4) (d_model=8, H=4, Hkv=2, D=2), got (8, 8)"),
    ("AttentionWeights", lambda: AttentionWeights(W.W_q, W.W_k, W.W_v, W.W_o.T[:4], H=4, Hkv=2),
     "W_o must have shape (8, 8) (d_model=8, H=4, Hkv=2, D=2), got (4, 8)"),
    ("AttentionWeights", lambda: AttentionWeights(W.W_q[:, :6], W.W_k, W.W_v, W.W_o, H=4, Hkv=2),
     "W_q must have shape (d_model, H * D) with H=4, got (8, 6)"),
    ("AttentionWeights", lambda: AttentionWeights(W.W_q.astype(int), W.W_k, W.W_v, W.W_o, H=4, Hkv=2),
     "W_q must be a floating-point array (float16/32/64), got dtype int64"),
    ("AttentionWeights", lambda: AttentionWeights(W.W_q, W.W_k, W.W_v, W.W_o, H=0, Hkv=2), "H must be >= 1, got 0"),
    ("project_qkv", lambda: project_qkv(f(5, 7), W), "x has d_model=7 but the weights expect d_model=8"),
    ("project_qkv", lambda: project_qkv(f(5, 8), {"W_q": W.W_q}),
     "weights must be an AttentionWeights (see init_weights), got dict"),
    ("project_qkv", lambda: project_qkv(i(5, 8), W),
     "x must be a floating-point array (float16/32/64), got dtype int64"),
    ("multi_head_attention", lambda: multi_head_attention(f(2, 3, 8), W, np.ones((5, 5), bool)),
     "mask of shape (5, 5) does not broadcast to (2, 4, 3, 3)"),
    ("multi_head_attention", lambda: multi_head_attention(f(2, 3, 8), W, np.ones((3, 3))),
     "mask must be a boolean array with True = may attend, got dtype float64"),
    ("multi_head_attention", lambda: multi_head_attention(f(3, 6), W),
     "x has d_model=6 but the weights expect d_model=8"),
    ("multi_head_attention", lambda: multi_head_attention(f(8), W),
     "x must have at least 2 dimension(s), got shape (8,)"),
    ("KVCache", lambda: KVCache(0, 2, 3), "Hkv must be >= 1, got 0"),
    ("KVCache", lambda: KVCache(1, 2, 0), "max_len must be >= 1, got 0"),
    ("KVCache", lambda: KVCache(1, 2, 3, batch_shape=(2, -1)), "each entry of batch_shape must be >= 1, got -1"),
    ("KVCache", lambda: KVCache(1, 2, 3, dtype=int),
     "dtype must be a floating-point type (float16/32/64), got <class 'int'>"),
    ("KVCache", lambda: cache_with(0).append(f(1, 1, 3), f(1, 1, 3)),
     "k_new must have shape (1, 1, 2) to fit this cache, got (1, 1, 3)"),
    ("KVCache", lambda: cache_with(0).append(f(1, 1, 2), f(1, 2, 2)),
     "v_new must have shape (1, 1, 2) to fit this cache, got (1, 2, 2)"),
    ("KVCache", lambda: cache_with(0).append(i(1, 1, 2), f(1, 1, 2)),
     "k_new must be a floating-point array (float16/32/64), got dtype int64"),
    ("KVCache", lambda: cache_with(3).append(f(1, 1, 2), f(1, 1, 2)),
     "cache is full: 3 + 1 positions exceed max_len=3"),
    ("decode_step", lambda: decode_step(f(1, 8), W, None), "cache must be a KVCache, got NoneType"),
    ("decode_step", lambda: decode_step(f(1, 8), W, KVCache(1, 2, 4)),
     "k_new must have shape (1, 1, 2) to fit this cache, got (2, 1, 2)"),
    ("decode_step", lambda: decode_step(f(1, 6), W, KVCache(2, 2, 4)),
     "x has d_model=6 but the weights expect d_model=8"),
    ("decode", lambda: decode(f(3, 6), W), "x has d_model=6 but the weights expect d_model=8"),
    ("decode", lambda: decode(f(3, 8), "weights"), "weights must be an AttentionWeights (see init_weights), got str"),
    ("decode", lambda: decode(i(3, 8), W), "x must be a floating-point array (float16/32/64), got dtype int64"),
    # cost
    ("matmul_flops", lambda: matmul_flops(0, 2, 3), "m must be >= 1, got 0"),
    ("matmul_flops", lambda: matmul_flops(1, -2, 3), "k must be >= 1, got -2"),
    ("matmul_flops", lambda: matmul_flops(1, 2, 3.0), "n must be an integer, got 3.0"),
    ("causal_pairs", lambda: causal_pairs(5, 3), "expected T <= S, got T=5, S=3"),
    ("causal_pairs", lambda: causal_pairs(0, 3), "T must be >= 1, got 0"),
    ("attention_flops", lambda: attention_flops(3, 64, T=5, causal=True), "expected T <= S, got T=5, S=3"),
    ("attention_flops", lambda: attention_flops(0, 64), "S must be >= 1, got 0"),
    ("attention_flops", lambda: attention_flops(8, 64, T=-1), "T must be >= 1, got -1"),
    ("projection_flops", lambda: projection_flops(8, 10, H=3),
     "need d_model % H == 0 and H % Hkv == 0, got d_model=10, H=3, Hkv=3"),
    ("projection_flops", lambda: projection_flops(8, 12, H=6, Hkv=4),
     "need d_model % H == 0 and H % Hkv == 0, got d_model=12, H=6, Hkv=4"),
    ("projection_flops", lambda: projection_flops(8, 12, H=0), "H must be >= 1, got 0"),
    ("crossover_length", lambda: crossover_length(0), "d_model must be >= 1, got 0"),
    ("crossover_length", lambda: crossover_length(100, H=3),
     "need d_model % H == 0 and H % Hkv == 0, got d_model=100, H=3, Hkv=3"),
    ("score_bytes", lambda: score_bytes(32, 8192, dtype="fp4"),
     "dtype must be one of ['bf16', 'bfloat16', 'float16', 'float32', 'fp16', 'fp32', 'fp8', 'int8'] or a byte count, "
     "got 'fp4'"),
    ("score_bytes", lambda: score_bytes(32, 8192, dtype=0), "dtype (bytes per element) must be >= 1, got 0"),
    ("score_bytes", lambda: score_bytes(0, 8192), "H must be >= 1, got 0"),
    ("score_bytes", lambda: score_bytes(32, 8192, batch=0), "batch must be >= 1, got 0"),
    ("kv_cache_bytes", lambda: kv_cache_bytes(1024, layers=0, Hkv=8, D=128), "layers must be >= 1, got 0"),
    ("kv_cache_bytes", lambda: kv_cache_bytes(1024, layers=32, Hkv=-8, D=128), "Hkv must be >= 1, got -8"),
    ("kv_cache_bytes", lambda: kv_cache_bytes(1024, layers=32, Hkv=8, D=128, dtype="int4"),
     "dtype must be one of ['bf16', "),
    ("decode_step_cost", lambda: decode_step_cost(1024, d_model=100, H=3),
     "need d_model % H == 0 and H % Hkv == 0, got d_model=100, H=3, Hkv=3"),
    ("decode_step_cost", lambda: decode_step_cost(1024, d_model=64, H=8, Hkv=3),
     "need d_model % H == 0 and H % Hkv == 0, got d_model=64, H=8, Hkv=3"),
    ("decode_step_cost", lambda: decode_step_cost(0, d_model=64, H=8), "S must be >= 1, got 0"),
    ("format_bytes", lambda: format_bytes(-1), "n must be a non-negative number of bytes, got -1"),
    ("format_bytes", lambda: format_bytes(float("nan")), "n must be a non-negative number of bytes, got nan"),
    ("format_bytes", lambda: format_bytes(float("inf")), "n must be a non-negative number of bytes, got inf"),
    ("format_bytes", lambda: format_bytes("4096"), "n must be a non-negative number of bytes, got '4096'"),
    ("format_bytes", lambda: format_bytes(True), "n must be a non-negative number of bytes, got True"),
    # plots and explorers (not in attnlab.__all__, but public in their modules)
    ("plot.heatmap", lambda: plot.heatmap(f(2, 3, 4)), "heatmap needs a 2-D matrix, got shape (2, 3, 4)"),
    ("plot.mask_heatmap", lambda: plot.mask_heatmap(f(3, 3)),
     "mask_heatmap needs a 2-D boolean mask, got float64 of shape (3, 3)"),
    ("plot.loglog", lambda: plot.loglog([1, 2, 3], {"y": [1, 2]}), "series 'y' has shape (2,) but x has shape (3,)"),
    ("plot.loglog", lambda: plot.loglog([1, 2, 3], {"y": [0, 1, 2]}),
     "series 'y' must be positive on log axes, got min 0.0"),
    ("plot.loglog", lambda: plot.loglog([0, 1, 2], {"y": [1, 1, 2]}), "x must be positive on log axes, got min 0.0"),
    ("widgets.explorer", lambda: explorer("draw", n=(1, 3)), "draw must be a function of the control values, got str"),
]


@pytest.mark.parametrize("call, message", [pytest.param(c, m, id=f"{name}: {m[:60]}") for name, c, m in CASES])
def test_bad_input(call, message, close_figures):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
    assert close_figures.get_fignums() == [], "a refused plot leaves no half-drawn figure behind"


def test_every_public_name_has_a_bad_input_case():
    covered = {name for name, _, _ in CASES}
    missing = set(attnlab.__all__) - NOTHING_TO_CHECK - covered
    assert not missing, f"no bad-input test for {sorted(missing)}"
    assert NOTHING_TO_CHECK <= set(attnlab.__all__)


def test_valid_input_right_next_to_each_boundary_is_accepted():
    """The checks reject exactly the bad values: the nearest good ones pass."""
    assert causal_mask(3, 3).shape == (3, 3)
    assert padding_mask([0, 4], 4).shape == (2, 1, 1, 4)
    assert online_softmax(f(5), block_size=1).shape == (5,)
    assert tiled_attention(f(2, 3, 4), f(2, 3, 4), f(2, 3, 4), causal=True, Br=1, Bc=1).shape == (2, 3, 4)
    assert softmax_backward(f(2, 4), f(2, 4), axis=-2).shape == (2, 4)
    assert [g.shape for g in attention_backward(f(3, 4), f(3, 4), f(3, 2), f(3, 2), causal=True)] == [(3, 4), (3, 4),
                                                                                                       (3, 2)]
    assert tiled_attention_backward(f(2, 3, 4), f(2, 3, 4), f(2, 3, 4), f(2, 3, 4), f(2, 3, 4), f(2, 3), causal=True,
                                    Br=1, Bc=1)[0].shape == (2, 3, 4)
    assert attention(f(3, 4), f(5, 4), f(5, 4), scale=1e-300).shape == (3, 4)
    assert score_bytes(1, 1, dtype=1) == 1 and format_bytes(0) == "0 B"
    assert init_weights(6, 3, 1).Hkv == 1 and repeat_kv(f(1, 2, 2), 1).shape == (1, 2, 2)
