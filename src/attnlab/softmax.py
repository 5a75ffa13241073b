"""The numerically stable, mask-aware softmax."""

from __future__ import annotations

import numpy as np

from ._checks import broadcast_mask, compute_dtype, float_array


def softmax(scores, mask=None, *, axis: int = -1, out=None) -> np.ndarray:
    """Softmax along ``axis`` with the row maximum subtracted, masked entries at exactly 0.

    Parameters
    ----------
    scores : (..., S) ndarray
        Real-valued scores (logits), any floating dtype.
    mask : (..., S) bool ndarray, optional
        ``True`` = may attend; broadcastable to ``scores``. Masked entries get weight exactly 0.
    axis : int
        The axis to normalise over (default: the last).
    out : ndarray, optional
        Where to write the weights: an array of the shape and dtype of ``scores`` (float32 or float64), possibly
        ``scores`` itself, so that the ``(..., S)`` matrix is held once.

    Returns
    -------
    weights : ndarray, same shape and dtype as ``scores``
        Each row sums to 1, or is all zeros when every entry of the row is masked.

    Notes
    -----
    ``softmax(x)_j = exp(x_j - m) / sum_i exp(x_i - m)`` with ``m = max_i x_i`` over the unmasked entries. Subtracting
    ``m`` changes nothing mathematically and keeps every ``exp`` in ``(0, 1]``, so nothing overflows. A fully masked
    row has no maximum; this library defines its weights as zeros (never NaN, never a warning). float16 input is
    computed in float32 and returned as float16. NaN in ``scores`` propagates to its row: it is not hidden.

    Examples
    --------
    >>> softmax(np.array([1000.0, 999.0, 0.0])).round(4)
    array([0.7311, 0.2689, 0.    ])
    >>> softmax(np.array([1.0, 2.0]), mask=np.array([False, False]))
    array([0., 0.])
    """
    scores = float_array(scores, "scores")
    if not -scores.ndim <= axis < scores.ndim:
        raise ValueError(f"axis must be in [-{scores.ndim}, {scores.ndim}) for scores of shape {scores.shape}, got {axis}")
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != scores.shape
                            or out.dtype != scores.dtype or out.dtype != compute_dtype(scores)):
        raise ValueError(f"out must be a float32 or float64 array of the shape and dtype of scores {scores.shape} "
                         f"{scores.dtype}, got {getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)}")
    if mask is not None:
        mask = np.moveaxis(np.broadcast_to(broadcast_mask(mask, scores.shape), scores.shape), axis, -1)
    if out is not None:
        if out is not scores:
            np.copyto(out, scores)
        softmax_inplace(np.moveaxis(out, axis, -1), mask)  # a view of out, normalised in place
        return out
    x = np.moveaxis(scores.astype(compute_dtype(scores), copy=True), axis, -1)  # a copy, normalised in place
    softmax_inplace(x, mask)
    return np.moveaxis(x, -1, axis).astype(scores.dtype, copy=False)


def mask_inplace(scores: np.ndarray, mask: np.ndarray | None) -> None:
    """Set the scores where ``mask`` is False to ``-inf``: the one place a boolean mask becomes an additive bias."""
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)


def softmax_inplace(x: np.ndarray, mask: np.ndarray | None = None, *, normalize: bool = True) -> np.ndarray:
    """Turn scores ``x (..., S)`` into weights in place, over the last axis (no checks: for trusted arrays).

    Masked entries and rows that are all ``-inf`` end as exact zeros, without NaN or warnings. Returns the row sums
    ``(..., 1)`` of ``exp(x - max)``; with ``normalize=False`` the rows are left unnormalised, so that a caller can divide
    something smaller than the weights by those sums (``P V / l`` instead of ``(P / l) V``).
    """
    mask_inplace(x, mask)
    m = x.max(axis=-1, keepdims=True)
    dead = np.isneginf(m)  # fully masked rows: there is no maximum
    m[dead] = 0.0
    with np.errstate(over="ignore"):  # x - m <= 0; if it overflows (|x| near the dtype's max) it is -inf: weight 0
        x -= m
    np.exp(x, out=x)  # exp(-inf) = 0 exactly: masked entries vanish here
    total = x.sum(axis=-1, keepdims=True)
    total[dead] = 1.0  # 0 / 1 = 0 for fully masked rows instead of 0 / 0
    if normalize:
        x /= total
    return total
