"""Checks for notebook 01, the soft lookup.

1.1  ``stable_softmax(x)``: a softmax over the last axis that survives ``[1000, 999, 0]``.
1.2  ``cross_attention(x, y, W_q, W_k, W_v)``: one head of cross-attention from the embeddings, queries from ``x`` and
     keys and values from ``y``, returning ``(out, weights)``.
1.3  ``steer_query(keys, target)``: a query that puts at least 99 % of the weight on one chosen key.

Each checker calls the learner's function on inputs drawn from :func:`seeded` (inside the checker, so that grading
draws them afresh) and compares with :func:`attnlab.softmax` and :func:`attnlab.attention`. When a wrong answer matches a classic mistake (no normalisation, the wrong axis, no max
subtraction, a missing or wrong scale, ...) the message names that mistake.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..attention import attention
from ..softmax import softmax
from . import close, exercise, fail, seeded

RTOL, ATOL = 1e-6, 1e-9


def _close(a, b) -> bool:
    """The learner's ``a`` equals ``b`` within the tolerances of ``a``'s precision (float32 answers: float32 error)."""
    return close(a, b, RTOL, ATOL)


def _fmt(x) -> str:
    """An array rounded to 4 decimals, on one line whatever its number of dimensions."""
    x = np.asarray(x, dtype=float)
    if x.ndim > 1:
        return "[" + ", ".join(_fmt(row) for row in x) + "]"
    return np.array2string(x, precision=4, suppress_small=True, separator=", ", max_line_width=10_000)


def _call(fn, args: dict):
    """Call the learner's ``fn`` on copies of ``args`` (name -> array) and return its result.

    Floating-point warnings are silenced: the checker looks for NaN and inf itself and explains them. A function that
    changes its inputs in place is reported, because the caller's arrays would be corrupted.
    """
    copies = {name: np.array(a, copy=True) for name, a in args.items()}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = fn(*copies.values())
    for name, a in args.items():
        if not np.array_equal(copies[name], a, equal_nan=True):
            fail(f"your function changed its argument {name} in place", f"{name} unchanged", f"{name} modified",
                 f"use `{name} = {name} - ...` (a new array) instead of `{name} -= ...` or item assignment")
    return result


def _float_array(got, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """``got`` as a floating ndarray of ``shape``, or fail saying what is wrong with it."""
    if got is None:
        fail(f"{what} is None", f"an array of shape {shape}", "None", "did you forget the `return` statement?")
    try:
        arr = np.asarray(got)
    except Exception:  # ragged lists and the like
        fail(f"{what} is not an array", f"an array of shape {shape}", type(got).__name__)
    if arr.dtype.kind != "f":
        fail(f"{what} is not a floating-point array", "a float dtype", f"dtype {arr.dtype}",
             "weights are fractions: do not round them or cast them to integers")
    if arr.shape != shape:
        fail(f"{what} has the wrong shape", shape, arr.shape)
    return arr


def _softmax_raw(x, axis=-1, *, max_axis="same", normalise: bool = True):
    """A softmax with a chosen mistake, to recognise the learner's: the max or the sum over another axis, no sum."""
    max_axis = axis if max_axis == "same" else max_axis
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=max_axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True) if normalise else e


def _keepdims_mistakes(x):
    """Softmaxes of a square ``x`` that forget ``keepdims=True`` in the max, the sum or both, with a description."""
    max_ok, max_bad = x.max(axis=-1, keepdims=True), x.max(axis=-1)
    with np.errstate(all="ignore"):
        for m, sum_keepdims, what in (
            (max_bad, False, "you subtracted the row maxima and divided by the row sums without keepdims=True, so "
                             "both were applied to the columns"),
            (max_bad, True, "you subtracted the row maxima without keepdims=True, so row j's max was subtracted from "
                            "column j"),
            (max_ok, False, "you divided by the row sums without keepdims=True, so column j was divided by row j's "
                            "sum"),
        ):
            e = np.exp(x - m)
            yield e / e.sum(axis=-1, keepdims=sum_keepdims), what


def _row_sums(w) -> np.ndarray:
    return np.sum(w, axis=-1).reshape(-1)


def _first_bad_row(w) -> int:
    """Index (in the rows flattened over leading axes) of the first row that does not sum to 1."""
    return int(np.argmax(~np.isclose(_row_sums(w), 1.0, rtol=RTOL, atol=1e-7)))


def _normalisation_mistakes(got: np.ndarray, scores: np.ndarray, fix: str):
    """Fail if ``got`` is the softmax of ``scores`` without the division, or along the wrong axis."""
    if _close(got, _softmax_raw(scores, normalise=False)):
        r = _first_bad_row(got)
        fail(f"row {r} of your weights sums to {_row_sums(got)[r]:.2f}; did you subtract the max but forget to "
             "normalise?", "every row sums to 1", f"row sums {_fmt(_row_sums(got))}",
             f"divide by the row sums: {fix}")
    with np.errstate(all="ignore"):
        exp_scores = np.exp(scores)
    if _close(got, exp_scores):
        r = _first_bad_row(got)
        fail(f"row {r} of your weights sums to {_row_sums(got)[r]:.2f}: you return np.exp of the scores, neither "
             "shifted by the max nor normalised", "every row sums to 1", f"row sums {_fmt(_row_sums(got))}",
             f"subtract each row's max, exponentiate, then divide by the row sums: {fix}")
    if scores.ndim >= 2 and _close(got, _softmax_raw(scores, axis=-2)):
        fail("your columns sum to 1 instead of your rows", "each row (one query, all keys) sums to 1",
             f"column sums {_fmt(got.sum(axis=-2).reshape(-1))}, row sums {_fmt(_row_sums(got))}",
             "softmax over the last axis: axis=-1 in both the max and the sum (axis=0 normalises each column)")
    if scores.ndim >= 2 and _close(got, _softmax_raw(scores, axis=None)):
        fail("the whole array sums to 1 instead of each row", "each row sums to 1",
             f"row sums {_fmt(_row_sums(got))}, total {got.sum():.4f}",
             "np.max(x) and np.sum(e) without an axis reduce over everything: pass axis=-1, keepdims=True")


# --------------------------------------------------------------------------------------------------- 1.1 softmax

_SQUARE = np.array([[2.0, 0.8, -1.0, -2.0],
                    [3.0, 3.0, 0.0, 1.0],
                    [-2.0, 0.0, 2.0, 4.0],
                    [0.5, 0.25, 0.125, 0.0]])  # square, so that a missing keepdims broadcasts instead of raising
_BIG = np.array([1000.0, 999.0, 0.0])
_MIXED = np.array([[1000.0, 999.0, 0.0],
                   [-1000.0, -1001.0, -1002.0],
                   [0.0, 0.0, 0.0]])  # rows of very different sizes: one global max is not enough

_KEEPDIMS_HINT = ("without keepdims=True a reduction over axis=-1 of an (n, n) array has shape (n,), which broadcasts "
                  "along the LAST axis, so row j's max or sum is applied to column j: use "
                  "x.max(axis=-1, keepdims=True) and e.sum(axis=-1, keepdims=True), of shape (n, 1)")


@exercise("1.1", forbids=("attnlab.softmax", "attnlab.online_softmax"))
def check_stable_softmax(stable_softmax) -> None:
    """``stable_softmax(x)``: softmax over the last axis of any-shaped ``x``, finite for large inputs."""
    x = _SQUARE
    got = _float_array(_call(stable_softmax, {"x": x}), "stable_softmax(x) for x of shape (4, 4)", x.shape)
    if not np.all(np.isfinite(got)):
        fail("NaN or inf in your output for small inputs", _fmt(softmax(x)[0]), _fmt(got[0]),
             "look for a division by zero: every row's sum of exponentials should be at least 1")
    if not _close(got, softmax(x)):
        _normalisation_mistakes(got, x, "e / e.sum(axis=-1, keepdims=True)")
        for variant, what in _keepdims_mistakes(x):
            if _close(got, variant):
                fail(what, _fmt(softmax(x)[0]) + " (row 0)", _fmt(got[0]), _KEEPDIMS_HINT)
        if _close(got, _softmax_raw(x, max_axis=0)):
            fail("you subtracted each column's max (axis=0) instead of each row's", _fmt(softmax(x)[0]) + " (row 0)",
                 _fmt(got[0]), "softmax is unchanged only when the SAME number is subtracted from every entry of a "
                 "row: x - x.max(axis=-1, keepdims=True)")
        r = _first_bad_row(got)
        if not np.isclose(_row_sums(got)[r], 1.0):
            fail(f"row {r} of your weights sums to {_row_sums(got)[r]:.2f}, not 1", "every row sums to 1",
                 f"row sums {_fmt(_row_sums(got))}",
                 "divide each row by its own sum: e / e.sum(axis=-1, keepdims=True)")
        r = int(np.argmax(np.abs(got - softmax(x)).max(axis=-1)))
        fail(f"row {r} of your output differs from the softmax of row {r} of x", _fmt(softmax(x)[r]), _fmt(got[r]),
             "softmax(x)_j = exp(x_j - max(x)) / sum_i exp(x_i - max(x)), row by row")

    x = seeded(101).normal(0.0, 3.0, size=(2, 3, 5))  # (B, T, S): axis=1 is not the last axis here
    got = _float_array(_call(stable_softmax, {"x": x}), "stable_softmax(x) for x of shape (2, 3, 5)", x.shape)
    if not _close(got, softmax(x)):
        if _close(got, _softmax_raw(x, axis=1)) or _close(got, _softmax_raw(x, axis=-2)):
            fail("for an input of shape (2, 3, 5) you normalised over axis 1, not the last axis",
                 "every x[b, t, :] sums to 1", f"sums over the last axis {_fmt(got.sum(axis=-1).reshape(-1))}",
                 "use axis=-1: it is the last axis whatever the number of dimensions (axis=1 is the last axis only "
                 "for 2-D input)")
        _normalisation_mistakes(got, x, "e / e.sum(axis=-1, keepdims=True)")
        fail("wrong output for an input of shape (2, 3, 5)", _fmt(softmax(x)[0, 0]) + " (x[0, 0])",
             _fmt(got[0, 0]), "normalise over the last axis whatever the number of dimensions: axis=-1, "
             "keepdims=True")

    got = _float_array(_call(stable_softmax, {"x": _BIG}), "stable_softmax(x) for x = [1000, 999, 0]", _BIG.shape)
    if not np.all(np.isfinite(got)):
        fail("NaN or inf for x = [1000, 999, 0]: your softmax overflows", _fmt(softmax(_BIG)), _fmt(got),
             "np.exp(1000) is inf in float64 and inf / inf is nan. Did you forget to subtract the max? Shifting a row "
             "by a constant does not change its softmax, and after x - x.max(axis=-1, keepdims=True) every exponent "
             "is <= 0")
    if not _close(got, softmax(_BIG)):
        fail("wrong softmax of the 1-D input [1000, 999, 0]", _fmt(softmax(_BIG)), _fmt(got),
             "your function must work for 1-D input too: reduce over axis=-1 with keepdims=True")

    x = _MIXED
    got = _float_array(_call(stable_softmax, {"x": x}), "stable_softmax(x) for x of shape (3, 3)", x.shape)
    bad = ~np.all(np.isfinite(got), axis=-1)
    if bad[1] and not bad[0]:
        fail("row 1 = [-1000, -1001, -1002] gives NaN: you subtracted one max for the whole array", _fmt(softmax(x)[1]),
             _fmt(got[1]), "x.max() is 1000 (from row 0), so row 1's exponents are exp(-2000) = 0 and 0 / 0 = nan; "
             "each row needs its own max: x.max(axis=-1, keepdims=True)")
    if bad.any():
        fail(f"NaN or inf in row {int(np.argmax(bad))} for rows of very different sizes",
             _fmt(softmax(x)[int(np.argmax(bad))]), _fmt(got[int(np.argmax(bad))]),
             "subtract each row's own max: x - x.max(axis=-1, keepdims=True)")
    if not _close(got, softmax(x)):
        fail("wrong output for x = [[1000, 999, 0], [-1000, -1001, -1002], [0, 0, 0]]", _fmt(softmax(x)), _fmt(got))


# ------------------------------------------------------------------------------ 1.2 cross-attention, from the embeddings

_T, _S, _DM, _D, _DV = 3, 5, 7, 4, 6  # all different, so that every wrong dimension gives a different scale

_D_K_HINT = (f"d_k is the width of the queries and keys after the projection, W_q.shape[1] = q.shape[-1] (here {_D}); "
             "not d_model, not a sequence length, not the value width")


def _cross_inputs(n: int):
    """``x (T, d_model)``, ``y (S, d_model)`` and the projections, drawn from ``seeded(n)``."""
    rng = seeded(n)
    x, y = rng.normal(size=(_T, _DM)), rng.normal(size=(_S, _DM))
    W_q, W_k = rng.normal(0.0, 1 / np.sqrt(_DM), size=(2, _DM, _D))  # (d_model, D) each
    W_v = rng.normal(0.0, 1 / np.sqrt(_DM), size=(_DM, _DV))  # (d_model, Dv)
    return {"x": x, "y": y, "W_q": W_q, "W_k": W_k, "W_v": W_v}


def _scale_mistakes(got: np.ndarray, q, k) -> None:
    """Fail if ``got`` are attention weights with a missing or wrong scale."""
    raw = q @ k.T  # (T, S) unscaled scores
    expected = softmax(raw / np.sqrt(_D))
    for scale, what, hint in (
        (1.0, "your weights are those of UNSCALED scores: you forgot to divide by sqrt(d_k)",
         f"scores = q @ k.T / np.sqrt(d_k) with d_k = q.shape[-1]; here sqrt({_D}) = {np.sqrt(_D):.1f}"),
        (1.0 / _D, f"you divided the scores by d_k = {_D} instead of sqrt(d_k) = {np.sqrt(_D):.1f}",
         "the dot product of two random d_k-dimensional vectors has standard deviation sqrt(d_k), not d_k: "
         "divide by np.sqrt(d_k)"),
        (np.sqrt(_D), f"you multiplied the scores by sqrt(d_k) = {np.sqrt(_D):.1f} instead of dividing by it",
         "scores = q @ k.T / np.sqrt(d_k)"),
        (1.0 / np.sqrt(_DM), f"you divided by sqrt({_DM}), the square root of d_model = x.shape[-1], the width of the "
         "embeddings", _D_K_HINT),
        (1.0 / np.sqrt(_S), f"you divided by sqrt({_S}), the square root of the number of keys S = y.shape[0]",
         _D_K_HINT),
        (1.0 / np.sqrt(_T), f"you divided by sqrt({_T}), the square root of the number of queries T = x.shape[0]",
         _D_K_HINT),
        (1.0 / np.sqrt(_DV), f"you divided by sqrt({_DV}), the square root of the value width W_v.shape[1]",
         _D_K_HINT),
    ):
        if _close(got, softmax(raw * scale)):
            fail(what, _fmt(expected[0]) + " (row 0)", _fmt(got[0]), hint)
    if _close(got, softmax(raw) / np.sqrt(_D)) or _close(got, expected / np.sqrt(_D)):
        fail(f"your rows sum to {_row_sums(got)[0]:.2f}: you divided the weights by sqrt(d_k) after the softmax",
             _fmt(expected[0]) + " (row 0)", _fmt(got[0]),
             "the scale belongs on the scores, before the softmax: softmax(q @ k.T / np.sqrt(d_k))")


def _shape(a):
    """The shape of an array-like answer, or None when it has none (None, a ragged list, ...)."""
    try:
        return None if a is None else np.shape(a)
    except ValueError:
        return None


def _check_pair(result, inputs: dict):
    """Unpack ``(out, weights)`` and check their shapes, naming the usual mix-ups of the two sequences."""
    T, S, D, Dv, DM = _T, _S, _D, _DV, _DM
    x, y, W_q, W_k = inputs["x"], inputs["y"], inputs["W_q"], inputs["W_k"]
    if isinstance(result, np.ndarray):
        fail(f"cross_attention returned one array of shape {result.shape}", "a pair (out, weights)",
             "a single array", "end the function with `return out, weights`")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail("cross_attention must return a pair (out, weights)", "(out, weights)", type(result).__name__,
             "end the function with `return out, weights`")
    out, weights = result
    if _shape(out) == (T, S) and _shape(weights) == (T, Dv):
        fail("you returned (weights, out)", f"out {(T, Dv)} first, then weights {(T, S)}",
             f"{_shape(out)}, then {_shape(weights)}", "return out, weights")
    if _shape(weights) == (T, T):
        fail(f"your weights have shape {(T, T)}: the keys came from x, so x attended to itself",
             f"(T, S) = {(T, S)}: the {T} rows of x against the {S} rows of y", _shape(weights),
             "in cross-attention the queries come from x and the keys AND values from y: k = y @ W_k, v = y @ W_v")
    if _shape(weights) == (S, S):
        fail(f"your weights have shape {(S, S)}: the queries came from y, so y attended to itself",
             f"(T, S) = {(T, S)}", _shape(weights), "the queries come from x: q = x @ W_q")
    if _shape(weights) == (S, T):
        swapped = softmax((y @ W_q) @ (x @ W_k).T / np.sqrt(D))  # (S, T): queries from y, keys from x
        if _close(np.asarray(weights, dtype=float), swapped):
            fail("you swapped the two sequences: your queries come from y and your keys from x",
                 f"weights (T, S) = {(T, S)}, one row per row of x", _shape(weights),
                 "x asks and y answers: q = x @ W_q, k = y @ W_k, v = y @ W_v")
        fail(f"your weights have shape {(S, T)}: one row per key instead of one row per query",
             f"(T, S) = {(T, S)}", _shape(weights), "scores = q @ k.T has shape (T, S); k @ q.T is its transpose")
    weights = _float_array(weights, f"weights for x {(T, DM)}, y {(S, DM)}", (T, S))
    if _shape(out) == (T, D):
        fail(f"your output has shape {(T, D)}, the width of the keys, not of the values", f"(T, Dv) = {(T, Dv)}",
             _shape(out), "the output mixes the VALUES: v = y @ W_v, out = weights @ v")
    if _shape(out) == (T, DM):
        fail(f"your output has shape {(T, DM)}, the width of the embeddings: you averaged the rows of y itself",
             f"(T, Dv) = {(T, Dv)}", _shape(out), "project the values first: v = y @ W_v, then out = weights @ v")
    out = _float_array(out, f"out for x {(T, DM)}, y {(S, DM)}, W_v {(DM, Dv)}", (T, Dv))
    return out, weights


def _reference(inputs: dict):
    x, y = inputs["x"], inputs["y"]
    q, k, v = x @ inputs["W_q"], y @ inputs["W_k"], y @ inputs["W_v"]  # (T, D), (S, D), (S, Dv)
    out, weights = attention(q, k, v, return_weights=True)  # (T, Dv), (T, S)
    return q, k, out, weights


@exercise("1.2", forbids=("attnlab.attention", "attnlab.softmax", "attnlab.online_softmax", "attnlab.tiled_attention",
                          "attnlab.multi_head_attention"))
def check_cross_attention(cross_attention) -> None:
    """``cross_attention(x, y, W_q, W_k, W_v) -> (out, weights)``: queries from x, keys and values from y."""
    inputs = _cross_inputs(12)
    q, k, out_ref, w_ref = _reference(inputs)
    out, w = _check_pair(_call(cross_attention, inputs), inputs)
    if not np.all(np.isfinite(w)):
        fail("NaN or inf in your weights for small inputs", _fmt(w_ref[0]), _fmt(w[0]),
             "look for a division by zero in your softmax")
    if not _close(w, w_ref):
        _scale_mistakes(w, q, k)
        _normalisation_mistakes(w, q @ k.T / np.sqrt(_D), "weights = e / e.sum(axis=-1, keepdims=True)")
        if _close(w, softmax((inputs["x"] @ inputs["W_k"]) @ (inputs["y"] @ inputs["W_q"]).T / np.sqrt(_D))):
            fail("you swapped W_q and W_k: your queries are x @ W_k and your keys y @ W_q", _fmt(w_ref[0]) + " (row 0)",
                 _fmt(w[0]), "each projection has its own job: q = x @ W_q, k = y @ W_k (scores are not symmetric)")
        r = _first_bad_row(w)
        if not np.isclose(_row_sums(w)[r], 1.0):
            fail(f"row {r} of your weights sums to {_row_sums(w)[r]:.2f}, not 1", "every row sums to 1",
                 f"row sums {_fmt(_row_sums(w))}", "normalise each row: softmax over the last axis")
        fail("your weights differ from softmax(q @ k.T / sqrt(d_k))", _fmt(w_ref[0]) + " (row 0)", _fmt(w[0]),
             "q = x @ W_q, k = y @ W_k; scores = q @ k.T / np.sqrt(q.shape[-1]); weights = softmax of each row")
    if not _close(out, out_ref):
        fail("your weights are right but your output is not", _fmt(out_ref[0]) + " (row 0)", _fmt(out[0]),
             "each output row is the weighted average of the value rows: v = y @ W_v, out = weights @ v")

    # scale x so that the largest score is 1500, whatever the draw: np.exp overflows unless the row max is subtracted
    big = dict(inputs, x=inputs["x"] * (1500.0 / np.max(q @ k.T / np.sqrt(_D))))
    _, _, out_ref, w_ref = _reference(big)
    out, w = _check_pair(_call(cross_attention, big), big)
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(out))):
        r = int(np.argmax(~np.all(np.isfinite(w), axis=-1) | ~np.all(np.isfinite(out), axis=-1)))
        fail("NaN or inf when the scores are large (x scaled so that the largest score is 1500)", _fmt(w_ref[r]) + f" (row {r})", _fmt(w[r]),
             "np.exp of a score above about 709 overflows to inf: subtract each row's own max "
             "(axis=-1, keepdims=True) before np.exp, as your stable_softmax of exercise 1.1 does. One max for the "
             "whole matrix is not enough: rows far below it underflow to 0 / 0")
    if not (_close(w, w_ref) and _close(out, out_ref)):
        fail("wrong result when the scores are large (x scaled so that the largest score is 1500)", _fmt(w_ref[0]) + " (row 0)", _fmt(w[0]))


# ---------------------------------------------------------------------------------------------- 1.3 steer a query

_TRAP_KEYS = np.array([[1.0, 0.0, 0.0],
                       [2.0, 0.5, 0.0],
                       [0.0, 0.0, 1.0]])  # key 1 is longer and close in direction to key 0
MIN_WEIGHT = 0.99


# Nothing in attnlab computes such a query; attnlab.softmax may be used to test one, so nothing is forbidden.
@exercise("1.3", forbids=())
def check_steer_query(steer_query) -> None:
    """``steer_query(keys, target) -> q`` with ``softmax(keys @ q / sqrt(D))[target] >= 0.99``."""
    cases = ((_TRAP_KEYS, 0), (seeded(7).normal(size=(4, 6)), 2), (seeded(8).normal(size=(5, 5)), 4))
    for keys, target in cases:
        S, D = keys.shape
        q = _call(lambda keys: steer_query(keys, target), {"keys": keys})
        q = _float_array(q, f"your query for keys of shape {(S, D)}", (D,))
        if not np.all(np.isfinite(q)):
            fail("your query contains NaN or inf", "a finite vector", _fmt(q))
        if not np.any(q):
            fail("your query is all zeros", f"weight >= {MIN_WEIGHT} on key {target}",
                 f"weight {1 / S:.3f} on every key",
                 "q = 0 scores every key 0, so every key gets the same weight 1/S")
        w = softmax(keys @ q / np.sqrt(D))  # (S,)
        if w[target] >= MIN_WEIGHT:
            continue
        label = f"key {target} of keys {_fmt(keys)}" if keys is _TRAP_KEYS else f"key {target} of {S} random keys"
        expected = f"weight >= {MIN_WEIGHT} on {label}"
        got = f"weights {_fmt(w)}"
        if softmax(keys @ q)[target] >= MIN_WEIGHT:
            fail(f"the weight on key {target} is only {w[target]:.3f}: you forgot that the scores are divided by "
                 f"sqrt(d_k) = sqrt({D})", expected, got,
                 f"the scores are keys @ q / np.sqrt({D}); make them large enough after that division")
        winner = int(np.argmax(w))
        if winner == target:
            fail(f"key {target} has the largest weight, {w[target]:.3f}, but not {MIN_WEIGHT}", expected, got,
                 "the ranking is right, the contrast is too small: multiply your query by a larger number. A longer "
                 "query is a lower temperature: it sharpens the softmax without changing the order of the scores")
        unit = keys @ (q / np.linalg.norm(q))  # (S,) scores per unit length of the query
        if unit[target] / np.linalg.norm(keys[target]) > 0.999:  # cosine of q and the target key
            fail(f"your query points along key {target}, but key {winner} wins", expected, got,
                 f"per unit length of that query, key {winner} scores {unit[winner]:.2f} and key {target} only "
                 f"{unit[target]:.2f}: attention ranks keys by the dot product q . k, which grows with the length "
                 "of the key, not by the angle alone. Choose the scores you want (large for the target, 0 for the "
                 "others) and solve keys @ q = scores for q, e.g. with np.linalg.lstsq")
        fail(f"key {winner} gets weight {w[winner]:.3f}, more than key {target} ({w[target]:.3f})", expected, got,
             "choose the scores you want (large for the target, 0 for the others) and solve keys @ q = scores for "
             "q, e.g. with np.linalg.lstsq")
