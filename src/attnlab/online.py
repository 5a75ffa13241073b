"""The online softmax and a tiled, FlashAttention-style forward pass.

The online softmax (Milakov and Gimelshein, 2018) reads the scores in blocks and keeps only a running maximum ``m``
and a running sum ``l`` of ``exp(x - m)``. When a block raises the maximum, the old sum is rescaled by
``exp(m_old - m_new)``. Tiled attention (Dao et al., 2022) applies the same idea to rows of ``q kᵀ``: it visits
``Br x Bc`` tiles of scores, never the whole ``T x S`` matrix, so its memory grows linearly in ``S``.

:func:`tiled_attention` returns the output alone unless asked for more; then a :class:`TiledResult`, read by name or
unpacked in the order of the flags.

Its tile loop is the textbook lines. From ``FAST_PATH_MIN_SCORES`` scores on, each block of query rows goes through
``_lazy_online_softmax`` (below the line) instead: the same online softmax, with two passes over every tile folded into
the matmuls and the maximum moved only when it must be.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import compute_dtype, float_array, positive_int
from ._parallel import MIN_PARALLEL_ELEMENTS, run_blocks, workers
from ._qkv import group_query_heads, key_blocks, prepare_qkv, tile_mask, with_ones
from .softmax import mask_inplace

# From this many scores on (the whole (..., H, T, S) matrix), tiled_attention takes the lazy-rescaling fast path.
FAST_PATH_MIN_SCORES = MIN_PARALLEL_ELEMENTS
# The fast path moves a row's reference maximum only when a tile's maximum passes it by more than this (in the units of
# the scores), which it learns from the tile's row sum: the unnormalised weights then stay at most Bc · e^8.
RESCALE_THRESHOLD = 8.0


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


def tiled_attention(q, k, v, mask=None, *, causal: bool = False, scale=None, Br: int = 512, Bc: int = 512,
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

    From ``FAST_PATH_MIN_SCORES`` scores on, the same loop runs with its passes over each tile folded into the matmuls,
    ``[Q_i, -m] [K_j, 1]ᵀ = S_ij - m`` and ``P_ij [V_j, 1] = [P_ij V_j, rowsum(P_ij)]``, and ``m`` taken as a row's
    maximum only on its first tile and moved only when a later tile's row sum shows that it must
    (``_lazy_online_softmax``). Memory then also holds one key/value head with its column of ones per core.

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

    def tiles(idx, i0, i1):
        """The key blocks ``(j0, j1, allowed)`` that rows i0:i1 of one key/value head visit; fully masked ones skipped."""
        for j0, j1 in key_blocks(i0, i1, S, T, Bc, causal):
            allowed = tile_mask(None if gmask is None else gmask[idx], causal, T, S, i0, i1, j0, j1)  # (G, Br, Bc)
            if allowed is not None and not allowed.any():  # nothing in this tile may be attended
                continue
            if visited is not None:
                visited[i0 // Br, j0 // Bc] = True
            yield j0, j1, allowed

    def row_block(idx, i0, i1, K1=None, V1=None):
        """Rows i0:i1 of the output of one key/value head (and its G query heads); through the fast path when given
        that head's keys and values with a column of ones, ``K1 (S, D + 1)`` and ``V1 (S, Dv + 1)``."""
        if K1 is not None:
            m, l, acc = _lazy_online_softmax(qg[idx][:, i0:i1], dtype.type(scale), K1, V1, tiles(idx, i0, i1),
                                             min(Bc, S))
        else:
            Q_i = qg[idx][:, i0:i1].astype(dtype) * dtype.type(scale)  # (G, Br, D)
            K, V = k[idx], v[idx]  # (S, D), (S, Dv)
            m = np.full((G, i1 - i0, 1), -np.inf, dtype=dtype)  # running row max
            l = np.zeros_like(m)  # running row sum of exp(S_ij - m)
            acc = np.zeros((G, i1 - i0, p.Dv), dtype=dtype)  # unnormalised output
            tile = np.empty((G, i1 - i0, min(Bc, S)), dtype=dtype)  # the one tile of scores, reused for every block
            for j0, j1, allowed in tiles(idx, i0, i1):
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
        np.divide(acc, l, out=out[idx][:, i0:i1])  # out_i = acc / l
        if lse is not None:
            L = lse[idx][:, i0:i1]  # (G, Br, 1)
            np.add(m, np.log(l), out=L)  # L_i = m + log(l)
            L[dead] = -np.inf  # the log of an empty sum

    def rows_of_head(idx, c, n):
        """Row blocks c, c + n, c + 2n, ... of one key/value head through the fast path (interleaved, so that causal
        work is shared evenly), with one copy of its keys and values with a column of ones for all of them."""
        K1, V1 = with_ones(k[idx]), with_ones(v[idx])
        for i0 in range(c * Br, T, n * Br):
            row_block(idx, i0, min(i0 + Br, T), K1, V1)

    # which tiles of the (T, S) grid were computed for at least one head: one byte a tile, only when asked for
    visited = np.zeros((-(-T // Br), -(-S // Bc)), dtype=bool) if return_stats else None
    if p.n_scores < FAST_PATH_MIN_SCORES:
        blocks = [(idx, i0, min(i0 + Br, T)) for idx in np.ndindex(*lead) for i0 in range(0, T, Br)]
        run_blocks(row_block, blocks, p.n_scores)  # blocks of query rows are independent: on every core
    else:  # a task per head, or per n-th of a head when there are too few heads to keep every core busy
        n = min(-(-T // Br), -(-4 * workers() // int(np.prod(lead, dtype=np.int64))))
        run_blocks(rows_of_head, [(idx, c, n) for idx in np.ndindex(*lead) for c in range(n)], p.n_scores)

    out = p.restore(out.reshape(*p.q.shape[:-1], p.Dv).astype(p.q.dtype, copy=False))  # (..., H, T, Dv)
    if not (return_lse or return_stats):
        return out
    stats = None
    if return_stats:
        n_tiles, computed = visited.size, int(visited.sum())
        stats = TiledStats(n_tiles, computed, n_tiles - computed, min(Br, T) * min(Bc, S))
    return TiledResult(out, None if lse is None else p.restore(lse.reshape(p.q.shape[:-1])), stats)  # lse (..., H, T)


# --- the fast path of tiled_attention -------------------------------------------------------------------------------
# Besides its two matmuls and its exponentials, the textbook loop makes three passes over every tile: the row maximum,
# the subtraction of m_new and the row sum. The fast path makes them on a row's first tile only:
#
# - The subtraction rides in the first matmul, on one more column: [Q_i · scale, -c] [K_j, 1]ᵀ = S_ij - c.
# - The row sum rides in the second, on one more column of ones: P_ij [V_j, 1] = [P_ij V_j, rowsum(P_ij)].
# - c, the reference the exponentials are taken against, is set by a row's first tile to its maximum, and then moves
#   only when it must. FlashAttention-4 does the same on GPUs ("updates are applied only when the maximum has changed
#   enough to impact numerical stability", Modal's write-up of its kernel, September 2025). Here even the check costs
#   no pass over the tile: a row sum of at most Bc · e^RESCALE_THRESHOLD, which the second matmul gives, proves that
#   none of that row's weights passed it. A tile where some row's sum does (or overflowed) is computed again with its
#   maximum, moving c (and rescaling the sums so far) on the rows whose maximum passed it by more than
#   RESCALE_THRESHOLD. After a row's first tile that is rare, and costs that one tile twice.
# - The tile is kept transposed, keys down and queries across: (S_ij - c)ᵀ = [K_j, 1] [Q_i · scale, -c]ᵀ, of shape
#   (Bc, G · Br), with the G query heads that share K_j side by side in one matmul. OpenBLAS's AVX-512 float32 kernel
#   computes this product faster than its transpose (measured on one core of an AMD EPYC with AVX-512, Br = 256,
#   Bc = 1024: 1.44 against 2.04 ns a score; its AVX2 kernel takes 1.31-1.35 either way).
#
# The result is the same sum, rescaled differently: out = acc / l is unchanged in exact arithmetic and L = c + log(l)
# as before. No weight passes Bc · e^RESCALE_THRESHOLD (e^14 for the default Bc, far from overflow in float32), and
# the largest weight of a row is at least 1 (it was 1 when c last moved), so l never underflows to look like a row
# with no allowed key.


def _lazy_online_softmax(Q_i, scale, K1, V1, tiles, Bc: int):
    """The online softmax of one block of query rows ``Q_i (G, Br, D)``, scaled by ``scale`` (a scalar of the compute
    dtype), over the key tiles ``(j0, j1, allowed)`` of ``K1 = [K, 1] (S, D + 1)`` and ``V1 = [V, 1] (S, Dv + 1)``:
    ``c, l, acc`` with ``out = acc / l`` and ``L = c + log(l)``, as the textbook loop's ``m, l, acc``. A row that saw no
    allowed key has ``l = 0``."""
    G, n, D = Q_i.shape
    Dv = V1.shape[1] - 1
    dtype = K1.dtype
    QcT = np.empty((D + 1, G * n), dtype=dtype)  # [Q_i · scale, -c]ᵀ, the G heads' rows side by side
    np.multiply(Q_i.transpose(2, 0, 1), scale, out=QcT[:D].reshape(D, G, n))  # one pass: transposed and scaled
    QcT[D] = 0
    minus_c = QcT[D]  # (G·Br,), a view: moving c changes the next matmul
    accT = np.zeros((Dv + 1, G * n), dtype=dtype)  # [unnormalised output, l]ᵀ
    tile = np.empty((Bc, G * n), dtype=dtype)
    seen = np.zeros(G * n, dtype=bool)  # rows that have met an allowed key (and so have a c)
    all_seen = False

    def scores(j0, j1, allowed):
        S_c = np.matmul(K1[j0:j1], QcT, out=tile[: j1 - j0])  # (S_ij - c)ᵀ  (Bc, G·Br)
        mask_inplace(S_c.reshape(j1 - j0, G, n).transpose(1, 2, 0), allowed)
        return S_c

    for j0, j1, allowed in tiles:
        S_c = scores(j0, j1, allowed)
        if all_seen:  # every row has its c: no maximum, unless a row sum shows that some row's weights outgrew it
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow only sends this tile round again
                part = V1[j0:j1].T @ np.exp(S_c, out=S_c)  # [P V_j, rowsum(P)]ᵀ  (Dv + 1, G·Br)
            if (part[Dv] <= (j1 - j0) * np.exp(RESCALE_THRESHOLD)).all():  # False for inf or NaN too
                accT += part
                continue
            S_c = scores(j0, j1, allowed)
        top = S_c.max(axis=0)  # rowmax(S_ij) - c  (G·Br,)
        move = top > RESCALE_THRESHOLD
        if not all_seen:
            move |= ~seen & (top > -np.inf)  # a row's first allowed scores set its c
            seen |= move
            all_seen = bool(seen.all())
        # c += top on the rows that move; their sums so far shrink by e^-top (a row met for the first time has none:
        # its factor is capped at 1, so that e^-top cannot overflow on scores far below zero)
        if move.all():
            S_c -= top
            accT *= np.exp(np.minimum(-top, 0))
            minus_c -= top
        elif move.any():
            r = np.flatnonzero(move)
            shift = top[r]
            S_c[:, r] -= shift
            accT[:, r] *= np.exp(np.minimum(-shift, 0))
            minus_c[r] -= shift
        accT += V1[j0:j1].T @ np.exp(S_c, out=S_c)  # [acc, l]ᵀ += [P V_j, rowsum(P)]ᵀ
    return -minus_c.reshape(G, n, 1), accT[Dv].reshape(G, n, 1), accT[:Dv].T.reshape(G, n, Dv)
