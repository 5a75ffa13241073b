"""Sliding-window attention: each query sees only the last ``window`` positions (and, optionally, the first ``sinks``).

Query ``i`` may attend to key ``j`` when ``i - window < j <= i`` (the window, ``window`` keys including itself) or
``j < sinks`` (a few "attention sink" tokens kept from the start, Xiao et al., 2023). This is
:func:`attnlab.sliding_window_mask`; the two functions here compute the same thing without ever building the
``(T, S)`` mask:

* :func:`window_attention`, the pass over blocks of ``Br`` query rows, each against only the keys its window (and the
  sinks) can reach: ``Br x (sinks + window + Br - 1)`` scores at a time, so time and memory grow as ``T · window``,
  not ``T · S``;
* :func:`window_decode`, token by token with a rolling buffer of ``sinks + window`` key/value slots: the KV cache of a
  windowed model stops growing at ``window`` positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import positive_int
from ._qkv import check_qkv
from .attention import attention


@dataclass(frozen=True)
class WindowStats:
    """What :func:`window_attention` did: the ``(query, key)`` pairs whose score it computed, out of ``T · S``, and the
    most scores one block held at once (``Br x keys``)."""

    pairs_computed: int
    pairs_total: int
    max_block_elements: int


def _window_args(window, sinks):
    return positive_int(window, "window"), positive_int(sinks, "sinks", allow_zero=True)


def window_attention(q, k, v, window: int, *, sinks: int = 0, scale=None, Br: int = 64, return_stats: bool = False):
    """Causal sliding-window attention, block of query rows by block, touching only the keys a block can reach.

    Parameters
    ----------
    q : (..., H, T, D) ndarray
        Queries, the last ``T`` of ``S`` positions (as for :func:`attnlab.causal_mask`).
    k, v : (..., Hkv, S, D) and (..., Hkv, S, Dv) ndarray
        Keys and values.
    window : int
        Keys per query in the window, the query's own position included: ``i - window < j <= i``.
    sinks : int
        The first ``sinks`` positions stay visible to every query (default 0: none).
    scale : float, optional
        Default ``1 / sqrt(D)``.
    Br : int
        Query rows per block.
    return_stats : bool
        Also return a :class:`WindowStats`.

    Returns
    -------
    out : (..., H, T, Dv) ndarray
        Equal to ``attention(q, k, v, sliding_window_mask(T, S, window, sinks=sinks))``.

    Notes
    -----
    Queries ``i0 .. i1-1`` (absolute positions ``S - T + i0 ...``) reach the keys from ``S - T + i0 - window + 1`` to
    ``S - T + i1 - 1`` and the sinks; only those are sliced out and handed to :func:`attnlab.attention` with the
    block's small mask. Every other key tile is skipped, so the work per query is ``sinks + window + Br - 1`` keys at
    most, whatever ``S`` is.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 1, 9, 4))
    >>> from attnlab import attention, sliding_window_mask
    >>> bool(np.allclose(window_attention(q, k, v, 3, Br=4), attention(q, k, v, sliding_window_mask(9, window=3))))
    True
    """
    q, k, v = check_qkv(q, k, v)
    window, sinks = _window_args(window, sinks)
    Br = positive_int(Br, "Br")
    T, S = q.shape[-2], k.shape[-2]
    if T > S:
        raise ValueError(f"T={T} queries cannot be the last T positions of S={S} keys; expected T <= S")
    out = np.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)  # (..., H, T, Dv), attention's output dtype
    computed, biggest = 0, 0
    for i0 in range(0, T, Br):
        i1 = min(i0 + Br, T)
        first, last = S - T + i0, S - T + i1 - 1  # absolute positions of the block's queries
        lo = max(sinks, first - window + 1, 0)  # the window's keys: lo .. last (the sinks are added separately)
        cols = np.r_[np.arange(min(sinks, S)), np.arange(lo, last + 1)]  # (keys,) absolute key positions
        i = np.arange(first, last + 1)[:, None]  # (r, 1)
        j = cols[None, :]  # (1, keys)
        allowed = (j <= i) & ((j > i - window) | (j < sinks))  # (r, keys), the block's part of the mask
        out[..., i0:i1, :] = attention(q[..., i0:i1, :], k[..., cols, :], v[..., cols, :], allowed, scale=scale)
        computed += (i1 - i0) * len(cols)
        biggest = max(biggest, (i1 - i0) * len(cols))
    if return_stats:
        return out, WindowStats(computed, T * S, biggest)
    return out


def window_decode(q, k, v, window: int, *, sinks: int = 0, scale=None):
    """Decode token by token with a rolling key/value buffer of ``sinks + window`` slots; return every step's output.

    Parameters
    ----------
    q, k, v : (..., H, T, D), (..., Hkv, T, D), (..., Hkv, T, Dv) ndarray
        One query, key and value per position, arriving in order (``T == S``).
    window, sinks, scale
        As in :func:`window_attention`.

    Returns
    -------
    out : (..., H, T, Dv) ndarray
        Equal to ``attention(q, k, v, sliding_window_mask(T, window=window, sinks=sinks))``, computed without ever
        holding more than ``sinks + window`` keys.

    Notes
    -----
    Position ``t < sinks`` is written to slot ``t`` for good. Position ``t >= sinks`` overwrites slot
    ``sinks + (t - sinks) % window``: the oldest key of the window, which the new query no longer sees. A slot is
    valid when it holds a sink, or a key ``j`` with ``t - window < j``; empty slots are masked out.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 1, 7, 4))
    >>> bool(np.allclose(window_decode(q, k, v, 2, sinks=1), window_attention(q, k, v, 2, sinks=1)))
    True
    """
    q, k, v = check_qkv(q, k, v)
    window, sinks = _window_args(window, sinks)
    T = q.shape[-2]
    if k.shape[-2] != T:
        raise ValueError(f"window_decode takes one key per query: expected S == T={T}, got S={k.shape[-2]}")
    slots = sinks + window
    buf_k = np.zeros((*k.shape[:-2], slots, k.shape[-1]), dtype=k.dtype)  # (..., Hkv, sinks + window, D)
    buf_v = np.zeros((*v.shape[:-2], slots, v.shape[-1]), dtype=v.dtype)  # (..., Hkv, sinks + window, Dv)
    pos = np.full(slots, -1)  # the absolute position each slot holds, -1 = empty
    outs = []
    for t in range(T):
        slot = t if t < sinks else sinks + (t - sinks) % window  # the sink slot, or the window's oldest slot
        buf_k[..., slot, :], buf_v[..., slot, :], pos[slot] = k[..., t, :], v[..., t, :], t
        valid = (pos >= 0) & ((pos < sinks) | (pos > t - window))  # (slots,)
        outs.append(attention(q[..., t : t + 1, :], buf_k, buf_v, valid[None, :], scale=scale))  # (..., H, 1, Dv)
    return np.concatenate(outs, axis=-2)  # (..., H, T, Dv)
