"""The checkers of notebook 07: right answers pass, each classic mistake fails with its own diagnosis."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab import softmax
from attnlab.exercises import ExerciseFailed, check, forbidden


def softmax_backward(P, dP, *, mistake=None):
    """The softmax backward, right by default; ``mistake`` switches on one classic error."""
    axis = 0 if mistake == "axis 0" else -1
    total = {"plain sum": dP.sum(axis, keepdims=True), "mean": (P * dP).mean(axis, keepdims=True),
             "whole array": (P * dP).sum()}.get(mistake, (P * dP).sum(axis, keepdims=True))
    if mistake == "no second term":
        return P * dP
    if mistake == "no P":
        return dP - total
    if mistake == "sign":
        return P * (total - dP)
    return P * (dP - total)


def attention_backward(q, k, v, dout, mask, *, mistake=None):
    """One head's backward, right by default; ``mistake`` switches on one classic error."""
    c = 1 / np.sqrt(q.shape[-1])
    scores = q @ k.T * (1.0 if mistake == "no scale in forward" else c)
    if mistake == "naive softmax":
        scores = np.where(mask, scores, -np.inf) if mask is not None else scores
        e = np.exp(scores - scores.max(-1, keepdims=True))
        P = e / e.sum(-1, keepdims=True)
    else:
        P = softmax(scores, mask)
    dP = dout @ v.T
    dS = dP if mistake == "skip softmax" else P * (dP - (P * dP).sum(-1, keepdims=True))
    dq = dS @ k * {"dq no scale": 1.0, "dq scale twice": c * c, "dq times sqrt": 1 / c}.get(mistake, c)
    dk = dS.T @ q * (1.0 if mistake == "dk no scale" else c)
    dv = P @ dout if mistake == "P not transposed" else P.T @ dout
    if mistake == "order":
        return dk, dq, dv
    return dq, dk, dv


def cross_entropy_backward(logits, targets, *, mistake=None):
    N, V = logits.shape
    p = softmax(logits)
    onehot = np.eye(V)[targets]
    if mistake == "unstable":
        p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return {"no 1/N": p - onehot, "no onehot": p / N, "sign": (onehot - p) / N,
            "logits": (logits - onehot) / N}.get(mistake, (p - onehot) / N)


def passes(exercise_id, fn, capsys):
    check(exercise_id, fn)
    return capsys.readouterr().out == f"Exercise {exercise_id}: passed\n"


@pytest.mark.parametrize("exercise_id, fn", [("7.1", softmax_backward), ("7.2", attention_backward),
                                             ("7.3", cross_entropy_backward)])
def test_reference_passes_and_stub_is_not_attempted(exercise_id, fn, capsys):
    assert passes(exercise_id, fn, capsys)

    def stub(*args):
        raise NotImplementedError

    check(exercise_id, stub)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


def test_forbidden_functions_are_named():
    assert "attnlab.softmax_backward" in forbidden("7.1")
    assert {"attnlab.attention_backward", "attnlab.softmax_backward"} <= set(forbidden("7.2"))
    assert "attnlab.cross_entropy" in forbidden("7.3")


@pytest.mark.parametrize("mistake, hint", [
    ("no second term", "forgot the second term"),
    ("no P", "the factor P is missing"),
    ("plain sum", "weighted by P"),
    ("mean", "not the mean"),
    ("axis 0", "wrong axis"),
    ("sign", "sign error"),
    ("whole array", "per row"),
])
def test_7_1_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check("7.1", lambda P, dP: softmax_backward(P, dP, mistake=mistake))


def test_7_1_a_batch_only_answer_is_caught():
    with pytest.raises(ExerciseFailed, match="one row of shape"):
        check("7.1", lambda P, dP: P * (dP - (P * dP).sum(1, keepdims=True)))


@pytest.mark.parametrize("mistake, hint", [
    ("dq no scale", "dq is wrong.*the scale is missing"),
    ("dk no scale", "dk is wrong.*the scale is missing"),
    ("dq scale twice", "applied twice"),
    ("dq times sqrt", "instead of dividing"),
    ("skip softmax", "skipped the softmax backward"),
    ("no scale in forward", "without the scale"),
    ("P not transposed", "raised ValueError"),
    ("naive softmax", "NaN or inf"),
    ("order", "return \\(dq, dk, dv\\) in this order"),
])
def test_7_2_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=f"(?s){hint}"):
        check("7.2", lambda q, k, v, d, m: attention_backward(q, k, v, d, m, mistake=mistake))


def test_7_2_wrong_count_of_results():
    with pytest.raises(ExerciseFailed, match="must return three arrays"):
        check("7.2", lambda q, k, v, d, m: attention_backward(q, k, v, d, m)[:2])


@pytest.mark.parametrize("mistake, hint", [
    ("no 1/N", "forgot the 1/N"),
    ("no onehot", "one-hot term is missing"),
    ("sign", "sign error"),
    ("logits", "not the logits"),
    ("unstable", "subtract each row's max"),
])
def test_7_3_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check("7.3", lambda z, y: cross_entropy_backward(z, y, mistake=mistake))


def test_7_2_an_answer_that_edits_its_inputs_fails_and_cannot_corrupt_the_reference():
    seen = []

    def spy(q, k, v, dout, mask):
        seen.append(mask)
        q += 1.0  # an answer that edits its inputs must not corrupt the reference
        return attention_backward(q - 1.0, k, v, dout, mask)

    with pytest.raises(ExerciseFailed, match="changed its argument number 1 in place"):
        check("7.2", spy)
    assert seen[0] is None and seen[1][1].sum() == 0
