"""Rotary position embeddings (RoPE; Su et al., 2021, "RoFormer"): positions enter the scores as rotations.

Query and key vectors ``(..., T, D)`` are cut into ``D/2`` pairs of coordinates. Pair ``j`` of the vector at position
``m`` is turned by the angle ``m * theta_j``, with ``theta_j = base ** (-2j / D)``: the frequencies of the sinusoids of
Vaswani et al. (2017). Rotations preserve dot products up to their difference, so ``rope(q, m) . rope(k, n)`` depends
on ``m - n`` only, never on ``m`` or ``n`` alone.

Pairing convention: **halves**, as in GPT-NeoX and the Hugging Face Llama code (``rotate_half``): coordinate ``j`` is
paired with coordinate ``j + D/2``. The RoFormer paper and Meta's original Llama code pair neighbours ``(2j, 2j+1)``
instead ("interleaved"). The two conventions differ only by a fixed permutation of the D coordinates, applied to
queries and keys alike, so they give the same scores; weights trained in one convention must be permuted to be used
with the other.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._checks import compute_dtype, float_array


def rope_angles(positions, D: int, *, base: float = 10000.0) -> np.ndarray:
    """The rotation angles ``m * theta_j`` of :func:`rope`: integer positions ``(..., T)`` -> ``(..., T, D/2)`` (float64).

    ``theta_j = base ** (-2j / D)`` for ``j = 0, ..., D/2 - 1``: pair 0 turns by one radian per position, the last pair
    about ``base`` times slower.

    Examples
    --------
    >>> rope_angles([0, 1, 2], 4).round(3)
    array([[0.  , 0.  ],
           [1.  , 0.01],
           [2.  , 0.02]])
    """
    if isinstance(D, (bool, np.bool_)) or not isinstance(D, numbers.Integral) or D < 2 or D % 2:
        raise ValueError(f"D must be an even integer >= 2 (RoPE rotates pairs of coordinates), got {D!r}")
    if (isinstance(base, (bool, np.bool_)) or not isinstance(base, numbers.Real) or not np.isfinite(base)
            or base <= 1):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iu" or pos.ndim < 1:
        raise ValueError(f"positions must be an integer array of shape (..., T), got {pos.dtype} of shape {pos.shape}")
    if pos.size and pos.min() < 0:
        raise ValueError(f"positions must be >= 0, got {pos.min()}")
    theta = float(base) ** (-np.arange(0, D, 2) / D)  # (D/2,)
    return pos[..., None].astype(np.float64) * theta  # (..., T, D/2)


def rope(x, positions=None, *, base: float = 10000.0) -> np.ndarray:
    """Rotate the query or key vectors ``x`` to their positions (rotary position embedding, halves convention).

    Parameters
    ----------
    x : (..., T, D) float ndarray
        Queries or keys, ``D`` even (for example ``q`` of shape ``(B, H, T, D)``).
    positions : (T,) or (..., T) int array, optional
        The position of each of the ``T`` vectors, ``>= 0``; it must broadcast against ``x.shape[:-1]`` (for ``x`` of
        shape ``(B, H, T, D)`` and per-sequence positions ``(B, T)``, pass ``positions[:, None, :]``). Default
        ``0, 1, ..., T-1``. Give the true position of each token: with left padding ``attnlab.position_ids``, and for
        the queries of a decode step the positions after the cached keys.
    base : float
        The base of the frequencies, ``theta_j = base ** (-2j / D)`` (10000 in RoFormer and the first Llama models).

    Returns
    -------
    rotated : (..., T, D) ndarray, of the dtype of ``x``
        Same shape; the angles are computed in float64 and the rotation in ``x``'s precision (float32 for float16).

    Notes
    -----
    With ``a = x[..., :D/2]``, ``b = x[..., D/2:]`` and ``phi = m * theta_j`` (from :func:`rope_angles`),

    .. math:: \\operatorname{rope}(x)_j = a_j \\cos\\phi_j - b_j \\sin\\phi_j, \\qquad
              \\operatorname{rope}(x)_{j + D/2} = b_j \\cos\\phi_j + a_j \\sin\\phi_j,

    which is ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = concat(-b, a)``; as complex numbers,
    ``(a + i b) * exp(i phi)``. Hence ``rope(q, m) . rope(k, n) = Re sum_j (a_j + i b_j)(c_j - i d_j) exp(i (m - n)
    theta_j)`` for ``k = concat(c, d)``: a function of ``m - n``.

    Examples
    --------
    >>> x = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])   # (T=3, D=2): one pair, turned by 1 radian a position
    >>> rope(x).round(3)
    array([[ 1.   ,  0.   ],
           [ 0.54 ,  0.841],
           [-0.416,  0.909]])
    """
    x = float_array(x, "x", min_ndim=2)
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"x must have an even width D (RoPE rotates pairs of coordinates), got D={D} in shape {x.shape}")
    pos = np.arange(T) if positions is None else np.asarray(positions)
    if pos.ndim < 1 or pos.shape[-1] != T:
        raise ValueError(f"positions must have shape (..., T) with T={T} (x has shape {x.shape}), got shape {pos.shape}")
    try:
        np.broadcast_shapes(pos.shape, x.shape[:-1])
    except ValueError:
        raise ValueError(f"positions of shape {pos.shape} do not broadcast against x's (..., T) = {x.shape[:-1]}; for x "
                         "of shape (B, H, T, D) and positions (B, T), pass positions[:, None, :]") from None
    if len(np.broadcast_shapes(pos.shape, x.shape[:-1])) > x.ndim - 1:
        raise ValueError(f"positions of shape {pos.shape} have more axes than x's (..., T) = {x.shape[:-1]}")
    phi = rope_angles(pos, D, base=base)  # (..., T, D/2) float64
    dtype = compute_dtype(x)
    cos, sin = np.cos(phi).astype(dtype), np.sin(phi).astype(dtype)  # (..., T, D/2)
    a, b = x[..., : D // 2].astype(dtype), x[..., D // 2:].astype(dtype)  # (..., T, D/2) each: the two halves
    rotated = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)  # (..., T, D)
    return rotated.astype(x.dtype, copy=False)
