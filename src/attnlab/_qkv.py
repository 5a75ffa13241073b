"""The arguments every attention function shares: ``q, k, v``, the mask, grouped-query views and score tiles.

``attention``, ``tiled_attention``, ``attention_backward`` and ``tiled_attention_backward`` all take
``q (..., H, T, D)``, ``k, v (..., Hkv, S, D)``, a boolean mask broadcastable to ``(..., H, T, S)``, a ``causal`` flag
and a ``scale``. :func:`prepare_qkv` checks those arguments once, in one way, and returns them as a :class:`QKV`; the
module also holds the index arithmetic the four share: the ``(..., Hkv, G, T, X)`` view of grouped-query attention
and which ``Br x Bc`` tiles of the ``(T, S)`` scores a tiled pass must visit. It sits beneath the concept modules (and
above ``_checks`` and ``masks``), so none of them reaches into another for plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import broadcast_mask, compute_dtype, float_array, scale_value
from .masks import causal_mask


@dataclass(frozen=True)
class QKV:
    """Checked arguments of one attention call, with at least one head axis.

    ``q (..., H, T, D)``, ``k (..., Hkv, S, D)``, ``v (..., Hkv, S, Dv)`` as given (a 2-D single head has gained a
    head axis, which :meth:`restore` removes again from the results), the user's boolean ``mask`` checked against
    ``(..., H, T, S)`` (the causal mask is not folded in: :meth:`allowed` does that for whoever wants the whole
    matrix), the ``causal`` flag and the ``scale`` (``1/sqrt(D)`` by default).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None
    causal: bool
    scale: float
    one_head: bool

    H = property(lambda self: self.q.shape[-3])
    Hkv = property(lambda self: self.k.shape[-3])
    G = property(lambda self: self.q.shape[-3] // self.k.shape[-3])
    T = property(lambda self: self.q.shape[-2])
    S = property(lambda self: self.k.shape[-2])
    D = property(lambda self: self.q.shape[-1])
    Dv = property(lambda self: self.v.shape[-1])

    @property
    def dtype(self) -> np.dtype:
        """The compute dtype: float16 is computed in float32, otherwise the common type of ``q, k, v``."""
        return compute_dtype(self.q, self.k, self.v)

    @property
    def n_scores(self) -> int:
        """How many scores the whole ``(..., H, T, S)`` matrix holds."""
        return self.q.size // self.D * self.S

    def allowed(self) -> np.ndarray | None:
        """What may be attended, broadcastable to ``(..., H, T, S)``: the mask and, if causal, the causal mask."""
        mask = self.mask
        if self.causal:
            c = causal_mask(self.T, self.S)  # (T, S)
            mask = c if mask is None else mask & c
        return mask

    def grouped_mask(self, mask: np.ndarray | None) -> np.ndarray | None:
        """``mask`` (broadcastable to ``(..., H, T, S)``) broadcast to the grouped ``(..., Hkv, G, T, S)``."""
        if mask is None:
            return None
        lead = self.q.shape[:-3]
        return np.broadcast_to(group_mask(mask, self.q.ndim, self.H, self.Hkv),
                               (*lead, self.Hkv, self.G, self.T, self.S))

    def check_like_out(self, x, name: str) -> np.ndarray:
        """Check that ``x`` has the output's shape ``(..., H, T, Dv)`` as the caller gave it; add the head axis too."""
        shape = (*self.q.shape[:-1], self.Dv)
        x = check_shaped(x, name, shape[1:] if self.one_head else shape, "the output's: q's (..., H, T) and v's Dv")
        return x[None] if self.one_head else x

    def check_like_scores(self, x, name: str) -> np.ndarray:
        """Check that ``x`` has the scores' shape ``(..., H, T, S)`` as the caller gave it; add the head axis too."""
        shape = (*self.q.shape[:-1], self.S)
        x = check_shaped(x, name, shape[1:] if self.one_head else shape, "the scores': q's (..., H, T) and k's S")
        return x[None] if self.one_head else x

    def check_per_row(self, x, name: str, what: str) -> np.ndarray:
        """Check that ``x`` has one number per query row, ``(..., H, T)``; add the head axis too."""
        shape = self.q.shape[:-1]
        x = check_shaped(x, name, shape[1:] if self.one_head else shape, what)
        return x[None] if self.one_head else x

    def restore(self, x: np.ndarray) -> np.ndarray:
        """Remove the head axis that a 2-D single-head call gained."""
        return x[0] if self.one_head else x


def prepare_qkv(q, k, v, mask=None, *, causal: bool = False, scale=None) -> QKV:
    """Check the arguments of an attention call and return them as a :class:`QKV`.

    Raises ``ValueError`` naming what was expected and what was given: mismatched shapes (:func:`check_qkv`), a mask
    that is not boolean or does not broadcast to ``(..., H, T, S)``, a scale that is not a positive finite number,
    and, for a causal call, more queries than keys (the queries are the last ``T`` of ``S`` positions).
    """
    q, k, v = check_qkv(q, k, v)
    one_head = q.ndim == 2
    if one_head:  # a single head (T, D): the mask must broadcast to (T, S); then add the head axis
        if mask is not None:
            broadcast_mask(mask, (q.shape[0], k.shape[0]))
        q, k, v = q[None], k[None], v[None]
    scale = scale_value(scale, q.shape[-1])
    mask = None if mask is None else broadcast_mask(mask, (*q.shape[:-1], k.shape[-2]))
    check_causal_fits(causal, q.shape[-2], k.shape[-2])
    return QKV(q, k, v, mask, bool(causal), scale, one_head)


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
    """Combine a user mask with the causal mask, checked against the full score shape ``(..., H, T, S)`` (for a
    function that takes ``q`` without the rest of :func:`prepare_qkv`)."""
    T = q_shape[-2]
    if mask is not None:
        mask = broadcast_mask(mask, (*q_shape[:-1], S))
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


def with_ones(x: np.ndarray) -> np.ndarray:
    """``[x, 1]``: ``x (S, D)`` with a column of ones appended, ``(S, D + 1)``. A matmul with it carries one more
    column for free: a row sum (``P [V, 1]``) or a per-row offset (``[Q, -c] [K, 1]ᵀ = Q Kᵀ - c``)."""
    out = np.ones((x.shape[0], x.shape[1] + 1), dtype=x.dtype)
    out[:, :-1] = x
    return out
