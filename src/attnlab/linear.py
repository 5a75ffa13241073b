"""Linear attention (Katharopoulos et al., 2020): the kernel trick ``φ(q)·φ(k)`` in place of ``exp(q·k)``.

With a feature map ``φ`` whose values are positive, the weight of key ``j`` for query ``i`` is
``φ(q_i)·φ(k_j) / Σ_j' φ(q_i)·φ(k_j')``. Written that way it is a softmax-free attention of the usual ``(T, S)``
shape (:func:`linear_attention`, the parallel form). Regrouped, the sum over keys comes first:

    out_i = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / φ(q_i)ᵀ (Σ_j φ(k_j))

and under a causal mask the two sums are a running state, a ``(D, Dv)`` matrix ``state`` and a ``(D,)`` vector ``z``,
updated once per token (:func:`linear_attention_step`, the recurrent form): constant memory and constant work per
decoded token, whatever the length. The price: everything the sequence said is squeezed into ``D · Dv`` numbers.

The feature map here is ``φ(x) = elu(x) + 1`` (:func:`elu_feature`), the paper's choice. A query row whose keys are
all masked gets a zero output, never NaN.
"""

from __future__ import annotations

import numpy as np

from ._checks import compute_dtype, float_array
from ._qkv import check_qkv, check_shaped, prepare_mask
from .attention import repeat_kv


def elu_feature(x) -> np.ndarray:
    """``φ(x) = elu(x) + 1``: ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise; always positive.

    Examples
    --------
    >>> elu_feature(np.array([-1.0, 0.0, 2.0])).round(4)
    array([0.3679, 1.    , 3.    ])
    """
    x = float_array(x, "x", min_ndim=0)
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


def _elu_feature_grad(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0)))  # dφ/dx


def _full_heads(q, k, v):
    """Grouped-query keys and values copied to the ``H`` query heads (np.repeat: head h uses key head h // G)."""
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        return repeat_kv(k, q.shape[-3]), repeat_kv(v, q.shape[-3])
    return k, v


def _parallel(q, k, v, mask, causal):
    dtype = compute_dtype(q, k, v)
    k, v = _full_heads(q, k, v)
    fq, fk = elu_feature(q.astype(dtype)), elu_feature(k.astype(dtype))  # (..., H, T, D), (..., H, S, D)
    A = fq @ fk.swapaxes(-1, -2)  # (..., H, T, S): φ(q_i)·φ(k_j) > 0, the kernel in place of exp(q·k)
    allowed = prepare_mask(mask, causal, q.shape, k.shape[-2])  # broadcastable to (..., H, T, S), or None
    if allowed is not None:
        A = A * allowed
    z = A.sum(axis=-1, keepdims=True)  # (..., H, T, 1)
    zs = np.where(z == 0, 1, z)  # a row with no allowed key: 0 / 1 = 0
    return (A @ v.astype(dtype)) / zs, (fq, fk, A, zs, k, v, allowed)  # out (..., H, T, Dv)


def linear_attention(q, k, v, mask=None, *, causal: bool = False):
    """Linear attention in its parallel form: ``out_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j)``.

    Parameters
    ----------
    q : (..., H, T, D) ndarray
    k, v : (..., Hkv, S, D), (..., Hkv, S, Dv) ndarray
    mask : bool ndarray, optional
        ``True`` = may attend, broadcastable to ``(..., H, T, S)``.
    causal : bool
        Also apply the causal mask (queries are the last ``T`` of ``S`` positions).

    Returns
    -------
    out : (..., H, T, Dv) ndarray

    Notes
    -----
    This form builds the ``(..., H, T, S)`` matrix ``A = φ(q) φ(k)ᵀ``, like softmax attention, so its cost is
    quadratic; it is the reference the recurrent form :func:`linear_attention_recurrent` is checked against. There is
    no scale: ``φ`` is not an exponential, so there is no saturation to prevent.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 1, 5, 4))
    >>> bool(np.allclose(linear_attention(q, k, v, causal=True), linear_attention_recurrent(q, k, v)))
    True
    """
    q, k, v = check_qkv(q, k, v)
    if q.ndim == 2:  # a single head: add the head axis and remove it again
        return linear_attention(q[None], k[None], v[None], mask, causal=causal)[0]
    out, _ = _parallel(q, k, v, mask, causal)
    return out.astype(q.dtype, copy=False)


def linear_attention_backward(q, k, v, dout, mask=None, *, causal: bool = False):
    """Gradients ``(dq, dk, dv)`` of :func:`linear_attention` for the upstream gradient ``dout (..., H, T, Dv)``.

    Notes
    -----
    With ``A = M ∘ φ(q)φ(k)ᵀ``, ``z = rowsum(A)`` and ``out = A v / z``: ``dv = (A / z)ᵀ dout``,
    ``dA = M ∘ (dout vᵀ − rowsum(dout ∘ out)) / z``, ``dφ(q) = dA φ(k)``, ``dφ(k) = dAᵀ φ(q)``, then
    ``dq = dφ(q) ∘ φ'(q)`` and ``dk = dφ(k) ∘ φ'(k)``. Grouped key/value heads sum the gradients of their ``G`` query heads.
    """
    q, k, v = check_qkv(q, k, v)
    dout = check_shaped(dout, "dout", (*q.shape[:-1], v.shape[-1]), "the output's shape")
    if q.ndim == 2:  # a single head: add the head axis and remove it again
        return tuple(g[0] for g in linear_attention_backward(q[None], k[None], v[None], dout[None], mask,
                                                             causal=causal))
    out, (fq, fk, A, zs, kf, vf, allowed) = _parallel(q, k, v, mask, causal)
    dout = dout.astype(out.dtype)
    dv = (A / zs).swapaxes(-1, -2) @ dout  # (..., H, S, Dv)
    dA = (dout @ vf.swapaxes(-1, -2) - (dout * out).sum(axis=-1, keepdims=True)) / zs  # (..., H, T, S)
    if allowed is not None:
        dA = dA * allowed  # masked pairs get no gradient
    dq = (dA @ fk) * _elu_feature_grad(q.astype(out.dtype))  # (..., H, T, D)
    dk = (dA.swapaxes(-1, -2) @ fq) * _elu_feature_grad(kf.astype(out.dtype))  # (..., H, S, D)
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:  # sum each group of G query heads into its key/value head
        Hkv, G = k.shape[-3], q.shape[-3] // k.shape[-3]
        dk = dk.reshape(*dk.shape[:-3], Hkv, G, *dk.shape[-2:]).sum(axis=-3)
        dv = dv.reshape(*dv.shape[:-3], Hkv, G, *dv.shape[-2:]).sum(axis=-3)
    return dq.astype(q.dtype, copy=False), dk.astype(k.dtype, copy=False), dv.astype(v.dtype, copy=False)


def linear_attention_step(state, z, q_t, k_t, v_t):
    """One decode step of causal linear attention: add the new key/value to the state, then read it with the query.

    Parameters
    ----------
    state : (..., H, D, Dv) ndarray
        ``Σ_j φ(k_j) v_jᵀ`` over the positions so far (zeros before the first token).
    z : (..., H, D) ndarray
        ``Σ_j φ(k_j)``, the normaliser.
    q_t, k_t : (..., H, D) ndarray
    v_t : (..., H, Dv) ndarray

    Returns
    -------
    out_t : (..., H, Dv) ndarray
        ``φ(q_t)ᵀ state / φ(q_t)ᵀ z`` with the new token already added (a token sees itself, as under a causal mask).
    state, z : new arrays (the inputs are not modified).

    Notes
    -----
    ``state += φ(k_t) v_tᵀ`` (an outer product, ``(D, 1) @ (1, Dv)``), ``z += φ(k_t)``: ``D · Dv + D`` numbers, whatever
    ``t`` is. Grouped-query heads: repeat ``k_t, v_t`` to ``H`` heads first, or keep ``Hkv`` states and group ``q_t``.
    """
    state, z = float_array(state, "state", min_ndim=2), float_array(z, "z", min_ndim=1)
    q_t, k_t, v_t = (float_array(x, n) for x, n in ((q_t, "q_t"), (k_t, "k_t"), (v_t, "v_t")))
    D, Dv = state.shape[-2:]
    for name, x, shape in (("z", z, state.shape[:-1]), ("q_t", q_t, state.shape[:-1]), ("k_t", k_t, state.shape[:-1]),
                           ("v_t", v_t, (*state.shape[:-2], Dv))):
        if x.shape != shape:
            raise ValueError(f"{name} must have shape {shape} for a state of shape {state.shape}, got {x.shape}")
    fk = elu_feature(k_t)  # (..., H, D)
    state = state + fk[..., :, None] * v_t[..., None, :]  # (..., H, D, Dv): state += φ(k_t) v_tᵀ
    z = z + fk  # (..., H, D)
    fq = elu_feature(q_t)
    num = np.einsum("...d,...de->...e", fq, state)  # (..., H, Dv): φ(q_t)ᵀ state
    den = np.einsum("...d,...d->...", fq, z)[..., None]  # (..., H, 1): φ(q_t)ᵀ z
    return num / np.where(den == 0, 1, den), state, z


def linear_attention_recurrent(q, k, v):
    """Causal linear attention token by token with :func:`linear_attention_step`: a ``(D, Dv)`` state, no ``(T, S)``
    matrix. ``q, k, v (..., H, T, D)`` with ``T == S`` (grouped heads are repeated). Returns ``(..., H, T, Dv)``."""
    q, k, v = check_qkv(q, k, v)
    if k.shape[-2] != q.shape[-2]:
        raise ValueError(f"the recurrent form takes one key per query: expected S == T={q.shape[-2]}, "
                         f"got S={k.shape[-2]}")
    k, v = _full_heads(q, k, v)
    dtype = compute_dtype(q, k, v)
    state = np.zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]), dtype=dtype)  # (..., H, D, Dv)
    z = np.zeros((*q.shape[:-2], q.shape[-1]), dtype=dtype)  # (..., H, D)
    out = np.empty((*q.shape[:-1], v.shape[-1]), dtype=dtype)  # (..., H, T, Dv)
    for t in range(q.shape[-2]):
        out[..., t, :], state, z = linear_attention_step(state, z, q[..., t, :], k[..., t, :], v[..., t, :])
    return out.astype(q.dtype, copy=False)
