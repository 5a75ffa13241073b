"""The backward pass of attention: the softmax's, the textbook one, and the FlashAttention-2 tiled one.

For one head, ``S = q kᵀ · scale`` (the scores), ``P = softmax(S)`` (the weights) and ``O = P V``. Given ``dO``, the
gradient of a loss with respect to ``O``, the chain rule gives, step by step (names as in the FlashAttention-2 paper)::

    dV = Pᵀ dO                                   (T, S)ᵀ (T, Dv) -> (S, Dv)
    dP = dO Vᵀ                                   (T, Dv) (S, Dv)ᵀ -> (T, S)
    dS = P ∘ (dP - D),  D = rowsum(P ∘ dP)       the softmax backward; D = rowsum(dO ∘ O) too, since O = P V
    dQ = dS K · scale                            (T, S) (S, D) -> (T, D)
    dK = dSᵀ Q · scale                           (T, S)ᵀ (T, D) -> (S, D)

:func:`attention_backward` evaluates these with the whole ``(..., H, T, S)`` weights in memory, as autograd keeps them
from the forward pass. :func:`tiled_attention_backward` (Dao, 2023, Algorithm 2) keeps only the log-sum-exp ``L`` of
each row from the forward and recomputes each tile's weights as ``P_ij = exp(S_ij - L_i)``, so its memory grows
linearly in ``S``. Under grouped-query attention a key/value head serves ``G`` query heads, so its ``dK`` and ``dV``
are the sums over those ``G`` heads. Masked entries have ``P = 0``, hence ``dS = 0``: a row with no allowed key gets
zero gradients.

Names: ``D`` is the head width, as everywhere in attnlab; the paper's ``D`` (one number per query row) is written
``D_i`` for the rows of a block and ``Dg`` for all of them. :func:`attention_backward` is the five lines above; from
``FAST_PATH_MIN_SCORES`` scores on it hands them to ``_attention_backward_blocked`` (below the line), which evaluates
them in blocks of query rows that stay in a core's cache, on every core.
"""

from __future__ import annotations

import numpy as np

from ._checks import compute_dtype, float_array, positive_int
from ._parallel import MIN_PARALLEL_ELEMENTS, ROW_BLOCK_ELEMENTS, run_blocks, workers
from ._qkv import QKV, group_query_heads, prepare_qkv, query_blocks, tile_mask, with_ones
from .attention import attention
from .softmax import mask_inplace

# From this many scores on (the whole (..., H, T, S) matrix), attention_backward takes the blocked, multi-threaded path.
FAST_PATH_MIN_SCORES = MIN_PARALLEL_ELEMENTS
# and tiled_attention_backward folds its two subtractions into its matmuls (see "the fast path" in key_block)
TILED_FAST_PATH_MIN_SCORES = MIN_PARALLEL_ELEMENTS


def softmax_backward(weights, dweights, axis: int = -1) -> np.ndarray:
    """The gradient with respect to the scores, given the softmax ``weights`` and the gradient ``dweights`` of a loss
    with respect to them.

    Parameters
    ----------
    weights : (..., S) ndarray
        ``P = softmax(scores)`` along ``axis``, e.g. from :func:`attnlab.softmax` (masked entries and fully masked
        rows are zeros).
    dweights : (..., S) ndarray
        ``dP``, the gradient of the loss with respect to ``weights``; same shape.
    axis : int
        The axis the softmax normalised over (default: the last).

    Returns
    -------
    dscores : (..., S) ndarray
        ``dS``, in the common dtype of the inputs (float16 is computed in float32).

    Notes
    -----
    The softmax's Jacobian is ``∂P_j/∂S_k = P_j (δ_jk - P_k)``, so ``dS_k = sum_j dP_j P_j (δ_jk - P_k)``::

        dS = P ∘ (dP - rowsum(P ∘ dP))

    one multiply-and-sum per row instead of an ``S x S`` Jacobian. Where ``P = 0`` (masked entries, fully masked
    rows) ``dS = 0``: a masked score gets no gradient. Adding a constant to every ``dP_j`` of a row changes nothing,
    since the weights of a row always sum to 1.

    Examples
    --------
    >>> from attnlab import softmax
    >>> P = softmax(np.array([1.0, 2.0, 3.0]))
    >>> softmax_backward(P, np.array([1.0, 0.0, 0.0])).round(4)  # d P_0 / d scores
    array([ 0.0819, -0.022 , -0.0599])
    """
    P = float_array(weights, "weights")
    dP = float_array(dweights, "dweights")
    if dP.shape != P.shape:
        raise ValueError(f"dweights must have the shape of weights {P.shape}, got {dP.shape}")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)) or not -P.ndim <= axis < P.ndim:
        raise ValueError(
            f"axis must be an integer in [-{P.ndim}, {P.ndim}) for weights of shape {P.shape}, got {axis!r}")
    dtype = compute_dtype(P, dP)
    dS = np.moveaxis(dP.astype(dtype, copy=True), axis, -1)  # a copy, turned into dS in place
    softmax_backward_inplace(np.moveaxis(P, axis, -1).astype(dtype, copy=False), dS)
    return np.moveaxis(dS, -1, axis).astype(np.result_type(P, dP), copy=False)


def softmax_backward_inplace(P: np.ndarray, dP: np.ndarray) -> np.ndarray:
    """Turn ``dP (..., S)`` into ``dS = P ∘ (dP - rowsum(P ∘ dP))`` in place, over the last axis (no checks)."""
    dP -= np.einsum("...s,...s->...", P, dP)[..., None]  # dP - rowsum(P ∘ dP)
    dP *= P  # dS = P ∘ (dP - rowsum(P ∘ dP))
    return dP


def attention_backward(q, k, v, dout, mask=None, *, causal: bool = False, scale=None, weights=None):
    """Gradients of :func:`attnlab.attention` with respect to ``q``, ``k`` and ``v``, with the weights held whole.

    Parameters
    ----------
    q, k, v, mask, causal, scale
        As in :func:`attnlab.attention`: ``q (..., H, T, D)``, ``k (..., Hkv, S, D)``, ``v (..., Hkv, S, Dv)``, a
        boolean mask broadcastable to ``(..., H, T, S)`` with ``True`` = may attend, the causal flag (queries are the
        last ``T`` of ``S`` positions) and the scale (default ``1 / sqrt(D)``).
    dout : (..., H, T, Dv) ndarray
        ``dO``, the gradient of the loss with respect to the output of ``attention(q, k, v, mask, ...)``.
    weights : (..., H, T, S) ndarray, optional
        ``P``, the weights of that forward pass (``attention(..., return_weights=True)``), if they were kept, as
        autograd keeps them; by default they are computed again.

    Returns
    -------
    dq : (..., H, T, D) ndarray
    dk : (..., Hkv, S, D) ndarray
        Summed over the ``G = H // Hkv`` query heads that share each key head (grouped-query attention).
    dv : (..., Hkv, S, Dv) ndarray
        Summed over the ``G`` query heads likewise.

    Each in its input's dtype; float16 is computed in float32. A query row with no allowed key contributes nothing:
    its ``dq`` row is zero, never NaN.

    Notes
    -----
    With ``P`` the weights and ``O = P V``, per head::

        dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP - rowsum(P ∘ dP)),   dQ = dS K · scale,   dK = dSᵀ Q · scale

    (see :func:`softmax_backward`). This is the textbook backward: it computes the ``(..., H, T, S)`` weights with
    :func:`attnlab.attention` and keeps them, as autograd stores them from the forward pass, so its memory grows as
    ``S²``; :func:`tiled_attention_backward` gives the same gradients in memory linear in ``S``. The rest is done in
    blocks of query rows sized to a core's cache, on every core.

    Examples
    --------
    >>> from attnlab import attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, dout = rng.normal(size=(4, 2, 5, 3))
    >>> dq, dk, dv = attention_backward(q, k, v, dout, causal=True)
    >>> dq.shape, dk.shape, dv.shape
    ((2, 5, 3), (2, 5, 3), (2, 5, 3))
    >>> _, P = attention(q, k, v, causal=True, return_weights=True)
    >>> bool(np.allclose(dv, P.swapaxes(-1, -2) @ dout))  # dV = Pᵀ dO
    True
    """
    p = prepare_qkv(q, k, v, mask, causal=causal, scale=scale)  # checked; a 2-D head gains a head axis
    dout = p.check_like_out(dout, "dout")  # (..., H, T, Dv)
    dtype = compute_dtype(p.q, p.k, p.v, dout)  # float16 is computed in float32
    P = None if weights is None else p.check_like_scores(weights, "weights").astype(dtype, copy=False)  # (..., T, S)
    if p.n_scores >= FAST_PATH_MIN_SCORES:
        dq, dk, dv = _attention_backward_blocked(p, dout, P, dtype)  # the same lines, cache-blocked, on every core
    else:
        q, k, v, dO = (a.astype(dtype, copy=False) for a in (p.q, p.k, p.v, dout))  # a copy only for float16
        if P is None:
            _, P = attention(q, k, v, p.mask, causal=causal, scale=p.scale, return_weights=True)  # (..., H, T, S)
        Qg, Pg, dOg = (group_query_heads(a, p.Hkv) for a in (q, P, dO))  # (..., Hkv, G, T, D|S|Dv)
        K, V = k[..., None, :, :], v[..., None, :, :]  # (..., Hkv, 1, S, D|Dv): broadcast over the G query heads
        dv = (Pg.swapaxes(-1, -2) @ dOg).sum(axis=-3)  # dV = Pᵀ dO, summed over the G heads  (..., Hkv, S, Dv)
        dP = dOg @ V.swapaxes(-1, -2)  # dP = dO Vᵀ  (..., Hkv, G, T, S)
        dS = softmax_backward(Pg, dP)  # dS = P ∘ (dP - rowsum(P ∘ dP))
        dq = dS @ K * dtype.type(p.scale)  # dQ = dS K · scale  (..., Hkv, G, T, D)
        dk = (dS.swapaxes(-1, -2) @ Qg).sum(axis=-3) * dtype.type(p.scale)  # dK = dSᵀ Q · scale  (..., Hkv, S, D)
    return (p.restore(dq.reshape(p.q.shape).astype(p.q.dtype, copy=False)),  # (..., H, T, D)
            p.restore(dk.astype(p.k.dtype, copy=False)), p.restore(dv.astype(p.v.dtype, copy=False)))


def tiled_attention_backward(q, k, v, out, dout, lse, mask=None, *, causal: bool = False, scale=None,
                             Br: int = 256, Bc: int = 512):
    """Gradients of :func:`attnlab.tiled_attention` with respect to ``q``, ``k`` and ``v``, tile by tile, in memory
    linear in ``S`` (the FlashAttention-2 backward).

    Parameters
    ----------
    q, k, v, mask, causal, scale
        As in :func:`attnlab.attention` and :func:`attnlab.tiled_attention`, and the same as in the forward pass.
    out : (..., H, T, Dv) ndarray
        ``O``, the forward's output.
    dout : (..., H, T, Dv) ndarray
        ``dO``, the gradient of the loss with respect to ``out``.
    lse : (..., H, T) ndarray
        ``L``, each row's log-sum-exp from ``tiled_attention(..., return_lse=True)``; ``-inf`` marks a row with no
        allowed key.
    Br, Bc : int
        Query rows and key columns per tile; any sizes work, including ones that do not divide ``T`` or ``S``. With the
        defaults the two float32 tiles a block of work holds (``P_ij`` and ``dS_ij``) are 512 KiB each; on one core,
        tiles from 128 x 512 to 1024 x 1024 took the same CPU time to within 8 % (five matmuls per tile dominate).

    Returns
    -------
    dq : (..., H, T, D) ndarray
    dk : (..., Hkv, S, D) ndarray
        Summed over the ``G = H // Hkv`` query heads that share each key head.
    dv : (..., Hkv, S, Dv) ndarray

    Equal to :func:`attention_backward` to float rounding, each in its input's dtype (float16 is computed in float32).

    Notes
    -----
    Only ``L`` (one number per row) is kept from the forward pass, and ``D = rowsum(dO ∘ O)`` is computed once.
    Then, for each block of keys ``K_j, V_j`` (in parallel) and each block of queries ``Q_i`` that sees it::

        S_ij  = Q_i K_jᵀ · scale                              (Br, Bc)
        P_ij  = exp(S_ij - L_i)                               the forward's weights, recomputed
        dV_j += P_ijᵀ dO_i
        dP_ij = dO_i V_jᵀ
        dS_ij = P_ij ∘ (dP_ij - D_i)
        dQ_i += dS_ij K_j · scale                             the paper adds atomically; see below
        dK_j += dS_ijᵀ Q_i · scale

    The tiles the forward skips are skipped here too: those entirely above the causal diagonal and those fully
    masked for every row. A row with no allowed key has ``L = -inf`` and gets ``P = 0``, so zero gradients.

    Blocks of keys run on every core. Each task owns the ``dQ`` it adds into (all of one head's key blocks, or, when
    there are fewer heads than tasks the cores need, every n-th key block of a head into a copy of that head's ``dQ``,
    summed in a fixed order), so no two threads add into the same rows and the result is the same on every run.
    Memory is the gradients, a pair of tiles per core and, with few heads, a few copies per core of one head's ``dQ``:
    linear in ``S``.

    From ``TILED_FAST_PATH_MIN_SCORES`` scores on, the two subtractions ride in the matmuls on one more column each,
    ``[Q_i, -L_i] [K_j · scale, 1]ᵀ = S_ij - L_i`` and ``[dO_i, -D_i] [V_j, 1]ᵀ = dP_ij - D_i``, which saves two of the
    tile's four element-wise passes, and each tile is kept transposed, with the G query heads side by side
    (``_key_block_fast``); the rest is the same.

    Examples
    --------
    >>> from attnlab import tiled_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, dout = rng.normal(size=(4, 2, 7, 3))
    >>> out, lse = tiled_attention(q, k, v, causal=True, return_lse=True)
    >>> grads = tiled_attention_backward(q, k, v, out, dout, lse, causal=True, Br=2, Bc=3)
    >>> all(np.allclose(a, b) for a, b in zip(grads, attention_backward(q, k, v, dout, causal=True)))
    True
    """
    p = prepare_qkv(q, k, v, mask, causal=causal, scale=scale)  # checked; a 2-D head gains a head axis
    out, dout = p.check_like_out(out, "out"), p.check_like_out(dout, "dout")  # (..., H, T, Dv)
    lse = p.check_per_row(lse, "lse", "q's (..., H, T): one log-sum-exp per query row")  # (..., H, T)
    Br, Bc = positive_int(Br, "Br"), positive_int(Bc, "Bc")
    T, D, S, Hkv, Dv, scale = p.T, p.D, p.S, p.Hkv, p.Dv, p.scale
    dtype = compute_dtype(p.q, p.k, p.v, out, dout)  # float16 is computed in float32

    Qg = group_query_heads(p.q.astype(dtype, copy=False), Hkv)  # (..., Hkv, G, T, D), a copy only for float16
    k_, v_ = p.k.astype(dtype, copy=False), p.v.astype(dtype, copy=False)
    dOg = group_query_heads(dout.astype(dtype, copy=False), Hkv)  # (..., Hkv, G, T, Dv)
    Og = group_query_heads(out, Hkv)
    Dg = np.einsum("...d,...d->...", dOg, Og, dtype=dtype)[..., None]  # the paper's D = rowsum(dO ∘ O)  (..., T, 1)
    Lg = group_query_heads(lse[..., None].astype(dtype), Hkv)  # L, a copy  (..., Hkv, G, T, 1)
    Lg[np.isneginf(Lg)] = np.inf  # a row with no allowed key: P = exp(S - inf) = 0, with no -inf - -inf = NaN
    fast = p.n_scores >= TILED_FAST_PATH_MIN_SCORES
    if fast:  # -L_i and -D_i, the extra columns of the fast path; a row with no allowed key gets -(largest float)
        minus_L = -np.minimum(Lg, np.finfo(dtype).max)  # (..., Hkv, G, T, 1): exp(S - largest) is 0, as exp(S - inf)
        minus_D = -Dg
    lead, G = Qg.shape[:-3], Qg.shape[-3]  # lead = (..., Hkv)
    gmask = p.grouped_mask(p.mask)  # (..., Hkv, G, T, S) or None; the causal part is index arithmetic per tile
    dq = np.zeros((*lead, G, T, D), dtype=dtype)  # (..., Hkv, G, T, D), accumulated over key blocks
    dk = np.empty((*lead, S, D), dtype=dtype)  # (..., Hkv, S, D), each block written once
    dv = np.empty((*lead, S, Dv), dtype=dtype)  # (..., Hkv, S, Dv)

    def key_block(idx, j0, j1, dQ):
        """dK_j and dV_j of keys j0:j1 of one key/value head, and their share of its dQ, added into ``dQ (G, T, D)``."""
        K_j, V_j = k_[idx][j0:j1], v_[idx][j0:j1]  # (Bc, D), (Bc, Dv)
        K_js = K_j * dtype.type(scale)  # the scale goes on the (Bc, D) keys once, not on every (Br, D) query block
        dK_j, dV_j = np.zeros((j1 - j0, D), dtype=dtype), np.zeros((j1 - j0, Dv), dtype=dtype)

        def visits():
            """The query blocks ``(i0, i1, allowed)`` that see this key block; the tiles the forward skipped have no
            gradient."""
            for i0, i1 in query_blocks(j0, T, S, Br, causal):
                allowed = tile_mask(None if gmask is None else gmask[idx], causal, T, S, i0, i1, j0, j1)  # (G, Br, Bc)
                if allowed is None or allowed.any():
                    yield i0, i1, allowed

        if fast:
            _key_block_fast(Qg[idx], dOg[idx], minus_L[idx], minus_D[idx], K_j, K_js, V_j, dK_j, dV_j, dQ, visits(),
                            min(Br, T))
        else:
            tile = np.empty((2, G, min(Br, T), j1 - j0), dtype=dtype)  # the tiles of P_ij and dS_ij, reused
            for i0, i1, allowed in visits():
                Q_i, dO_i = Qg[idx][:, i0:i1], dOg[idx][:, i0:i1]  # (G, Br, D), (G, Br, Dv)
                S_ij = np.matmul(Q_i, K_js.T, out=tile[0, :, : i1 - i0])  # S_ij = Q_i K_jᵀ · scale  (G, Br, Bc)
                mask_inplace(S_ij, allowed)
                S_ij -= Lg[idx][:, i0:i1]
                P_ij = np.exp(S_ij, out=S_ij)  # P_ij = exp(S_ij - L_i)
                dP_ij = np.matmul(dO_i, V_j.T, out=tile[1, :, : i1 - i0])  # dP_ij = dO_i V_jᵀ  (G, Br, Bc)
                dP_ij -= Dg[idx][:, i0:i1]  # dP_ij - D_i
                dS_ij = np.multiply(dP_ij, P_ij, out=dP_ij)  # dS_ij = P_ij ∘ (dP_ij - D_i)
                for g in range(G):  # a key/value head's gradient sums over its G query heads
                    dV_j += P_ij[g].T @ dO_i[g]  # dV_j += P_ijᵀ dO_i  (Bc, Dv)
                    dK_j += dS_ij[g].T @ Q_i[g]  # dK_j += dS_ijᵀ Q_i  (Bc, D), times scale below
                dQ[:, i0:i1] += dS_ij @ K_j  # dQ_i += dS_ij K_j  (G, Br, D), times scale below
        np.multiply(dK_j, dtype.type(scale), out=dk[idx][j0:j1])  # dK_j = dS_jᵀ Q · scale
        dv[idx][j0:j1] = dV_j

    # Where the paper adds into dQ atomically, a task here owns its dQ: all of one head's key blocks (writing into
    # dq directly) or, when there are too few heads to keep every core busy, every n-th key block of one head (into
    # its own copy of that head's dQ, summed below in a fixed order). Either way dq is the same on every run.
    n_key_blocks, elements = -(-S // Bc), p.n_scores
    n_lead = int(np.prod(lead, dtype=np.int64))
    n = 1 if elements < MIN_PARALLEL_ELEMENTS else min(n_key_blocks, -(-4 * workers() // n_lead))  # tasks per head

    def task(idx, c):
        """Key blocks c, c + n, c + 2n, ... of one key/value head (interleaved, so causal work is shared evenly)."""
        dQ = dq[idx] if n == 1 else np.zeros((G, T, D), dtype=dtype)
        for jb in range(c, n_key_blocks, n):
            key_block(idx, jb * Bc, min(jb * Bc + Bc, S), dQ)
        return idx, dQ

    partial = run_blocks(task, [(idx, c) for idx in np.ndindex(*lead) for c in range(n)], elements)
    if n > 1:
        for idx, dQ in partial:  # in task order: a fixed order of additions
            dq[idx] += dQ
    dq *= dtype.type(scale)  # dQ = dS K · scale
    return (p.restore(dq.reshape(p.q.shape).astype(p.q.dtype, copy=False)),  # (..., H, T, D)
            p.restore(dk.astype(p.k.dtype, copy=False)), p.restore(dv.astype(p.v.dtype, copy=False)))


# --- the fast path of tiled_attention_backward ----------------------------------------------------------------------
# The same lines as the tile loop, with the tiles kept transposed, keys down and queries across (Bc, G · Br), as in
# tiled_attention's fast path: OpenBLAS computes [K_j, 1] [Q_i, -L_i]ᵀ faster than its transpose, and the G query
# heads that share K_j and V_j go through each matmul side by side, so that dK_j and dV_j sum over them inside the
# matmul. The two subtractions ride in the first two matmuls, on one more column each:
#
#     [K_j · scale, 1] [Q_i, -L_i]ᵀ = (S_ij - L_i)ᵀ        [V_j, 1] [dO_i, -D_i]ᵀ = (dP_ij - D_i)ᵀ
#
# which saves two of the tile's four element-wise passes.


def _key_block_fast(Q, dO, minus_L, minus_D, K_j, K_js, V_j, dK_j, dV_j, dQ, visits, Br: int):
    """dK_j, dV_j and the share of dQ of one block of keys ``K_j (Bc, D)`` (``K_js`` scaled) of one key/value head,
    added into ``dK_j, dV_j`` and ``dQ (G, T, D)``, over the query blocks ``visits (i0, i1, allowed)`` of at most
    ``Br`` rows that see it (that head's ``Q (G, T, D)``, ``dO (G, T, Dv)``, ``minus_L, minus_D (G, T, 1)``)."""
    G, _, D = Q.shape
    Bc, Dv = V_j.shape
    K1, V1 = with_ones(K_js), with_ones(V_j)  # [K_j · scale, 1], [V_j, 1]
    Q1 = np.empty((G * Br, D + 1), dtype=K_j.dtype)  # [Q_i, -L_i], the G heads' rows one after another
    dO1 = np.empty((G * Br, Dv + 1), dtype=K_j.dtype)  # [dO_i, -D_i]
    tile = np.empty((2, Bc, G * Br), dtype=K_j.dtype)  # P_ijᵀ and dS_ijᵀ, reused
    for i0, i1, allowed in visits:
        n = i1 - i0
        Q1_i, dO1_i = Q1[: G * n], dO1[: G * n]  # (G·Br, D + 1), (G·Br, Dv + 1)
        Q1_g, dO1_g = Q1_i.reshape(G, n, D + 1), dO1_i.reshape(G, n, Dv + 1)  # the same memory, head by head
        Q1_g[..., :D], Q1_g[..., D:] = Q[:, i0:i1], minus_L[:, i0:i1]
        dO1_g[..., :Dv], dO1_g[..., Dv:] = dO[:, i0:i1], minus_D[:, i0:i1]
        S_T = np.matmul(K1, Q1_i.T, out=tile[0, :, : G * n])  # (S_ij - L_i)ᵀ  (Bc, G·Br)
        mask_inplace(S_T.reshape(Bc, G, n).transpose(1, 2, 0), allowed)
        P_T = np.exp(S_T, out=S_T)  # P_ijᵀ
        dP_T = np.matmul(V1, dO1_i.T, out=tile[1, :, : G * n])  # (dP_ij - D_i)ᵀ  (Bc, G·Br)
        dS_T = np.multiply(dP_T, P_T, out=dP_T)  # dS_ijᵀ = (P_ij ∘ (dP_ij - D_i))ᵀ
        dV_j += P_T @ dO1_i[:, :Dv]  # dV_j += P_ijᵀ dO_i, summed over the G heads  (Bc, Dv)
        dK_j += dS_T @ Q1_i[:, :D]  # dK_j += dS_ijᵀ Q_i  (Bc, D), times scale later
        dQ[:, i0:i1] += (dS_T.T @ K_j).reshape(G, n, D)  # dQ_i += dS_ij K_j  (G, Br, D), times scale later


# --- the fast path of attention_backward ----------------------------------------------------------------------------
# The textbook lines write dP and dS for every head to memory and read them back several times. The blocked path
# below evaluates the same five lines a block of query rows at a time, so that a block's dP and dS stay in a core's
# cache, with the blocks spread over every core; each task returns its share of dK and dV, summed in a fixed order.
# It computes dS in place (softmax_backward_inplace) and only the order of additions differs: rounding, nothing else.


def _attention_backward_blocked(p: QKV, dout: np.ndarray, P: np.ndarray | None, dtype: np.dtype):
    """``attention_backward``'s lines in blocks of query rows sized to a core's cache, on every core: ``dq`` grouped
    ``(..., Hkv, G, T, D)``, ``dk (..., Hkv, S, D)``, ``dv (..., Hkv, S, Dv)``, in the compute dtype."""
    T, D, S, Hkv, Dv, scale = p.T, p.D, p.S, p.Hkv, p.Dv, p.scale
    q_, k_, v_, dO = (a.astype(dtype, copy=False) for a in (p.q, p.k, p.v, dout))  # a copy only for float16
    if P is None:
        _, P = attention(q_, k_, v_, p.mask, causal=p.causal, scale=scale, return_weights=True)  # (..., H, T, S)
    Pg, Qg, dOg = (group_query_heads(a, Hkv) for a in (P, q_, dO))  # (..., Hkv, G, T, S|D|Dv)
    lead, G = Pg.shape[:-3], Pg.shape[-3]  # lead = (..., Hkv)
    dq = np.empty((*lead, G, T, D), dtype=dtype)  # (..., Hkv, G, T, D)
    step = max(1, ROW_BLOCK_ELEMENTS // (G * S))  # rows per block, so that a block of dP stays in cache

    def rows(idx, r0, r1):
        """Rows r0:r1 of dQ for one key/value head, and their share of its dK and dV (summed by the caller)."""
        K, V = k_[idx], v_[idx]  # (S, D), (S, Dv)
        dK, dV = np.zeros((S, D), dtype=dtype), np.zeros((S, Dv), dtype=dtype)
        buf = np.empty((G, min(step, r1 - r0), S), dtype=dtype)
        for a in range(r0, r1, step):
            b = min(a + step, r1)
            P_, Q_, dO_ = Pg[idx][:, a:b], Qg[idx][:, a:b], dOg[idx][:, a:b]  # (G, r, S), (G, r, D), (G, r, Dv)
            dS = np.matmul(dO_, V.T, out=buf[:, : b - a])  # dP = dO Vᵀ  (G, r, S)
            softmax_backward_inplace(P_, dS)  # dS = P ∘ (dP - rowsum(P ∘ dP))
            np.matmul(dS, K, out=dq[idx][:, a:b])  # dQ = dS K  (G, r, D), times scale below
            for g in range(G):  # a key/value head's gradient sums over its G query heads
                dV += P_[g].T @ dO_[g]  # dV = Pᵀ dO  (S, Dv)
                dK += dS[g].T @ Q_[g]  # dK = dSᵀ Q  (S, D), times scale below
        return idx, dK, dV

    n_lead = int(np.prod(lead, dtype=np.int64))
    per_task = min(T, max(step, -(-T * n_lead // (4 * workers()))))  # a few tasks per core
    tasks = [(idx, r0, min(r0 + per_task, T)) for idx in np.ndindex(*lead) for r0 in range(0, T, per_task)]
    dk, dv = np.zeros((*lead, S, D), dtype=dtype), np.zeros((*lead, S, Dv), dtype=dtype)
    for idx, dK, dV in run_blocks(rows, tasks, P.size):
        dk[idx] += dK
        dv[idx] += dV
    dq *= dtype.type(scale)  # dQ = dS K · scale
    dk *= dtype.type(scale)  # dK = dSᵀ Q · scale
    return dq, dk, dv


