"""Checks for notebook 06, online softmax and tiled attention.

6.1 ``online_logsumexp(x, block_size)``: the log-sum-exp of every row of ``x (R, S)``, streamed over blocks of columns
    with a running max and sum per row (the online softmax of section 2, for many rows, returning what the backward
    pass keeps).
6.2 ``causal_tiled_attention(q, k, v, Br, Bc)`` -> ``(out, tiles_computed)``: a causal tiled pass for one head that
    builds no mask array and skips the tiles above the diagonal, with ``T <= S`` (the pass of section 4, causal by
    index arithmetic, as ``attnlab.tiled_attention`` does it).
6.3 ``merge_states(a, b)``: combine two partial states ``(m, l, acc)`` computed over disjoint sets of keys.

Each checker calls the learner's function on inputs drawn from :func:`seeded`, compares with the exact answer, and,
when it is wrong, recomputes the classic mistakes (the old sum not rescaled, the factor upside down, the last partial
block dropped, no max subtracted, NaN from ``-inf - (-inf)``, the causal offset of ``T < S`` ignored) to name the one
the learner made.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..attention import attention
from ..masks import causal_mask
from . import close, exercise, fail, float_array, seeded

_PI = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0])  # the max grows 3 times; 9 is not a multiple of 2


def _fmt(a) -> str:
    """An array for a failure message, aligned under ``expected: `` (a (Br, 1) column is shown as a row)."""
    a = np.asarray(a, dtype=float)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    return np.array2string(a, precision=4, suppress_small=True, separator=", ", max_line_width=10_000,
                           prefix=" " * 12)


def _close(got, expected) -> bool:
    """The learner's ``got`` equals ``expected`` within the tolerances of its precision (float32 answers: float32
    error); NaN only where NaN is expected."""
    return close(got, expected, 1e-9, 1e-12, equal_nan=True)


_SHAPES_HINT = ("the running max and sum are one number per row, kept as (rows, 1) columns: take max and sum along "
                "the keys with keepdims=True, so that they broadcast against a (rows, block) tile; P_ij @ V_j is "
                "(rows, block) @ (block, Dv)")


def _quiet(fn, *args, arithmetic_hint: str = ""):
    """Call the learner's ``fn`` without numpy warnings; Python's own float errors, and numpy's shape errors (a
    ``ValueError`` from broadcasting or a product), become a failure with a hint."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return fn(*args)
        except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
            fail(f"your function raised {type(exc).__name__}: {exc}", "a finite result", type(exc).__name__,
                 arithmetic_hint)
        except ValueError as exc:
            text = str(exc)
            if "broadcast" in text or "mismatch" in text or "shapes" in text or "aligned" in text:
                fail(f"your function raised ValueError: {text}", "arrays whose shapes fit together",
                     "a shape error", hint=_SHAPES_HINT)
            raise


def _shift(m):
    """The value subtracted before ``exp``: the running max, or 0 while it is still ``-inf`` (nothing seen yet)."""
    return np.where(np.isneginf(m), 0.0, m)




# ---------------------------------------------------------------------------------------------------------------------
# 6.1 the log-sum-exp of many rows, streamed in blocks


def _lse_variant(x, block_size, *, rescale="right", drop_tail=False, plus_m=True):
    """The streamed log-sum-exp of every row of ``x (R, S)``, right or with one classic mistake."""
    with np.errstate(all="ignore"):
        R, S = x.shape
        m, l = np.full((R, 1), -np.inf), np.zeros((R, 1))
        stop = S - S % block_size if drop_tail else S
        for start in range(0, stop, block_size):
            block = x[:, start:start + block_size]
            m_new = np.maximum(m, block.max(axis=1, keepdims=True))  # m_new = max(m, rowmax(block))
            factor = {"right": np.exp(m - _shift(m_new)), "none": np.ones_like(m),
                      "inverted": np.where(np.isneginf(m), 0.0, np.exp(m_new - m))}[rescale]
            l = factor * l + np.exp(block - _shift(m_new)).sum(axis=1, keepdims=True)
            m = m_new
        return (m + np.log(l) if plus_m else np.log(l))[:, 0]


def _check_lse(fn, x, block_size, where: str):
    """Call ``fn(x, block_size)`` and compare with the exact log-sum-exp of each row; on a mismatch, name the mistake."""
    expected = _lse_variant(x, block_size=x.shape[1])  # one block: the plain stable log-sum-exp
    R, S = x.shape
    call = f"online_logsumexp({where}, block_size={block_size})"
    tail = S % block_size
    tail_hint = (f"S = {S} is not a multiple of block_size = {block_size}, so the last block holds only {tail} "
                 "column(s); loop with `range(0, x.shape[1], block_size)` and the slice "
                 "`x[:, start:start + block_size]` so that it is read too")
    got = _quiet(fn, x.copy(), block_size,
                 arithmetic_hint="subtract the running max before exp: e^(x - m) is at most 1 and never overflows")
    shape_hint = {(R, 1): "return one number per row as a 1-D array: (m + np.log(l))[:, 0]",
                  (S,): f"the rows are the R = {R} queries: read the COLUMNS in blocks (x[:, start:start + "
                        "block_size]) and take max and sum along axis=1, keeping one m and one l per row"}.get(
        np.shape(got) if got is not None else None, "return one number per row of x")
    got = float_array(got, call, (R,), shape_hint)
    if _close(got, expected):
        return
    variants = [
        (_lse_variant(x, block_size, rescale="none"), "did you forget to rescale l by exp(m_old - m_new)? When a "
         "block raises a row's running max, every term already summed in l was measured against the old max"),
        (_lse_variant(x, block_size, rescale="inverted"), "the rescaling factor is upside down: multiply l by "
         "exp(m_old - m_new), which is at most 1, not by exp(m_new - m_old)"),
        (_lse_variant(x, block_size, plus_m=False), "you returned log(l); l is the sum of exp(x - m), so "
         "log(sum exp(x)) = m + log(l): add the running max back"),
    ]
    if tail:
        variants.append((_lse_variant(x, block_size, drop_tail=True), f"the last, partial block was never read: "
                         f"{tail_hint}"))
    for variant, hint in variants:
        if _close(got, variant):
            fail(f"{call} is not the log-sum-exp of each row", _fmt(expected), _fmt(got), hint)
    bad = ~np.isfinite(got) & np.isfinite(expected)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        hint = ("exp(-inf - (-inf)) = exp(nan) = nan: while a row's running max is still -inf (only masked entries so "
                "far) there is nothing to rescale; subtract 0 instead of m_new in such rows "
                "(np.where(np.isneginf(m_new), 0, m_new))" if np.isneginf(x[row]).any() and np.isnan(got[row]) else
                "subtract the running max before exp: e^(x - m) is at most 1 and never overflows, while "
                f"e^{np.nanmax(x[row][np.isfinite(x[row])]):.0f} does not fit in a float")
        fail(f"{call}: row {row} is {got[row]}", _fmt(expected[row]), _fmt(got[row]), hint)
    dead = np.isneginf(x).all(axis=1)
    if dead.any() and not np.array_equal(got[dead], expected[dead]):
        row = int(np.argwhere(dead)[0][0])
        fail(f"{call}: row {row} is entirely -inf", "-inf", _fmt(got[row]),
             "a row with nothing allowed has l = 0, and log(0) = -inf: its log-sum-exp is -inf (its softmax would be "
             "all zeros), not NaN and not 0" + ("; NaN comes from exp(-inf - (-inf)) = exp(nan) = nan: subtract 0 "
             "instead of m_new while m_new is -inf" if np.isnan(got[row]) else ""))
    fail(f"{call} is not the log-sum-exp of each row", _fmt(expected), _fmt(got),
         "keep per row m = max so far and l = sum of exp(x_j - m) so far, as (R, 1) columns; return m + log(l)")


@exercise("6.1", forbids=("attnlab.softmax", "attnlab.online_softmax", "attnlab.online_softmax_stats"))
def check_online_logsumexp(online_logsumexp) -> None:
    """Rows whose max grows, other block sizes, scores in the thousands, masked entries, a dead row, R != S."""
    rng = seeded(61)
    x = np.stack([_PI, _PI[::-1], 200 * _PI, rng.normal(scale=3, size=9),
                  [-np.inf, -np.inf, 2.0, 0.0, -np.inf, 1.0, 3.0, -np.inf, 0.5], np.full(9, -np.inf)])  # (6, 9)
    _check_lse(online_logsumexp, x[:4], 2, "x[:4]")  # no masked entries yet
    for block_size in (2, 1, 4, 20):
        _check_lse(online_logsumexp, x, block_size, "x")
    wide = rng.normal(scale=4, size=(3, 50))
    wide[1, :23] = -np.inf  # a row that starts with a run of masked blocks
    _check_lse(online_logsumexp, wide, 8, "a (3, 50) array")


# ---------------------------------------------------------------------------------------------------------------------
# 6.2 a causal tiled pass that skips tiles, by index arithmetic


def _causal_variant(q, k, v, Br, Bc, *, offset=True, strict=False, rescale_acc=True, rescale_l=True, skip=True):
    """One-head causal tiled attention (queries = last T of S positions), right or with one classic mistake.

    Returns ``(out, tiles_computed)``.
    """
    with np.errstate(all="ignore"):
        T, D = q.shape
        S = k.shape[0]
        shift = S - T if offset else 0
        out, computed = np.zeros((T, v.shape[1])), 0
        for i0 in range(0, T, Br):
            rows = np.arange(i0, min(i0 + Br, T)) + shift  # positions of this block's queries
            Q_i = q[i0:i0 + Br] / np.sqrt(D)
            m, l, acc = np.full((len(rows), 1), -np.inf), np.zeros((len(rows), 1)), np.zeros((len(rows), v.shape[1]))
            for j0 in range(0, S, Bc):
                if skip and j0 > rows[-1] - (1 if strict else 0):
                    break
                computed += 1
                cols = np.arange(j0, min(j0 + Bc, S))
                allowed = cols[None, :] < rows[:, None] if strict else cols[None, :] <= rows[:, None]
                S_ij = np.where(allowed, Q_i @ k[j0:j0 + Bc].T, -np.inf)  # (Br, Bc)
                m_new = np.maximum(m, S_ij.max(axis=1, keepdims=True))
                P_ij = np.exp(S_ij - _shift(m_new))
                alpha = np.exp(m - _shift(m_new))
                l = (alpha * l if rescale_l else l) + P_ij.sum(axis=1, keepdims=True)
                acc = (alpha * acc if rescale_acc else acc) + P_ij @ v[j0:j0 + Bc]
                m = m_new
            out[i0:i0 + Br] = acc / np.where(l == 0, 1.0, l)
        return out, computed


@exercise("6.2", forbids=("attnlab.attention", "attnlab.tiled_attention", "attnlab.causal_mask",
                          "attnlab.multi_head_attention", "attnlab.softmax", "attnlab.online_softmax",
                          "attnlab.online_softmax_stats"))
def check_causal_tiled_attention(causal_tiled_attention) -> None:
    """Square and non-square causal passes, blocks that do not divide, one tile, one query; outputs and tile counts."""
    rng = seeded(62)
    cases = [(10, 10, 4, 3), (16, 16, 4, 4), (6, 13, 4, 5), (1, 9, 4, 4), (7, 7, 8, 8), (12, 20, 5, 3)]
    for T, S, Br, Bc in cases:
        q, k = rng.normal(size=(T, 4)) * 1.5, rng.normal(size=(S, 4))
        v = rng.normal(size=(S, 3))
        call = f"causal_tiled_attention(q, k, v, Br={Br}, Bc={Bc}) with T={T}, S={S}"
        got = _quiet(causal_tiled_attention, q.copy(), k.copy(), v.copy(), Br, Bc)
        if got is None:
            fail(f"{call} returned None", "a tuple (out, tiles_computed)", "None", "did you forget the `return`?")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            fail(f"{call} must return two things", "a tuple (out, tiles_computed)", type(got).__name__,
                 "end with `return out, tiles_computed`")
        out = float_array(got[0], f"{call}: out", (T, 3), "one row per query, one column per value feature")
        expected = attention(q, k, v, causal_mask(T, S))  # the queries are the last T of S positions
        needed = _causal_variant(q, k, v, Br, Bc)[1]  # tiles with at least one allowed (query, key) pair
        if not _close(out, expected):
            if not np.isfinite(out).all():
                fail(f"{call}: out contains inf or NaN", _fmt(expected), _fmt(out),
                     "every query may attend to key 0, so after the first tile every row has a finite max; check "
                     "that exp(m - m_new) uses the running max from before the tile, and that you divide by l")
            variants = [
                (_causal_variant(q, k, v, Br, Bc, offset=False)[0], f"with T = {T} < S = {S} the queries are the LAST "
                 f"T positions: query i sits at position S - T + i = {S - T} + i and may attend to keys j <= S - T + i"),
                (_causal_variant(q, k, v, Br, Bc, strict=True)[0], "the causal mask allows the diagonal: query at "
                 "position p may attend to keys j <= p, itself included (j < p leaves the first query nothing)"),
                (_causal_variant(q, k, v, Br, Bc, rescale_acc=False)[0], "did you forget to rescale acc by "
                 "exp(m_old - m_new)? acc is measured against the running max, exactly like l"),
                (_causal_variant(q, k, v, Br, Bc, rescale_l=False)[0], "did you forget to rescale l by "
                 "exp(m_old - m_new)? The old sum was measured against the old max"),
            ]
            for variant, hint in variants:
                if _close(out, variant):
                    fail(f"{call}: out is not causal attention", _fmt(expected), _fmt(out), hint)
            fail(f"{call}: out is not causal attention", _fmt(expected), _fmt(out),
                 "skip only tiles whose first key j0 comes after the block's last query position; inside a computed "
                 "tile, set the scores of keys j > the query's position to -inf")
        count = got[1]
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer, float, np.floating)) or (
                float(count) != int(count)):
            fail(f"{call}: tiles_computed must be a whole number", needed, repr(count))
        count, total = int(count), -(-T // Br) * -(-S // Bc)
        if count != needed:
            hint = (f"you counted all {total} tiles of the grid. Either you computed them all (skip a key block "
                    "starting at j0 when j0 > the position of the block's last query, S - T + i1 - 1), or your "
                    "counter also counts the tiles you skip: add 1 only after the skip test" if count == total else
                    f"the grid has {total} tiles, of which {needed} contain an allowed (query, key) pair and "
                    f"{total - needed} lie entirely above the diagonal; count each tile you compute once")
            fail(f"{call}: wrong number of tiles computed", needed, count, hint)


# ---------------------------------------------------------------------------------------------------------------------
# the running state (m, l, acc), shared by the checks of 6.3


def _unpack_state(got, what: str, Br: int, Dv: int):
    if got is None:
        fail(f"{what} returned None", "a tuple (m, l, acc)", "None", "did you forget the `return`?")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        fail(f"{what} must return three arrays", "a tuple (m, l, acc)", type(got).__name__,
             "end with `return m_new, l_new, acc_new`")
    keep = "keep the row axis as a column: use keepdims=True in max and sum, so that it broadcasts against (Br, Bc)"
    return (float_array(got[0], f"{what}: m", (Br, 1), keep), float_array(got[1], f"{what}: l", (Br, 1), keep),
            float_array(got[2], f"{what}: acc", (Br, Dv), "acc has one row per query and one column per value "
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


# ---------------------------------------------------------------------------------------------------------------------
# 6.3 merging two partial states


def _merge_variant(a, b, *, rescale_l=True, rescale_acc=True, inverted=False, average=False, normalised=False):
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
        if normalised:
            acc = acc / np.where(l == 0, 1.0, l)
        return m, l, acc


def _state_over(q, k, v, mask):
    """(m, l, acc) of one head's queries over the given keys, computed directly (no tiles)."""
    scores = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)  # (T, S)
    m = scores.max(axis=1, keepdims=True)
    P = np.exp(scores - _shift(m))  # (T, S)
    return m, P.sum(axis=1, keepdims=True), P @ v


@exercise("6.3", forbids=("attnlab.attention", "attnlab.tiled_attention", "attnlab.softmax",
                          "attnlab.online_softmax", "attnlab.online_softmax_stats"))
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
        (_merge_variant(a, b, normalised=True), "you returned acc / l: the state keeps acc unnormalised, so that it "
         "can still be merged with others; return acc itself, and let whoever holds the final state divide by l once"),
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
