"""Checks for notebook 06, online softmax and tiled attention.

6.1 ``online_softmax_blocks(x, block_size=2)``: the softmax of a 1-D array read in blocks with a running max and sum.
6.2 ``tile_update(m, l, acc, S_ij, V_j)``: one FlashAttention step, returning the new ``(m, l, acc)``.
6.3 ``merge_states(a, b)``: combine two partial states ``(m, l, acc)`` computed over disjoint sets of keys.

Each checker calls the learner's function on fixed inputs, compares with the exact answer, and, when it is wrong,
recomputes the classic mistakes (the old sum not rescaled, the factor upside down, the last partial block dropped, no
max subtracted, NaN from ``-inf - (-inf)``) to name the one the learner made.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..attention import attention
from ..masks import causal_mask
from ..softmax import softmax
from . import exercise, fail, seeded

_PI = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0])  # the max grows 3 times; 9 is not a multiple of 2


def _fmt(a) -> str:
    """An array for a failure message, aligned under ``expected: `` (a (Br, 1) column is shown as a row)."""
    a = np.asarray(a, dtype=float)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    return np.array2string(a, precision=4, suppress_small=True, separator=", ", max_line_width=10_000,
                           prefix=" " * 12)


def _close(got, expected) -> bool:
    return got.shape == expected.shape and np.allclose(got, expected, rtol=1e-9, atol=1e-12, equal_nan=True)


def _quiet(fn, *args, arithmetic_hint: str = ""):
    """Call the learner's ``fn`` without numpy warnings; Python's own float errors become a failure with a hint."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return fn(*args)
        except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
            fail(f"your function raised {type(exc).__name__}: {exc}", "a finite result", type(exc).__name__,
                 arithmetic_hint)


def _as_float_array(got, what: str, shape: tuple, shape_hint: str = "") -> np.ndarray:
    if got is None:
        fail(f"{what} returned None", f"an array of shape {shape}", "None", "did you forget the `return`?")
    try:
        arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        fail(f"{what} did not return numbers", f"an array of shape {shape}", type(got).__name__)
    if arr.shape != shape:
        fail(f"{what} has the wrong shape", f"shape {shape}", f"shape {arr.shape}", shape_hint)
    return arr


def _shift(m):
    """The value subtracted before ``exp``: the running max, or 0 while it is still ``-inf`` (nothing seen yet)."""
    return np.where(np.isneginf(m), 0.0, m)


# ---------------------------------------------------------------------------------------------------------------------
# 6.1 the online softmax in blocks


def _blocks_variant(x, block_size, *, rescale: str = "right", drop_tail: bool = False):
    """The blocked online softmax, right or with one classic mistake (used to diagnose a wrong answer)."""
    with np.errstate(all="ignore"):
        m, l = -np.inf, 0.0
        stop = len(x) - len(x) % block_size if drop_tail else len(x)
        for start in range(0, stop, block_size):
            block = x[start:start + block_size]
            m_new = max(m, block.max())
            if m_new == -np.inf:
                continue
            factor = {"right": np.exp(m - m_new), "none": 1.0, "inverted": np.exp(m_new - m)}[rescale]
            if m == -np.inf:
                factor = 0.0  # l is 0 anyway; keeps inf * 0 out of the inverted variant
            l = factor * l + np.exp(block - m_new).sum()
            m = m_new
        return np.exp(x - m) / l if l > 0 else np.zeros_like(x)


def _check_blocks(fn, x, block_size, where: str):
    """Call ``fn(x, block_size)`` and compare with the softmax; on a mismatch, name the mistake."""
    expected = softmax(x)
    call = f"online_softmax_blocks({where}, block_size={block_size})"
    tail = len(x) % block_size
    tail_hint = (f"len(x) = {len(x)} is not a multiple of block_size = {block_size}, so the last block holds only "
                 f"{tail} element(s); loop with `range(0, len(x), block_size)` and the slice "
                 "`x[start:start + block_size]` so that it is read too")
    overflow_hint = ("subtract the running max before exp: e^(x - m) is at most 1 and never overflows, while "
                     f"e^{x.max():.0f} does not fit in a float")
    finite = np.isfinite(x)
    if not finite.any():
        nonfinite_hint = ("every entry is -inf, so nothing may be attended: l stays 0, and the answer is all zeros "
                          "(the course's rule for fully masked rows), not 0 / 0 = NaN")
    elif not finite.all():
        nonfinite_hint = ("exp(-inf - (-inf)) = exp(nan) = nan: while the running max is still -inf (only masked "
                          "entries so far) there is nothing to rescale; skip such a block, or subtract 0 instead of "
                          "m_new")
    elif x.max() > 700:
        nonfinite_hint = overflow_hint
    elif block_size > len(x):
        nonfinite_hint = (f"block_size = {block_size} is larger than len(x) = {len(x)}: the whole row is one partial "
                          "block, and `range(0, len(x), block_size)` still visits it")
    else:
        nonfinite_hint = ("inf or NaN from finite scores: do you set m = m_new after every block, and divide "
                          "exp(x - m) by the final l, with m the final running max?")
    got = _quiet(fn, x.copy(), block_size, arithmetic_hint=nonfinite_hint)
    got = _as_float_array(got, call, x.shape, tail_hint if tail and got is not None and
                          np.shape(got) == (len(x) - tail,) else "return one weight per entry of x")
    if _close(got, expected):
        return
    if not np.isfinite(got).all():
        fail(f"{call} contains inf or NaN", _fmt(expected), _fmt(got), nonfinite_hint)
    if _close(got, _blocks_variant(x, block_size, rescale="none")):
        fail(f"{call} is not the softmax", _fmt(expected), _fmt(got),
             "did you forget to rescale l by exp(m_old - m_new)? When a block raises the running max, every term "
             "already summed in l was measured against the old max and must shrink by that factor")
    if _close(got, _blocks_variant(x, block_size, rescale="inverted")):
        fail(f"{call} is not the softmax", _fmt(expected), _fmt(got),
             "the rescaling factor is upside down: multiply l by exp(m_old - m_new), which is at most 1, "
             "not by exp(m_new - m_old)")
    if tail and _close(got, _blocks_variant(x, block_size, drop_tail=True)):
        fail(f"{call} is not the softmax", _fmt(expected), _fmt(got),
             f"the last, partial block was never read (your weights sum to {got.sum():.4f}): {tail_hint}")
    total = got.sum()
    if finite.any() and not np.isclose(total, 1.0):
        fail(f"{call} is not normalised", "weights that sum to 1", f"weights that sum to {total:.4f}: {_fmt(got)}",
             "divide exp(x - m) by the final running sum l, with m the final running max")
    fail(f"{call} is not the softmax", _fmt(expected), _fmt(got),
         "keep m = max so far and l = sum of exp(x_j - m) so far; return exp(x - m) / l at the end")


@exercise("6.1", forbids=('attnlab.online_softmax', 'attnlab.online_softmax_stats', 'attnlab.softmax'))
def check_online_softmax_blocks(online_softmax_blocks) -> None:
    """Blocks of 2 over a row whose max grows, other block sizes, huge scores, masked entries and a dead row."""
    _check_blocks(online_softmax_blocks, _PI, 2, "x")
    for block_size in (1, 3, 4, 20):
        _check_blocks(online_softmax_blocks, _PI, block_size, "x")
    _check_blocks(online_softmax_blocks, 200 * _PI, 2, "200 * x")
    masked = np.array([-np.inf, -np.inf, 2.0, 0.0, -np.inf, 1.0, 3.0])
    _check_blocks(online_softmax_blocks, masked, 2, "[-inf, -inf, 2, 0, -inf, 1, 3]")
    _check_blocks(online_softmax_blocks, np.full(5, -np.inf), 2, "[-inf] * 5")


# ---------------------------------------------------------------------------------------------------------------------
# 6.2 one tile update


def _update_variant(m, l, acc, S_ij, V_j, *, rescale_l=True, rescale_acc=True, inverted=False, old_max_in_p=False,
                    normalise=False):
    """The tile update, right or with one classic mistake."""
    with np.errstate(all="ignore"):
        m_new = np.maximum(m, S_ij.max(axis=1, keepdims=True))  # m_new = max(m, rowmax(S_ij))
        P_ij = np.exp(S_ij - _shift(m if old_max_in_p else m_new))  # (Br, Bc)
        alpha = np.exp(m - _shift(m_new))  # e^(m - m_new)
        if inverted:
            alpha = np.where(np.isneginf(m), 0.0, np.exp(m_new - m))
        l_new = (alpha * l if rescale_l else l) + P_ij.sum(axis=1, keepdims=True)
        acc_new = (alpha * acc if rescale_acc else acc) + P_ij @ V_j  # (Br, Dv)
        if normalise:
            acc_new = acc_new / np.where(l_new == 0, 1.0, l_new)
        return m_new, l_new, acc_new


def _unpack_state(got, what: str, Br: int, Dv: int):
    if got is None:
        fail(f"{what} returned None", "a tuple (m, l, acc)", "None", "did you forget the `return`?")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        fail(f"{what} must return three arrays", "a tuple (m, l, acc)", type(got).__name__,
             "end with `return m_new, l_new, acc_new`")
    keep = "keep the row axis as a column: use keepdims=True in max and sum, so that it broadcasts against (Br, Bc)"
    return (_as_float_array(got[0], f"{what}: m", (Br, 1), keep), _as_float_array(got[1], f"{what}: l", (Br, 1), keep),
            _as_float_array(got[2], f"{what}: acc", (Br, Dv), "acc has one row per query and one column per value "
                            "feature: P_ij @ V_j is (Br, Bc) @ (Bc, Dv)"))


def _diagnose_state(what, got, expected, variants, nan_hint: str) -> None:
    """Compare a returned ``(m, l, acc)`` with the expected one; if a part differs, name the mistake.

    ``variants`` are ``((m, l, acc), hint)`` pairs computed with one classic mistake each.
    """
    for index, (name, g, e) in enumerate(zip(("m", "l", "acc"), got, expected)):
        if _close(g, e):
            continue
        for variant, hint in variants:
            if _close(g, variant[index]):
                fail(f"{what}: {name} is wrong", _fmt(e), _fmt(g), hint)
        bad = (np.isnan(g) & ~np.isnan(e)) | (np.isinf(g) & np.isfinite(e))
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            fail(f"{what}: {name} has NaN or inf in row {row}", _fmt(e), _fmt(g), nan_hint)
        fail(f"{what}: {name} is wrong", _fmt(e), _fmt(g),
             {"m": "m_new is the larger of the old running max and the row max of S_ij: np.maximum(m, rowmax)",
              "l": "l_new = exp(m - m_new) * l + rowsum(exp(S_ij - m_new))",
              "acc": "acc_new = exp(m - m_new) * acc + exp(S_ij - m_new) @ V_j"}[name])


_NAN_HINT = ("a row whose scores are all -inf so far has m_new = -inf, and exp(-inf - (-inf)) = exp(nan) = nan; "
             "subtract 0 instead of m_new in such rows (np.where(np.isneginf(m_new), 0, m_new)), so that they keep "
             "m = -inf, l = 0 and acc = 0")


def _update_variants(args):
    return [
        (_update_variant(*args, rescale_l=False), "did you forget to rescale l by exp(m_old - m_new)? The old sum was "
         "measured against the old max"),
        (_update_variant(*args, rescale_acc=False), "did you forget to rescale acc by exp(m_old - m_new)? acc is a sum "
         "of exp(s - m) v over the keys seen so far, measured against the old max, exactly like l"),
        (_update_variant(*args, inverted=True), "the rescaling factor is upside down: use exp(m_old - m_new), which is "
         "at most 1, not exp(m_new - m_old)"),
        (_update_variant(*args, old_max_in_p=True), "P_ij must be exp(S_ij - m_new), with the new max: everything in "
         "the state is measured against the same max"),
        (_update_variant(*args, normalise=True), "keep acc unnormalised (do not divide by l inside the step): the "
         "division happens once, after the last tile"),
        ((args[0], *_update_variant(*args)[1:]), "return the new running max m_new, not the old one"),
    ]


@exercise("6.2", forbids=('attnlab.tiled_attention',))
def check_tile_update(tile_update) -> None:
    """One step from a mid-row state, one step from the empty state with masked rows, then a whole tiled pass."""
    rng = seeded(62)
    Br, Bc, Dv = 4, 3, 2
    # a state after earlier tiles, and a tile whose row max rises (rows 0, 2), stays below (row 1) or ties (row 3)
    m = np.array([[1.0], [2.0], [0.5], [3.0]])
    l = np.array([[1.5], [2.0], [1.2], [1.0]])
    acc = rng.normal(size=(Br, Dv))
    S_ij = np.array([[2.5, 0.0, -1.0], [1.0, -0.5, 0.2], [4.0, 3.5, -np.inf], [3.0, 1.0, 2.0]])
    V_j = rng.normal(size=(Bc, Dv))
    args = (m, l, acc, S_ij, V_j)
    what = "tile_update(m, l, acc, S_ij, V_j)"
    got = _unpack_state(_quiet(tile_update, *(a.copy() for a in args)), what, Br, Dv)
    expected = _update_variant(*args)
    variants = _update_variants(args)
    _diagnose_state(what, got, expected, variants, "no row is masked here: which exp or division gave NaN or inf?")
    # the first tile of a row block: row 1 is fully masked in it, row 2 partly
    m0, l0, acc0 = np.full((Br, 1), -np.inf), np.zeros((Br, 1)), np.zeros((Br, Dv))
    S_0 = rng.normal(size=(Br, Bc))
    S_0[1] = -np.inf
    S_0[2, :2] = -np.inf
    args = (m0, l0, acc0, S_0, V_j)
    what = "tile_update on the first tile (m = -inf, l = 0, acc = 0; row 1 of S_ij is all -inf)"
    got = _unpack_state(_quiet(tile_update, *(a.copy() for a in args)), what, Br, Dv)
    _diagnose_state(what, got, _update_variant(*args), _update_variants(args), _NAN_HINT)
    # a whole tiled pass: T = 7 queries, S = 8 keys, causal, with query 4 attending to nothing
    T, S, D = 7, 8, 3
    q, k, v = rng.normal(size=(T, D)), rng.normal(size=(S, D)), rng.normal(size=(S, Dv))
    mask = causal_mask(T, S)
    mask[4] = False
    exact = attention(q, k, v, mask)
    out = np.empty((T, Dv))
    for i0 in range(0, T, Br):
        rows = slice(i0, i0 + Br)
        n = len(q[rows])
        state = (np.full((n, 1), -np.inf), np.zeros((n, 1)), np.zeros((n, Dv)))
        for j0 in range(0, S, Bc):
            cols = slice(j0, j0 + Bc)
            S_t = np.where(mask[rows, cols], q[rows] @ k[cols].T / np.sqrt(D), -np.inf)  # (Br, Bc)
            state = _unpack_state(_quiet(tile_update, *state, S_t, v[cols]), "tile_update", n, Dv)
        out[rows] = state[2] / np.where(state[1] == 0, 1.0, state[1])
    if not _close(out, exact):
        fail("a tiled pass built from your tile_update is not attention", _fmt(exact), _fmt(out),
             "run the step on tiles of different shapes (the last ones are smaller) and check each output")


# ---------------------------------------------------------------------------------------------------------------------
# 6.3 merging two partial states


def _merge_variant(a, b, *, rescale_l=True, rescale_acc=True, inverted=False, average=False):
    with np.errstate(all="ignore"):
        (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
        m = np.maximum(m_a, m_b)
        if average:
            out = (acc_a / np.where(l_a == 0, 1, l_a) + acc_b / np.where(l_b == 0, 1, l_b)) / 2
            return m, l_a + l_b, out
        alpha, beta = np.exp(m_a - _shift(m)), np.exp(m_b - _shift(m))
        if inverted:
            alpha, beta = np.exp(_shift(m) - m_a), np.exp(_shift(m) - m_b)
        l = alpha * l_a + beta * l_b if rescale_l else l_a + l_b
        acc = alpha * acc_a + beta * acc_b if rescale_acc else acc_a + acc_b
        return m, l, acc


def _state_over(q, k, v, mask):
    """(m, l, acc) of one head's queries over the given keys, computed directly (no tiles)."""
    scores = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)  # (T, S)
    m = scores.max(axis=1, keepdims=True)
    P = np.exp(scores - _shift(m))  # (T, S)
    return m, P.sum(axis=1, keepdims=True), P @ v


@exercise("6.3", forbids=('attnlab.online_softmax', 'attnlab.online_softmax_stats'))
def check_merge_states(merge_states) -> None:
    """Merge the states of the two halves of the keys, including rows masked in one half or in both."""
    rng = seeded(63)
    T, S, D, Dv = 5, 9, 3, 2
    q = rng.normal(size=(T, D)) * 2
    k, v = rng.normal(size=(S, D)), rng.normal(size=(S, Dv))
    mask = np.ones((T, S), dtype=bool)
    mask[1, :4] = False  # row 1 sees nothing in the first half
    mask[3, 4:] = False  # row 3 sees nothing in the second half
    mask[4] = False  # row 4 sees nothing at all
    a = _state_over(q, k[:4], v[:4], mask[:, :4])
    b = _state_over(q, k[4:], v[4:], mask[:, 4:])
    what = "merge_states(a, b)"
    got = _unpack_state(_quiet(merge_states, tuple(x.copy() for x in a), tuple(x.copy() for x in b)), what, T, Dv)
    expected = _merge_variant(a, b)
    variants = [
        (_merge_variant(a, b, rescale_l=False), "did you forget to rescale l? Each sum was measured against its own "
         "max; bring both to the common max M with exp(m_a - M) and exp(m_b - M)"),
        (_merge_variant(a, b, rescale_acc=False), "did you forget to rescale acc? Each acc was measured against its "
         "own max, like l: multiply by exp(m_a - M) and exp(m_b - M)"),
        (_merge_variant(a, b, inverted=True), "the rescaling factors are upside down: exp(m_a - M) and exp(m_b - M) "
         "are at most 1"),
        (_merge_variant(a, b, average=True), "averaging the two outputs weights both halves equally; the half with "
         "more (or larger) exp scores must weigh more: merge the unnormalised sums, then divide once"),
    ]
    nan_hint = ("row 4 has no allowed key in either half, so M = -inf and exp(-inf - (-inf)) = nan; subtract 0 "
                "instead of M in such rows so that they stay m = -inf, l = 0, acc = 0")
    average = _merge_variant(a, b, average=True)[2]
    if not _close(got[2], expected[2]) and _close(got[2], average):
        fail(f"{what}: acc is wrong", _fmt(expected[2]), _fmt(got[2]), variants[3][1])
    _diagnose_state(what, got, expected, variants, nan_hint)
    out = got[2] / np.where(got[1] == 0, 1.0, got[1])
    exact = attention(q, k, v, mask)
    if not _close(out, exact):
        fail("acc / l of your merged state is not attention over all keys", _fmt(exact), _fmt(out))
