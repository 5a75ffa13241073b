"""The trainable model: every backward against central finite differences in float64, Adam on a quadratic, KV-cache
generation against full passes, and a tiny training run that must learn to copy."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from attnlab import (
    Adam,
    AttentionWeights,
    attention_layer,
    attention_layer_backward,
    copy_task,
    cross_entropy,
    generate,
    init_model,
    loss_and_grads,
    model_forward,
    multi_head_attention,
    train,
    train_many,
)


def rel_error(a, b) -> float:
    """``|a - b| / max(|a|, |b|)`` over the whole array: the gradient check's measure."""
    return float(np.abs(a - b).max() / max(np.abs(a).max(), np.abs(b).max(), 1e-300))


def numerical_grad(f, x, eps=1e-6):
    """Central finite differences of the scalar ``f()`` with respect to every entry of ``x`` (edited in place)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        up = f()
        x[idx] = old - eps
        down = f()
        x[idx] = old
        g[idx] = (up - down) / (2 * eps)
    return g


def layer_weights(d_model, H, Hkv, D, seed):
    g = np.random.default_rng(seed)
    return AttentionWeights(g.normal(size=(d_model, H * D)), g.normal(size=(d_model, Hkv * D)),
                            g.normal(size=(d_model, Hkv * D)), g.normal(size=(H * D, d_model)), H, Hkv)


DEAD_ROW = np.tril(np.ones((5, 5), dtype=bool))
DEAD_ROW[2] = False  # query 2 may attend to nothing: zero output, zero gradient


@pytest.mark.parametrize("H, Hkv, mask, causal, scale", [
    (3, 3, None, True, None),          # multi-head, causal
    (3, 1, None, True, 0.7),           # multi-query, another scale
    (2, 1, DEAD_ROW, False, None),     # a row with no allowed key
    (2, 2, np.arange(5)[None, :] <= np.arange(5)[:, None] + 1, False, 1.0),  # the off-by-one mask, unscaled
])
def test_attention_layer_backward_matches_finite_differences(H, Hkv, mask, causal, scale):
    g = np.random.default_rng(1)
    x = g.normal(size=(2, 5, 7))  # B=2, T=5, d_model=7 (odd, and not H * D)
    w = layer_weights(7, H, Hkv, 3, seed=2)
    dy = g.normal(size=(2, 5, 7))

    def loss():
        return float(np.sum(attention_layer(x, w, mask, causal=causal, scale=scale) * dy))

    dx, grads = attention_layer_backward(x, w, dy, mask, causal=causal, scale=scale)
    assert rel_error(dx, numerical_grad(loss, x)) < 1e-7
    for name in ("W_q", "W_k", "W_v", "W_o"):
        assert grads[name].shape == getattr(w, name).shape
        assert rel_error(grads[name], numerical_grad(loss, getattr(w, name))) < 1e-7, name
    if mask is DEAD_ROW:
        assert np.all(np.isfinite(dx))


def test_attention_layer_is_the_library_layer():
    g = np.random.default_rng(3)
    x, w = g.normal(size=(2, 6, 8)), layer_weights(8, 4, 2, 2, seed=4)
    np.testing.assert_allclose(attention_layer(x, w), multi_head_attention(x, w, causal=True), rtol=1e-13)
    _, attn = attention_layer(x, w, return_weights=True)
    assert attn.shape == (2, 4, 6, 6) and np.allclose(attn.sum(-1), 1) and not np.triu(attn[0, 0], 1).any()


def test_cross_entropy_value_and_gradient():
    g = np.random.default_rng(5)
    logits = g.normal(size=(3, 4, 7))
    targets = g.integers(0, 7, size=(3, 4))
    loss, dlogits = cross_entropy(logits, targets)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = -np.log(np.take_along_axis(p, targets[..., None], -1)).mean()
    assert loss == pytest.approx(expected, rel=1e-13)
    assert rel_error(dlogits, numerical_grad(lambda: cross_entropy(logits, targets)[0], logits)) < 1e-7
    np.testing.assert_allclose(dlogits.sum(-1), 0, atol=1e-15)  # softmax minus one-hot sums to 0 in every row


def test_cross_entropy_is_finite_for_a_certain_mistake():
    loss, dlogits = cross_entropy(np.array([[1000.0, 0.0]]), np.array([1]))
    assert loss == pytest.approx(1000.0) and np.all(np.isfinite(dlogits))


@pytest.mark.parametrize("kwargs", [
    dict(H=2, Hkv=1, n_layers=2, scale=0.6),                    # two layers, multi-query, another scale
    dict(H=3, n_layers=1, learned_positions=False, D=3),        # fixed positions get no gradient
])
def test_whole_model_gradient_matches_finite_differences(kwargs):
    model = init_model(5, 7, d_model=6, seed=6, **kwargs)
    tokens = np.array([[1, 3, 3, 0, 4], [2, 2, 2, 1, 0]])  # repeated tokens: their gradients must add up
    targets = np.array([[3, 3, 0, 4, 1], [2, 2, 1, 0, 4]])
    loss, grads = loss_and_grads(model, tokens, targets)
    assert loss == pytest.approx(cross_entropy(model_forward(model, tokens), targets)[0], rel=1e-14)
    expected = set(model.params) - set(model.frozen)
    assert set(grads) == expected
    for name in expected:
        numeric = numerical_grad(lambda: loss_and_grads(model, tokens, targets)[0], model.params[name])
        assert rel_error(grads[name], numeric) < 1e-7, name
    if "pos" in model.frozen:
        assert "pos" not in grads


def test_gradient_under_a_user_mask_matches_finite_differences():
    model = init_model(5, 6, d_model=4, H=2, n_layers=2, seed=7)
    tokens, targets = np.array([[1, 2, 3, 4, 0, 1]]), np.array([[2, 3, 4, 0, 1, 2]])
    mask = np.arange(6)[None, :] <= np.arange(6)[:, None] + 1  # off by one: sees one token ahead
    loss, grads = loss_and_grads(model, tokens, targets, mask, causal=False)
    for name in ("layers.0.W_k", "layers.1.W_q", "embed"):
        numeric = numerical_grad(lambda: loss_and_grads(model, tokens, targets, mask, causal=False)[0],
                                 model.params[name])
        assert rel_error(grads[name], numeric) < 1e-7, name


def test_adam_first_step_and_convergence_on_a_quadratic():
    a, c = np.array([1.0, 10.0, 0.1]), np.array([1.0, -2.0, 3.0])
    params = {"x": np.zeros(3)}
    opt = Adam(lr=0.1)
    opt.step(params, {"x": a * (params["x"] - c)})
    # the first bias-corrected step is lr * g / |g|: every coordinate moves by lr towards c, whatever its curvature
    np.testing.assert_allclose(params["x"], 0.1 * np.sign(c), rtol=1e-6)
    for _ in range(2000):
        opt.step(params, {"x": a * (params["x"] - c)})
    np.testing.assert_allclose(params["x"], c, atol=1e-3)
    assert opt.t == 2001


def test_adam_matches_the_update_written_out():
    g1, g2 = np.array([0.5, -2.0]), np.array([1.5, 1.0])
    params = {"x": np.array([1.0, 1.0])}
    opt = Adam(lr=0.01, betas=(0.8, 0.9), eps=1e-3)
    opt.step(params, {"x": g1})
    opt.step(params, {"x": g2})
    x = np.array([1.0, 1.0])
    m = v = 0.0
    for t, g in ((1, g1), (2, g2)):
        m, v = 0.8 * m + 0.2 * g, 0.9 * v + 0.1 * g * g
        x = x - 0.01 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.9**t)) + 1e-3)
    np.testing.assert_allclose(params["x"], x, rtol=1e-14)


@pytest.mark.parametrize("kwargs", [dict(H=2, Hkv=1, n_layers=2), dict(H=2, scale=1.0), dict(H=1, D=5, scale=0.05)])
def test_kv_cache_generation_equals_full_passes(kwargs):
    model = init_model(9, 12, d_model=8, seed=8, **kwargs)
    prompt = np.random.default_rng(9).integers(0, 9, size=(4, 3))
    cached = generate(model, prompt, 9)
    assert cached.shape == (4, 12) and np.array_equal(cached[:, :3], prompt)
    assert np.array_equal(cached, generate(model, prompt, 9, use_cache=False))


def test_training_learns_to_copy():
    """A tiny model (L = 4, vocab 8) copies 95% of the tokens right after 150 steps with this seed; the loss falls to
    near its floor, the entropy of the random first half."""
    L, V = 4, 8
    model = init_model(V, 2 * L, d_model=16, H=2, learned_positions=False, seed=0)
    losses = train(model, lambda step: copy_task(16, L, V, seed=100 + step), 150, lr=0.02)
    tokens, _ = copy_task(100, L, V, seed=1)
    out = generate(model, tokens[:, :L + 1], L)
    accuracy = (out[:, L + 1:] == tokens[:, :L]).mean()
    floor = (L - 1) / (2 * L) * np.log(V - 1)  # only x_1 .. x_{L-1} are unpredictable
    assert accuracy >= 0.95
    assert losses[-10:].mean() < floor + 0.15 < losses[:10].mean()


def test_train_returns_snapshots():
    model = init_model(4, 4, d_model=4, H=1, seed=0)
    losses, snaps = train(model, lambda step: copy_task(2, 2, 4, seed=step), 5, snapshot_every=2)
    assert losses.shape == (5,) and [s for s, _ in snaps] == [0, 2, 4, 5]
    assert np.array_equal(snaps[-1][1].params["W_out"], model.params["W_out"])
    assert not np.array_equal(snaps[0][1].params["W_out"], model.params["W_out"])


def test_copy_task_layout():
    tokens, targets = copy_task(3, 4, 6, seed=2)
    assert tokens.shape == targets.shape == (3, 8)
    assert np.array_equal(tokens[:, 1:], targets[:, :-1])
    assert np.all(tokens[:, 4] == 0) and np.array_equal(tokens[:, 5:], tokens[:, :3])
    assert np.array_equal(targets[:, 4:], tokens[:, :4]) and tokens[:, :4].min() >= 1


@pytest.mark.parametrize("kwargs, mask, causal", [
    (dict(H=2), None, True),
    (dict(H=2, Hkv=1, n_layers=2), None, True),
    (dict(H=1, D=12), np.arange(8)[None, :] <= np.arange(8)[:, None] + 1, False),  # the off-by-one mask
    (dict(H=2, learned_positions=True), None, True),  # trained positions get a gradient too
])
def test_train_many_equals_train_on_each_model(kwargs, mask, causal):
    """Stacked training is train() on every model: different seeds, scales, learning rates and batches per model."""
    kwargs = {"learned_positions": False, **kwargs}
    models = [init_model(7, 8, d_model=8, seed=s, **kwargs) for s in range(3)]
    models[1].scale = 1.0  # an unscaled model in the same stack
    alone = [m.copy() for m in models]
    lrs = [0.02, 0.01, 0.005]

    def batch(step, s):
        return copy_task(4, 4, 7, seed=100 * s + step)

    def stacked(step):
        per_model = [batch(step, s) for s in range(3)]
        return np.stack([t for t, _ in per_model]), np.stack([y for _, y in per_model])

    losses, snaps = train_many(models, stacked, 6, lr=lrs, mask=mask, causal=causal, snapshot_every=3)
    assert losses.shape == (3, 6) and [step for step, _ in snaps] == [0, 3, 6]
    for s, (m, a) in enumerate(zip(models, alone)):
        expected = train(a, lambda step: batch(step, s), 6, lr=lrs[s], mask=mask, causal=causal)
        np.testing.assert_allclose(losses[s], expected, rtol=1e-12)
        for name, p in a.params.items():
            np.testing.assert_allclose(m.params[name], p, rtol=1e-9, atol=1e-12)
            np.testing.assert_array_equal(snaps[-1][1][s].params[name], m.params[name])
        assert snaps[0][1][s].scale == m.scale and not np.array_equal(snaps[0][1][s].params["W_out"], m.params["W_out"])


def test_train_many_shares_one_batch_and_checks_its_inputs():
    models = [init_model(5, 6, d_model=4, H=1, seed=s) for s in range(2)]
    losses = train_many(models, lambda step: copy_task(3, 3, 5, seed=step), 2)  # (B, T): one batch for both
    assert losses.shape == (2, 2) and not np.allclose(losses[0], losses[1])
    with pytest.raises(ValueError, match="non-empty list"):
        train_many([], lambda step: copy_task(3, 3, 5), 2)
    with pytest.raises(ValueError, match="differs from models\\[0\\]"):
        train_many([models[0], init_model(5, 6, d_model=4, H=2, seed=0)], lambda step: copy_task(3, 3, 5), 2)
    with pytest.raises(ValueError, match="lr must be a positive number or 2"):
        train_many(models, lambda step: copy_task(3, 3, 5), 2, lr=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="tokens must have shape \\(N=2, B, T\\)"):
        train_many(models, lambda step: tuple(np.stack([a] * 3) for a in copy_task(3, 3, 5)), 2)
    with pytest.raises(ValueError, match="batches must be a function"):
        train_many(models, None, 2)
