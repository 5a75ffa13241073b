"""Checks for notebook 08, beyond quadratic attention: a rolling-buffer KV cache, the recurrent step of linear
attention, and the capacity of a fixed-size state.

8.1 ``window_step(cache_k, cache_v, t, q_t, k_t, v_t)`` -> ``(out_t, cache_k, cache_v)``: one decode step of
    sliding-window attention with a rolling buffer of ``W = len(cache_k)`` slots. The check drives it for more than two laps of the
    buffer and compares every output with full recomputation, ``attention(q, k, v, sliding_window_mask(T, window=W))``.
8.2 ``linear_step(state, z, q_t, k_t, v_t)`` -> ``(out_t, state, z)``: one step of causal linear attention with
    ``φ(x) = elu(x) + 1``, a ``(D, Dv)`` state and a ``(D,)`` normaliser. The check drives it over a sequence and
    compares with the parallel form, ``attnlab.linear_attention(q, k, v, causal=True)``.
8.3 ``capacity(D, Dv)`` -> int: how many key-value pairs a ``(D, Dv)`` state read as ``k_iᵀ S`` can return exactly, for
    every choice of values, with the keys chosen as well as possible. The check compares with ``D`` and then runs the
    learner's number: it stores that many pairs in the best ``(D, Dv)`` matrix there is (least squares) and reports how
    well they come back.

Each checker draws its sizes and values from :func:`seeded` (``D != Dv``, so a transposed state fails loudly), and on a
mismatch recomputes the classic mistakes (empty slots attended before the buffer is full, reading the cache before
writing the new token, the scale or the feature map forgotten, no normaliser, the state overwritten instead of
accumulated, the state's entries counted instead of its rank) to name the one the learner made.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from ..attention import attention
from ..linear import elu_feature, linear_attention
from ..masks import sliding_window_mask
from . import close, exercise, fail, float_array, seeded


def _fmt(a) -> str:
    return np.array2string(np.asarray(a, dtype=float), precision=4, suppress_small=True, separator=", ",
                           max_line_width=10_000, prefix=" " * 12)


def _close(got, expected) -> bool:
    return close(got, expected, 1e-9, 1e-12)


def _quiet(fn, *args, call: str = "", shapes: str = ""):
    """Call the learner's function with copies of the inputs and without numpy's warnings (0/0 shows up as NaN); a
    ValueError raised by the learner's arithmetic (numpy's shape errors) becomes a failure naming the shapes."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return fn(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        except ValueError as error:
            if not shapes:
                raise
            fail(f"{call} raised ValueError", "arrays of matching shapes", f"ValueError: {error}", shapes)


def _unpack(got, call, names, shapes, hints):
    """The learner's tuple of arrays, each checked for its shape (with the hint for a wrong one)."""
    if got is None:
        fail(f"{call} returned None", f"a tuple ({', '.join(names)})", "None", "did you forget the `return`?")
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        fail(f"{call} must return {len(names)} things", f"({', '.join(names)})",
             type(got).__name__ if not isinstance(got, (tuple, list)) else f"{len(got)} items")
    return [float_array(g, f"{call}: {name}", shape, hints.get(name, "")) for g, name, shape in
            zip(got, names, shapes)]


# ---------------------------------------------------------------------------------------------------------------------
# 8.1 a rolling-buffer KV cache for a sliding window


def _window_variant(q, k, v, W, mistake=None):
    """Every step's output of a window of W keys, right or with one classic mistake."""
    with np.errstate(all="ignore"):
        T, D = q.shape
        c = 1.0 if mistake == "no scale" else 1 / np.sqrt(D)
        if mistake == "empty slots":  # all W slots, zeros included, from the first step on
            pad_k, pad_v = np.vstack([np.zeros((W - 1, D)), k]), np.vstack([np.zeros((W - 1, v.shape[1])), v])
            outs = [attention(q[t:t + 1], pad_k[t:t + W], pad_v[t:t + W], scale=c)[0] for t in range(T)]
            return np.array(outs)
        if mistake == "read before write":  # keys t - W .. t - 1: the new token is not in the cache yet
            mask = sliding_window_mask(T, window=W + 1) & ~np.eye(T, dtype=bool)
            return attention(q, k, v, mask, scale=c)
        return attention(q, k, v, sliding_window_mask(T, window=W), scale=c)


_WINDOW_MISTAKES = {  # "you ..." -> the variant
    "attended to the empty slots: before the buffer is full (t < W − 1) some slots still hold zeros, and a zero key "
    "has score 0, not −inf; attend only to the min(t + 1, W) slots written so far": "empty slots",
    "read the cache before writing the new token: the query at t attends to keys t − W + 1 … t, its own key included, "
    "so write k_t and v_t into the oldest slot first, then attend": "read before write",
    "forgot the scale: the scores are q_t · k_j / √D": "no scale",
}


@exercise("8.1", forbids=("attnlab.window_decode", "attnlab.window_attention"))
def check_window_step(window_step) -> None:
    """More than two laps of a rolling buffer of W slots, every output against full recomputation."""
    rng = seeded(801)
    W = int(rng.integers(3, 6))
    D = int(rng.integers(3, 6))
    Dv = D + int(rng.integers(1, 3))  # D != Dv: keys and values cannot be swapped unnoticed
    T = 2 * W + int(rng.integers(2, 5))
    q, k, v = rng.normal(size=(T, D)) * 1.5, rng.normal(size=(T, D)), rng.normal(size=(T, Dv))
    expected = _window_variant(q, k, v, W)
    cache_k, cache_v = np.zeros((W, D)), np.zeros((W, Dv))
    outs = np.zeros((T, Dv))
    hints = {"cache_k": f"the cache holds W = {W} keys for good: overwrite the oldest slot (slot t % W) instead of "
                        "appending, so that its size never grows",
             "cache_v": f"the value cache holds W = {W} values of width Dv = {Dv}, like the key cache"}
    for t in range(T):
        call = (f"window_step(cache_k, cache_v, t={t}, q_t, k_t, v_t) with a buffer of W = {W} slots, D = {D}, "
                f"Dv = {Dv}")
        shapes = (f"q_t and k_t are ({D},), v_t is ({Dv},), the caches are ({W}, {D}) and ({W}, {Dv}): the scores "
                  "of the written slots are cache_k[:n] @ q_t, the output their softmax @ cache_v[:n]")
        got = _quiet(window_step, cache_k, cache_v, t, q[t], k[t], v[t], call=call, shapes=shapes)
        out_t, cache_k, cache_v = _unpack(got, call,
                                          ("out_t", "cache_k", "cache_v"), ((Dv,), (W, D), (W, Dv)), hints)
        outs[t] = out_t
        if _close(out_t, expected[t]):
            continue
        if not np.isfinite(out_t).all():
            fail(f"{call}: out_t contains NaN or inf", _fmt(expected[t]), _fmt(out_t),
                 "at t = 0 only one slot is written: attend to the written slots only (not to an empty selection, "
                 "and write k_t before attending, so there is always at least one key)")
        for hint, mistake in _WINDOW_MISTAKES.items():
            if _close(out_t, _window_variant(q, k, v, W, mistake)[t]):
                fail(f"{call}: out_t is wrong", _fmt(expected[t]), _fmt(out_t), "you " + hint)
        fail(f"{call}: out_t is wrong", _fmt(expected[t]), _fmt(out_t),
             f"out_t = softmax(q_t · k_j / √D) v_j over the keys j = max(0, t − W + 1) … t, here "
             f"{max(0, t - W + 1)} … {t}; the buffer must hold exactly those after writing k_t into slot t % W")


# ---------------------------------------------------------------------------------------------------------------------
# 8.2 the recurrent step of linear attention


def _linear_variant(q, k, v, mistake=None):
    """Every step's output of causal linear attention, right or with one classic mistake."""
    with np.errstate(all="ignore"):
        T, D = q.shape
        phi = (lambda x: x) if mistake == "no feature map" else elu_feature
        state, z, outs = np.zeros((D, v.shape[1])), np.zeros(D), []
        for t in range(T):
            fq, fk = phi(q[t]), phi(k[t])
            if mistake == "read before write":
                outs.append(fq @ state / (fq @ z))
            if mistake == "overwrite":
                state, z = np.outer(fk, v[t]), fk
            else:
                state, z = state + np.outer(fk, v[t]), z + (k[t] if mistake == "raw z" else fk)
            if mistake == "no normaliser":
                outs.append(fq @ state)
            elif mistake != "read before write":
                outs.append(fq @ state / (fq @ z))
        return np.array(outs)


_LINEAR_MISTAKES = {  # "you ..." -> the variant
    "read the state before adding the new token: under a causal mask the token at t sees itself, so add "
    "φ(k_t) v_tᵀ to the state (and φ(k_t) to z) first, then read it with φ(q_t)": "read before write",
    "left out the normaliser: out_t = φ(q_t)ᵀ state / φ(q_t)ᵀ z, the kernel's version of the softmax's division by the "
    "row sum": "no normaliser",
    "replaced the state instead of adding to it: the state is the running sum Σ_j φ(k_j) v_jᵀ over every token so far "
    "(state + np.outer(φ(k_t), v_t)), and z is Σ_j φ(k_j)": "overwrite",
    "used q and k without the feature map: φ(x) = elu(x) + 1 (x + 1 for x > 0, exp(x) otherwise) keeps every weight "
    "φ(q)·φ(k) positive, like exp": "no feature map",
    "added k_t to z without the feature map: z = Σ_j φ(k_j), the same φ(k_j) as in the state": "raw z",
}


@exercise("8.2", forbids=("attnlab.linear_attention_step", "attnlab.linear_attention_recurrent",
                          "attnlab.linear_attention"))
def check_linear_step(linear_step) -> None:
    """A sequence fed one token at a time, every output against the parallel form with the causal mask."""
    rng = seeded(802)
    D = int(rng.integers(3, 6))
    Dv = D + int(rng.integers(1, 3))  # D != Dv: a transposed state has the wrong shape
    T = int(rng.integers(7, 11))
    q, k, v = rng.normal(size=(3, T, D)) * 1.2
    v = rng.normal(size=(T, Dv))
    expected = linear_attention(q, k, v, causal=True)
    state, z = np.zeros((D, Dv)), np.zeros(D)
    hints = {"state": f"the state is Σ_j φ(k_j) v_jᵀ, (D, Dv) = ({D}, {Dv}): np.outer(φ(k_t), v_t), keys first",
             "z": f"z = Σ_j φ(k_j) has one entry per key feature, shape ({D},)"}
    for t in range(T):
        call = f"linear_step(state, z, q_t, k_t, v_t) at step t = {t} with D = {D}, Dv = {Dv}"
        shapes = (f"the state is (D, Dv) = ({D}, {Dv}): add np.outer(φ(k_t), v_t), keys first (np.outer(v_t, φ(k_t)) "
                  f"is ({Dv}, {D})); z is ({D},), and out_t = φ(q_t) @ state / (φ(q_t) @ z) is ({Dv},)")
        got = _quiet(linear_step, state, z, q[t], k[t], v[t], call=call, shapes=shapes)
        out_t, state, z = _unpack(got, call, ("out_t", "state", "z"),
                                  ((Dv,), (D, Dv), (D,)), hints)
        if _close(out_t, expected[t]):
            continue
        for hint, mistake in _LINEAR_MISTAKES.items():
            variant = _linear_variant(q, k, v, mistake)
            if len(variant) > t and _close(out_t, variant[t]):
                fail(f"{call}: out_t is wrong", _fmt(expected[t]), _fmt(out_t), "you " + hint)
        if not np.isfinite(out_t).all():
            fail(f"{call}: out_t contains NaN or inf", _fmt(expected[t]), _fmt(out_t),
                 "φ(q_t)ᵀ z is positive once the new token is added (φ > 0): add before you divide")
        fail(f"{call}: out_t is wrong", _fmt(expected[t]), _fmt(out_t),
             "state += np.outer(φ(k_t), v_t); z += φ(k_t); out_t = φ(q_t) @ state / (φ(q_t) @ z), φ(x) = elu(x) + 1")


# ---------------------------------------------------------------------------------------------------------------------
# 8.3 how many pairs a (D, Dv) state can hold


def best_state_recall_error(n: int, D: int, Dv: int, rng) -> float:
    """Store ``n`` random pairs in the best ``(D, Dv)`` state there is (least squares) and return the largest error of
    reading them back, ``max_i |k_iᵀ S − v_i|``: about 0 (float rounding) when ``n <= D``, not when ``n > D``."""
    K, V = rng.normal(size=(n, D)), rng.normal(size=(n, Dv))
    S = np.linalg.lstsq(K, V, rcond=None)[0]  # (D, Dv), the state that recalls the pairs as well as any can
    return float(np.abs(K @ S - V).max())


_CAPACITY_MISTAKES = {  # "you ..." -> the wrong count, from (D, Dv)
    "counted the numbers in the state: it holds D·Dv numbers, but reading is a linear map of the key, k ↦ kᵀS, and at "
    "most D keys in R^D are linearly independent; a (D + 1)-th key is a combination of the others, so its value is "
    "forced": lambda D, Dv: D * Dv,
    "counted the state and the normaliser: D·Dv + D numbers, but what limits recall is how many independent keys R^D "
    "has, D": lambda D, Dv: D * Dv + D,
    "took min(D, Dv): the value width does not limit the number of pairs (one column of S per value dimension is "
    "solved independently); the key width does": lambda D, Dv: min(D, Dv),
    "counted the value width: a value of any width Dv is stored along its key's direction; the number of independent "
    "key directions, D, is the limit": lambda D, Dv: Dv,
}


@exercise("8.3")
def check_capacity(capacity) -> None:
    """Four state shapes, then the learner's count put to a run: that many pairs stored in the best state there is."""
    rng = seeded(803)
    shapes = []
    while len(shapes) < 4:
        D, Dv = int(rng.integers(2, 13)), int(rng.integers(2, 13))
        if D != Dv and (D, Dv) not in shapes:
            shapes.append((D, Dv))
    for D, Dv in shapes:
        call = f"capacity(D={D}, Dv={Dv})"
        got = _quiet(capacity, D, Dv)  # a ValueError here is the learner's own: it propagates
        if got is None:
            fail(f"{call} returned None", "a whole number of pairs", "None", "did you forget the `return`?")
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (numbers.Integral, numbers.Real)) or (
                not float(got).is_integer()):
            fail(f"{call} is not a whole number of pairs", "an int", repr(got))
        n = int(got)
        if n == D:
            continue
        run = ""
        if 1 <= n <= 4 * D * Dv + 4 * D:
            error = best_state_recall_error(n, D, Dv, np.random.default_rng([D, Dv, n]))
            run = (f" (a run: {n} random pairs stored in the best ({D}, {Dv}) state come back with a largest error of "
                   f"{error:.2g}{', exact' if error < 1e-9 else ''})")
        for hint, wrong in _CAPACITY_MISTAKES.items():
            if n == wrong(D, Dv):
                fail(f"{call} is wrong{run}", D, n, "you " + hint)
        if n < D:
            fail(f"{call} is too small{run}", D, n,
                 f"D orthonormal keys (the rows of the {D} x {D} identity, say) are each read back exactly: with "
                 "S = Σ_i k_i v_iᵀ, k_jᵀ S = v_j because k_jᵀ k_i = 0 for i ≠ j")
        fail(f"{call} is too large{run}", D, n,
             f"more than D = {D} keys in R^{D} are linearly dependent: if k_{D + 1} = Σ c_i k_i, then its read-out "
             "k_{D+1}ᵀ S = Σ c_i v_i is forced, whatever value was stored with it")
