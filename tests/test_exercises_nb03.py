"""The checkers of notebook 03: reference solutions pass, each classic mistake fails with its diagnosis."""

import numpy as np
import pytest

from attnlab.exercises import check
from helpers import expect_failure


def passes(exercise_id, answer, capsys):
    check(exercise_id, answer)
    return capsys.readouterr().out == f"Exercise {exercise_id}: passed\n"




@pytest.mark.parametrize("exercise_id", ["3.1", "3.2", "3.3"])
def test_unattempted_stub_is_reported(exercise_id, capsys):
    def stub(*args):
        raise NotImplementedError

    check(exercise_id, stub)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


# ------------------------------------------------------------------------------------------------------------ 3.1


def std_reference(d_k, n, rng):
    q = rng.standard_normal((n, d_k))  # (n, d_k)
    k = rng.standard_normal((n, d_k))  # (n, d_k)
    return np.sum(q * k, axis=-1).std()


def std_one_draw(d_k, n, rng):  # another correct way to draw: one array for q and k
    q, k = rng.normal(0.0, 1.0, size=(2, n, d_k))
    return float(np.std(np.einsum("nd,nd->n", q, k), ddof=1))


def std_all_pairs(d_k, n, rng):  # every query against every key: still a spread of √d_k
    q, k = rng.standard_normal((2, n, d_k))
    return (q @ k.T).std()


@pytest.mark.parametrize("solution", [std_reference, std_one_draw, std_all_pairs])
def test_3_1_correct_solutions_pass(solution, capsys):
    assert passes("3.1", solution, capsys)


@pytest.mark.parametrize("wrong, phrases", [
    (lambda d_k, n, rng: np.sum(rng.standard_normal((n, d_k)) * rng.standard_normal((n, d_k)), -1).var(),
     ["variance", ".var()"]),
    (lambda d_k, n, rng: (np.sum(rng.standard_normal((n, d_k)) * rng.standard_normal((n, d_k)), -1)
                          / np.sqrt(d_k)).std(), ["does not grow with d_k"]),
    (lambda d_k, n, rng: (rng.standard_normal((n, d_k)) * rng.standard_normal((n, d_k))).std(),
     ["does not grow with d_k", "forget to sum"]),
    (lambda d_k, n, rng: np.sum(rng.standard_normal((n, d_k)) ** 2, -1).std(), ["q·q"]),
    (lambda d_k, n, rng: np.sum(rng.random((n, d_k)) * rng.random((n, d_k)), -1).std(), ["rng.random", "[0, 1)"]),
    (lambda d_k, n, rng: np.sum(rng.standard_normal((n, d_k)) * rng.standard_normal((n, d_k)), 0).std(),
     ["grows with n"]),
    (lambda d_k, n, rng: np.sum(rng.standard_normal((n, d_k)) * rng.standard_normal((n, d_k)), -1).mean(),
     ["mean"]),
    (lambda d_k, n, rng: np.sum(np.random.default_rng().standard_normal((2, n, d_k)).prod(0), -1).std(),
     ["same seed", "rng"]),
    (lambda d_k, n, rng: np.sum(rng.standard_normal((n, d_k)) * rng.standard_normal((n, d_k)), -1),
     ["one number", "shape (2000,)"]),
    (lambda d_k, n, rng: None, ["return"]),
])
def test_3_1_classic_mistakes_are_diagnosed(wrong, phrases):
    expect_failure("3.1", wrong, *phrases)


# ------------------------------------------------------------------------------------------------------------ 3.2


def jacobian_reference(p):
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]  # (..., S, S)


def jacobian_einsum(p):
    S = p.shape[-1]
    return np.einsum("...i,ij->...ij", p, np.eye(S)) - np.einsum("...i,...j->...ij", p, p)


def one_row_only(p):  # np.diag and np.outer: right for one row, wrong for a batch
    return np.diag(p) - np.outer(p, p)


def test_3_2_correct_solutions_pass(capsys):
    assert passes("3.2", jacobian_reference, capsys)
    assert passes("3.2", jacobian_einsum, capsys)


@pytest.mark.parametrize("wrong, phrases", [
    (lambda p: p[..., :, None] * np.eye(p.shape[-1]), ["outer-product term", "sums to 0"]),
    (lambda p: -jacobian_reference(p), ["sign error", "positive"]),
    (lambda p: (p * (1 - p))[..., :, None] * np.eye(p.shape[-1]), ["off-diagonal entries are 0"]),
    (lambda p: -p[..., :, None] * p[..., None, :], ["forgot the diag(p) term"]),
    (lambda p: p[..., :, None] * (1 - p[..., None, :]), ["only on the diagonal"]),
    (lambda p: np.eye(p.shape[-1]) - p[..., None, :], ["factor p_i is missing"]),
    (lambda p: jacobian_reference(p) + 0.01, ["rows sum to"]),
    (one_row_only, ["raised ValueError", "np.diag and np.outer only work on 1-D"]),
    (lambda p: p[:, None] * np.eye(p.shape[-1]) - p[:, None] * p[None, :], ["raised ValueError", "p[..., None, :]"]),
    (lambda p: jacobian_reference(p) if p.ndim == 1 else np.zeros((4, 4)), ["wrong shape", "(3, 4, 4)"]),
    (lambda p: jacobian_reference(p)[::-1] if p.ndim == 2 else jacobian_reference(p), ["block 0", "mixes the rows"]),
    (lambda p: np.zeros((p.shape[-1],) * 2), ["row 0"]),
    (lambda p: None, ["return"]),
])
def test_3_2_classic_mistakes_are_diagnosed(wrong, phrases):
    expect_failure("3.2", wrong, *phrases)


def test_3_2_reference_is_diag_minus_outer():
    p = np.array([0.5, 0.3, 0.2])
    np.testing.assert_allclose(jacobian_reference(p), np.diag(p) - np.outer(p, p))


# ------------------------------------------------------------------------------------------------------------ 3.3


def scores_reference(q, k):
    return q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])  # (..., T, S)


def scores_einsum(q, k):
    return np.einsum("...td,...sd->...ts", q / np.sqrt(q.shape[-1]), k)


def test_3_3_correct_solutions_pass(capsys):
    assert passes("3.3", scores_reference, capsys)
    assert passes("3.3", scores_einsum, capsys)


def d_model_scale(q, k):  # sqrt(H * D): the width of the whole model, not of one head
    width = q.shape[-1] * (q.shape[-3] if q.ndim >= 3 else 1)
    return q @ k.swapaxes(-1, -2) / np.sqrt(width)


@pytest.mark.parametrize("wrong, phrases", [
    (lambda q, k: q @ k.swapaxes(-1, -2), ["no scaling"]),
    (lambda q, k: q @ k.swapaxes(-1, -2) / q.shape[-1], ["divided by d_k instead of √d_k"]),
    (lambda q, k: q @ k.swapaxes(-1, -2) * np.sqrt(q.shape[-1]), ["multiplied"]),
    (d_model_scale, ["√d_model", "√64", "√16"]),
    (lambda q, k: q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[1]), ["wrong axis", "T, the number of queries"]),
    (lambda q, k: q @ k.swapaxes(-1, -2) / np.sqrt(len(q)), ["wrong axis"]),
    (lambda q, k: q @ k.swapaxes(-1, -2) / np.sqrt(k.shape[-2]), ["S, the number of keys"]),
    (lambda q, k: q @ k.T / np.sqrt(q.shape[-1]), ["k.T reverses every axis", "swapaxes"]),
    (lambda q, k: k @ q.swapaxes(-1, -2) / np.sqrt(q.shape[-1]), ["transposed", "k @ qᵀ"]),
    (lambda q, k: np.exp(scores_reference(q, k)) / np.exp(scores_reference(q, k)).sum(-1, keepdims=True),
     ["softmax weights"]),
    (lambda q, k: scores_reference(q, k) + 1.0, ["entry [0, 0]"]),
    (lambda q, k: None, ["return"]),
])
def test_3_3_classic_mistakes_are_diagnosed(wrong, phrases):
    expect_failure("3.3", wrong, *phrases)


def test_3_3_d_model_mistake_names_both_widths():
    message = expect_failure("3.3", d_model_scale)
    assert "H=4" in message or "H·d_k" in message
