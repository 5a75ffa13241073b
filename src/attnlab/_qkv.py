"""The arguments every attention function shares: ``q, k, v``, the mask, grouped-query views and score tiles.

``attention``, ``online`` (tiled attention) and ``backward`` all take ``q (..., H, T, D)``, ``k, v (..., Hkv, S, D)``,
a boolean mask broadcastable to ``(..., H, T, S)`` and a ``causal`` flag. This module checks those arguments once, in
one way, and holds the index arithmetic they share: the ``(..., Hkv, G, T, X)`` view of grouped-query attention and
which ``Br x Bc`` tiles of the ``(T, S)`` scores a tiled pass must visit. It sits beneath the three concept modules
(and above ``_checks`` and ``masks``), so none of them reaches into another for plumbing.
"""

from __future__ import annotations

import numpy as np

from ._checks import broadcast_mask, float_array
from .masks import causal_mask


def check_qkv(q, k, v):
    """Validate ``q (..., H, T, D)``, ``k (..., Hkv, S, D)``, ``v (..., Hkv, S, Dv)``; return them as arrays.

    Two-dimensional ``(T, D)`` / ``(S, D)`` inputs are accepted as a single head. Raises ``ValueError`` naming the
    mismatch (``"k has D=32 but q has D=64"``, ``"H=6 is not a multiple of Hkv=4"``, ...).
    """
    q, k, v = float_array(q, "q", min_ndim=2), float_array(k, "k", min_ndim=2), float_array(v, "v", min_ndim=2)
    if not q.ndim == k.ndim == v.ndim:
        raise ValueError(f"q, k and v must have the same number of dimensions, got shapes {q.shape}, {k.shape}, {v.shape}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k has D={k.shape[-1]} but q has D={q.shape[-1]}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"v of shape {v.shape} must match k of shape {k.shape} in all but the last axis (S and Hkv)")
    if q.ndim >= 3:
        if q.shape[:-3] != k.shape[:-3]:
            raise ValueError(f"batch shape of k {k.shape[:-3]} does not match batch shape of q {q.shape[:-3]}")
        H, Hkv = q.shape[-3], k.shape[-3]
        if H % Hkv:
            raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
    if q.shape[-2] == 0 or k.shape[-2] == 0 or q.shape[-1] == 0:
        raise ValueError(f"T, S and D must be >= 1, got q {q.shape} and k {k.shape}")
    return q, k, v


def check_shaped(x, name: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Validate that ``x`` is a floating array of exactly ``shape`` (``what`` says where that shape comes from)."""
    x = float_array(x, name, min_ndim=0)
    if x.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} ({what}), got {x.shape}")
    return x


def check_causal_fits(causal: bool, T: int, S: int) -> None:
    """Causal queries are the last ``T`` of ``S`` positions, so they need ``T <= S``."""
    if causal and T > S:
        raise ValueError(f"T={T} queries cannot be the last T positions of S={S} keys; expected T <= S")


def prepare_mask(mask, causal: bool, q_shape: tuple[int, ...], S: int) -> np.ndarray | None:
    """Combine a user mask with the causal mask, checked against the full score shape ``(..., H, T, S)``."""
    T = q_shape[-2]
    score_shape = (*q_shape[:-1], S)
    if mask is not None:
        mask = broadcast_mask(mask, score_shape)
    if causal:
        c = causal_mask(T, S)
        mask = c if mask is None else mask & c
    return mask


def group_query_heads(x: np.ndarray, Hkv: int) -> np.ndarray:
    """View ``(..., H, T, X)`` as ``(..., Hkv, G, T, X)``: query head ``h`` uses key/value head ``h // G``.

    This is grouped-query attention without copying K and V: K and V get a size-1 group axis and broadcast.
    """
    H = x.shape[-3]
    return x.reshape(*x.shape[:-3], Hkv, H // Hkv, *x.shape[-2:])  # (..., Hkv, G, T, X)


def group_mask(mask: np.ndarray, ndim: int, H: int, Hkv: int) -> np.ndarray:
    """Reshape a mask broadcastable to ``(..., H, T, S)`` so that it broadcasts to ``(..., Hkv, G, T, S)``."""
    mask = mask.reshape((1,) * (ndim - mask.ndim) + mask.shape)  # same rank as the scores
    if mask.shape[-3] == H:
        return mask.reshape(*mask.shape[:-3], Hkv, H // Hkv, *mask.shape[-2:])  # (..., Hkv, G, T, S)
    return mask[..., None, :, :]  # (..., 1, 1, T, S)


# --- tiles of the (T, S) scores -------------------------------------------------------------------------------------
# Query i sits at absolute position S - T + i (the queries are the last T positions), so under a causal mask query
# rows [i0, i1) see keys j <= S - T + i1 - 1, and key j is seen by query rows i >= j - (S - T).


def key_blocks(i0: int, i1: int, S: int, T: int, Bc: int, causal: bool) -> list[tuple[int, int]]:
    """Key blocks ``[j0, j1)`` that query rows ``[i0, i1)`` must visit; under a causal mask, none past the diagonal."""
    last = S if not causal else S - T + i1  # the last query row (absolute position S - T + i1 - 1) sees keys < this
    return [(j0, min(j0 + Bc, S)) for j0 in range(0, last, Bc)]


def query_blocks(j0: int, T: int, S: int, Br: int, causal: bool) -> list[tuple[int, int]]:
    """Query blocks ``[i0, i1)`` that see some key of the block starting at ``j0``: the transpose of ``key_blocks``."""
    first = max(0, j0 - (S - T)) // Br * Br if causal else 0  # the block holding the first query row that sees key j0
    return [(i0, min(i0 + Br, T)) for i0 in range(first, T, Br)]


def tile_mask(mask: np.ndarray | None, causal: bool, T: int, S: int, i0: int, i1: int, j0: int, j1: int):
    """What may be attended in the tile of query rows ``[i0, i1)`` and keys ``[j0, j1)`` of one key/value head.

    ``mask`` is that head's grouped mask ``(G, T, S)`` (or None). Returns None when every score of the tile may be
    attended, else a boolean array broadcastable to ``(G, i1 - i0, j1 - j0)``; a tile with no True is skipped.
    """
    allowed = None if mask is None else mask[:, i0:i1, j0:j1]  # (G, Br, Bc)
    if causal and j1 - 1 > S - T + i0:  # this tile straddles the diagonal
        diag = np.arange(j0, j1) <= np.arange(S - T + i0, S - T + i1)[:, None]  # (Br, Bc)
        allowed = diag if allowed is None else allowed & diag
    return allowed
