"""Scaled dot-product attention, batched, with grouped-query attention by reshape."""

from __future__ import annotations

import numpy as np

from ._checks import broadcast_mask, compute_dtype, float_array, positive_int, scale_value
from ._parallel import ROW_BLOCK_ELEMENTS, run_blocks, workers
from ._qkv import check_qkv, group_mask, group_query_heads, prepare_mask
from .softmax import softmax_inplace


def repeat_kv(x, H: int) -> np.ndarray:
    """Copy each key/value head ``G = H // Hkv`` times along the head axis: ``(..., Hkv, S, D) -> (..., H, S, D)``.

    The slow but obvious form of grouped-query attention, kept as a cross-check for the reshape. It must be
    ``np.repeat`` (heads ``[K1, K1, K2, K2]``), not ``np.tile`` (``[K1, K2, K1, K2]``), which pairs query heads with the
    wrong key/value heads.
    """
    x = float_array(x, "x", min_ndim=3)
    H, Hkv = positive_int(H, "H"), x.shape[-3]
    if H % Hkv:
        raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
    return np.repeat(x, H // Hkv, axis=-3)


def attention(q, k, v, mask=None, *, causal: bool = False, scale=None, return_weights: bool = False):
    """Scaled dot-product attention: ``softmax(q kᵀ · scale, masked) v``.

    Parameters
    ----------
    q : (..., H, T, D) ndarray
        Queries. A 2-D ``(T, D)`` array is one head.
    k : (..., Hkv, S, D) ndarray
        Keys. ``Hkv`` must divide ``H``: ``Hkv == H`` is multi-head attention, ``1 < Hkv < H`` grouped-query
        attention, ``Hkv == 1`` multi-query attention.
    v : (..., Hkv, S, Dv) ndarray
        Values.
    mask : bool ndarray, optional
        ``True`` = may attend, broadcastable to ``(..., H, T, S)``.
    causal : bool
        Also apply :func:`attnlab.causal_mask` (the queries are the last ``T`` of ``S`` positions).
    scale : float, optional
        Multiplier of the scores; default ``1 / sqrt(D)``.
    return_weights : bool
        Also return the ``(..., H, T, S)`` weights.

    Returns
    -------
    out : (..., H, T, Dv) ndarray
        In the dtype of the inputs (float16 is computed in float32). Rows whose keys are all masked are zeros.
    weights : (..., H, T, S) ndarray
        Only with ``return_weights=True``.

    Notes
    -----
    ``out_i = sum_j softmax_j(q_i · k_j · scale) v_j``. Grouped-query attention is done by viewing the query heads as
    ``(Hkv, G)`` so that each key/value head broadcasts over its ``G`` query heads; K and V are never copied.

    This is the textbook algorithm: the whole ``(..., H, T, S)`` matrix is materialised, so memory grows as ``S²``
    (:func:`attnlab.tiled_attention` is the linear-memory version). For speed it is filled in blocks of query rows that
    fit in a core's cache, each block finished (softmax, times ``v``) while it is still there, on every core; the
    output is divided by the row sums rather than the weights, which are normalised only when returned.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 2, 8, 4))
    >>> attention(q[None], k[None], v[None], causal=True).shape
    (1, 2, 8, 4)
    """
    q, k, v = check_qkv(q, k, v)
    if q.ndim == 2:  # a single head: add the head axis and remove it again
        if mask is not None:
            broadcast_mask(mask, (q.shape[0], k.shape[0]))
        result = attention(q[None], k[None], v[None], mask, causal=causal, scale=scale, return_weights=return_weights)
        return (result[0][0], result[1][0]) if return_weights else result[0]
    D, S, Hkv = q.shape[-1], k.shape[-2], k.shape[-3]
    scale = scale_value(scale, D)
    mask = prepare_mask(mask, causal, q.shape, S)
    dtype = compute_dtype(q, k, v)

    qg = group_query_heads(q, Hkv)  # (..., Hkv, G, T, D)
    k, v = k.astype(dtype, copy=False), v.astype(dtype, copy=False)  # once, not per block (a copy only for float16)
    lead, (G, T) = qg.shape[:-3], qg.shape[-3:-1]  # lead = (..., Hkv)
    gmask = None if mask is None else np.broadcast_to(group_mask(mask, q.ndim, q.shape[-3], Hkv), (*lead, G, T, S))
    weights = np.empty((*lead, G, T, S), dtype=dtype)  # the whole (T, S) matrix of every head, materialised
    out = np.empty((*lead, G, T, v.shape[-1]), dtype=dtype)  # (..., Hkv, G, T, Dv)

    step = max(1, ROW_BLOCK_ELEMENTS // (G * S))  # rows per block, so that a block of scores stays in cache

    def rows(idx, r0, r1):
        """Queries r0:r1 of one key/value head, a block at a time: each is finished while it is still in cache."""
        K, V = k[idx].T, v[idx]  # (D, S), (S, Dv)
        for a in range(r0, r1, step):
            b = min(a + step, r1)
            w = weights[idx][:, a:b]  # (G, r, S), a view into the full matrix
            o = out[idx][:, a:b]  # (G, r, Dv)
            qs = qg[idx][:, a:b].astype(dtype) * dtype.type(scale)  # (G, r, D)
            if b - a == T or G == 1:  # w and o are contiguous: one (G·r, D) @ (D, S) product reads K once, not G times
                np.matmul(qs.reshape(-1, qs.shape[-1]), K, out=w.reshape(-1, S))  # scores (G·r, S)
            else:
                np.matmul(qs, K, out=w)  # scores (G, r, S)
            total = softmax_inplace(w, None if gmask is None else gmask[idx][:, a:b], normalize=False)
            if b - a == T or G == 1:  # likewise V: read once for the G heads that share it
                np.matmul(w.reshape(-1, S), V, out=o.reshape(-1, o.shape[-1]))  # (G·r, Dv)
            else:
                np.matmul(w, V, out=o)  # w holds exp(scores - max): normalise the (r, Dv) output, not the (r, S) weights
            o /= total
            if return_weights:
                w /= total

    # a few tasks per core (each a run of blocks), so that the pool's overhead is paid rarely
    per_task = min(T, max(step, -(-T * int(np.prod(lead, dtype=np.int64)) // (4 * workers()))))
    run_blocks(rows, [(idx, r0, min(r0 + per_task, T)) for idx in np.ndindex(*lead) for r0 in range(0, T, per_task)],
               weights.size)

    out = out.reshape(*q.shape[:-1], v.shape[-1]).astype(q.dtype, copy=False)  # (..., H, T, Dv)
    if return_weights:
        return out, weights.reshape(*q.shape[:-1], S).astype(q.dtype, copy=False)  # (..., H, T, S)
    return out

