"""Cost formulas: every FLOP formula against a direct count of the matmuls attnlab actually runs; memory numbers.

The direct count comes from :class:`FlopCounter`, an ndarray subclass that intercepts every ``np.matmul`` (and so
every ``@``) it takes part in and tallies its FLOPs. Inputs and weights are wrapped in it, so whatever attnlab does
inside, each of its matmuls has a counted operand. The counter itself is checked against a naive loop that counts
one multiply and one add per term.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlab import (
    AttentionWeights,
    GiB,
    KVCache,
    attention,
    attention_flops,
    causal_mask,
    causal_pairs,
    crossover_length,
    decode_step,
    decode_step_cost,
    format_bytes,
    init_weights,
    kv_cache_bytes,
    matmul_flops,
    multi_head_attention,
    projection_flops,
    score_bytes,
    tiled_attention,
)
from helpers import make_qkv


class FlopCounter(np.ndarray):
    """An ndarray that adds the FLOPs of every matmul it takes part in to ``FlopCounter.flops``."""

    flops = 0
    _lock = threading.Lock()  # attnlab may run blocks of rows on a thread pool

    @classmethod
    def wrap(cls, *arrays):
        cls.flops = 0
        return [np.asarray(a).view(cls) for a in arrays]

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = [np.asarray(x) if isinstance(x, FlopCounter) else x for x in inputs]
        if ufunc is np.matmul and method == "__call__":
            a, b = (np.shape(x) for x in plain)
            a2, b2 = (a if len(a) > 1 else (1, *a)), (b if len(b) > 1 else (*b, 1))  # 1-D operands, numpy's rules
            (m, k), (k2, n) = a2[-2:], b2[-2:]
            assert k == k2
            batch = math.prod(np.broadcast_shapes(a2[:-2], b2[:-2]))
            with FlopCounter._lock:
                FlopCounter.flops += batch * m * n * 2 * k  # m n outputs, each k multiplies and k adds
        if out is not None:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, FlopCounter) else o for o in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        if isinstance(result, tuple):
            return tuple(r.view(FlopCounter) if isinstance(r, np.ndarray) else r for r in result)
        return result.view(FlopCounter) if isinstance(result, np.ndarray) else result

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.dot, np.einsum, np.tensordot, np.inner, np.vdot, np.linalg.multi_dot):
            raise NotImplementedError(f"FlopCounter only counts np.matmul / @; teach it {func.__name__}")
        return super().__array_function__(func, types, args, kwargs)


def counting_loop_matmul(a, b):
    """Naive (m, k) @ (k, n): returns the product and the number of multiplies and adds actually performed."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    ops = 0
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for p in range(k):
                acc = acc + a[i, p] * b[p, j]
                ops += 2  # one multiply, one add
            out[i, j] = acc
    return out, ops


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (2, 3, 4), (5, 1, 3), (4, 7, 2)])
def test_matmul_flops_counts_multiplies_and_adds(m, k, n):
    g = np.random.default_rng(0)
    a, b = g.standard_normal((m, k)), g.standard_normal((k, n))
    product, ops = counting_loop_matmul(a, b)
    np.testing.assert_allclose(product, a @ b, rtol=1e-12)
    assert matmul_flops(m, k, n) == ops
    x, y = FlopCounter.wrap(a, b)
    np.testing.assert_allclose(x @ y, product, rtol=1e-12)
    assert FlopCounter.flops == ops, "the counter agrees with the loop"


def test_flop_counter_counts_batched_and_broadcast_matmuls():
    a, b = FlopCounter.wrap(np.ones((3, 1, 2, 5)), np.ones((4, 5, 6)))
    c = a @ b  # batch (3, 4) of (2, 5) @ (5, 6)
    assert c.shape == (3, 4, 2, 6)
    assert FlopCounter.flops == 12 * counting_loop_matmul(np.ones((2, 5)), np.ones((5, 6)))[1]
    before = FlopCounter.flops
    np.matmul(np.ones((2, 5)), b[0], out=np.empty((2, 6)))  # out= and a plain left operand are counted too
    assert FlopCounter.flops - before == 2 * 2 * 5 * 6


@pytest.mark.parametrize("batch, H, Hkv, T, S, D", [((), 1, 1, 1, 1, 1), ((2,), 4, 4, 5, 9, 3), ((3,), 6, 2, 7, 7, 4),
                                                    ((), 3, 1, 1, 113, 8)])
def test_attention_flops_equals_counted_flops(batch, H, Hkv, T, S, D):
    q, k, v = FlopCounter.wrap(*make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D))
    attention(q, k, v)
    assert FlopCounter.flops == math.prod(batch) * attention_flops(S, H * D, T=T)


@pytest.mark.parametrize("T, S", [(1, 1), (1, 9), (6, 6), (5, 12), (17, 17)])
def test_causal_attention_flops_equals_a_kernel_that_skips_every_masked_pair(T, S):
    """Tiled attention with 1 x 1 tiles computes exactly the allowed (query, key) pairs: its count is the formula."""
    H, D = 2, 3
    q, k, v = FlopCounter.wrap(*make_qkv(H=H, T=T, S=S, D=D))
    tiled_attention(q, k, v, causal=True, Br=1, Bc=1)
    assert FlopCounter.flops == attention_flops(S, H * D, T=T, causal=True)
    assert causal_pairs(T, S) == causal_mask(T, S).sum()


@pytest.mark.parametrize("Br, Bc", [(4, 4), (3, 5), (64, 64)])
def test_tiled_flops_lie_between_causal_and_full(Br, Bc):
    T = S = 20
    q, k, v = FlopCounter.wrap(*make_qkv(H=2, T=T, S=S, D=3))
    _, stats = tiled_attention(q, k, v, causal=True, Br=Br, Bc=Bc, return_stats=True)
    assert attention_flops(S, 6, causal=True) <= FlopCounter.flops <= attention_flops(S, 6)
    if stats.tiles_skipped:
        assert FlopCounter.flops < attention_flops(S, 6)


@pytest.mark.parametrize("H, Hkv", [(4, 4), (4, 2), (4, 1), (6, 3)])
def test_layer_flops_are_projections_plus_attention(H, Hkv):
    d_model, T = 4 * H, 9
    w = init_weights(d_model, H, Hkv, seed=0)
    Wq, Wk, Wv, Wo, x = FlopCounter.wrap(w.W_q, w.W_k, w.W_v, w.W_o, np.ones((2, T, d_model)))
    multi_head_attention(x, AttentionWeights(Wq, Wk, Wv, Wo, H, Hkv), causal=True)
    expected = 2 * (projection_flops(T, d_model, H=H, Hkv=Hkv) + attention_flops(T, d_model))
    assert FlopCounter.flops == expected
    # the projection formula is the sum over the actual weight shapes
    assert projection_flops(T, d_model, H=H, Hkv=Hkv) == sum(matmul_flops(T, *W.shape) for W in (Wq, Wk, Wv, Wo))


def test_projection_flops_mha_is_8_S_d_squared():
    assert projection_flops(1000, 512) == projection_flops(1000, 512, H=8) == 8 * 1000 * 512**2


@pytest.mark.parametrize("H, Hkv", [(4, 4), (4, 2), (4, 1)])
def test_decoding_costs_exactly_the_causal_count(H, Hkv):
    """T decode steps against a growing KV cache == projections for T tokens + causal attention over T."""
    d_model, T = 2 * H, 7
    w = init_weights(d_model, H, Hkv, seed=1)
    Wq, Wk, Wv, Wo, x = FlopCounter.wrap(w.W_q, w.W_k, w.W_v, w.W_o, np.random.default_rng(0).random((T, d_model)))
    weights = AttentionWeights(Wq, Wk, Wv, Wo, H, Hkv)
    cache = KVCache(Hkv, w.D, T)
    cache._k, cache._v = cache._k.view(FlopCounter), cache._v.view(FlopCounter)  # count the cached K and V too
    step_flops = []
    for t in range(T):
        before = FlopCounter.flops
        decode_step(x[t:t + 1], weights, cache)
        step_flops.append(FlopCounter.flops - before - projection_flops(1, d_model, H=H, Hkv=Hkv))
    assert step_flops == [decode_step_cost(t + 1, d_model=d_model, H=H, Hkv=Hkv)["flops"] for t in range(T)]
    assert sum(step_flops) == attention_flops(T, d_model, causal=True)


# --- crossover ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model, H, Hkv", [(4096, None, None), (4096, 32, 8), (4096, 32, 1), (768, 12, 12)])
def test_crossover_is_where_attention_meets_projections(d_model, H, Hkv):
    S = crossover_length(d_model, H=H, Hkv=Hkv)
    assert S == int(S)
    S = int(S)
    assert attention_flops(S, d_model) == projection_flops(S, d_model, H=H, Hkv=Hkv)
    assert attention_flops(S - 1, d_model) < projection_flops(S - 1, d_model, H=H, Hkv=Hkv)
    assert attention_flops(S + 1, d_model) > projection_flops(S + 1, d_model, H=H, Hkv=Hkv)


def test_crossover_mha_is_2_d_model_and_causal_twice_that():
    assert crossover_length(4096) == 8192
    assert crossover_length(4096, causal=True) == 16384


def test_causal_crossover_is_exact_up_to_the_diagonal():
    """Causal attention counts S(S+1)/2 pairs, not S²/2: at the crossover the two sides differ by the diagonal only."""
    d_model = 1024
    S = int(crossover_length(d_model, causal=True))
    att, proj = attention_flops(S, d_model, causal=True), projection_flops(S, d_model)
    # S(S+1)/2 = S²/2 + S/2 pairs: the S/2 extra pairs cost 4 d_model FLOPs each
    assert att - proj == S // 2 * 4 * d_model
    assert abs(att / proj - 1) <= 1 / S


# --- memory ---------------------------------------------------------------------------------------------------------


def test_score_matrix_of_32_heads_at_8k_is_4_gib():
    assert score_bytes(32, 8192) == 32 * 8192**2 * 2 == 4 * GiB
    assert format_bytes(score_bytes(32, 8192)) == "4 GiB"


def test_score_matrix_of_32_heads_at_32k_in_bf16_is_64_gib():
    assert score_bytes(32, 32768, dtype="bf16") == 64 * GiB
    assert format_bytes(score_bytes(32, 32768, dtype="bf16")) == "64 GiB"


def test_score_bytes_options():
    assert score_bytes(2, 10, T=3, batch=4, dtype="fp32") == 4 * 2 * 3 * 10 * 4
    assert score_bytes(1, 100, dtype=1) == 100 * 100
    assert score_bytes(1, 10, dtype="FP16") == score_bytes(1, 10, dtype="float16") == 200
    # it is the size of the array attention really builds
    q, k, v = make_qkv(batch=(2,), H=3, T=4, S=6, dtype=np.float32)
    _, w = attention(q, k, v, return_weights=True)
    assert w.nbytes == score_bytes(3, 6, T=4, batch=2, dtype="fp32")


@pytest.mark.parametrize("Hkv, expected", [(32, 2 * GiB), (8, GiB // 2), (1, 64 * 2**20)])
def test_kv_cache_bytes_mha_gqa_mqa(Hkv, expected):
    """A 32-layer model, 32 query heads of width 128, 4,096 tokens in bf16: MHA 2 GiB, GQA (8) 512 MiB, MQA 64 MiB."""
    assert kv_cache_bytes(4096, layers=32, Hkv=Hkv, D=128) == expected
    assert kv_cache_bytes(4096, layers=32, Hkv=Hkv, D=128, batch=3, dtype="fp32") == 3 * 2 * expected


@pytest.mark.parametrize("Hkv", [4, 2, 1])
def test_kv_cache_bytes_is_what_a_filled_cache_holds(Hkv):
    S, D = 10, 8
    cache = KVCache(Hkv, D, S, batch_shape=(2,), dtype=np.float16)
    cache.append(np.ones((2, Hkv, S, D)), np.ones((2, Hkv, S, D)))
    assert cache.nbytes == kv_cache_bytes(S, layers=1, Hkv=Hkv, D=D, batch=2, dtype="fp16")


@pytest.mark.parametrize("H, Hkv, dtype, intensity",
                         [(32, 32, "bf16", 1.0), (32, 8, "bf16", 4.0), (32, 1, "fp32", 16.0)])
def test_decode_step_cost(H, Hkv, dtype, intensity):
    S, d_model = 4096, 4096
    cost = decode_step_cost(S, d_model=d_model, H=H, Hkv=Hkv, dtype=dtype)
    assert cost["flops"] == 4 * S * d_model
    assert cost["bytes_read"] == kv_cache_bytes(S, layers=1, Hkv=Hkv, D=d_model // H, dtype=dtype)
    assert cost["intensity"] == intensity == 2 * H / Hkv / {"bf16": 2, "fp32": 4}[dtype]


@given(T=st.integers(1, 40), extra=st.integers(0, 40))
def test_causal_pairs_counts_the_mask(T, extra):
    S = T + extra
    assert causal_pairs(T, S) == int(causal_mask(T, S).sum())
    assert attention_flops(S, 8, T=T, causal=True) == 4 * 8 * int(causal_mask(T, S).sum())


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1, "1 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
                                     (1000 * 1024, "1000 KiB"), (3 * 2**20, "3 MiB"), (4 * GiB, "4 GiB"),
                                     (2.5 * 2**40, "2.5 TiB"), (2**50, "1 PiB"), (2**60, "1024 PiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text
