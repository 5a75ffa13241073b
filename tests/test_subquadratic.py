"""Sliding windows, sinks, linear attention and the recall task (notebook 08): each against an independent reference.

The window functions against the plain-loop oracle with an explicit mask; the recurrent linear attention against the
parallel form and both against a plain loop written here; the backward passes against central finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from attnlab import (
    attention,
    elu_feature,
    init_recall,
    linear_attention,
    linear_attention_backward,
    linear_attention_recurrent,
    linear_attention_step,
    recall_accuracy,
    recall_loss_and_grads,
    recall_task,
    sliding_window_mask,
    train_recall,
    window_attention,
    window_decode,
)
from helpers import finite_differences, head_counts, make_qkv, seeds

# --- the window mask --------------------------------------------------------------------------------------------------


@given(T=st.integers(1, 12), extra=st.integers(0, 5), window=st.integers(1, 14), sinks=st.integers(0, 4))
def test_window_mask_is_its_definition(T, extra, window, sinks):
    S = T + extra
    mask = sliding_window_mask(T, S, window, sinks=sinks)
    for r in range(T):
        i = S - T + r
        for j in range(S):
            assert mask[r, j] == (j <= i and (i - window < j or j < sinks))
    assert mask.sum(axis=1).max() <= window + sinks  # never more keys than the window and the sinks


def test_window_mask_without_sinks_is_unchanged():
    np.testing.assert_array_equal(sliding_window_mask(6, window=3), sliding_window_mask(6, window=3, sinks=0))


# --- window attention and the rolling buffer --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(hc=head_counts(), T=st.integers(1, 11), extra=st.integers(0, 4), window=st.integers(1, 13),
       sinks=st.integers(0, 3), Br=st.integers(1, 6), seed=seeds)
def test_window_attention_equals_the_oracle_with_the_mask(hc, T, extra, window, sinks, Br, seed):
    H, Hkv = hc
    S = T + extra
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=3, Dv=2, seed=seed)
    mask = sliding_window_mask(T, S, window, sinks=sinks)
    expected = oracle.attention(q, k, v, mask)
    out, stats = window_attention(q, k, v, window, sinks=sinks, Br=Br, return_stats=True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert stats.pairs_computed >= int(mask.sum())  # every allowed pair was computed ...
    assert stats.pairs_computed <= T * min(S, sinks + window + Br - 1)  # ... and no key beyond the block's reach


def test_window_attention_work_grows_with_the_window_not_the_length():
    for S in (64, 256):
        q, k, v = make_qkv(H=1, T=S, D=4, seed=S)
        _, stats = window_attention(q, k, v, 8, Br=8, return_stats=True)
        assert stats.pairs_computed <= S * (8 + 8 - 1)
        assert stats.max_block_elements <= 8 * (8 + 8 - 1)


@settings(max_examples=30, deadline=None)
@given(hc=head_counts(), T=st.integers(1, 12), window=st.integers(1, 8), sinks=st.integers(0, 3), seed=seeds)
def test_rolling_buffer_decode_equals_full_recomputation(hc, T, window, sinks, seed):
    H, Hkv = hc
    q, k, v = make_qkv(H=H, Hkv=Hkv, T=T, D=3, Dv=5, seed=seed)
    expected = oracle.attention(q, k, v, sliding_window_mask(T, window=window, sinks=sinks))
    np.testing.assert_allclose(window_decode(q, k, v, window, sinks=sinks), expected, rtol=1e-12, atol=1e-12)


def test_a_window_wider_than_the_sequence_is_causal_attention():
    q, k, v = make_qkv(H=2, T=7, D=4)
    np.testing.assert_allclose(window_attention(q, k, v, 50), attention(q, k, v, causal=True), atol=1e-14)
    np.testing.assert_allclose(window_decode(q, k, v, 50), attention(q, k, v, causal=True), atol=1e-14)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: window_attention(q, k, v, 0), "window must be >= 1, got 0"),
    (lambda q, k, v: window_attention(q, k, v, 2, sinks=-1), "sinks must be >= 0, got -1"),
    (lambda q, k, v: window_attention(q, k[..., :3, :], v[..., :3, :], 2), "T=5 queries cannot be the last"),
    (lambda q, k, v: window_decode(q, k[..., :4, :], v[..., :4, :], 2), "expected S == T=5, got S=4"),
    (lambda q, k, v: window_attention(q, k[..., :3], v, 2), "k has D=3 but q has D=4"),
])
def test_window_functions_name_what_is_wrong(call, message):
    q, k, v = make_qkv(H=1, T=5, D=4)
    with pytest.raises(ValueError, match=message):
        call(q, k, v)


# --- linear attention -------------------------------------------------------------------------------------------------


def plain_linear_attention(q, k, v, mask):
    """One head, float64 loops: out_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j) over the allowed j."""
    def phi(x):
        return [a + 1 if a > 0 else math.exp(a) for a in x]

    T, S, Dv = q.shape[0], k.shape[0], v.shape[1]
    out = np.zeros((T, Dv))
    for i in range(T):
        w = [math.fsum(a * b for a, b in zip(phi(q[i]), phi(k[j]))) if mask[i, j] else 0.0 for j in range(S)]
        total = math.fsum(w)
        if total > 0:
            out[i] = [math.fsum(w[j] * v[j, e] for j in range(S)) / total for e in range(Dv)]
    return out


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 8), extra=st.integers(0, 4), causal=st.booleans(), seed=seeds)
def test_linear_attention_equals_a_plain_loop(T, extra, causal, seed):
    S = T + extra
    q, k, v = make_qkv(H=1, T=T, S=S, D=3, Dv=2, seed=seed)
    mask = np.random.default_rng(seed).random((T, S)) < 0.7
    mask[0] = False  # a row with no allowed key
    if causal:
        mask &= sliding_window_mask(T, S, S)
    got = linear_attention(q, k, v, mask)
    np.testing.assert_allclose(got[0], plain_linear_attention(q[0], k[0], v[0], mask), rtol=1e-12, atol=1e-12)
    assert np.all(got[0, 0] == 0) and np.isfinite(got).all()


@settings(max_examples=30, deadline=None)
@given(hc=head_counts(), T=st.integers(1, 10), seed=seeds)
def test_recurrent_linear_attention_equals_the_parallel_form(hc, T, seed):
    H, Hkv = hc
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, D=3, Dv=4, seed=seed)
    np.testing.assert_allclose(linear_attention_recurrent(q, k, v), linear_attention(q, k, v, causal=True),
                               rtol=1e-12, atol=1e-12)


def test_linear_attention_is_causal_later_tokens_change_nothing_before_them():
    q, k, v = make_qkv(H=2, T=9, D=4, seed=3)
    k2, v2 = k.copy(), v.copy()
    k2[:, 5:] += 10.0
    v2[:, 5:] -= 3.0
    before = linear_attention_recurrent(q, k, v)[:, :5]
    np.testing.assert_array_equal(linear_attention_recurrent(q, k2, v2)[:, :5], before)


def test_the_state_has_a_fixed_size_whatever_the_length():
    D, Dv = 3, 2
    state, z = np.zeros((1, D, Dv)), np.zeros((1, D))
    rng = np.random.default_rng(0)
    for _ in range(50):
        _, state, z = linear_attention_step(state, z, *rng.standard_normal((2, 1, D)), rng.standard_normal((1, Dv)))
    assert state.shape == (1, D, Dv) and z.shape == (1, D)


def test_elu_feature_is_positive_and_continuous():
    x = np.linspace(-30, 30, 2001)
    f = elu_feature(x)
    assert np.all(f > 0)
    np.testing.assert_allclose(elu_feature(np.array([-1e-12, 0.0, 1e-12])), 1.0, atol=1e-11)


@pytest.mark.parametrize("H, Hkv, causal", [(1, 1, True), (2, 1, False), (4, 2, True)])
def test_linear_attention_backward_against_finite_differences(H, Hkv, causal):
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=5, S=7 if not causal else 5, D=3, Dv=2, seed=H)
    T, S = q.shape[-2], k.shape[-2]
    mask = np.ones((T, S), dtype=bool)
    mask[1] = False  # a dead row: zero output, zero gradient
    mask[3, 0] = False
    dout = np.random.default_rng(1).standard_normal((2, H, T, 2))

    def loss(q_, k_, v_):
        return float(np.sum(linear_attention(q_, k_, v_, mask, causal=causal) * dout))

    dq, dk, dv = linear_attention_backward(q, k, v, dout, mask, causal=causal)
    cases = ((dq, q, lambda x: loss(x, k, v)), (dk, k, lambda x: loss(q, x, v)), (dv, v, lambda x: loss(q, k, x)))
    for got, x, f in cases:
        numeric = finite_differences(f, x)
        assert np.abs(got - numeric).max() <= 1e-7 * max(np.abs(numeric).max(), 1.0)
    assert np.all(dq[:, :, 1] == 0)


def test_linear_attention_checks_its_arguments():
    q, k, v = make_qkv(H=2, T=4, D=3)
    with pytest.raises(ValueError, match="dout must have shape"):
        linear_attention_backward(q, k, v, np.zeros((2, 4, 2)))
    with pytest.raises(ValueError, match="v_t must have shape"):
        linear_attention_step(np.zeros((2, 3, 3)), np.zeros((2, 3)), q[:, 0], k[:, 0], v[:, 0, :2])
    with pytest.raises(ValueError, match="one key per query"):
        linear_attention_recurrent(q, k[:, :3], v[:, :3])
    with pytest.raises(ValueError, match="floating-point"):
        elu_feature(np.arange(3))


# --- the recall task and the recall models ----------------------------------------------------------------------------


@given(n=st.integers(1, 5), pairs=st.integers(1, 9), extra=st.integers(0, 5), seed=seeds)
def test_recall_task_asks_every_stored_pair_once(n, pairs, extra, seed):
    keys, values, queries, targets = recall_task(n, pairs, pairs + extra, 4, seed=seed)
    for b in range(n):
        assert len(set(keys[b].tolist())) == pairs  # distinct keys
        assert sorted(queries[b].tolist()) == sorted(keys[b].tolist())  # every key asked once
        stored = dict(zip(keys[b].tolist(), values[b].tolist()))
        assert [stored[q] for q in queries[b].tolist()] == targets[b].tolist()


def test_recall_task_checks_its_arguments():
    with pytest.raises(ValueError, match="pairs must be <= n_keys"):
        recall_task(2, 9, 8, 4)


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_recall_gradients_against_finite_differences(kind):
    models = init_recall(kind, 7, 5, seeds=(0, 1), d_model=4, D=3, Dv=2)
    ids = [a.reshape(2, 2, -1) for a in recall_task(4, 3, 7, 5, seed=2)]
    _, grads = recall_loss_and_grads(models, *ids)
    rng = np.random.default_rng(3)
    for name, p in models.params.items():
        for _ in range(3):
            idx = tuple(int(rng.integers(0, s)) for s in p.shape)
            old = p[idx]
            p[idx] = old + 1e-6
            up = recall_loss_and_grads(models, *ids)[0].sum()
            p[idx] = old - 1e-6
            down = recall_loss_and_grads(models, *ids)[0].sum()
            p[idx] = old
            numeric = (up - down) / 2e-6
            assert abs(grads[name][idx] - numeric) <= 1e-6 * max(1.0, abs(numeric)), name


def test_softmax_recall_learns_pairs_that_linear_attention_cannot_hold():
    test = recall_task(200, 16, 32, 16, seed=99)
    acc = {}
    for kind in ("softmax", "linear"):
        models = init_recall(kind, 32, 16, seeds=(0, 1), d_model=16, D=4)
        losses = train_recall(models, 16, 100, batch=16, lr=0.02)
        assert np.all(losses[:, -10:].mean(axis=1) < losses[:, :5].mean(axis=1))
        acc[kind] = recall_accuracy(models, *test)
    assert np.all(acc["softmax"] > 0.9)  # chance is 1/16
    assert np.all(acc["linear"] < 0.6)  # 16 pairs in a 4 x 16 state


def test_recall_models_check_their_arguments():
    with pytest.raises(ValueError, match="kind must be one of"):
        init_recall("cosine", 4, 4)
    models = init_recall("linear", 6, 4, seeds=(0, 1))
    with pytest.raises(ValueError, match=r"must have shape \(B, P\) or \(N=2, B, P\)"):
        recall_accuracy(models, *(a[None] for a in recall_task(3, 2, 6, 4)))
