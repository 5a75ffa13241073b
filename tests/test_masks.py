"""Every mask against its definition, written out element by element (True = may attend)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlab import causal_mask, combine_masks, document_mask, padding_mask, position_ids, sliding_window_mask
from helpers import lengths_and_S, segments


def from_rule(T, S, rule):
    """A (T, S) mask built one element at a time; query i sits at absolute position S - T + i."""
    return np.array([[rule(S - T + i, j) for j in range(S)] for i in range(T)], dtype=bool)


@pytest.mark.parametrize("T, S", [(1, 1), (1, 7), (4, 4), (3, 10), (113, 113), (5, 113)])
def test_causal_mask(T, S):
    got = causal_mask(T, S)
    assert got.dtype == bool and got.shape == (T, S)
    assert np.array_equal(got, from_rule(T, S, lambda i, j: j <= i))


def test_causal_mask_default_is_square_lower_triangle():
    assert np.array_equal(causal_mask(6), np.tril(np.ones((6, 6), dtype=bool)))


def test_one_decode_step_sees_everything():
    assert causal_mask(1, 9).all()


@given(T=st.integers(1, 20), extra=st.integers(0, 20))
def test_causal_row_counts(T, extra):
    """Row i of the last T queries of S positions sees exactly S - T + i + 1 keys."""
    S = T + extra
    assert np.array_equal(causal_mask(T, S).sum(axis=1), np.arange(S - T + 1, S + 1))


@pytest.mark.parametrize("T, S, window", [(1, 1, 1), (6, 6, 1), (6, 6, 3), (4, 9, 2), (7, 7, 100), (5, 113, 17)])
def test_sliding_window_mask(T, S, window):
    got = sliding_window_mask(T, S, window)
    assert got.shape == (T, S)
    assert np.array_equal(got, from_rule(T, S, lambda i, j: i - window < j <= i))


@given(T=st.integers(1, 12), extra=st.integers(0, 12), window=st.integers(1, 30))
def test_sliding_window_is_causal_and_narrow(T, extra, window):
    S = T + extra
    got = sliding_window_mask(T, S, window)
    assert not np.any(got & ~causal_mask(T, S)), "a sliding window never looks ahead"
    assert np.array_equal(got.sum(axis=1), np.minimum(window, np.arange(S - T + 1, S + 1)))
    if window >= S:
        assert np.array_equal(got, causal_mask(T, S))


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_mask(side):
    lengths, S = np.array([0, 1, 3, 5]), 5
    got = padding_mask(lengths, S, side)
    assert got.shape == (4, 1, 1, S) and got.dtype == bool
    for b, n in enumerate(lengths):
        real = [j < n for j in range(S)] if side == "right" else [j >= S - n for j in range(S)]
        assert got[b, 0, 0].tolist() == real


def test_padding_mask_default_side_is_right():
    assert np.array_equal(padding_mask([2, 3], 4), padding_mask([2, 3], 4, side="right"))


@given(ls=lengths_and_S())
def test_padding_mask_counts_and_sides(ls):
    lengths, S = ls
    right, left = padding_mask(lengths, S, "right"), padding_mask(lengths, S, "left")
    assert np.array_equal(right.sum(axis=-1)[:, 0, 0], lengths)
    assert np.array_equal(left, right[..., ::-1]), "left padding is right padding mirrored"


@given(ls=lengths_and_S())
def test_position_ids(ls):
    lengths, S = ls
    for side in ("right", "left"):
        pos = position_ids(lengths, S, side)
        real = padding_mask(lengths, S, side)[:, 0, 0]
        assert pos.shape == (len(lengths), S)
        for b, n in enumerate(lengths):
            assert pos[b][real[b]].tolist() == list(range(n)), "real tokens count 0, 1, ... whatever the padding"
            assert np.all(pos[b][~real[b]] == 0)


def test_position_ids_left_padding_example():
    assert position_ids([2, 3], 4, side="left").tolist() == [[0, 0, 0, 1], [0, 0, 1, 2]]


@given(seg=segments())
def test_document_mask(seg):
    got = document_mask(seg)
    T = len(seg)
    assert got.shape == (1, T, T)
    assert np.array_equal(got[0], from_rule(T, T, lambda i, j: seg[i] == seg[j]))


def test_document_mask_separate_key_ids_and_batch():
    q_ids = np.array([[0, 0, 1], [0, 1, 1]])
    k_ids = np.array([[0, 1, 1, 1], [1, 1, 0, 0]])
    got = document_mask(q_ids, k_ids)
    assert got.shape == (2, 1, 3, 4)
    for b in range(2):
        expected = [[q_ids[b, i] == k_ids[b, j] for j in range(4)] for i in range(3)]
        assert got[b, 0].tolist() == expected


def test_combine_masks_is_and_with_broadcasting():
    causal = causal_mask(4)
    pad = padding_mask([3, 1], 4)  # (2, 1, 1, 4)
    got = combine_masks(causal, None, pad)  # None is skipped
    assert got.shape == (2, 1, 4, 4)
    for b in range(2):
        assert np.array_equal(got[b, 0], causal & pad[b, 0, 0][None, :])


def test_combine_masks_single_mask_is_a_copy():
    m = causal_mask(3)
    got = combine_masks(m)
    assert np.array_equal(got, m) and got is not m
    got[0, 0] = False
    assert m[0, 0], "combining must never write into a caller's mask"
