"""Multi-head and grouped-query attention layers, and incremental decoding with a KV cache.

A layer maps ``x (..., T, d_model)`` to ``(..., T, d_model)``: project to ``H`` query heads and ``Hkv`` key/value heads
of width ``D = d_model // H``, attend, concatenate the heads and project back with ``W_o``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import float_array, float_dtype, positive_int
from .attention import attention


def split_heads(x, H: int) -> np.ndarray:
    """``(..., T, H * D) -> (..., H, T, D)``.

    Examples
    --------
    >>> split_heads(np.zeros((5, 12)), 3).shape
    (3, 5, 4)
    """
    x = float_array(x, "x", min_ndim=2)
    H = positive_int(H, "H")
    if x.shape[-1] % H:
        raise ValueError(f"last axis of x ({x.shape[-1]}) is not a multiple of H={H}")
    x = x.reshape(*x.shape[:-1], H, x.shape[-1] // H)  # (..., T, H, D)
    return x.swapaxes(-2, -3)  # (..., H, T, D)


def merge_heads(x) -> np.ndarray:
    """``(..., H, T, D) -> (..., T, H * D)``: concatenate the heads, the inverse of :func:`split_heads`."""
    x = float_array(x, "x", min_ndim=3)
    x = x.swapaxes(-2, -3)  # (..., T, H, D)
    return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])  # (..., T, H * D)


@dataclass(frozen=True)
class AttentionWeights:
    """Projection matrices of one attention layer.

    ``W_q (d_model, H*D)``, ``W_k (d_model, Hkv*D)``, ``W_v (d_model, Hkv*D)``, ``W_o (H*D, d_model)``.
    """

    W_q: np.ndarray
    W_k: np.ndarray
    W_v: np.ndarray
    W_o: np.ndarray
    H: int
    Hkv: int

    def __post_init__(self):
        H, Hkv = positive_int(self.H, "H"), positive_int(self.Hkv, "Hkv")
        if H % Hkv:
            raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
        W_q = float_array(self.W_q, "W_q", min_ndim=2)
        if W_q.ndim != 2 or W_q.shape[1] % H:
            raise ValueError(f"W_q must have shape (d_model, H * D) with H={H}, got {W_q.shape}")
        d_model, D = W_q.shape[0], W_q.shape[1] // H
        for name, W, expected in (("W_k", self.W_k, (d_model, Hkv * D)), ("W_v", self.W_v, (d_model, Hkv * D)),
                                  ("W_o", self.W_o, (H * D, d_model))):
            if float_array(W, name).shape != expected:
                raise ValueError(f"{name} must have shape {expected} (d_model={d_model}, H={H}, Hkv={Hkv}, D={D}), "
                                 f"got {np.shape(W)}")

    @property
    def d_model(self) -> int:
        return self.W_q.shape[0]

    @property
    def D(self) -> int:
        return self.W_q.shape[1] // self.H

    @property
    def n_params(self) -> int:
        return sum(w.size for w in (self.W_q, self.W_k, self.W_v, self.W_o))


def init_weights(d_model: int, H: int, Hkv: int | None = None, *, seed: int = 0, dtype=np.float64) -> AttentionWeights:
    """Random projection weights with variance ``1 / fan_in`` (so activations keep unit scale).

    ``Hkv`` defaults to ``H`` (multi-head attention); ``Hkv = 1`` gives multi-query attention.

    Examples
    --------
    >>> w = init_weights(64, H=8, Hkv=2)
    >>> w.W_q.shape, w.W_k.shape, w.D
    ((64, 64), (64, 16), 8)
    """
    d_model, H = positive_int(d_model, "d_model"), positive_int(H, "H")
    Hkv = H if Hkv is None else positive_int(Hkv, "Hkv")
    float_dtype(dtype)
    if d_model % H:
        raise ValueError(f"d_model={d_model} is not a multiple of H={H}")
    if H % Hkv:
        raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
    D = d_model // H
    rng = np.random.default_rng(seed)

    def w(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(dtype)

    return AttentionWeights(w(d_model, H * D), w(d_model, Hkv * D), w(d_model, Hkv * D), w(H * D, d_model), H, Hkv)


def _check_x(x, weights: AttentionWeights) -> np.ndarray:
    if not isinstance(weights, AttentionWeights):
        raise ValueError(f"weights must be an AttentionWeights (see init_weights), got {type(weights).__name__}")
    x = float_array(x, "x", min_ndim=2)
    if x.shape[-1] != weights.d_model:
        raise ValueError(f"x has d_model={x.shape[-1]} but the weights expect d_model={weights.d_model}")
    return x


def project_qkv(x, weights: AttentionWeights):
    """``x (..., T, d_model)`` -> ``q (..., H, T, D)``, ``k, v (..., Hkv, T, D)``."""
    x = _check_x(x, weights)
    q = split_heads(x @ weights.W_q, weights.H)  # (..., H, T, D)
    k = split_heads(x @ weights.W_k, weights.Hkv)  # (..., Hkv, T, D)
    v = split_heads(x @ weights.W_v, weights.Hkv)  # (..., Hkv, T, D)
    return q, k, v


def multi_head_attention(x, weights: AttentionWeights, mask=None, *, causal: bool = False, return_weights: bool = False):
    """Self-attention layer: ``merge_heads(attention(x W_q, x W_k, x W_v)) W_o``.

    Parameters
    ----------
    x : (..., T, d_model) ndarray
    weights : AttentionWeights
        From :func:`init_weights`; ``H`` and ``Hkv`` come with them.
    mask : bool ndarray, optional
        Broadcastable to ``(..., H, T, T)``, ``True`` = may attend.

    Returns
    -------
    out : (..., T, d_model) ndarray
    attn : (..., H, T, T) ndarray
        The attention weights of every head, only with ``return_weights=True``.
    """
    q, k, v = project_qkv(x, weights)
    res = attention(q, k, v, mask, causal=causal, return_weights=return_weights)
    out, attn = res if return_weights else (res, None)
    out = merge_heads(out) @ weights.W_o  # (..., T, d_model)
    return (out, attn) if return_weights else out


class KVCache:
    """Keys and values of the positions decoded so far, preallocated for ``max_len`` positions.

    ``k`` and ``v`` are ``(..., Hkv, length, D)`` views of the filled part. Because attention is causal, the keys and
    values of earlier positions never change when a token is appended: they are computed once and reused.
    """

    def __init__(self, Hkv: int, D: int, max_len: int, *, batch_shape: tuple[int, ...] = (), dtype=np.float64):
        Hkv, D, max_len = positive_int(Hkv, "Hkv"), positive_int(D, "D"), positive_int(max_len, "max_len")
        batch_shape = tuple(positive_int(n, "each entry of batch_shape") for n in batch_shape)
        dtype = float_dtype(dtype)
        shape = (*batch_shape, Hkv, max_len, D)
        self._k = np.zeros(shape, dtype=dtype)
        self._v = np.zeros(shape, dtype=dtype)
        self.length = 0

    @property
    def k(self) -> np.ndarray:
        return self._k[..., : self.length, :]  # (..., Hkv, length, D)

    @property
    def v(self) -> np.ndarray:
        return self._v[..., : self.length, :]  # (..., Hkv, length, D)

    @property
    def max_len(self) -> int:
        return self._k.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the filled part of the cache (keys and values)."""
        return self.k.nbytes + self.v.nbytes

    def append(self, k_new, v_new) -> None:
        """Add ``t`` positions: ``k_new, v_new (..., Hkv, t, D)``."""
        k_new, v_new = float_array(k_new, "k_new", min_ndim=3), float_array(v_new, "v_new", min_ndim=3)
        expected = (*self._k.shape[:-2], k_new.shape[-2], self._k.shape[-1])
        for name, arr in (("k_new", k_new), ("v_new", v_new)):
            if arr.shape != expected:
                raise ValueError(f"{name} must have shape {expected} to fit this cache, got {arr.shape}")
        t = k_new.shape[-2]
        if self.length + t > self.max_len:
            raise ValueError(f"cache is full: {self.length} + {t} positions exceed max_len={self.max_len}")
        self._k[..., self.length : self.length + t, :] = k_new
        self._v[..., self.length : self.length + t, :] = v_new
        self.length += t


def decode_step(x_t, weights: AttentionWeights, cache: KVCache) -> np.ndarray:
    """Attend from new position(s) ``x_t (..., t, d_model)`` to everything in the cache plus themselves.

    Appends the new keys and values to ``cache`` and returns ``(..., t, d_model)``. With ``t = 1`` this is one step of
    autoregressive decoding: one query row, ``O(length)`` work.
    """
    if not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache, got {type(cache).__name__}")
    q, k, v = project_qkv(x_t, weights)  # q (..., H, t, D), k, v (..., Hkv, t, D)
    cache.append(k, v)
    out = attention(q, cache.k, cache.v, causal=True)  # the new queries are the last t of `length` positions
    return merge_heads(out) @ weights.W_o  # (..., t, d_model)


def decode(x, weights: AttentionWeights) -> np.ndarray:
    """Run ``x (..., T, d_model)`` one token at a time through a fresh KV cache.

    Gives the same outputs (to float rounding) as ``multi_head_attention(x, weights, causal=True)``.
    """
    x = _check_x(x, weights)
    T = x.shape[-2]
    cache = KVCache(weights.Hkv, weights.D, T, batch_shape=x.shape[:-2], dtype=np.result_type(x, weights.W_k))
    steps = [decode_step(x[..., t : t + 1, :], weights, cache) for t in range(T)]  # each (..., 1, d_model)
    return np.concatenate(steps, axis=-2)  # (..., T, d_model)
