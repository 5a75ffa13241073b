"""The backward passes: finite differences for every gradient, the float64 loop oracle, tiled == plain under every
mask and tile size, the log-sum-exp, float16, and the tiled backward's linear memory."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attnlab.backward
import oracle
from attnlab import (
    attention,
    attention_backward,
    causal_mask,
    combine_masks,
    document_mask,
    padding_mask,
    sliding_window_mask,
    softmax,
    softmax_backward,
    tiled_attention,
    tiled_attention_backward,
)
from helpers import finite_differences, head_counts, make_qkv, seeds

# The tiled tests run through both paths of the tiled passes (the `tiled_path` fixture, conftest.py); the tests of
# attention_backward choose its own fast path themselves.
TOL = dict(rtol=1e-11, atol=1e-12)  # float64 against float64: a few ulp times the number of terms
FD_RTOL = 1e-7  # central differences in float64: |error| / |gradient|, measured ~1e-9


def assert_close_relative(got, expected, rtol=FD_RTOL, what=""):
    """``|got - expected| <= rtol |expected|`` in the Euclidean norm (a zero gradient must be exactly zero)."""
    scale = np.linalg.norm(expected)
    err = np.linalg.norm(got - expected)
    assert err <= rtol * scale or (scale == 0 and err == 0), f"{what}: relative error {err / max(scale, 1e-300):.1e}"


def with_dead_rows(mask, shape):
    """``mask`` broadcast to ``shape (..., T, S)`` with the first query row of every head fully masked."""
    m = np.broadcast_to(True if mask is None else mask, shape).copy()
    m[..., 0, :] = False
    return m


# --- softmax ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, axis", [((1,), -1), ((5,), 0), ((3, 7), -1), ((4, 3, 5), 1), ((2, 3, 6), 0)])
def test_softmax_backward_matches_finite_differences(shape, axis):
    g = np.random.default_rng(len(shape) + shape[-1])
    x, dP = 3 * g.standard_normal(shape), g.standard_normal(shape)
    mask = g.random(shape) < 0.7
    for m in (None, mask):
        def loss(x_):
            return (np.moveaxis(softmax(np.moveaxis(x_, axis, -1), None if m is None else np.moveaxis(m, axis, -1)),
                                -1, axis) * dP).sum()
        P = np.moveaxis(softmax(np.moveaxis(x, axis, -1), None if m is None else np.moveaxis(m, axis, -1)), -1, axis)
        got = softmax_backward(P, dP, axis)
        assert got.shape == shape and got.dtype == np.float64
        assert_close_relative(got, finite_differences(loss, x), what=f"mask={m is not None}")


def test_softmax_backward_matches_the_jacobian_oracle(rng):
    x, dP = rng.standard_normal((6, 9)), rng.standard_normal((6, 9))
    mask = rng.random((6, 9)) < 0.6
    mask[2] = False  # a dead row
    P = softmax(x, mask)
    expected = np.array([oracle.softmax_backward_row(p, d) for p, d in zip(P.tolist(), dP.tolist())])
    got = softmax_backward(P, dP)
    np.testing.assert_allclose(got, expected, **TOL)
    assert np.all(got[~mask] == 0), "a masked score gets no gradient"
    assert np.all(got[2] == 0)


def test_softmax_backward_ignores_a_constant_added_to_dweights(rng):
    P, dP = softmax(rng.standard_normal((4, 7))), rng.standard_normal((4, 7))
    np.testing.assert_allclose(softmax_backward(P, dP + 5.0), softmax_backward(P, dP), atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_softmax_backward_keeps_dtype(dtype, rng):
    x, dP = rng.standard_normal((3, 50)), rng.standard_normal((3, 50))
    P = softmax(x)
    got = softmax_backward(P.astype(dtype), dP.astype(dtype))
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), softmax_backward(P, dP),
                               atol=2e-3 if dtype == np.float16 else 1e-6)


# --- attention_backward ----------------------------------------------------------------------------------------------

# (batch, H, Hkv, T, S, D, Dv): odd sizes, T != S, MHA / GQA / MQA, leading batch axes, Dv != D
SIZES = [
    pytest.param((), 1, 1, 1, 1, 2, 2, id="T=S=1"),
    pytest.param((), 1, 1, 3, 7, 3, 3, id="T<S"),
    pytest.param((), 1, 1, 6, 4, 3, 2, id="T>S,Dv!=D"),
    pytest.param((2,), 4, 2, 5, 6, 3, 3, id="GQA,batch"),
    pytest.param((2,), 3, 1, 4, 5, 2, 3, id="MQA,batch"),
    pytest.param((2, 1), 2, 2, 3, 5, 2, 2, id="batch(2,1)"),
]


def masks(B, H, T, S, seed):
    """Masks broadcastable to (B, H, T, S), each with fully masked (dead) rows, and none."""
    g = np.random.default_rng(seed)
    seg = np.sort(g.integers(0, 3, size=S))
    qseg = (seg[S - T:] if T <= S else np.r_[np.full(T - S, 1), seg]).copy()
    qseg[0] = 7  # the first query belongs to a document with no key: a dead row
    doc = document_mask(qseg, seg)
    pad = padding_mask(np.r_[0, g.integers(1, S + 1, size=B - 1)], S) if B > 1 else padding_mask([0], S)[0]
    per_head = with_dead_rows(g.random((B, H, T, S)) < 0.5, (B, H, T, S))
    return {"none": None, "padding (a sequence of length 0)": pad, "document": doc,
            "document+padding": combine_masks(doc, pad), "random per head": per_head}


def loss_fns(q, k, v, dout, mask, causal, scale=None):
    """The scalar ``sum(attention(...) * dout)`` as a function of each of q, k and v."""
    def f(q_=q, k_=k, v_=v):
        return float((attention(q_, k_, v_, mask, causal=causal, scale=scale) * dout).sum())
    return {"q": lambda x: f(q_=x), "k": lambda x: f(k_=x), "v": lambda x: f(v_=x)}


@pytest.mark.parametrize("batch, H, Hkv, T, S, D, Dv", SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_matches_finite_differences(batch, H, Hkv, T, S, D, Dv, causal):
    if causal and T > S:
        pytest.skip("causal needs T <= S")
    q, k, v = make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D, Dv=Dv, seed=T * S + H)
    dout = np.random.default_rng(1).standard_normal((*batch, H, T, Dv))
    grads = attention_backward(q, k, v, dout, causal=causal)
    for (name, f), x, got in zip(loss_fns(q, k, v, dout, None, causal).items(), (q, k, v), grads):
        assert got.shape == x.shape and got.dtype == np.float64
        assert_close_relative(got, finite_differences(f, x), what=name)


@pytest.mark.parametrize("kind", ["padding (a sequence of length 0)", "document", "document+padding",
                                  "random per head"])
@pytest.mark.parametrize("H, Hkv, T, S, causal", [(2, 2, 4, 6, False), (4, 2, 3, 5, True), (3, 1, 5, 4, False)])
def test_attention_backward_under_masks_with_dead_rows_matches_finite_differences(kind, H, Hkv, T, S, causal):
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=3, seed=H + T + S)
    dout = np.random.default_rng(2).standard_normal((2, H, T, 3))
    mask = masks(2, H, T, S, seed=T)[kind]
    dead = ~np.broadcast_to(mask & (causal_mask(T, S) if causal else True), (2, H, T, S)).any(-1)
    assert dead.any(), "the case must have a dead row"
    grads = attention_backward(q, k, v, dout, mask, causal=causal)
    for (name, f), x, got in zip(loss_fns(q, k, v, dout, mask, causal).items(), (q, k, v), grads):
        assert np.all(np.isfinite(got))
        assert_close_relative(got, finite_differences(f, x), what=name)
    assert np.all(grads[0][dead] == 0), "a dead row's dq is exactly zero"


def test_attention_backward_with_a_scale_and_two_dimensional_inputs():
    q, k, v = make_qkv(H=1, T=4, S=6, D=3, Dv=2)
    dout = np.random.default_rng(3).standard_normal((4, 2))
    mask = causal_mask(4, 6)
    grads = attention_backward(q[0], k[0], v[0], dout, mask, scale=0.7)
    assert [g.shape for g in grads] == [(4, 3), (6, 3), (6, 2)]
    for (name, f), x, got in zip(loss_fns(q[0], k[0], v[0], dout, mask, False, 0.7).items(), (q[0], k[0], v[0]), grads):
        assert_close_relative(got, finite_differences(f, x), what=name)


@pytest.mark.parametrize("batch, H, Hkv, T, S, D, Dv", SIZES)
def test_attention_backward_matches_the_loop_oracle(batch, H, Hkv, T, S, D, Dv):
    q, k, v = make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D, Dv=Dv, seed=T + S)
    dout = np.random.default_rng(4).standard_normal((*batch, H, T, Dv))
    for causal in [False, True] if T <= S else [False]:
        mask = with_dead_rows(None, (*batch, H, T, S))
        for got, expected in zip(attention_backward(q, k, v, dout, mask, causal=causal),
                                 oracle.attention_backward(q, k, v, dout, mask, causal=causal)):
            np.testing.assert_allclose(got, expected, **TOL)


@given(hk=head_counts(), T=st.integers(1, 6), S=st.integers(1, 7), D=st.integers(1, 4), Dv=st.integers(1, 3),
       B=st.integers(1, 2), causal=st.booleans(), masked=st.booleans(), seed=seeds)
def test_attention_backward_property_oracle_and_directional_derivative(hk, T, S, D, Dv, B, causal, masked, seed):
    """Over shapes: equal to the loop oracle, and ``<grad, u>`` equals the derivative of the loss along ``u``."""
    H, Hkv = hk
    if causal and T > S:
        T, S = S, T
    q, k, v = make_qkv(batch=(B,), H=H, Hkv=Hkv, T=T, S=S, D=D, Dv=Dv, seed=seed)
    g = np.random.default_rng(seed + 1)
    dout = g.standard_normal((B, H, T, Dv))
    mask = (g.random((B, H, T, S)) < 0.6) if masked else None
    grads = attention_backward(q, k, v, dout, mask, causal=causal)
    for got, expected in zip(grads, oracle.attention_backward(q, k, v, dout, mask, causal=causal)):
        np.testing.assert_allclose(got, expected, **TOL)
    u = [g.standard_normal(x.shape) for x in (q, k, v)]
    h = 1e-6

    def loss(t):
        return (attention(q + t * u[0], k + t * u[1], v + t * u[2], mask, causal=causal) * dout).sum()

    directional = (loss(h) - loss(-h)) / (2 * h)
    predicted = sum(float((gr * ui).sum()) for gr, ui in zip(grads, u))
    assert abs(directional - predicted) <= 1e-7 * (1 + sum(np.linalg.norm(gr) * np.linalg.norm(ui)
                                                            for gr, ui in zip(grads, u)))


@pytest.mark.parametrize("kind", ["none", "causal", "padding", "document+padding", "dead rows", "random per head"])
@pytest.mark.parametrize("H, Hkv, T, S", [(4, 4, 9, 9), (4, 2, 5, 9), (4, 1, 1, 9), (2, 1, 9, 13)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_fast_path_agrees_with_the_textbook_lines(monkeypatch, kind, H, Hkv, T, S, dtype):
    """attention_backward's blocked, multi-threaded path gives the textbook lines' gradients, to rounding, with
    blocks of a few query rows and whole heads; a 2-D single head included."""
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=3, Dv=2, seed=T * S, dtype=dtype)
    dout = np.random.default_rng(5).standard_normal((2, H, T, 2)).astype(dtype)
    mask, causal = make_mask(kind, 2, H, T, S, seed=T + S)
    tol = {np.float64: dict(rtol=1e-11, atol=1e-12), np.float32: dict(rtol=1e-5, atol=1e-5),
           np.float16: dict(rtol=0, atol=3e-3)}[dtype]  # float16: both round float32 results, an ulp apart
    monkeypatch.setattr(attnlab.backward, "FAST_PATH_MIN_SCORES", np.inf)
    textbook = attention_backward(q, k, v, dout, mask, causal=causal)
    one_textbook = attention_backward(q[0, 0], k[0, 0], v[0, 0], dout[0, 0], causal=causal)
    monkeypatch.setattr(attnlab.backward, "FAST_PATH_MIN_SCORES", 0)
    for block in (2 * S, 1 << 18):  # a block of a few query rows, and every row of a head in one block
        monkeypatch.setattr(attnlab.backward, "ROW_BLOCK_ELEMENTS", block)
        for got, expected in zip(attention_backward(q, k, v, dout, mask, causal=causal), textbook):
            assert got.dtype == expected.dtype == dtype and got.shape == expected.shape
            np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), **tol)
    for got, expected in zip(attention_backward(q[0, 0], k[0, 0], v[0, 0], dout[0, 0], causal=causal), one_textbook):
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), **tol)


@pytest.mark.parametrize("fast", [False, True])
def test_weights_kept_from_the_forward_give_the_same_gradients(monkeypatch, fast):
    monkeypatch.setattr(attnlab.backward, "FAST_PATH_MIN_SCORES", 0 if fast else np.inf)
    q, k, v = make_qkv(batch=(2,), H=4, Hkv=2, T=5, S=7, D=3, seed=1)
    dout = np.random.default_rng(2).standard_normal((2, 4, 5, 3))
    mask = with_dead_rows(None, (2, 4, 5, 7))
    _, P = attention(q, k, v, mask, causal=True, scale=0.7, return_weights=True)
    for got, expected in zip(attention_backward(q, k, v, dout, mask, causal=True, scale=0.7, weights=P),
                             attention_backward(q, k, v, dout, mask, causal=True, scale=0.7)):
        np.testing.assert_array_equal(got, expected)
    _, P1 = attention(q[0, 0], k[0, 0], v[0, 0], return_weights=True)
    for got, expected in zip(attention_backward(q[0, 0], k[0, 0], v[0, 0], dout[0, 0], weights=P1),
                             attention_backward(q[0, 0], k[0, 0], v[0, 0], dout[0, 0])):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match=r"weights must have shape \(2, 4, 5, 7\) \(the scores'.*got \(2, 4, 7, 5\)"):
        attention_backward(q, k, v, dout, weights=P.swapaxes(-1, -2))


def test_gqa_gradients_are_the_sums_over_each_group():
    """dk, dv of a shared head equal the sum of the gradients of its copies under repeat (np.repeat: h // G)."""
    q, k, v = make_qkv(batch=(2,), H=6, Hkv=2, T=4, S=5, D=3)
    dout = np.random.default_rng(5).standard_normal((2, 6, 4, 3))
    dq, dk, dv = attention_backward(q, k, v, dout, causal=True)
    dq_r, dk_r, dv_r = attention_backward(q, np.repeat(k, 3, axis=-3), np.repeat(v, 3, axis=-3), dout, causal=True)
    np.testing.assert_allclose(dq, dq_r, **TOL)
    np.testing.assert_allclose(dk, dk_r.reshape(2, 2, 3, 5, 3).sum(axis=2), **TOL)
    np.testing.assert_allclose(dv, dv_r.reshape(2, 2, 3, 5, 3).sum(axis=2), **TOL)


@pytest.mark.usefixtures("tiled_path")
def test_everything_masked_gives_zero_gradients_without_warnings():
    q, k, v = make_qkv(batch=(2,), H=2, T=3, S=4, D=2)
    dout = np.ones((2, 2, 3, 2))
    mask = np.zeros((3, 4), dtype=bool)
    forward = tiled_attention(q, k, v, mask, return_lse=True)
    for grads in (attention_backward(q, k, v, dout, mask),
                  tiled_attention_backward(q, k, v, forward.out, dout, forward.lse, mask, Br=2, Bc=3)):
        for gr in grads:
            assert np.all(gr == 0)


@pytest.mark.usefixtures("tiled_path")
def test_backward_leaves_its_inputs_unchanged():
    q, k, v = make_qkv(H=2, T=5, S=6, D=3)
    dout = np.random.default_rng(6).standard_normal((2, 5, 3))
    out, lse = tiled_attention(q, k, v, causal=True, return_lse=True)
    args = (q, k, v, out, dout, lse)
    copies = [a.copy() for a in args]
    attention_backward(q, k, v, dout, causal=True)
    tiled_attention_backward(*args, causal=True, Br=2, Bc=2)
    for a, c in zip(args, copies):
        assert np.array_equal(a, c)


# --- the tiled backward --------------------------------------------------------------------------------------------

MASK_KINDS = ["none", "causal", "padding", "document", "document+padding", "window", "dead rows", "random per head"]


def make_mask(kind, B, H, T, S, seed):
    """A mask of each kind (with the causal flag it needs) broadcastable to (B, H, T, S)."""
    g = np.random.default_rng(seed)
    lengths = g.integers(0, S + 1, size=B)
    seg = np.sort(g.integers(0, 3, size=S))
    qseg = seg[S - T:] if T <= S else np.r_[np.full(T - S, 9), seg]
    mask = {
        "none": None, "causal": None,
        "padding": padding_mask(lengths, S),
        "document": document_mask(qseg, seg),
        "document+padding": combine_masks(document_mask(qseg, seg), padding_mask(lengths, S)),
        "window": sliding_window_mask(T, S, int(g.integers(1, S + 1))) if T <= S else None,
        "dead rows": with_dead_rows(g.random((T, S)) < 0.5, (T, S)),
        "random per head": g.random((B, H, T, S)) < 0.3,
    }[kind]
    return mask, kind == "causal" or (kind == "window" and T <= S)


def check_tiled_equals_plain(q, k, v, dout, mask, causal, Br, Bc):
    out, lse = tiled_attention(q, k, v, mask, causal=causal, return_lse=True)
    got = tiled_attention_backward(q, k, v, out, dout, lse, mask, causal=causal, Br=Br, Bc=Bc)
    for g_, e in zip(got, attention_backward(q, k, v, dout, mask, causal=causal)):
        assert g_.shape == e.shape and g_.dtype == e.dtype
        np.testing.assert_allclose(g_, e, **TOL)


@pytest.mark.usefixtures("tiled_path")
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("T, S, Br, Bc", [
    (7, 13, 3, 5),    # neither tile divides T or S
    (9, 9, 1, 4),     # Br = 1
    (5, 11, 2, 64),   # Bc > S
    (1, 17, 4, 3),    # one query row
    (12, 12, 5, 1),   # Bc = 1
    (10, 6, 3, 4),    # T > S (no causal)
])
def test_tiled_backward_equals_plain_backward(kind, T, S, Br, Bc):
    q, k, v = make_qkv(batch=(2,), H=4, Hkv=2, T=T, S=S, D=3, Dv=2, seed=T * S)
    dout = np.random.default_rng(7).standard_normal((2, 4, T, 2))
    mask, causal = make_mask(kind, 2, 4, T, S, seed=T + S)
    if causal and T > S:
        pytest.skip("causal needs T <= S")
    check_tiled_equals_plain(q, k, v, dout, mask, causal, Br, Bc)


@pytest.mark.usefixtures("tiled_path")
@given(hk=head_counts(), T=st.integers(1, 10), extra=st.integers(0, 10), Br=st.integers(1, 12), Bc=st.integers(1, 12),
       kind=st.sampled_from(MASK_KINDS), causal=st.booleans(), seed=seeds)
def test_tiled_backward_equals_plain_under_every_mask(hk, T, extra, Br, Bc, kind, causal, seed):
    H, Hkv = hk
    S = T + extra
    q, k, v = make_qkv(batch=(2,), H=H, Hkv=Hkv, T=T, S=S, D=2, seed=seed)
    dout = np.random.default_rng(seed).standard_normal((2, H, T, 2))
    mask, kind_causal = make_mask(kind, 2, H, T, S, seed)
    check_tiled_equals_plain(q, k, v, dout, mask, causal or kind_causal, Br, Bc)


@pytest.mark.usefixtures("tiled_path")
def test_tiled_backward_two_dimensional_inputs_and_scale():
    q, k, v = make_qkv(H=1, T=6, S=10, D=4, Dv=3)
    q, k, v = q[0], k[0], v[0]
    dout = np.random.default_rng(8).standard_normal((6, 3))
    out, lse = tiled_attention(q, k, v, causal=True, scale=0.4, return_lse=True)
    assert out.shape == (6, 3) and lse.shape == (6,)
    got = tiled_attention_backward(q, k, v, out, dout, lse, causal=True, scale=0.4, Br=4, Bc=3)
    for g_, e in zip(got, oracle.attention_backward(q, k, v, dout, causal=True, scale=0.4)):
        np.testing.assert_allclose(g_, e, **TOL)


def count_computed_tiles(monkeypatch, *args, **kwargs):
    """Run the tiled backward and count the tiles it computes (each computed tile is masked exactly once)."""
    calls = []
    real = attnlab.backward.mask_inplace
    monkeypatch.setattr(attnlab.backward, "mask_inplace", lambda s, a: (calls.append(s.shape), real(s, a)))
    tiled_attention_backward(*args, **kwargs)
    return len(calls)


@pytest.mark.usefixtures("tiled_path")
@pytest.mark.parametrize("T, S, Br, Bc, kind", [(16, 16, 4, 4, "causal"), (9, 20, 2, 3, "causal"),
                                                (13, 13, 3, 5, "document"), (12, 12, 4, 4, "document+padding"),
                                                (8, 8, 2, 2, "none")])
def test_tiled_backward_skips_the_tiles_the_forward_skips(monkeypatch, T, S, Br, Bc, kind):
    q, k, v = make_qkv(H=1, T=T, S=S, D=2, seed=S)
    mask, causal = make_mask(kind, 1, 1, T, S, seed=3)
    mask = None if mask is None else np.broadcast_to(mask, (1, 1, T, S))[0]
    out, lse, stats = tiled_attention(q, k, v, mask, causal=causal, Br=Br, Bc=Bc, return_lse=True, return_stats=True)
    dout = np.ones_like(out)
    computed = count_computed_tiles(monkeypatch, q, k, v, out, dout, lse, mask, causal=causal, Br=Br, Bc=Bc)
    assert computed == stats.tiles_computed
    if kind != "none":
        assert stats.tiles_skipped > 0


@pytest.mark.usefixtures("tiled_path")
@pytest.mark.parametrize("H, Hkv", [(1, 1), (4, 1), (8, 8)])
def test_tiled_backward_on_every_core_is_exact_and_the_same_on_every_run(H, Hkv):
    """Large enough for the thread pool (>= 2^20 scores): blocks of keys of one head run on different cores."""
    T = S = 1024 if H == 1 else 384
    q, k, v = make_qkv(H=H, Hkv=Hkv, T=T, S=S, D=4, seed=H)
    dout = np.random.default_rng(10).standard_normal((H, T, 4))
    mask = with_dead_rows(causal_mask(T, S), (T, S))
    out, lse = tiled_attention(q, k, v, mask, return_lse=True)
    first = tiled_attention_backward(q, k, v, out, dout, lse, mask, Br=64, Bc=64)
    again = tiled_attention_backward(q, k, v, out, dout, lse, mask, Br=64, Bc=64)
    for a, b, e in zip(first, again, attention_backward(q, k, v, dout, mask)):
        assert np.array_equal(a, b), "the same inputs give the same bits"
        np.testing.assert_allclose(a, e, **TOL)


# --- the log-sum-exp ------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("tiled_path")
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_return_lse_is_the_log_sum_exp_of_the_allowed_scores(kind):
    T, S, D = 6, 9, 3
    q, k, v = make_qkv(batch=(2,), H=2, T=T, S=S, D=D, seed=11)
    q = 4 * q  # large scores: a naive log(sum(exp)) would still be fine here, the point is the exact value
    mask, causal = make_mask(kind, 2, 2, T, S, seed=5)
    out, lse = tiled_attention(q, k, v, mask, causal=causal, Br=4, Bc=4, return_lse=True)
    assert lse.shape == (2, 2, T) and lse.dtype == np.float64
    np.testing.assert_array_equal(out, tiled_attention(q, k, v, mask, causal=causal, Br=4, Bc=4))
    allowed = np.broadcast_to(True if mask is None else mask, (2, 2, T, S)) & (causal_mask(T, S) if causal else True)
    for idx in np.ndindex(2, 2, T):
        scores = [math.fsum(q[idx][d] * k[idx[0], idx[1], j, d] for d in range(D)) / math.sqrt(D)
                  for j in range(S) if allowed[idx][j]]
        if not scores:
            assert lse[idx] == -np.inf, "a row with no allowed key: the log of an empty sum"
            continue
        m = max(scores)
        assert lse[idx] == pytest.approx(m + math.log(math.fsum(math.exp(s - m) for s in scores)), rel=1e-13, abs=1e-13)


@pytest.mark.usefixtures("tiled_path")
def test_return_lse_with_stats_and_in_float16():
    q, k, v = make_qkv(H=2, T=5, S=7, D=4, dtype=np.float16)
    out, lse, stats = tiled_attention(q, k, v, causal=True, Br=2, Bc=3, return_lse=True, return_stats=True)
    assert out.dtype == np.float16 and lse.dtype == np.float32, "the log-sum-exp is kept in the compute dtype"
    assert stats.tiles_total == 3 * 3
    _, lse64 = tiled_attention(*(a.astype(np.float64) for a in (q, k, v)), causal=True, return_lse=True)
    np.testing.assert_allclose(lse, lse64, rtol=1e-5)


# --- float16 and float32 --------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("tiled_path")
@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-2), (np.float32, 2e-5)])
@pytest.mark.parametrize("causal", [False, True])
def test_low_precision_gradients_keep_dtype_and_are_accurate(dtype, tol, causal):
    q, k, v = make_qkv(batch=(2,), H=4, Hkv=2, T=12, S=20, D=8, seed=9)
    dout = np.random.default_rng(9).standard_normal((2, 4, 12, 8))
    mask = with_dead_rows(padding_mask([20, 13], 20), (2, 4, 12, 20))
    lo = [a.astype(dtype) for a in (q, k, v, dout)]
    exact = oracle.attention_backward(*(a.astype(np.float64) for a in lo), mask, causal=causal)
    out, lse = tiled_attention(*lo[:3], mask, causal=causal, return_lse=True)
    for grads in (attention_backward(*lo, mask, causal=causal),
                  tiled_attention_backward(*lo[:3], out, lo[3], lse, mask, causal=causal, Br=5, Bc=7)):
        for got, e in zip(grads, exact):
            assert got.dtype == dtype and np.all(np.isfinite(got))
            assert np.abs(got.astype(np.float64) - e).max() <= tol * np.abs(e).max()


def test_each_gradient_has_the_dtype_of_its_input():
    q, k, v = make_qkv(H=2, T=3, S=4, D=2)
    dout = np.ones((2, 3, 2), dtype=np.float32)
    dq, dk, dv = attention_backward(q.astype(np.float32), k, v.astype(np.float16), dout)
    assert (dq.dtype, dk.dtype, dv.dtype) == (np.float32, np.float64, np.float16)


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


@pytest.mark.usefixtures("tiled_path")
def test_tiled_backward_memory_grows_linearly_plain_backward_quadratically():
    """S -> 4S: the tiled backward holds O(S) (the gradients, a pair of tiles per core), the plain one the S² weights.

    The tiled pass is measured at S = 1024 and 4096, both large enough for the thread pool (2^20 scores and more), so
    that both hold the same per-core buffers; the plain pass at S = 128 and 512, both below its fast path's
    ``FAST_PATH_MIN_SCORES``, so that both run the textbook lines (the fast path's peak depends on how its threads
    happen to overlap).
    """
    tiles = {"Br": 64, "Bc": 64}  # a fixed tile, so that the tile itself does not grow with S

    def inputs(S):
        q, k, v = make_qkv(H=1, T=S, D=8, seed=S)
        out, lse = tiled_attention(q, k, v, causal=True, return_lse=True)
        return q, k, v, out, np.ones_like(out), lse

    s128, s512, s1024, s4096 = inputs(128), inputs(512), inputs(1024), inputs(4096)
    assert 512 * 512 < attnlab.backward.FAST_PATH_MIN_SCORES
    tiled_large = peak_bytes(tiled_attention_backward, *s4096, causal=True, **tiles)
    tiled_ratio = tiled_large / peak_bytes(tiled_attention_backward, *s1024, causal=True, **tiles)
    plain_large = peak_bytes(attention_backward, *s512[:3], s512[4], causal=True)
    plain_ratio = plain_large / peak_bytes(attention_backward, *s128[:3], s128[4], causal=True)
    assert tiled_ratio < 6, f"tiled backward peak grew {tiled_ratio:.1f}x for 4x longer sequences"
    assert plain_ratio > 8, f"plain backward peak grew only {plain_ratio:.1f}x: are the weights not held whole?"
    assert plain_large >= 512 * 512 * 8, "the plain backward holds the whole float64 (T, S) weights"
    # and in absolute terms the tiled backward never holds anything close to the S x S scores
    assert tiled_large < 4096 * 4096 * 8 / 32
