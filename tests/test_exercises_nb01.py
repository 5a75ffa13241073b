"""The checkers of notebook 01: the reference solutions pass, each classic mistake fails with its own diagnosis."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.exercises import ExerciseFailed, check


def stub(*args):
    raise NotImplementedError


# ------------------------------------------------------------------------------------------------ 1.1 stable_softmax

def softmax_ref(x):
    z = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


def softmax_naive(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def softmax_unnormalised(x):
    return np.exp(x - x.max(axis=-1, keepdims=True))


def softmax_exp_only(x):
    return np.exp(x)


def softmax_axis0(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def softmax_whole_array(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def softmax_no_keepdims_max(x):
    e = np.exp(x - x.max(axis=-1))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_no_keepdims_sum(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1)


def softmax_no_keepdims(x):
    e = np.exp(x - x.max(axis=-1))
    return e / e.sum(axis=-1)


def softmax_column_max(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_global_max(x):
    e = np.exp(x - x.max())
    return e / e.sum(axis=-1, keepdims=True)


def softmax_axis1(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_in_place(x):
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def softmax_rounded(x):
    return np.round(softmax_ref(x)).astype(int)


def softmax_list(x):
    return softmax_ref(x).tolist()


def softmax_no_return(x):
    softmax_ref(x)


@pytest.mark.parametrize("fn", [softmax_ref, softmax_list], ids=["reference", "list"])
def test_1_1_passes(fn, capsys):
    check("1.1", fn)
    assert capsys.readouterr().out == "Exercise 1.1: passed\n"


def test_1_1_the_checker_accepts_the_reference_but_not_as_an_answer():
    import attnlab
    from attnlab.exercises import ExerciseFailed, checker

    checker("1.1")(attnlab.softmax)
    with pytest.raises(ExerciseFailed, match="asks you to write this yourself; attnlab.softmax is the reference"):
        check("1.1", attnlab.softmax)


@pytest.mark.parametrize("fn, message", [
    (softmax_naive, "your softmax overflows"),
    (softmax_naive, "Did you forget to subtract the max?"),
    (softmax_unnormalised, "row 0 of your weights sums to 1.37; did you subtract the max but forget to normalise?"),
    (softmax_exp_only, "neither shifted by the max nor normalised"),
    (softmax_axis0, "your columns sum to 1 instead of your rows"),
    (softmax_whole_array, "the whole array sums to 1 instead of each row"),
    (softmax_no_keepdims_max, "row j's max was subtracted from column j"),
    (softmax_no_keepdims_sum, "column j was divided by row j's sum"),
    (softmax_no_keepdims, "without keepdims=True, so both were applied to the columns"),
    (softmax_column_max, "you subtracted each column's max (axis=0)"),
    (softmax_global_max, "you subtracted one max for the whole array"),
    (softmax_axis1, "you normalised over axis 1, not the last axis"),
    (softmax_in_place, "changed its argument x in place"),
    (softmax_rounded, "is not a floating-point array"),
    (softmax_no_return, "did you forget the `return` statement?"),
])
def test_1_1_diagnoses(fn, message):
    with pytest.raises(ExerciseFailed) as info:
        check("1.1", fn)
    assert message in str(info.value)
    assert "expected:" in str(info.value) and "got:" in str(info.value)


def test_1_1_unattempted(capsys):
    check("1.1", stub)
    assert capsys.readouterr().out == "Exercise 1.1: not attempted yet\n"


# --------------------------------------------------------------------------------------------- 1.2 cross_attention

def cross_ref(x, y, W_q, W_k, W_v):
    q, k, v = x @ W_q, y @ W_k, y @ W_v
    weights = softmax_ref(q @ k.T / np.sqrt(q.shape[-1]))
    return weights @ v, weights


def _cross_with(scale=None, softmax=softmax_ref, post=None, order="ow", q_from="x", kv_from="y", swap_w=False,
                out_from="v"):
    """A cross_attention with one chosen mistake."""
    def cross_attention(x, y, W_q, W_k, W_v):
        seqs = {"x": x, "y": y}
        Wq, Wk = (W_k, W_q) if swap_w else (W_q, W_k)
        q, k, v = seqs[q_from] @ Wq, seqs[kv_from] @ Wk, seqs[kv_from] @ W_v
        s = q @ k.T * (1 / np.sqrt(q.shape[-1]) if scale is None else scale(x, y, W_q, W_v))
        w = softmax(s)
        if post is not None:
            w = post(w, q)
        out = w @ {"v": v, "k": k, "y": y}[out_from]
        return (out, w) if order == "ow" else (w, out)
    return cross_attention


def cross_naive_softmax(x, y, W_q, W_k, W_v):
    q, k, v = x @ W_q, y @ W_k, y @ W_v
    w = softmax_naive(q @ k.T / np.sqrt(q.shape[-1]))
    return w @ v, w


def cross_values_from_x(x, y, W_q, W_k, W_v):
    q, k, v = x @ W_q, y @ W_k, x @ W_v  # v from x: (T, Dv), but the weights are (T, S)
    w = softmax_ref(q @ k.T / np.sqrt(q.shape[-1]))
    return w @ v, w


def cross_values_from_x_dot(x, y, W_q, W_k, W_v):
    q, k, v = x @ W_q, y @ W_k, np.dot(x, W_v)
    w = softmax_ref(np.dot(q, k.T) / np.sqrt(q.shape[-1]))
    return np.dot(w, v), w


def cross_transposed(x, y, W_q, W_k, W_v):
    q, k, v = x @ W_q, y @ W_k, y @ W_v
    w = softmax_axis0(k @ q.T / np.sqrt(q.shape[-1]))  # (S, T)
    return w.T @ v, w


def cross_out_only(x, y, W_q, W_k, W_v):
    return cross_ref(x, y, W_q, W_k, W_v)[0]


def cross_wrong_output(x, y, W_q, W_k, W_v):
    out, w = cross_ref(x, y, W_q, W_k, W_v)
    return out + 0.1, w


def test_1_2_passes(capsys):
    check("1.2", cross_ref)
    assert capsys.readouterr().out == "Exercise 1.2: passed\n"


def test_1_2_the_checker_accepts_the_reference_but_not_as_an_answer():
    """attnlab.attention on the projected sequences is the checker's reference; an answer may not call it."""
    import attnlab
    from attnlab.exercises import checker

    def cross_attnlab(x, y, W_q, W_k, W_v):
        return attnlab.attention(x @ W_q, y @ W_k, y @ W_v, return_weights=True)

    checker("1.2")(cross_attnlab)
    with pytest.raises(ExerciseFailed, match="asks you to write this yourself; attnlab.attention is the reference"):
        check("1.2", cross_attnlab)


@pytest.mark.parametrize("fn, message", [
    (_cross_with(scale=lambda x, y, W_q, W_v: 1.0), "you forgot to divide by sqrt(d_k)"),
    (_cross_with(scale=lambda x, y, W_q, W_v: 1.0 / W_q.shape[1]), "divided the scores by d_k = 4 instead of sqrt"),
    (_cross_with(scale=lambda x, y, W_q, W_v: np.sqrt(W_q.shape[1])), "you multiplied the scores by sqrt(d_k)"),
    (_cross_with(scale=lambda x, y, W_q, W_v: 1.0 / np.sqrt(x.shape[1])), "d_model = x.shape[-1]"),
    (_cross_with(scale=lambda x, y, W_q, W_v: 1.0 / np.sqrt(y.shape[0])), "the number of keys S = y.shape[0]"),
    (_cross_with(scale=lambda x, y, W_q, W_v: 1.0 / np.sqrt(x.shape[0])), "the number of queries T = x.shape[0]"),
    (_cross_with(scale=lambda x, y, W_q, W_v: 1.0 / np.sqrt(W_v.shape[1])), "the value width W_v.shape[1]"),
    (_cross_with(post=lambda w, q: w / np.sqrt(q.shape[-1])), "after the softmax"),
    (_cross_with(softmax=softmax_unnormalised), "did you subtract the max but forget to normalise?"),
    (_cross_with(softmax=softmax_axis0), "your columns sum to 1 instead of your rows"),
    (_cross_with(kv_from="x"), "the keys came from x, so x attended to itself"),
    (_cross_with(q_from="y"), "the queries came from y, so y attended to itself"),
    (_cross_with(q_from="y", kv_from="x"), "you swapped the two sequences"),
    (_cross_with(swap_w=True), "you swapped W_q and W_k"),
    (_cross_with(out_from="k"), "the output mixes the VALUES"),
    (_cross_with(out_from="y"), "you averaged the rows of y itself"),
    (_cross_with(order="wo"), "you returned (weights, out)"),
    (cross_naive_softmax, "NaN or inf when the scores are large"),
    (cross_transposed, "one row per key instead of one row per query"),
    (cross_values_from_x, "raised numpy's ValueError when it multiplied the weights, (T, S) = (3, 5), by an array with T = 3 rows: did you take the values from x?"),
    (cross_values_from_x_dot, "did you take the values from x?"),
    (cross_out_only, "returned one array"),
    (cross_wrong_output, "your weights are right but your output is not"),
])
def test_1_2_diagnoses(fn, message):
    with pytest.raises(ExerciseFailed) as info:
        check("1.2", fn)
    assert message in str(info.value)
    assert "expected:" in str(info.value) and "got:" in str(info.value)


def test_1_2_other_value_errors_of_the_learner_propagate():
    def cross_raises(x, y, W_q, W_k, W_v):
        raise ValueError("an error of the learner's own")

    with pytest.raises(ValueError, match="an error of the learner's own"):
        check("1.2", cross_raises)


def test_1_2_unattempted(capsys):
    check("1.2", stub)
    assert capsys.readouterr().out == "Exercise 1.2: not attempted yet\n"


def test_1_2_draws_its_inputs_from_seeded(monkeypatch):
    """With a grading secret the inputs change, and the reference still passes (no answer can be precomputed)."""
    import attnlab.exercises as ex
    from attnlab.exercises.nb01 import _cross_inputs

    plain = _cross_inputs(12)["x"]
    monkeypatch.setattr(ex, "_SECRET", 12345)
    assert not np.allclose(_cross_inputs(12)["x"], plain)
    check("1.2", cross_ref)


def test_forbids():
    from attnlab.exercises import forbidden

    assert "attnlab.softmax" in forbidden("1.1")
    assert {"attnlab.attention", "attnlab.softmax"} <= set(forbidden("1.2"))
    assert forbidden("1.3") == ()


# --------------------------------------------------------------------------------------------------- 1.3 steer_query

def steer_ref(keys, target):
    S, D = keys.shape
    margin = np.log(99 * (S - 1)) + 1.0
    wanted = np.zeros(S)
    wanted[target] = margin * np.sqrt(D)
    q, *_ = np.linalg.lstsq(keys, wanted, rcond=None)
    return q


def steer_along_target(keys, target):
    return 50.0 * keys[target]


def steer_unscaled(keys, target):
    S, D = keys.shape
    wanted = np.zeros(S)
    wanted[target] = np.log(99 * (S - 1)) + 1.0  # forgets the sqrt(D)
    return np.linalg.lstsq(keys, wanted, rcond=None)[0]


def steer_too_short(keys, target):
    wanted = np.zeros(keys.shape[0])
    wanted[target] = 1.0
    return np.linalg.lstsq(keys, wanted, rcond=None)[0]


def steer_wrong_key(keys, target):
    return steer_ref(keys, (target + 1) % keys.shape[0])


def steer_zero(keys, target):
    return np.zeros(keys.shape[1])


def steer_column(keys, target):
    return steer_ref(keys, target)[:, None]


def test_1_3_passes(capsys):
    check("1.3", steer_ref)
    assert capsys.readouterr().out == "Exercise 1.3: passed\n"


@pytest.mark.parametrize("fn, message", [
    (steer_along_target, "your query points along key 0, but key 1 wins"),
    (steer_unscaled, "you forgot that the scores are divided by sqrt(d_k)"),
    (steer_too_short, "has the largest weight"),
    (steer_wrong_key, "more than key 0"),
    (steer_zero, "your query is all zeros"),
    (steer_column, "has the wrong shape"),
])
def test_1_3_diagnoses(fn, message):
    with pytest.raises(ExerciseFailed) as info:
        check("1.3", fn)
    assert message in str(info.value)


def test_1_3_unattempted(capsys):
    check("1.3", stub)
    assert capsys.readouterr().out == "Exercise 1.3: not attempted yet\n"


def test_messages_have_the_house_format():
    with pytest.raises(ExerciseFailed) as info:
        check("1.1", softmax_unnormalised)
    lines = str(info.value).splitlines()
    assert lines[1].startswith("  expected: ") and lines[2].startswith("  got:      ")
    assert lines[3].startswith("  hint: ")
