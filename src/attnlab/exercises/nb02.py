"""Checks for notebook 02, masks.

2.1  ``my_causal_mask(T, S, start)``: the ``(T, S)`` boolean causal mask, True = may attend, for T queries at positions
     ``start, ..., start + T - 1`` of a preallocated cache of S slots (the slots after them are empty).
2.2  ``masked_attention(q, k, v, mask)``: ``q (T, D)``, ``k (S, D)``, ``v (S, Dv)``, ``mask (T, S)`` bool ->
     ``(out (T, Dv), weights (T, S))``, with zeros (not NaN) for rows that may attend to nothing.
2.3  ``influence_matrix(attend, x)``: which outputs change when each input token is edited; a causal layer's
     influence matrix must lie inside its causal mask.

Each checker calls the learner's function on inputs of its own (random ones drawn from :func:`seeded`), compares with ``attnlab``'s reference and, when they differ,
tries the classic mistakes one by one so that the message can name the one that was made.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..attention import attention
from ..masks import causal_mask
from ..softmax import softmax
from . import close, exercise, fail, seeded


def _rows(mask: np.ndarray) -> str:
    """A small boolean matrix as rows of 0/1, for messages: ``[[1 0] [1 1]]``."""
    return "[" + " ".join("[" + " ".join(str(int(x)) for x in row) + "]" for row in np.asarray(mask)) + "]"


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """The learner's ``a`` equals ``b`` within the tolerances of ``a``'s precision (float32 answers: float32 error)."""
    return close(a, b, 1e-7, 1e-10)


def _call_recording_warnings(fn, *args):
    """Call the learner's ``fn(*args)``; return its result and the RuntimeWarnings it emitted (as text)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    messages = [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, RuntimeWarning)]
    return result, messages


# ---------------------------------------------------------------------------------------------------------- 2.1

# (T, S, start): square first (inverted, off-by-one and diagonal mistakes show there), then the queries as the last T
# slots (start = S - T: the shift), then caches with empty slots after the queries, then edge cases
_CACHE_CASES = ((5, 5, 0), (3, 7, 4), (2, 8, 3), (1, 6, 2), (3, 9, 0), (1, 1, 0), (4, 4, 0), (2, 9, 6))


def _cache_cases() -> list[tuple[int, int, int]]:
    """The fixed cases, then two drawn from :func:`seeded` (different in every grading: no table of answers works)."""
    rng = seeded(21)
    drawn = []
    for _ in range(2):
        T, start = int(rng.integers(1, 10)), int(rng.integers(0, 31))
        drawn.append((T, start + T + int(rng.integers(0, 10)), start))
    return [*_CACHE_CASES, *drawn]


@exercise("2.1", forbids=("attnlab.causal_mask", "attnlab.sliding_window_mask"))
def check_my_causal_mask(my_causal_mask) -> None:
    for T, S, start in _cache_cases():
        call = f"my_causal_mask({T}, {S}, {start})"
        i = start + np.arange(T)[:, None]  # (T, 1) positions of the new queries
        j = np.arange(S)[None, :]  # (1, S) slots of the cache
        expected = j <= i  # (T, S)
        got = my_causal_mask(T, S, start)
        if got is None:
            fail(f"{call} returned None", f"a ({T}, {S}) boolean array", "None",
                 "did you forget the `return` statement?")
        got = np.asarray(got)
        if got.shape != expected.shape:
            hint = "one row per query (T rows) and one column per slot of the cache (S columns)."
            if got.shape == (S, T):
                hint = "your mask is transposed: rows are the T queries, columns the S keys."
            elif got.shape == (S, S):
                hint = "there are only T queries: one row for each new token, at positions start, ..., start + T - 1."
            elif got.shape == (T, start + T):
                hint = ("your mask covers only the slots written so far (start + T of them); the cache has S slots, "
                        "and the empty ones after the queries need columns too (all False).")
            fail(f"{call} returned the wrong shape", expected.shape, got.shape, hint)
        if got.dtype != bool:
            values = np.unique(got)
            if got.dtype.kind == "f" and np.isneginf(values).any():
                hint = ("that looks like an additive bias (0 where allowed, -inf where not). This function returns "
                        "the boolean mask itself; the bias is made from it in one place, inside the softmax.")
            elif set(values.tolist()) <= {0, 1}:
                same = np.array_equal(got.astype(bool), expected)
                hint = ("the pattern is right" if same else "the pattern is also wrong") + (
                    "; masks in this course are boolean. Comparisons such as `j <= i` already give booleans; "
                    "np.tril(np.ones((T, S))) does not, so add dtype=bool or `.astype(bool)`.")
            else:
                hint = "build the mask from comparisons of positions (`j <= i`), which give True/False."
            fail(f"{call} must return a boolean array (True = may attend)", "dtype bool", f"dtype {got.dtype}", hint)
        if np.array_equal(got, expected):
            continue
        what = f"{call} is not the causal mask"
        row0 = np.arange(T)[:, None]  # (T, 1) the query's row index, without the start
        if np.array_equal(got, ~expected):
            fail(what, _rows(expected), _rows(got),
                 "your mask is inverted: in this course True means 'may attend' (keys j <= i), and False marks the "
                 "forbidden future. Some libraries and tutorials use True = masked; not this one.")
        if np.array_equal(got, j >= i):
            fail(what, _rows(expected), _rows(got),
                 "your mask allows the query itself and everything AFTER it (the upper triangle, as np.triu gives): "
                 "that is the future a causal model must not see. True must mark keys j <= i (np.tril).")
        if np.array_equal(got, j <= i + 1):
            fail(what, _rows(expected), _rows(got),
                 "off by one: query i may also see key i + 1, the very next token (its target in training). "
                 "Allow j <= i, not j <= i + 1 (with np.tril, k=0, not k=1).")
        if np.array_equal(got, j < i):
            fail(what, _rows(expected), _rows(got),
                 "the diagonal is missing: a query may attend to its own position (j == i), so use j <= i, not j < i. "
                 "Without it the first query has no key at all.")
        if start and np.array_equal(got, j <= row0):
            fail(what, _rows(expected), _rows(got),
                 f"the queries sit at positions start, ..., start + T - 1 = {start}, ..., {start + T - 1}: query i "
                 f"may attend to keys j <= start + i. Your mask treats them as the first T positions, so they miss "
                 "the tokens already in the cache.")
        if start != S - T and np.array_equal(got, j <= row0 + S - T):
            fail(what, _rows(expected), _rows(got),
                 f"you placed the queries at the END of the cache (positions S - T + i, as causal_mask(T, S) does), "
                 f"but they sit at start + i = {start} + i: the slots after position {start + T - 1} are still empty, "
                 "and your mask lets the queries read them. Use start, not S - T.")
        if np.array_equal(got, np.broadcast_to(j < start + T, expected.shape)):
            fail(what, _rows(expected), _rows(got),
                 "you hid the empty slots but not the future: every new query may also read the new tokens after "
                 "it. Compare each query's own position with each key's (j <= start + i).")
        row = int(np.flatnonzero((got != expected).any(axis=1))[0])
        fail(f"{what}: row {row} (the query at position {start + row}) is wrong", _rows(expected[row:row + 1]),
             _rows(got[row:row + 1]), "query i sits at position start + i and may attend to every key j at or before "
             "it; the slots after the last query are empty.")


# ---------------------------------------------------------------------------------------------------------- 2.2


def _masked_cases():
    """Inputs drawn from :func:`seeded`: the first has one row with no allowed key (a left-padded, causal batch); the
    second huge scores."""
    rng = seeded(22)
    T, S, D, Dv = 4, 6, 8, 5
    q = rng.standard_normal((T, D))  # (T, D)
    k = rng.standard_normal((S, D))  # (S, D)
    v = rng.standard_normal((S, Dv))  # (S, Dv)
    # keys 0..2 are left padding; the queries are the last 4 positions, so query 0 (position 2) sees no real key
    mask = causal_mask(T, S) & (np.arange(S) >= 3)  # (T, S)
    yield "case 1 (query 0 has no allowed key)", q, k, v, mask
    yield "case 2 (large scores, up to about 1100)", 20 * q, 20 * k, v, causal_mask(T, S)


@exercise("2.2", forbids=("attnlab.attention", "attnlab.softmax", "attnlab.tiled_attention",
                          "attnlab.multi_head_attention"))
def check_masked_attention(masked_attention) -> None:
    for name, q, k, v, mask in _masked_cases():
        T, D = q.shape
        S, Dv = v.shape
        setup = f"for {name}: q {q.shape}, k {k.shape}, v {v.shape}, mask {mask.shape}"
        exp_out, exp_w = attention(q, k, v, mask, return_weights=True)  # (T, Dv), (T, S)
        result, warned = _call_recording_warnings(masked_attention, q.copy(), k.copy(), v.copy(), mask.copy())
        if result is None:
            fail(f"masked_attention returned None {setup}", "(out, weights)", "None",
                 "did you forget the `return` statement?")
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            fail(f"masked_attention must return a pair (out, weights) {setup}", "(out, weights)",
                 f"{type(result).__name__}", "end with `return out, weights`.")
        out, w = (np.asarray(r) for r in result)
        for label, arr, shape in (("out", out, (T, Dv)), ("weights", w, (T, S))):
            if arr.dtype.kind != "f":
                fail(f"{label} must be a floating-point array {setup}", "dtype float64", f"dtype {arr.dtype}")
            if arr.shape != shape:
                hint = "out is (T, Dv): one row per query, as wide as the values; weights is (T, S)."
                if label == "out" and arr.shape == (T, D):
                    hint = "out has the width of k, not of v: did you multiply the weights by k instead of v?"
                elif arr.shape == shape[::-1]:
                    hint = "it is transposed: rows are queries."
                fail(f"{label} has the wrong shape {setup}", shape, arr.shape, hint)
        dead = ~mask.any(axis=-1)  # rows with no allowed key
        for i in np.flatnonzero(dead):
            if np.isnan(w[i]).any() or np.isnan(out[i]).any():
                fail(f"row {i} has no allowed key (mask[{i}] is all False), and your output there is NaN {setup}",
                     f"weights[{i}] and out[{i}] all zeros", f"weights[{i}] = {np.round(w[i], 4)}",
                     "every score of that row is -inf, so exp gives all zeros and the softmax divides 0 by 0 "
                     "(or computes -inf - (-inf) when subtracting the max). Find rows where mask.any(axis=-1) is "
                     "False and give them zero weights: e.g. replace a zero row sum by 1 before dividing.")
        scores = q @ k.T / np.sqrt(D)  # (T, S)
        leaked = w[~mask & ~dead[:, None]]  # weight on forbidden keys, in rows that have allowed keys
        if np.any(leaked != 0):
            if _close(w, softmax(scores, ~mask)):
                fail(f"the mask is inverted {setup}", "zero weight where mask is False",
                     "zero weight where mask is True",
                     "True means 'may attend': keep the scores where mask is True and set the others to -inf.")
            if _close(w, softmax(scores)):
                fail(f"the mask is ignored {setup}", "zero weight where mask is False",
                     f"{np.count_nonzero(leaked)} masked positions with nonzero weight",
                     "set the scores of masked positions to -inf before the softmax: np.where(mask, scores, -np.inf).")
            if _close(w, softmax(scores * mask)):
                fail(f"masked positions get weight {setup}", "zero weight where mask is False",
                     f"{np.count_nonzero(leaked)} masked positions with nonzero weight",
                     "multiplying the scores by the mask makes masked scores 0, not -inf, and exp(0) = 1. "
                     "Use np.where(mask, scores, -np.inf).")
        for i in np.flatnonzero(dead):
            if np.allclose(w[i], 1.0 / S):
                fail(f"row {i} has no allowed key, but your weights there are uniform 1/S {setup}",
                     f"weights[{i}] = all zeros, out[{i}] = all zeros",
                     f"weights[{i}] = {np.round(w[i], 4)} (out[{i}] = the average of all values)",
                     "that is what filling masked scores with a large finite number like -1e9 gives: every score of "
                     "the row is the same, so the softmax spreads the weight evenly over keys the mask forbids. "
                     "Mask with -inf (or np.where on the mask) and define fully masked rows as zeros.")
            if np.any(w[i] != 0) or np.any(out[i] != 0):
                fail(f"row {i} has no allowed key, but your weights or output there are not zero {setup}",
                     f"weights[{i}] = all zeros, out[{i}] = all zeros",
                     f"weights[{i}] = {np.round(w[i], 4)}, out[{i}] = {np.round(out[i], 4)}",
                     "a row whose mask is all False may attend to nothing: its weights and its output are zeros.")
        live = ~dead
        if not (np.all(np.isfinite(w[live])) and np.all(np.isfinite(out[live]))):
            hint = "check each step for inf or NaN."
            if name.startswith("case 2"):
                hint = ("the scores reach about 1100 and np.exp(1100) overflows to inf (then inf / inf = NaN). "
                        "Subtract each row's maximum over the allowed keys before np.exp.")
            fail(f"rows that have allowed keys contain NaN or inf {setup}", "finite numbers", "NaN or inf", hint)
        if _close(w, exp_w) and _close(out, exp_out):
            if warned:
                fail(f"masked_attention is right, but it emitted a warning {setup}", "no warning", "; ".join(warned),
                     "you let a NaN or inf appear and repaired it afterwards (e.g. with np.nan_to_num or np.where "
                     "after the division). Handle rows with no allowed key before dividing, so that nothing invalid "
                     "is ever computed.")
            continue
        if np.any(leaked != 0):
            fail(f"masked positions get nonzero weight {setup}", "weights exactly 0 where mask is False",
                 f"largest weight on a masked position: {np.abs(leaked).max():.3g}",
                 "the scores of masked positions must become -inf before the softmax, so that exp gives exactly 0.")
        sums = w.sum(axis=-1)
        bad_rows = [i for i in np.flatnonzero(live) if not np.isclose(sums[i], 1.0)]
        if bad_rows:
            i = bad_rows[0]
            hint = "divide each row of exp(scores - max) by its sum over the keys."
            if _close(w, softmax(scores) * mask):
                hint = ("you zeroed the masked weights AFTER the softmax, so the remaining ones no longer sum to 1. "
                        "Mask the scores (-inf) BEFORE the softmax instead.")
            fail(f"row {i} of your weights sums to {sums[i]:.4g} {setup}", "each row with an allowed key sums to 1",
                 f"row sums {np.round(sums, 4)}", hint)
        for scale, text in ((1.0, "scores without the 1 / sqrt(D) factor"), (1.0 / D, f"scores / D = scores / {D}")):
            if _close(w, softmax(q @ k.T * scale, mask)):
                fail(f"the scores are scaled wrongly {setup}", f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}", text,
                     "divide q @ k.T by np.sqrt(D), the square root of the query/key width, before the softmax.")
        if _close(w, exp_w):
            fail(f"the weights are right but out is wrong {setup}", f"out[-1, :3] = {np.round(exp_out[-1, :3], 4)}",
                 f"out[-1, :3] = {np.round(out[-1, :3], 4)}", "out = weights @ v.")
        fail(f"masked_attention gives wrong weights {setup}", f"weights[-1] = {np.round(exp_w[-1], 4)}",
             f"weights[-1] = {np.round(w[-1], 4)}",
             "scores = q @ k.T / sqrt(D); masked scores to -inf; softmax over the keys (subtract the row max); "
             "rows with no allowed key are zeros; out = weights @ v.")


# ---------------------------------------------------------------------------------------------------------- 2.3


def _influence(attend, x: np.ndarray, *, accumulate: bool = False, tolerant: bool = False) -> np.ndarray:
    """The influence matrix of ``attend`` at ``x``, right or with a classic mistake: edits that accumulate (one copy
    of x reused for every p), or a tolerant comparison (np.isclose) that calls a change of about 1e-11 'unchanged'."""
    T = x.shape[0]
    base = attend(x)  # (T, Dv)
    changed = np.zeros((T, T), dtype=bool)
    edited = x.copy()
    for p in range(T):
        if not accumulate:
            edited = x.copy()
        edited[p] += 1.0
        new = attend(edited)
        changed[:, p] = ~np.isclose(new, base).all(axis=-1) if tolerant else np.any(new != base, axis=-1)
    return changed


def _layers():
    """One-head layers to test against, in an order drawn from :func:`seeded`, with a sequence length, a width, the
    weights, a window and x drawn from it too (so that no table of answers works): correct causal, off by one, a leak
    of about 1e-11, no mask, and a causal sliding window."""
    rng = seeded(23)
    T, D = int(rng.integers(4, 8)), int(rng.integers(4, 9))
    window = int(rng.integers(2, T))  # keys i - window + 1 .. i
    W_q, W_k, W_v = rng.standard_normal((3, D, D)) / np.sqrt(D)  # (D, D) each

    def project(x):
        return x @ W_q, x @ W_k, x @ W_v  # (T, D) each

    def causal(x):
        return attention(*project(x), causal=True)

    def off_by_one(x):
        T = x.shape[0]
        return attention(*project(x), np.arange(T)[None, :] <= np.arange(T)[:, None] + 1)

    def tiny_leak(x):
        q, k, v = project(x)
        scores = q @ k.T / np.sqrt(D)  # (T, T)
        scores = np.where(causal_mask(x.shape[0]), scores, scores - 25.0)  # future keys get about e^-25 of the weight
        return softmax(scores) @ v  # (T, D)

    def bidirectional(x):
        return attention(*project(x))

    def sliding(x):
        j, i = np.arange(x.shape[0])[None, :], np.arange(x.shape[0])[:, None]
        return attention(*project(x), (j <= i) & (j > i - window))

    layers = [("a correct causal layer", causal), ("a layer whose mask is off by one (j <= i + 1)", off_by_one),
              ("a layer that leaks about 1e-11 of its weight to the future", tiny_leak),
              ("a layer without a mask", bidirectional),
              (f"a causal layer that sees only the last {window} keys (j > i - {window})", sliding)]
    x = rng.standard_normal((T, D))  # (T, D)
    return x, dict(layers[int(n)] for n in rng.permutation(len(layers)))


# Nothing in attnlab computes an influence matrix, and the layers under test call attnlab.attention themselves (on the
# checker's side): nothing is forbidden.
@exercise("2.3", forbids=())
def check_influence_matrix(influence_matrix) -> None:
    x, layers = _layers()
    T = x.shape[0]
    for name, attend in layers.items():
        setup = f"for {name} and x of shape {x.shape}"
        expected = _influence(attend, x)
        given = x.copy()
        got = influence_matrix(attend, given)
        if not np.array_equal(given, x):
            fail(f"influence_matrix changed the x it was given {setup}", "x unchanged", "x modified",
                 "edit a copy: x_edit = x.copy(); x_edit[p] += 1.0. Editing x itself makes every later "
                 "comparison start from an already edited sequence.")
        if got is None:
            fail(f"influence_matrix returned None {setup}", f"a ({T}, {T}) boolean array", "None",
                 "did you forget the `return` statement?")
        got = np.asarray(got)
        if got.shape != (T, T):
            fail(f"influence_matrix returned the wrong shape {setup}", (T, T), got.shape,
                 "one row per output position i and one column per edited token p.")
        if got.dtype != bool:
            fail(f"influence_matrix must return a boolean array {setup}", "dtype bool", f"dtype {got.dtype}",
                 "changed[i, p] is True or False: use comparisons and np.any, or `.astype(bool)`.")
        if np.array_equal(got, expected):
            continue
        what = f"influence_matrix is wrong {setup}"
        if np.array_equal(got, expected.T):
            fail(what, _rows(expected), _rows(got),
                 "your matrix is transposed: changed[i, p] says whether OUTPUT i changed when TOKEN p was edited, "
                 "so fill column p in the p-th round (changed[:, p] = ...).")
        if np.array_equal(got, _influence(attend, x, tolerant=True)):
            fail(what, _rows(expected), _rows(got),
                 "you missed a leak: editing a later token changes earlier outputs by about 1e-11, which "
                 "np.allclose (or a tolerance) calls 'unchanged'. A correct mask leaves earlier outputs "
                 "bit-for-bit identical, so compare exactly (out != base, or np.array_equal).")
        if np.array_equal(got, _influence(attend, x, accumulate=True)):
            fail(what, _rows(expected), _rows(got),
                 "your matrix shows outputs that change when a LATER token is edited, as if the layer leaked: do "
                 "you make a fresh copy of x for each edited position p? Reusing one edited copy accumulates the "
                 "edits of earlier rounds.")
        i, p = (int(a[0]) for a in np.nonzero(got != expected))
        fail(f"{what}: entry [{i}, {p}]", _rows(expected), _rows(got),
             f"changed[{i}, {p}] should say whether out[{i}] differs at all (exactly) after x[{p}] += 1.0, "
             "compared with the output for the unedited x.")
