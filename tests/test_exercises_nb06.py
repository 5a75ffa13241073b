"""The checkers of notebook 06: right answers pass, each classic mistake fails with its own diagnosis."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.exercises import ExerciseFailed, check


def shift(m):
    return np.where(np.isneginf(m), 0.0, m)


# ---------------------------------------------------------------------------------------------------------------------
# 6.1 online softmax in blocks


def blocks(x, block_size=2, *, rescale=True, inverted=False, stop_early=False, subtract_max=True, guard=True,
           dead_rows=True, normalise=True, short_output=False, update_m=True):
    """The blocked online softmax, right by default; each flag switches on one classic mistake."""
    x = np.asarray(x, dtype=float)
    m, l = -np.inf, 0.0
    stop = len(x) - block_size + 1 if stop_early else len(x)  # stop_early: the partial last block is skipped
    for start in range(0, stop, block_size):
        block = x[start:start + block_size]
        if not subtract_max:
            l = l + np.exp(block).sum()
            continue
        m_new = max(m, block.max())
        if guard and m_new == -np.inf:
            continue
        factor = np.exp(m - m_new) if rescale else 1.0
        if inverted and m > -np.inf:
            factor = np.exp(m_new - m)
        l = factor * l + np.exp(block - m_new).sum()
        m = m_new if update_m else m
    if not subtract_max:
        return np.exp(x) / l
    if short_output:
        x = x[: len(x) - len(x) % block_size]
    if dead_rows and l == 0:
        return np.zeros_like(x)
    return np.exp(x - m) / l if normalise else np.exp(x - m)


def test_6_1_reference_passes(capsys):
    check("6.1", blocks)
    assert capsys.readouterr().out == "Exercise 6.1: passed\n"


def test_6_1_unattempted(capsys):
    def stub(x, block_size=2):
        raise NotImplementedError

    check("6.1", stub)
    assert capsys.readouterr().out == "Exercise 6.1: not attempted yet\n"


@pytest.mark.parametrize("mistake, message", [
    (dict(rescale=False), "did you forget to rescale l by exp(m_old - m_new)?"),
    (dict(inverted=True), "upside down"),
    (dict(stop_early=True), "the last, partial block was never read"),
    (dict(short_output=True), "the last block holds only 1 element(s)"),
    (dict(subtract_max=False), "subtract the running max before exp"),
    (dict(guard=False), "exp(-inf - (-inf)) = exp(nan) = nan"),
    (dict(dead_rows=False), "the answer is all zeros"),
    (dict(normalise=False), "weights that sum to"),
    (dict(update_m=False), "do you set m = m_new after every block"),
])
def test_6_1_classic_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed) as info:
        check("6.1", lambda x, block_size=2: blocks(x, block_size, **mistake))
    assert message in str(info.value)


def test_6_1_python_floats_overflow():
    def with_math(x, block_size=2):
        total = sum(math.exp(v) for v in x)  # raises OverflowError on 200 * x
        return np.array([math.exp(v) / total for v in x])

    with pytest.raises(ExerciseFailed, match="OverflowError") as info:
        check("6.1", with_math)
    assert "subtract the running max before exp" in str(info.value)


def test_6_1_missing_return():
    with pytest.raises(ExerciseFailed, match="forget the `return`"):
        check("6.1", lambda x, block_size=2: None)


# ---------------------------------------------------------------------------------------------------------------------
# 6.2 one tile update


def tile_update(m, l, acc, S_ij, V_j, *, rescale_l=True, rescale_acc=True, inverted=False, old_max_in_p=False,
                normalise=False, guard=True, keepdims=True, return_old_m=False):
    """The FlashAttention step, right by default; each flag switches on one classic mistake."""
    m_new = np.maximum(m, S_ij.max(axis=1, keepdims=True))
    sub = shift if guard else (lambda a: a)
    P_ij = np.exp(S_ij - sub(m if old_max_in_p else m_new))
    alpha = np.exp(m - sub(m_new)) if not inverted else np.where(np.isneginf(m), 0.0, np.exp(m_new - m))
    l_new = (alpha * l if rescale_l else l) + P_ij.sum(axis=1, keepdims=True)
    acc_new = (alpha * acc if rescale_acc else acc) + P_ij @ V_j
    if normalise:
        acc_new = acc_new / np.where(l_new == 0, 1.0, l_new)
    if not keepdims:
        m_new = m_new[:, 0]
    return (m if return_old_m else m_new), l_new, acc_new


def test_6_2_reference_passes(capsys):
    check("6.2", tile_update)
    assert capsys.readouterr().out == "Exercise 6.2: passed\n"


def test_6_2_unattempted(capsys):
    def stub(m, l, acc, S_ij, V_j):
        raise NotImplementedError

    check("6.2", stub)
    assert capsys.readouterr().out == "Exercise 6.2: not attempted yet\n"


@pytest.mark.parametrize("mistake, message", [
    (dict(rescale_l=False), "did you forget to rescale l by exp(m_old - m_new)?"),
    (dict(rescale_acc=False), "did you forget to rescale acc by exp(m_old - m_new)?"),
    (dict(inverted=True), "upside down"),
    (dict(old_max_in_p=True), "P_ij must be exp(S_ij - m_new)"),
    (dict(normalise=True), "keep acc unnormalised"),
    (dict(return_old_m=True), "return the new running max"),
    (dict(guard=False), "exp(-inf - (-inf)) = exp(nan) = nan"),
    (dict(keepdims=False), "keepdims=True"),
])
def test_6_2_classic_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed) as info:
        check("6.2", lambda *args: tile_update(*args, **mistake))
    assert message in str(info.value)


def test_6_2_wrong_return_type():
    with pytest.raises(ExerciseFailed, match="must return three arrays"):
        check("6.2", lambda m, l, acc, S_ij, V_j: tile_update(m, l, acc, S_ij, V_j)[2])


# ---------------------------------------------------------------------------------------------------------------------
# 6.3 merging two partial states


def merge_states(a, b, *, rescale_l=True, rescale_acc=True, average=False, guard=True):
    """Merge two (m, l, acc) states, right by default; each flag switches on one classic mistake."""
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = np.maximum(m_a, m_b)
    M = shift(m) if guard else m
    alpha, beta = np.exp(m_a - M), np.exp(m_b - M)
    if average:
        return m, l_a + l_b, (acc_a / np.where(l_a == 0, 1, l_a) + acc_b / np.where(l_b == 0, 1, l_b)) / 2
    l = alpha * l_a + beta * l_b if rescale_l else l_a + l_b
    acc = alpha * acc_a + beta * acc_b if rescale_acc else acc_a + acc_b
    return m, l, acc


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
])
def test_6_3_classic_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed) as info:
        check("6.3", lambda a, b: merge_states(a, b, **mistake))
    assert message in str(info.value)
