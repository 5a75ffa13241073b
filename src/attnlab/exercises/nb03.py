"""Checks for notebook 03, "Why √d_k": the spread of q·k, the softmax Jacobian, and the scale of the scores.

Every checker calls the learner's function on fixed inputs (random ones come from fixed seeds), compares with the
reference, and on a mismatch names the classic mistake it recognises.
"""

from __future__ import annotations

import numpy as np

from ..softmax import softmax
from . import exercise, fail, seeded

# ------------------------------------------------------------------------------------------------------------- helpers


def _number(value, call: str) -> float:
    """The learner's answer as one float, or a failure that says why it is not one."""
    if value is None:
        fail(f"{call} returned None", "one number (a float)", "None", hint="did you forget the `return` line?")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        fail(f"{call} did not return a number", "one number (a float)", f"{type(value).__name__}")
    if arr.size != 1:
        fail(f"{call} should return one number", "a float", f"an array of shape {arr.shape}",
             hint="return the standard deviation of the n dot products (one number), not the dot products themselves")
    number = float(arr.reshape(()))
    if not np.isfinite(number):
        fail(f"{call} returned a non-finite number", "a finite float", number)
    return number


def _array(value, call: str, shape: tuple[int, ...]) -> np.ndarray:
    """The learner's answer as a float array of ``shape``, or a failure naming what came back instead."""
    if value is None:
        fail(f"{call} returned None", f"an array of shape {shape}", "None", hint="did you forget the `return` line?")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        fail(f"{call} did not return a numeric array", f"an array of shape {shape}", type(value).__name__)
    return arr


# ------------------------------------------------------------------------------------------ 3.1 the spread of q·k

_SPREAD_CASES = ((16, 31), (100, 32), (400, 33))  # (d_k, seed)
_SPREAD_N = 2000
_SPREAD_RTOL = 0.08  # the sample std of 2000 dot products is within ~2% of √d_k; 8% is > 4 standard errors


@exercise("3.1")
def check_dot_product_std(dot_product_std) -> None:
    """``dot_product_std(d_k, n, rng)`` must return the std of n dot products of unit-variance vectors: about √d_k."""
    measured = {}
    for d_k, seed in _SPREAD_CASES:
        call = f"dot_product_std({d_k}, {_SPREAD_N}, np.random.default_rng({seed}))"
        got = _number(dot_product_std(d_k, _SPREAD_N, np.random.default_rng(seed)), call)
        again = _number(dot_product_std(d_k, _SPREAD_N, np.random.default_rng(seed)), call)
        if got != again:
            fail(f"{call} gives a different number each time it is called with the same seed",
                 "the same number for the same seed", f"{got:.4f}, then {again:.4f}",
                 hint="draw every random number from the `rng` argument (rng.standard_normal(...)), "
                      "not from np.random.randn or a new np.random.default_rng()")
        measured[d_k] = got
    for d_k, got in measured.items():
        if abs(got / np.sqrt(d_k) - 1) > _SPREAD_RTOL:
            _diagnose_spread(d_k, got, measured)


def _diagnose_spread(d_k: int, got: float, measured: dict) -> None:
    call = f"dot_product_std({d_k}, {_SPREAD_N}, rng)"
    expected = f"about √{d_k} = {np.sqrt(d_k):.2f} (within {_SPREAD_RTOL:.0%})"
    ratio = got / np.sqrt(d_k)
    if abs(got / d_k - 1) < 0.15:
        hint = "that is the variance d_k; the standard deviation is its square root (use .std(), not .var())"
    elif all(abs(v - 1) < 0.15 for v in measured.values()):
        hint = ("your spread does not grow with d_k: did you divide the dot products by √d_k (this exercise measures "
                "the raw scores), or forget to sum the d_k products q_i·k_i into one dot product per pair?")
    elif abs(ratio - np.sqrt(2)) < 0.1:
        hint = ("√2 times too large: this is the spread of q·q = |q|², not of q·k; draw the keys separately from the "
                "queries")
    elif abs(ratio - np.sqrt(7 / 144)) < 0.05:
        hint = ("rng.random draws from [0, 1): mean 1/2 and variance 1/12, not mean 0 and variance 1; "
                "use rng.standard_normal")
    elif abs(got / np.sqrt(_SPREAD_N) - 1) < 0.5:
        hint = ("your spread grows with n, not with d_k: you summed over the n samples instead of over the d_k "
                "components (sum q * k over the last axis)")
    elif abs(ratio) < 0.1:
        hint = "that is close to 0, like the mean of q·k; the exercise asks for the standard deviation"
    else:
        hint = "q and k should each be drawn with rng.standard_normal, multiplied elementwise and summed over d_k"
    fail(f"{call} is not the spread of q·k", expected, f"{got:.4f}", hint=hint)


# ------------------------------------------------------------------------------------- 3.2 the softmax Jacobian

_JACOBIAN_SCORES = np.array([2.0, 0.5, -1.0, 1.0, 0.0])
_JACOBIAN_BATCH = np.array([[0.3, -1.2, 2.0, 0.1], [5.0, 0.0, 0.0, -5.0], [1.0, 1.0, 1.0, 1.0]])


def _jacobian(p: np.ndarray) -> np.ndarray:
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]  # (..., S, S)


@exercise("3.2")
def check_softmax_jacobian(softmax_jacobian) -> None:
    """``softmax_jacobian(p)`` must return ``diag(p) - p pᵀ`` for one row ``(S,)`` and for a batch ``(..., S)``."""
    p = softmax(_JACOBIAN_SCORES)  # (5,)
    S = p.size
    got = _array(softmax_jacobian(p.copy()), "softmax_jacobian(p) for p of shape (5,)", (S, S))
    if got.shape != (S, S):
        fail("softmax_jacobian(p) has the wrong shape for one row p of shape (5,)", (S, S), got.shape,
             hint="J has one row per weight p_i and one column per score s_j: shape (S, S)")
    expected = _jacobian(p)
    if not np.allclose(got, expected, rtol=1e-6, atol=1e-9):
        _diagnose_jacobian(p, got, expected)

    P = softmax(_JACOBIAN_BATCH)  # (3, 4): three rows of weights
    T, S = P.shape
    call = "softmax_jacobian(p) for a batch p of shape (3, 4)"
    batch_hint = ("one (S, S) Jacobian per row: np.diag and np.outer only work on 1-D arrays (np.diag of a 2-D array "
                  "extracts its diagonal, np.outer flattens); build diag(p) as p[..., :, None] * np.eye(S) and the "
                  "outer product as p[..., :, None] * p[..., None, :]")
    try:
        got = softmax_jacobian(P.copy())
    except ValueError as error:  # a broadcasting error: the function only handles one row
        fail(f"{call} raised ValueError (it works for one row)", f"an array of shape {(T, S, S)}",
             f"ValueError: {error}", hint=batch_hint)
    got = _array(got, call, (T, S, S))
    if got.shape != (T, S, S):
        fail(f"{call} has the wrong shape", (T, S, S), got.shape, hint=batch_hint)
    expected = _jacobian(P)
    for t in range(T):
        if not np.allclose(got[t], expected[t], rtol=1e-6, atol=1e-9):
            fail(f"{call}: block {t} is not the Jacobian of row p[{t}] = {np.round(P[t], 4).tolist()}",
                 np.round(expected[t], 4).tolist(), np.round(got[t], 4).tolist(),
                 hint="your function is right for one row but mixes the rows of a batch; "
                      "index the last axis with p[..., :, None] and p[..., None, :], never axis 0")


def _diagnose_jacobian(p: np.ndarray, got: np.ndarray, expected: np.ndarray) -> None:
    S = p.size
    outer = np.outer(p, p)
    variants = (
        (np.diag(p), "the off-diagonal entries are missing: you returned diag(p) without the outer-product term "
                     "-p pᵀ. Raising one score takes weight away from every other key, so dp_i/ds_j = -p_i·p_j "
                     "for i != j (and each row of J sums to 0)"),
        (-expected, "sign error: you returned p pᵀ - diag(p). Raising a score raises its own weight, so the "
                    "diagonal dp_i/ds_i = p_i(1 - p_i) must be positive"),
        (np.diag(p * (1 - p)), "the diagonal p_i(1 - p_i) is right but the off-diagonal entries are 0; they are "
                               "-p_i·p_j: raising s_j lowers every other weight"),
        (-outer, "you returned -p pᵀ and forgot the diag(p) term, which is what makes the diagonal p_i(1 - p_i)"),
        (p[:, None] * (1 - p[None, :]), "p_i(1 - p_j) is the derivative only on the diagonal (i = j); "
                                        "off the diagonal it is -p_i·p_j. Together: J = diag(p) - p pᵀ"),
        (np.eye(S) - p[None, :], "the factor p_i is missing: dp_i/ds_j = p_i(δ_ij - p_j), i.e. diag(p) - p pᵀ, "
                                 "not I - 1 pᵀ"),
        (np.eye(S) - p[:, None], "the factor p_i is missing: dp_i/ds_j = p_i(δ_ij - p_j), i.e. diag(p) - p pᵀ"),
    )
    for variant, hint in variants:
        if np.allclose(got, variant, rtol=1e-6, atol=1e-9):
            break
    else:
        hint = ("J[i, j] = p_i(δ_ij - p_j): diag(p) - np.outer(p, p). Each row of J must sum to 0 (adding the same "
                f"number to every score changes no weight); your rows sum to {np.round(got.sum(axis=1), 4).tolist()}")
    fail(f"softmax_jacobian(p) is not diag(p) - p pᵀ for p = {np.round(p, 4).tolist()}; row 0:",
         np.round(expected[0], 4).tolist(), np.round(got[0], 4).tolist(), hint=hint)


# ------------------------------------------------------------------------------------------ 3.3 the scaled scores

# (B, H, T, S, D) with every size different, so that a scale taken from the wrong axis is recognisable
_SCORE_CASES = ((None, None, 5, 7, 9), (None, 4, 5, 7, 16), (2, 3, 5, 7, 16))


@exercise("3.3", forbids=('attnlab.attention',))
def check_scaled_scores(scaled_scores) -> None:
    """``scaled_scores(q, k)`` must return ``q kᵀ / √D`` of shape ``(..., T, S)`` for q ``(..., T, D)``."""
    rng = seeded(303)
    for B, H, T, S, D in _SCORE_CASES:
        lead = tuple(n for n in (B, H) if n is not None)
        q = rng.standard_normal((*lead, T, D))  # (..., T, D)
        k = rng.standard_normal((*lead, S, D))  # (..., S, D)
        _check_scores_case(scaled_scores, q, k, H)


def _check_scores_case(scaled_scores, q: np.ndarray, k: np.ndarray, H: int | None) -> None:
    T, D = q.shape[-2:]
    S = k.shape[-2]
    call = f"scaled_scores(q, k) with q of shape {q.shape} and k of shape {k.shape}"
    raw = q @ k.swapaxes(-1, -2)  # (..., T, S)
    expected = raw / np.sqrt(D)
    try:
        got = scaled_scores(q.copy(), k.copy())
    except ValueError as error:
        if q.ndim == 2:
            raise
        fail(f"{call} raised ValueError", f"scores of shape {expected.shape}", f"ValueError: {error}",
             hint="with more than two axes, k.T reverses every axis; transpose only the last two: "
                  "k.swapaxes(-1, -2) (and use @ or np.matmul, which treats leading axes as a batch)")
    got = _array(got, call, expected.shape)
    if got.shape == raw.swapaxes(-1, -2).shape and got.shape != expected.shape and np.allclose(
            got.swapaxes(-1, -2), expected, rtol=1e-6, atol=1e-9):
        fail(f"{call} returned the scores transposed", f"shape {expected.shape} (..., T, S)", f"shape {got.shape}",
             hint="rows are queries and columns are keys: q @ kᵀ, not k @ qᵀ")
    if got.shape != expected.shape:
        hint = ("one score per (query, key) pair: q @ k.swapaxes(-1, -2) has shape (..., T, S); k.T reverses every "
                "axis, which is only the transpose for a 2-D array") if q.ndim > 2 else "q @ k.T has shape (T, S)"
        fail(f"{call} has the wrong shape", expected.shape, got.shape, hint=hint)
    if np.allclose(got, expected, rtol=1e-6, atol=1e-9):
        return
    if np.allclose(got, softmax(expected), rtol=1e-6, atol=1e-9):
        fail(f"{call} returned softmax weights (each row sums to 1)", "the scores before the softmax",
             "the weights after it", hint="return q kᵀ / √d_k itself; the softmax comes next, outside this function")
    c = float(np.sum(got * raw) / np.sum(raw * raw))
    if np.allclose(got, c * raw, rtol=1e-6, atol=1e-9):
        fail(f"{call}: your scores are q kᵀ times {c:.4g}", f"q kᵀ times 1/√{D} = {1 / np.sqrt(D):.4g}",
             f"q kᵀ times {c:.4g}", hint=_scale_hint(c, q.shape, S, H))
    fail(f"{call} is not q kᵀ / √d_k; entry [0, 0] of the last two axes:", f"{expected[..., 0, 0].ravel()[0]:.4f}",
         f"{got[..., 0, 0].ravel()[0]:.4f}",
         hint="each score is the dot product of one query with one key, divided by √d_k = √q.shape[-1]")


def _scale_hint(c: float, q_shape: tuple[int, ...], S: int, H: int | None) -> str:
    T, D = q_shape[-2:]
    axis = ("you took d_k from the wrong axis: d_k is the width of one query vector, the last axis, "
            "d_k = q.shape[-1] = {D}; you divided by √{n}, which is {what}")
    candidates = [
        (1.0, "no scaling at all: divide by √d_k so that the scores have unit variance whatever the head width"),
        (1 / D, "you divided by d_k instead of √d_k (or scaled both q and k by 1/√d_k): the scores' spread "
                "shrinks to 1/√d_k and the softmax goes flat as d_k grows"),
        (np.sqrt(D), "you multiplied by √d_k instead of dividing by it"),
        (1 / np.sqrt(T), axis.format(D=D, n=T, what="T, the number of queries")),
        (1 / np.sqrt(S), axis.format(D=D, n=S, what="S, the number of keys")),
    ]
    if H is not None:
        candidates += [
            (1 / np.sqrt(H * D), f"you divided by √d_model = √(H·d_k) = √{H * D} instead of √d_k = √{D}: each "
                                 "head's dot product sums only its own d_k products, so its spread is √d_k"),
            (1 / np.sqrt(H), axis.format(D=D, n=H, what="H, the number of heads")),
        ]
    if len(q_shape) == 4:
        candidates.append((1 / np.sqrt(q_shape[0]), axis.format(D=D, n=q_shape[0], what="B, the batch size")))
    for scale, hint in candidates:
        if np.isclose(c, scale, rtol=1e-6):
            return hint
    return f"the scale must be 1/√d_k with d_k = q.shape[-1] = {D}"
