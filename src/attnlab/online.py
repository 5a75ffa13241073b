"""The online softmax and a tiled, FlashAttention-style forward pass.

The online softmax (Milakov and Gimelshein, 2018) reads the scores in blocks and keeps only a running maximum ``m``
and a running sum ``l`` of ``exp(x - m)``. When a block raises the maximum, the old sum is rescaled by
``exp(m_old - m_new)``. Tiled attention (Dao et al., 2022) applies the same idea to rows of ``q kᵀ``: it visits
``Br x Bc`` tiles of scores, never the whole ``T x S`` matrix, so its memory grows linearly in ``S``.

:func:`tiled_attention` returns the output alone unless asked for more; then a :class:`TiledResult`, read by name or
unpacked in the order of the flags.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import compute_dtype, float_array, positive_int
from ._parallel import run_blocks
from ._qkv import group_query_heads, key_blocks, prepare_qkv, tile_mask
from .softmax import mask_inplace


def online_softmax_stats(x, block_size: int = 2):
    """Stream ``x (..., S)`` in blocks along the last axis, keeping only the running max and sum.

    Returns
    -------
    m : (..., 1) ndarray
        The maximum of each row (``-inf`` for an empty or all ``-inf`` row).
    l : (..., 1) ndarray
        ``sum_j exp(x_j - m)`` of each row.
    trace : list of (m, l)
        The running values after each block, for plotting how they converge.
    """
    x = float_array(x, "x")
    block_size = positive_int(block_size, "block_size")
    dtype = compute_dtype(x)
    m = np.full((*x.shape[:-1], 1), -np.inf, dtype=dtype)
    l = np.zeros((*x.shape[:-1], 1), dtype=dtype)
    trace = []
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size].astype(dtype)
        m_new = np.maximum(m, block.max(axis=-1, keepdims=True))  # m_new = max(m, rowmax(block))
        m_safe = np.where(np.isneginf(m_new), 0, m_new)  # all -inf so far: nothing to subtract
        l = l * np.exp(m - m_safe) + np.exp(block - m_safe).sum(axis=-1, keepdims=True)  # rescale the old sum
        m = m_new
        trace.append((m.copy(), l.copy()))
    return m, l, trace


def online_softmax(x, block_size: int = 2) -> np.ndarray:
    """Softmax of ``x (..., S)`` along the last axis, computed in one streaming pass of blocks plus one output pass.

    Equal to :func:`attnlab.softmax` to float rounding; ``-inf`` entries act as masked, and an all ``-inf`` row gives
    zeros.

    Examples
    --------
    >>> online_softmax(np.array([1000.0, 999.0, 0.0]), block_size=2).round(4)
    array([0.7311, 0.2689, 0.    ])
    """
    m, l, _ = online_softmax_stats(x, block_size)
    x = np.asarray(x)
    dead = l == 0
    out = np.exp(x.astype(m.dtype) - np.where(dead, 0, m)) / np.where(dead, 1, l)
    return out.astype(x.dtype, copy=False)


@dataclass(frozen=True)
class TiledStats:
    """What a tiled pass did, on the grid of ``Br x Bc`` tiles over the ``(T, S)`` scores.

    A tile counts as computed when it was computed for at least one batch element and head, as skipped when it was
    skipped for all (entirely above the causal diagonal, or fully masked). ``score_tile_elements`` is the size of one
    tile of one head: the most scores a block of work holds at once (one block runs per core).
    """

    tiles_total: int
    tiles_computed: int
    tiles_skipped: int
    score_tile_elements: int


@dataclass(frozen=True)
class TiledResult:
    """What :func:`tiled_attention` returns when asked for more than the output.

    ``out (..., H, T, Dv)`` always; ``lse (..., H, T)`` with ``return_lse=True`` and ``stats`` (a :class:`TiledStats`)
    with ``return_stats=True``, else None. Unpacking gives the output and then what was asked for, in the order of the
    flags: ``out, lse = tiled_attention(..., return_lse=True)``, ``out, stats = tiled_attention(...,
    return_stats=True)``, ``out, lse, stats`` with both.
    """

    out: np.ndarray
    lse: np.ndarray | None = None
    stats: TiledStats | None = None

    def __iter__(self):
        return iter([self.out] + [x for x in (self.lse, self.stats) if x is not None])


def tiled_attention(q, k, v, mask=None, *, causal: bool = False, scale=None, Br: int = 256, Bc: int = 1024,
                    return_lse: bool = False, return_stats: bool = False):
    """Exact attention computed tile by tile with the online softmax, never holding more than a ``Br x Bc`` tile of
    scores per head.

    Parameters
    ----------
    q, k, v, mask, causal, scale
        As in :func:`attnlab.attention` (``q (..., H, T, D)``, ``k, v (..., Hkv, S, D)``, mask broadcastable to
        ``(..., H, T, S)``, ``True`` = may attend).
    Br, Bc : int
        Rows of queries and columns of keys per tile. Any sizes work, including ones that do not divide ``T`` or ``S``
        and ones larger than them. The defaults make a float32 tile of scores 1 MiB, about what one core's cache
        holds (measured fastest by ``make bench``).
    return_lse : bool
        Also return the log-sum-exp of each row, what :func:`attnlab.tiled_attention_backward` needs.
    return_stats : bool
        Also return a :class:`TiledStats` counting the tiles computed and skipped.

    Returns
    -------
    out : (..., H, T, Dv) ndarray
        Without either flag, the output alone, in the dtype of the inputs (float16 is computed in float32).
    result : TiledResult
        With ``return_lse`` or ``return_stats``: the output and what was asked for, by name (``result.out``,
        ``result.lse``, ``result.stats``) or unpacked in the order of the flags (``out, lse = ...``):

        ``lse (..., H, T)``: ``L_i = log sum_j exp(s_ij)`` over the allowed keys ``j`` of row ``i`` (the scores
        ``s = q kᵀ · scale``), in the compute dtype (float32 for float16 inputs, so that it is not rounded). A row
        with no allowed key has ``L = -inf`` (the log of an empty sum).

        ``stats``: a :class:`TiledStats`.

    Notes
    -----
    For each block of query rows ``Q_i`` it keeps the running row maximum ``m``, the running sum ``l`` and the
    unnormalised output ``acc``; for each key block ``K_j, V_j``::

        S_ij  = Q_i K_jᵀ · scale                          (Br, Bc)
        m_new = max(m, rowmax(S_ij))
        P_ij  = exp(S_ij - m_new)
        l     = exp(m - m_new) · l + rowsum(P_ij)
        acc   = exp(m - m_new) · acc + P_ij V_j
        m     = m_new

    and finally ``out_i = acc / l`` and ``L_i = m + log(l)``. Under a causal mask the tiles entirely above the
    diagonal are skipped; with any mask, a tile that is fully masked for every row is skipped too. Rows with no allowed
    key give zeros. Blocks of query rows are independent, so they run on every core (see ``attnlab._parallel``);
    memory is the output plus one tile per core, linear in ``S``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 2, 8, 4))
    >>> out, lse = tiled_attention(q, k, v, causal=True, Br=3, Bc=3, return_lse=True)
    >>> out.shape, lse.shape
    ((2, 8, 4), (2, 8))
    >>> from attnlab import attention
    >>> bool(np.allclose(out, attention(q, k, v, causal=True)))
    True
    """
    p = prepare_qkv(q, k, v, mask, causal=causal, scale=scale)  # checked; a 2-D head gains a head axis
    Br, Bc = positive_int(Br, "Br"), positive_int(Bc, "Bc")
    T, S, G, scale, dtype = p.T, p.S, p.G, p.scale, p.dtype  # float16 is computed in float32

    qg = group_query_heads(p.q, p.Hkv)  # (..., Hkv, G, T, D): query head h uses key/value head h // G
    k, v = p.k.astype(dtype, copy=False), p.v.astype(dtype, copy=False)  # once, not per tile (a copy only for float16)
    lead = qg.shape[:-3]  # (..., Hkv)
    # the causal part is index arithmetic per tile (key_blocks, tile_mask): no T x S array is built for it
    gmask = p.grouped_mask(p.mask)  # (..., Hkv, G, T, S) or None
    out = np.empty((*lead, G, T, p.Dv), dtype=dtype)  # (..., Hkv, G, T, Dv)
    lse = np.empty((*lead, G, T, 1), dtype=dtype) if return_lse else None  # (..., Hkv, G, T, 1)

    def row_block(idx, i0, i1):
        """Rows i0:i1 of the output of one key/value head (and its G query heads)."""
        Q_i = qg[idx][:, i0:i1].astype(dtype) * dtype.type(scale)  # (G, Br, D)
        K, V = k[idx], v[idx]  # (S, D), (S, Dv)
        m = np.full((G, i1 - i0, 1), -np.inf, dtype=dtype)  # running row max
        l = np.zeros_like(m)  # running row sum of exp(S_ij - m)
        acc = np.zeros((G, i1 - i0, p.Dv), dtype=dtype)  # unnormalised output
        tile = np.empty((G, i1 - i0, min(Bc, S)), dtype=dtype)  # the one tile of scores, reused for every key block
        for j0, j1 in key_blocks(i0, i1, S, T, Bc, causal):
            allowed = tile_mask(None if gmask is None else gmask[idx], causal, T, S, i0, i1, j0, j1)  # (G, Br, Bc)
            if allowed is not None and not allowed.any():  # nothing in this tile may be attended
                continue
            if visited is not None:
                visited[i0 // Br, j0 // Bc] = True
            S_ij = np.matmul(Q_i, K[j0:j1].T, out=tile[..., : j1 - j0])  # S_ij = Q_i K_jᵀ · scale  (G, Br, Bc)
            mask_inplace(S_ij, allowed)
            m_new = np.maximum(m, S_ij.max(axis=-1, keepdims=True))  # m_new = max(m, rowmax(S_ij))
            m_safe = np.where(np.isneginf(m_new), 0, m_new)  # rows with nothing allowed yet stay at zero
            S_ij -= m_safe
            P_ij = np.exp(S_ij, out=S_ij)  # P_ij = exp(S_ij - m_new), in place
            alpha = np.exp(m - m_safe)  # rescales what was accumulated under the old max
            l *= alpha
            l += P_ij.sum(axis=-1, keepdims=True)  # l = e^(m - m_new) l + rowsum(P_ij)
            acc *= alpha
            acc += P_ij @ V[j0:j1]  # acc = e^(m - m_new) acc + P_ij V_j
            m = m_new
        dead = l == 0  # rows with no allowed key
        l[dead] = 1  # 0 / 1 = 0
        out[idx][:, i0:i1] = acc / l  # out_i = acc / l
        if lse is not None:
            L = lse[idx][:, i0:i1]  # (G, Br, 1)
            np.add(m, np.log(l), out=L)  # L_i = m + log(l)
            L[dead] = -np.inf  # the log of an empty sum

    blocks = [(idx, i0, min(i0 + Br, T)) for idx in np.ndindex(*lead) for i0 in range(0, T, Br)]
    # which tiles of the (T, S) grid were computed for at least one head: one byte a tile, only when asked for
    visited = np.zeros((-(-T // Br), -(-S // Bc)), dtype=bool) if return_stats else None
    run_blocks(row_block, blocks, p.n_scores)  # blocks of query rows are independent: on every core

    out = p.restore(out.reshape(*p.q.shape[:-1], p.Dv).astype(p.q.dtype, copy=False))  # (..., H, T, Dv)
    if not (return_lse or return_stats):
        return out
    stats = None
    if return_stats:
        n_tiles, computed = visited.size, int(visited.sum())
        stats = TiledStats(n_tiles, computed, n_tiles - computed, min(Br, T) * min(Bc, S))
    return TiledResult(out, None if lse is None else p.restore(lse.reshape(p.q.shape[:-1])), stats)  # lse (..., H, T)
