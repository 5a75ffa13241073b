"""The one preparation of q, k, v and mask that attention, tiled attention and both backward passes share."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab import attention, attention_backward, causal_mask, tiled_attention, tiled_attention_backward
from attnlab._qkv import QKV, prepare_qkv
from helpers import make_qkv


def test_shapes_scale_and_dtype_of_a_grouped_query_call():
    q, k, v = make_qkv(batch=(3,), H=6, Hkv=2, T=4, S=9, D=5, Dv=7, dtype=np.float16)
    p = prepare_qkv(q, k, v)
    assert isinstance(p, QKV) and not p.one_head and not p.causal and p.mask is None
    assert (p.H, p.Hkv, p.G, p.T, p.S, p.D, p.Dv) == (6, 2, 3, 4, 9, 5, 7)
    assert p.scale == pytest.approx(1 / np.sqrt(5)) and p.dtype == np.float32  # float16 is computed in float32
    assert p.n_scores == 3 * 6 * 4 * 9
    assert p.q is q and p.k is k and p.v is v  # nothing is copied


def test_a_two_dimensional_call_gains_a_head_axis_and_restore_removes_it():
    q, k, v = make_qkv(H=1, T=3, S=5)
    p = prepare_qkv(q[0], k[0], v[0], causal_mask(3, 5), scale=0.5)
    assert p.one_head and p.q.shape == (1, 3, 4) and p.scale == 0.5
    assert p.restore(np.zeros((1, 3, 4))).shape == (3, 4)
    assert p.check_like_out(np.zeros((3, 4)), "dout").shape == (1, 3, 4)
    with pytest.raises(ValueError, match=r"dout must have shape \(3, 4\)"):
        p.check_like_out(np.zeros((1, 3, 4)), "dout")  # the caller's shape is the 2-D one
    with pytest.raises(ValueError, match=r"mask of shape \(1, 3, 5\) does not broadcast to \(3, 5\)"):
        prepare_qkv(q[0], k[0], v[0], np.ones((1, 3, 5), dtype=bool))


@pytest.mark.parametrize("causal", [False, True])
def test_allowed_folds_the_causal_mask_into_the_users_and_grouped_mask_views_it_per_kv_head(causal):
    q, k, v = make_qkv(batch=(2,), H=4, Hkv=2, T=3, S=5)
    user = np.random.default_rng(0).random((2, 4, 3, 5)) < 0.7
    p = prepare_qkv(q, k, v, user, causal=causal)
    assert p.mask is user  # the user's mask alone: tiled passes do the causal part per tile
    expected = user & causal_mask(3, 5) if causal else user
    assert np.array_equal(np.broadcast_to(p.allowed(), (2, 4, 3, 5)), expected)
    grouped = p.grouped_mask(p.allowed())
    assert grouped.shape == (2, 2, 2, 3, 5)
    assert np.array_equal(grouped[:, 1, 0], expected[:, 2])  # query head 2 is head 0 of K/V head 1's group
    assert prepare_qkv(q, k, v).allowed() is None and prepare_qkv(q, k, v).grouped_mask(None) is None


@pytest.mark.parametrize("call", [
    lambda q, k, v, **kw: attention(q, k, v, **kw),
    lambda q, k, v, **kw: tiled_attention(q, k, v, **kw),
    lambda q, k, v, **kw: attention_backward(q, k, v, np.zeros((2, 5, 4)), **kw),
    lambda q, k, v, **kw: tiled_attention_backward(q, k, v, np.zeros((2, 5, 4)), np.zeros((2, 5, 4)),
                                                   np.zeros((2, 5)), **kw),
], ids=["attention", "tiled_attention", "attention_backward", "tiled_attention_backward"])
@pytest.mark.parametrize("kwargs, message", [
    ({"scale": -1.0}, "scale must be a positive finite number, got -1.0"),
    ({"mask": np.ones((3, 5), dtype=int)}, "mask must be a boolean array with True = may attend, got dtype int"),
    ({"mask": np.ones((4, 3), dtype=bool)}, r"mask of shape \(4, 3\) does not broadcast to \(2, 5, 3\)"),
    ({"causal": True}, "T=5 queries cannot be the last T positions of S=3 keys; expected T <= S"),
])
def test_every_attention_function_raises_the_same_errors(call, kwargs, message):
    q, k, v = make_qkv(H=2, T=5, S=3, D=4)
    with pytest.raises(ValueError, match=message):
        call(q, k, v, **kwargs)
