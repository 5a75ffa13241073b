"""Scaled dot-product attention, batched, with grouped-query attention by reshape.

:func:`attention` is the textbook algorithm: scores, softmax, weighted sum of values. Past ``FAST_PATH_MIN_SCORES``
scores it hands the same arithmetic to :func:`_attention_blocked` (below the line), which computes it in blocks of
query rows that stay in a core's cache, on every core. ``tests/test_attention.py`` checks that the two agree.
"""

from __future__ import annotations

import numpy as np

from ._checks import float_array, positive_int
from ._parallel import MIN_PARALLEL_ELEMENTS, ROW_BLOCK_ELEMENTS, run_blocks, workers
from ._qkv import QKV, group_query_heads, prepare_qkv
from .softmax import softmax, softmax_inplace

# From this many scores on (the whole (..., H, T, S) matrix), attention takes the blocked, multi-threaded path:
# below it one thread does the work anyway, and the textbook lines are as fast.
FAST_PATH_MIN_SCORES = MIN_PARALLEL_ELEMENTS


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
    ``(Hkv, G)``: the ``G`` query heads that share a key/value head are stacked as rows of one product with it, so K and
    V are never copied and each is read once.

    This is the textbook algorithm: the whole ``(..., H, T, S)`` matrix is materialised, so memory grows as ``S²``
    (:func:`attnlab.tiled_attention` is the linear-memory version). From ``FAST_PATH_MIN_SCORES`` scores on, the
    same arithmetic runs in blocks of query rows that fit in a core's cache, on every core (``_attention_blocked``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 2, 8, 4))
    >>> attention(q[None], k[None], v[None], causal=True).shape
    (1, 2, 8, 4)
    """
    p = prepare_qkv(q, k, v, mask, causal=causal, scale=scale)  # checked; a 2-D head gains a head axis
    if p.n_scores >= FAST_PATH_MIN_SCORES:
        out, weights = _attention_blocked(p, return_weights)  # the same arithmetic, cache-blocked, on every core
    else:
        dtype = p.dtype  # float16 is computed in float32
        lead, (Hkv, G, T, S) = p.q.shape[:-3], (p.Hkv, p.G, p.T, p.S)
        # grouped-query attention by reshape: the G query heads that share K/V head j stack as rows of one block
        q = p.q.reshape(*lead, Hkv, G * T, p.D).astype(dtype, copy=False)  # (..., Hkv, G·T, D)
        k, v = p.k.astype(dtype, copy=False), p.v.astype(dtype, copy=False)  # (..., Hkv, S, D|Dv); float16: a copy
        scores = (q * dtype.type(p.scale)) @ k.swapaxes(-1, -2)  # (..., Hkv, G·T, S): one product reads K once
        scores = scores.reshape(*lead, Hkv, G, T, S)  # (..., Hkv, G, T, S)
        weights = softmax(scores, p.grouped_mask(p.allowed()), out=scores)  # in place: the matrix is held once
        out = weights.reshape(*lead, Hkv, G * T, S) @ v  # (..., Hkv, G·T, Dv)
    out = p.restore(out.reshape(*p.q.shape[:-1], p.Dv).astype(p.q.dtype, copy=False))  # (..., H, T, Dv)
    if return_weights:
        return out, p.restore(weights.reshape(*p.q.shape[:-1], p.S).astype(p.q.dtype, copy=False))  # (..., H, T, S)
    return out


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


# --- the fast path ---------------------------------------------------------------------------------------------------
# The textbook lines above write the (T, S) scores of every head to memory, read them back for the softmax and again
# for the product with v: at large sizes that traffic, not the arithmetic, sets the time. The blocked path below
# computes the same softmax(q kᵀ · scale) v, a block of query rows at a time, each block finished (softmax, times v)
# while it is still in a core's cache, and on every core. Two reorderings make it faster and change only rounding:
# the output is divided by the row sums instead of the (much larger) weights, which are normalised only when they are
# returned, and the G query heads that share a K/V head are stacked into one matmul so that K and V are read once.


def _attention_blocked(p: QKV, return_weights: bool):
    """``attention`` in blocks of query rows sized to a core's cache, on every core: ``(out, weights or None)``, both
    grouped ``(..., Hkv, G, T, Dv|S)`` in the compute dtype. ``weights`` holds the whole matrix (memory as in the
    textbook lines); only its normalisation is skipped when it is not returned."""
    dtype, S, Hkv = p.dtype, p.S, p.Hkv
    mask = p.allowed()
    qg = group_query_heads(p.q, Hkv)  # (..., Hkv, G, T, D)
    k, v = p.k.astype(dtype, copy=False), p.v.astype(dtype, copy=False)  # once, not per block (a copy only for float16)
    lead, (G, T) = qg.shape[:-3], qg.shape[-3:-1]  # lead = (..., Hkv)
    gmask = p.grouped_mask(mask)
    scores = np.empty((*lead, G, T, S), dtype=dtype)  # every head's (T, S) matrix; each block becomes weights in place
    out = np.empty((*lead, G, T, p.Dv), dtype=dtype)  # (..., Hkv, G, T, Dv)

    step = max(1, ROW_BLOCK_ELEMENTS // (G * S))  # rows per block, so that a block of scores stays in cache

    def rows(idx, r0, r1):
        """Queries r0:r1 of one key/value head, a block at a time: each is finished while it is still in cache."""
        K, V = k[idx].T, v[idx]  # (D, S), (S, Dv)
        for a in range(r0, r1, step):
            b = min(a + step, r1)
            w = scores[idx][:, a:b]  # (G, r, S), a view into the full matrix
            o = out[idx][:, a:b]  # (G, r, Dv)
            qs = qg[idx][:, a:b].astype(dtype) * dtype.type(p.scale)  # (G, r, D)
            if b - a == T or G == 1:  # w and o are contiguous: one (G·r, D) @ (D, S) product reads K once, not G times
                np.matmul(qs.reshape(-1, qs.shape[-1]), K, out=w.reshape(-1, S))  # scores (G·r, S)
            else:
                np.matmul(qs, K, out=w)  # scores (G, r, S)
            total = softmax_inplace(w, None if gmask is None else gmask[idx][:, a:b], normalize=False)  # e = exp(s - m)
            if b - a == T or G == 1:  # likewise V: read once for the G heads that share it
                np.matmul(w.reshape(-1, S), V, out=o.reshape(-1, o.shape[-1]))  # e V  (G·r, Dv)
            else:
                np.matmul(w, V, out=o)  # e V  (G, r, Dv)
            o /= total  # out = (e V) / rowsum(e) = softmax(s) V: divide the (r, Dv) output, not the (r, S) weights
            if return_weights:
                w /= total  # weights = e / rowsum(e)

    # a few tasks per core (each a run of blocks), so that the pool's overhead is paid rarely
    per_task = min(T, max(step, -(-T * int(np.prod(lead, dtype=np.int64)) // (4 * workers()))))
    run_blocks(rows, [(idx, r0, min(r0 + per_task, T)) for idx in np.ndindex(*lead) for r0 in range(0, T, per_task)],
               scores.size)
    return out, (scores if return_weights else None)
