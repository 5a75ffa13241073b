"""Argument checks shared by the public functions.

Every public function validates at its boundary and raises ``ValueError`` naming what it expected and what it got.
Inside, the arrays are trusted.
"""

from __future__ import annotations

import numbers

import numpy as np


def float_array(x, name: str, *, min_ndim: int = 1) -> np.ndarray:
    """Return ``x`` as a floating ndarray, or raise ``ValueError`` saying why it is not one."""
    if isinstance(x, np.ndarray):
        arr = x
    else:
        try:
            arr = np.asarray(x)
        except Exception as exc:  # ragged lists and the like
            raise ValueError(f"{name} must be a floating-point array, got {type(x).__name__} ({exc})") from None
    if arr.dtype.kind != "f":
        raise ValueError(f"{name} must be a floating-point array (float16/32/64), got dtype {arr.dtype}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    return arr


def float_dtype(dtype) -> np.dtype:
    """Return ``dtype`` as a floating numpy dtype, or raise ``ValueError``."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f":
        raise ValueError(f"dtype must be a floating-point type (float16/32/64), got {dtype!r}")
    return dt


def bool_array(x, name: str) -> np.ndarray:
    """Return ``x`` as a boolean ndarray (True = may attend), or raise."""
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        raise ValueError(
            f"{name} must be a boolean array with True = may attend, got dtype {arr.dtype}"
            " (convert with `mask.astype(bool)`; an additive bias of 0/-inf is not a mask)"
        )
    return arr


def positive_int(x, name: str, *, allow_zero: bool = False) -> int:
    """Return ``x`` as an int that is > 0 (or >= 0), or raise."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {x!r}")
    x = int(x)
    if x < 0 or (x == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ValueError(f"{name} must be {bound}, got {x}")
    return x


def broadcast_mask(mask, target_shape: tuple[int, ...], name: str = "mask") -> np.ndarray:
    """Check that a boolean ``mask`` broadcasts to ``target_shape`` and return it unchanged (as ndarray)."""
    mask = bool_array(mask, name)
    try:
        np.broadcast_shapes(mask.shape, target_shape)
    except ValueError:
        raise ValueError(f"{name} of shape {mask.shape} does not broadcast to {target_shape}") from None
    if len(np.broadcast_shapes(mask.shape, target_shape)) != len(target_shape) or any(
        m != 1 and m != t for m, t in zip(mask.shape[::-1], target_shape[::-1])
    ):
        raise ValueError(f"{name} of shape {mask.shape} does not broadcast to {target_shape}")
    return mask


def scale_value(scale, D: int) -> float:
    """The softmax scale: ``1/sqrt(D)`` by default, else a positive finite number."""
    if scale is None:
        return 1.0 / np.sqrt(D)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real) or not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return float(scale)


def compute_dtype(*arrays: np.ndarray) -> np.dtype:
    """float16 is computed in float32; otherwise the common float type of the inputs."""
    dtype = np.result_type(*arrays)
    return np.dtype(np.float32) if dtype == np.float16 else dtype
