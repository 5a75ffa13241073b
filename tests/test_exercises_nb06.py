"""The checkers of notebook 06: right answers pass, each classic mistake fails with its own diagnosis."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.exercises import ExerciseFailed, check


def shift(m):
    return np.where(np.isneginf(m), 0.0, m)


# ---------------------------------------------------------------------------------------------------------------------
# 6.1 the log-sum-exp of many rows, streamed


def lse(x, block_size, *, rescale=True, inverted=False, stop_early=False, subtract_max=True, guard=True, plus_m=True,
        keep_column=False, axis0=False):
    """The streamed log-sum-exp of each row, right by default; each flag switches on one classic mistake."""
    x = np.asarray(x, dtype=float)
    if axis0:
        x = x.T
    R, S = x.shape
    m, l = np.full((R, 1), -np.inf), np.zeros((R, 1))
    stop = S - block_size + 1 if stop_early else S  # stop_early: the partial last block is skipped
    for start in range(0, stop, block_size):
        block = x[:, start:start + block_size]
        if not subtract_max:
            l = l + np.exp(block).sum(axis=1, keepdims=True)
            continue
        m_new = np.maximum(m, block.max(axis=1, keepdims=True))
        sub = np.where(np.isneginf(m_new), 0.0, m_new) if guard else m_new
        factor = np.exp(m - sub) if rescale else 1.0
        if inverted:
            factor = np.where(np.isneginf(m), 0.0, np.exp(m_new - m))
        l = factor * l + np.exp(block - sub).sum(axis=1, keepdims=True)
        m = m_new
    with np.errstate(divide="ignore"):
        out = np.log(l) if not subtract_max else (m + np.log(l) if plus_m else np.log(l))
    return out if keep_column else out[:, 0]


def test_6_1_reference_passes(capsys):
    check("6.1", lse)
    assert capsys.readouterr().out == "Exercise 6.1: passed\n"


def test_6_1_unattempted(capsys):
    def stub(x, block_size):
        raise NotImplementedError

    check("6.1", stub)
    assert capsys.readouterr().out == "Exercise 6.1: not attempted yet\n"


@pytest.mark.parametrize("mistake, message", [
    (dict(rescale=False), "did you forget to rescale l by exp(m_old - m_new)?"),
    (dict(inverted=True), "upside down"),
    (dict(stop_early=True), "the last, partial block was never read"),
    (dict(subtract_max=False), "subtract the running max before exp"),
    (dict(guard=False), "exp(-inf - (-inf)) = exp(nan) = nan"),
    (dict(plus_m=False), "add the running max back"),
    (dict(keep_column=True), "as a 1-D array"),
    (dict(axis0=True), "read the COLUMNS in blocks"),
])
def test_6_1_classic_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed) as info:
        check("6.1", lambda x, block_size: lse(x, block_size, **mistake))
    assert message in str(info.value)


def test_6_1_a_dead_row_must_be_minus_inf():
    def zero_for_dead(x, block_size):
        out = lse(x, block_size)
        return np.where(np.isneginf(out), 0.0, out)

    with pytest.raises(ExerciseFailed, match="entirely -inf") as info:
        check("6.1", zero_for_dead)
    assert "log(0) = -inf" in str(info.value)


def test_6_1_a_loop_over_rows_with_python_floats_passes(capsys):
    def per_row(x, block_size):
        out = []
        for row in np.asarray(x, dtype=float):
            m, l = -math.inf, 0.0
            for start in range(0, len(row), block_size):
                b = row[start:start + block_size]
                m_new = max(m, b.max())
                if m_new == -math.inf:
                    continue
                l = math.exp(m - m_new) * l + np.exp(b - m_new).sum()
                m = m_new
            out.append(m + math.log(l) if l > 0 else -math.inf)
        return np.array(out)

    check("6.1", per_row)
    assert capsys.readouterr().out == "Exercise 6.1: passed\n"


def test_6_1_missing_return():
    with pytest.raises(ExerciseFailed, match="forget the `return`"):
        check("6.1", lambda x, block_size: None)


# ---------------------------------------------------------------------------------------------------------------------
# 6.2 a causal tiled pass that skips tiles


def causal_tiled(q, k, v, Br, Bc, *, offset=True, strict=False, rescale_acc=True, rescale_l=True, skip=True,
                 count_extra=0):
    """Causal tiled attention for one head (queries = last T of S), right by default; flags switch on mistakes."""
    T, D = q.shape
    S = k.shape[0]
    out, computed = np.zeros((T, v.shape[1])), 0
    for i0 in range(0, T, Br):
        rows = np.arange(i0, min(i0 + Br, T)) + (S - T if offset else 0)
        Q_i = q[i0:i0 + Br] / np.sqrt(D)
        m, l, acc = np.full((len(rows), 1), -np.inf), np.zeros((len(rows), 1)), np.zeros((len(rows), v.shape[1]))
        for j0 in range(0, S, Bc):
            if skip and j0 > rows[-1]:
                break
            computed += 1
            cols = np.arange(j0, min(j0 + Bc, S))
            allowed = cols[None, :] < rows[:, None] if strict else cols[None, :] <= rows[:, None]
            S_ij = np.where(allowed, Q_i @ k[j0:j0 + Bc].T, -np.inf)
            m_new = np.maximum(m, S_ij.max(axis=1, keepdims=True))
            shift = np.where(np.isneginf(m_new), 0.0, m_new)
            P_ij, alpha = np.exp(S_ij - shift), np.exp(m - shift)
            l = (alpha * l if rescale_l else l) + P_ij.sum(axis=1, keepdims=True)
            acc = (alpha * acc if rescale_acc else acc) + P_ij @ v[j0:j0 + Bc]
            m = m_new
        out[i0:i0 + Br] = acc / np.where(l == 0, 1.0, l)
    return out, computed + count_extra


def test_6_2_reference_passes(capsys):
    check("6.2", causal_tiled)
    assert capsys.readouterr().out == "Exercise 6.2: passed\n"


def test_6_2_unattempted(capsys):
    def stub(q, k, v, Br, Bc):
        raise NotImplementedError

    check("6.2", stub)
    assert capsys.readouterr().out == "Exercise 6.2: not attempted yet\n"


@pytest.mark.parametrize("mistake, message", [
    (dict(offset=False), "the queries are the LAST"),
    (dict(strict=True), "allows the diagonal"),
    (dict(rescale_acc=False), "did you forget to rescale acc"),
    (dict(rescale_l=False), "did you forget to rescale l"),
    (dict(skip=False), "Either you computed them all"),
    (dict(count_extra=1), "count each tile you compute once"),
])
def test_6_2_classic_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed) as info:
        check("6.2", lambda *args: causal_tiled(*args, **mistake))
    assert message in str(info.value)


def test_6_2_a_counter_that_counts_the_skipped_tiles_is_named():
    def count_all(q, k, v, Br, Bc):  # skips the right tiles, but counts every tile of the grid
        out, _ = causal_tiled(q, k, v, Br, Bc)
        return out, -(-q.shape[0] // Br) * -(-k.shape[0] // Bc)

    with pytest.raises(ExerciseFailed) as info:
        check("6.2", count_all)
    assert "your counter also counts the tiles you skip" in str(info.value)


def test_6_2_no_guard_is_fine_under_a_causal_mask(capsys):
    # every query may attend to key 0, so the running max is finite after the first tile: subtracting m_new is safe
    def unguarded(q, k, v, Br, Bc):
        T, D = q.shape
        S = k.shape[0]
        out, n = np.zeros((T, v.shape[1])), 0
        for i0 in range(0, T, Br):
            rows = np.arange(i0, min(i0 + Br, T)) + S - T
            m, l, acc = np.full((len(rows), 1), -np.inf), np.zeros((len(rows), 1)), np.zeros((len(rows), v.shape[1]))
            for j0 in range(0, rows[-1] + 1, Bc):
                n += 1
                cols = np.arange(j0, min(j0 + Bc, S))
                s = np.where(cols <= rows[:, None], q[i0:i0 + Br] @ k[j0:j0 + Bc].T / np.sqrt(D), -np.inf)
                m_new = np.maximum(m, s.max(axis=1, keepdims=True))
                p, a = np.exp(s - m_new), np.exp(m - m_new)
                l, acc, m = a * l + p.sum(axis=1, keepdims=True), a * acc + p @ v[j0:j0 + Bc], m_new
            out[i0:i0 + Br] = acc / l
        return out, n

    check("6.2", unguarded)
    assert capsys.readouterr().out == "Exercise 6.2: passed\n"


@pytest.mark.parametrize("bad, message", [
    (lambda q, k, v, Br, Bc: causal_tiled(q, k, v, Br, Bc)[0], "must return two things"),
    (lambda q, k, v, Br, Bc: (causal_tiled(q, k, v, Br, Bc)[0], "many"), "whole number"),
    (lambda q, k, v, Br, Bc: (causal_tiled(q, k, v, Br, Bc)[0][:, :2], 1), "wrong shape"),
])
def test_6_2_wrong_return_types(bad, message):
    with pytest.raises(ExerciseFailed, match=message):
        check("6.2", bad)


def test_6_2_forbids_the_library():
    from attnlab.exercises import forbidden

    assert {"attnlab.tiled_attention", "attnlab.attention", "attnlab.causal_mask"} <= set(forbidden("6.2"))
    assert "attnlab.online_softmax" in forbidden("6.1") and "attnlab.tiled_attention" in forbidden("6.3")


# ---------------------------------------------------------------------------------------------------------------------
# 6.3 merging two partial states


def merge_states(a, b, *, rescale_l=True, rescale_acc=True, average=False, guard=True, normalised=False):
    """Merge two (m, l, acc) states, right by default; each flag switches on one classic mistake."""
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = np.maximum(m_a, m_b)
    M = shift(m) if guard else m
    alpha, beta = np.exp(m_a - M), np.exp(m_b - M)
    if average:
        return m, l_a + l_b, (acc_a / np.where(l_a == 0, 1, l_a) + acc_b / np.where(l_b == 0, 1, l_b)) / 2
    l = alpha * l_a + beta * l_b if rescale_l else l_a + l_b
    acc = alpha * acc_a + beta * acc_b if rescale_acc else acc_a + acc_b
    return m, l, (acc / np.where(l == 0, 1.0, l) if normalised else acc)


def test_6_3_reference_passes(capsys):
    check("6.3", merge_states)
    assert capsys.readouterr().out == "Exercise 6.3: passed\n"


def test_6_3_unattempted(capsys):
    def stub(a, b):
        raise NotImplementedError

    check("6.3", stub)
    assert capsys.readouterr().out == "Exercise 6.3: not attempted yet\n"


@pytest.mark.parametrize("mistake, message", [
    (dict(rescale_l=False), "did you forget to rescale l?"),
    (dict(rescale_acc=False), "did you forget to rescale acc?"),
    (dict(average=True), "averaging the two outputs"),
    (dict(guard=False), "row 4 has no allowed key in either half"),
    (dict(normalised=True), "return acc itself"),
])
def test_6_3_classic_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed) as info:
        check("6.3", lambda a, b: merge_states(a, b, **mistake))
    assert message in str(info.value)


# ---------------------------------------------------------------------------------------------------------------------
# numpy's shape errors are named, not left as a bare traceback


def _lse_no_keepdims(x, block_size):  # the running max as (R,) instead of (R, 1): it cannot meet a (R, block) block
    R, S = x.shape
    m, l = np.full(R, -np.inf), np.zeros(R)
    for start in range(0, S, block_size):
        block = x[:, start:start + block_size]
        m_new = np.maximum(m, block.max(axis=1))
        l = np.exp(m - m_new) * l + np.exp(block - m_new).sum(axis=1)
        m = m_new
    return m + np.log(l)


def _merge_flat(a, b):  # acc rescaled by an (R,) factor: does not broadcast against (R, Dv)
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = np.maximum(m_a, m_b)[:, 0]
    alpha, beta = np.exp(m_a[:, 0] - m), np.exp(m_b[:, 0] - m)
    return m[:, None], (alpha * l_a[:, 0] + beta * l_b[:, 0])[:, None], alpha * acc_a + beta * acc_b


@pytest.mark.parametrize("exercise_id, wrong", [("6.1", _lse_no_keepdims), ("6.3", _merge_flat)])
def test_a_broadcast_error_gets_a_hint(exercise_id, wrong):
    with pytest.raises(ExerciseFailed) as info:
        check(exercise_id, wrong)
    assert "raised ValueError" in str(info.value) and "keepdims=True" in str(info.value)
