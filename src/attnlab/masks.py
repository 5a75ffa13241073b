"""Boolean attention masks: ``True`` = may attend, shape ``(T, S)`` or broadcastable to ``(..., H, T, S)``.

Query ``i`` of ``T`` is taken to be the last ``T`` positions of an ``S``-long sequence, so it sits at absolute position
``S - T + i``. With ``T == S`` that is the ordinary square case; with ``T == 1`` it is one decode step against a cache.
"""

from __future__ import annotations

import numpy as np

from ._checks import bool_array, positive_int


def _positions(T: int, S: int) -> tuple[np.ndarray, np.ndarray]:
    """Absolute positions of the T queries (as a column) and of the S keys (as a row)."""
    if T > S:
        raise ValueError(f"T={T} queries cannot be the last T positions of S={S} keys; expected T <= S")
    i = np.arange(S - T, S)[:, None]  # (T, 1)
    j = np.arange(S)[None, :]  # (1, S)
    return i, j


def causal_mask(T: int, S: int | None = None) -> np.ndarray:
    """Query at position ``i`` may attend to keys ``j <= i``.

    Parameters
    ----------
    T : int
        Number of queries.
    S : int, optional
        Number of keys (default ``T``). For ``T < S`` the queries are the last ``T`` positions.

    Returns
    -------
    mask : (T, S) bool ndarray

    Examples
    --------
    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    >>> causal_mask(1, 4).astype(int)  # one decode step sees the whole cache
    array([[1, 1, 1, 1]])
    """
    T = positive_int(T, "T")
    S = T if S is None else positive_int(S, "S")
    i, j = _positions(T, S)
    return j <= i


def sliding_window_mask(T: int, S: int | None = None, window: int = 1, *, sinks: int = 0) -> np.ndarray:
    """Causal attention to the last ``window`` positions only: ``i - window < j <= i``; with ``sinks > 0`` also to the
    first ``sinks`` positions (``j < sinks``, attention sinks kept for good).

    Returns
    -------
    mask : (T, S) bool ndarray

    Examples
    --------
    >>> sliding_window_mask(4, window=2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    >>> sliding_window_mask(4, window=2, sinks=1).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [1, 1, 1, 0],
           [1, 0, 1, 1]])
    """
    T = positive_int(T, "T")
    S = T if S is None else positive_int(S, "S")
    window = positive_int(window, "window")
    sinks = positive_int(sinks, "sinks", allow_zero=True)
    i, j = _positions(T, S)
    return (j <= i) & ((j > i - window) | (j < sinks))


def _lengths(lengths, S: int) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"lengths must be a 1-D integer array (one length per sequence), got {arr.dtype} of shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"lengths must be >= 0, got {arr.min()}")
    if arr.size and arr.max() > S:
        raise ValueError(f"lengths must be <= S={S}, got {arr.max()}")
    return arr


def padding_mask(lengths, S: int, side: str = "right") -> np.ndarray:
    """Keys that are real tokens, for a batch of sequences padded to length ``S``.

    Parameters
    ----------
    lengths : (B,) int array
        Real length of each sequence, ``0 <= length <= S``.
    S : int
        Padded length.
    side : {"right", "left"}
        Where the padding sits: ``"right"`` = tokens first, ``"left"`` = padding first (common when generating).

    Returns
    -------
    mask : (B, 1, 1, S) bool ndarray
        Broadcasts against ``(B, H, T, S)`` scores: every query of sequence ``b`` may attend to its real keys.

    Examples
    --------
    >>> padding_mask([2, 3], 4)[:, 0, 0].astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 1, 0]])
    >>> padding_mask([2, 3], 4, side="left")[:, 0, 0].astype(int)
    array([[0, 0, 1, 1],
           [0, 1, 1, 1]])
    """
    S = positive_int(S, "S")
    lengths = _lengths(lengths, S)
    j = np.arange(S)[None, :]  # (1, S)
    if side == "right":
        keep = j < lengths[:, None]
    elif side == "left":
        keep = j >= S - lengths[:, None]
    else:
        raise ValueError(f'side must be "right" or "left", got {side!r}')
    return keep[:, None, None, :]  # (B, 1, 1, S)


def position_ids(lengths, S: int, side: str = "right") -> np.ndarray:
    """Position of each token within its own sequence, so that padding never shifts positions.

    Real tokens are numbered ``0, 1, ...`` from their first real token; padded slots get ``0`` (they are masked).

    Returns
    -------
    pos : (B, S) int ndarray

    Examples
    --------
    >>> position_ids([2, 3], 4, side="left")
    array([[0, 0, 0, 1],
           [0, 0, 1, 2]])
    """
    S = positive_int(S, "S")
    lengths = _lengths(lengths, S)
    real = padding_mask(lengths, S, side)[:, 0, 0, :]  # (B, S)
    return np.where(real, np.cumsum(real, axis=1) - 1, 0)


def document_mask(segment_ids, kv_segment_ids=None) -> np.ndarray:
    """Block-diagonal mask for several documents packed into one sequence: attend only within your own document.

    Parameters
    ----------
    segment_ids : (..., T) int array
        Document id of each query position (e.g. ``[0, 0, 0, 1, 1, 2]``).
    kv_segment_ids : (..., S) int array, optional
        Document id of each key position (default: ``segment_ids``).

    Returns
    -------
    mask : (..., 1, T, S) bool ndarray
        The head axis is left as 1 so the mask broadcasts to ``(..., H, T, S)``. Combine with :func:`causal_mask` for
        causal packed training.

    Examples
    --------
    >>> document_mask([0, 0, 1])[0].astype(int)
    array([[1, 1, 0],
           [1, 1, 0],
           [0, 0, 1]])
    """
    q_ids = np.asarray(segment_ids)
    k_ids = q_ids if kv_segment_ids is None else np.asarray(kv_segment_ids)
    for name, ids in (("segment_ids", q_ids), ("kv_segment_ids", k_ids)):
        if ids.ndim < 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"{name} must be an integer array of shape (..., T), got {ids.dtype} of shape {ids.shape}")
    if q_ids.shape[:-1] != k_ids.shape[:-1]:
        raise ValueError(f"kv_segment_ids batch shape {k_ids.shape[:-1]} does not match segment_ids batch shape {q_ids.shape[:-1]}")
    same = q_ids[..., :, None] == k_ids[..., None, :]  # (..., T, S)
    return same[..., None, :, :]  # (..., 1, T, S)


def combine_masks(*masks) -> np.ndarray:
    """A position may be attended only if every mask allows it (logical AND, with broadcasting).

    ``None`` entries are skipped, so optional masks can be passed straight through.

    Examples
    --------
    >>> combine_masks(causal_mask(3), padding_mask([2], 3))[0, 0].astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 0]])
    """
    present = [bool_array(m, f"mask {n}") for n, m in enumerate(masks) if m is not None]
    if not present:
        raise ValueError("combine_masks needs at least one mask, got none")
    try:
        shape = np.broadcast_shapes(*(m.shape for m in present))
    except ValueError:
        shapes = ", ".join(str(m.shape) for m in present)
        raise ValueError(f"masks of shapes {shapes} do not broadcast together") from None
    out = np.ones(shape, dtype=bool)
    for m in present:
        out &= m
    return out
