"""The checkers of notebook 07: right answers pass (float32 ones too), each classic mistake fails with its own
diagnosis."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab import softmax
from attnlab.exercises import ExerciseFailed, check, forbidden

# ---------------------------------------------------------------------------------------------------------------------
# 7.1 one tile of the tiled backward


def tile_backward(q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed, *, mistake=None):
    """One tile's (dq_i, dk_j, dv_j), right by default; ``mistake`` switches on one classic error."""
    c = 1 / np.sqrt(q_i.shape[-1])
    s = q_i @ k_j.T * (1.0 if mistake == "no scale in s" else c)
    if allowed is not None and mistake != "mask ignored":
        s = np.where(allowed, s, -np.inf)
    if mistake == "no [:, None]":
        P = np.exp(s - lse_i)
    elif mistake == "tile softmax":
        P = softmax(s)
    elif mistake == "nan":
        P = np.exp(s - lse_i[:, None])
    else:
        P = np.exp(s - np.where(np.isneginf(lse_i), np.inf, lse_i)[:, None])  # a dead row: exp(-inf) = 0
    dv = P @ dout_i if mistake == "P not transposed" else P.T @ dout_i
    dP = dout_i @ v_j.T
    D = {"tile delta": (P * dP).sum(-1, keepdims=True), "no delta": 0.0}.get(mistake, delta_i[:, None])
    dS = P * (dP - D)
    g = 1.0 if mistake == "no scale in grads" else c
    dk = dS @ q_i * g if mistake == "dk not transposed" else dS.T @ q_i * g
    out = dS @ k_j * g, dk, dv
    if mistake == "float32":
        return tuple(a.astype(np.float32) for a in out)
    return out


@pytest.mark.parametrize("mistake, hint", [
    ("no [:, None]", "one number per row must stay a column"),
    ("tile softmax", "not a softmax over this tile"),
    ("tile delta", "use the given D_i"),
    ("no delta", "the second term, the row's D_i, is missing"),
    ("no scale in s", "the scale is missing before exp"),
    ("no scale in grads", "the scale is missing in the gradients"),
    ("mask ignored", "masked pairs must get P = 0"),
    ("nan", "exp\\(−inf − \\(−inf\\)\\)"),
    ("P not transposed", "matching inner sizes"),
    ("dk not transposed", "matching inner sizes"),
])
def test_7_1_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=f"(?s){hint}"):
        check("7.1", lambda *args: tile_backward(*args, mistake=mistake))


def test_7_1_a_square_tile_catches_L_subtracted_per_column():
    """Broadcasting (Br,) along the keys raises on a non-square tile; a square tile must be caught by its values."""
    def per_column_only_when_square(q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed):
        if q_i.shape[0] != k_j.shape[0]:
            return tile_backward(q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed)
        c = 1 / np.sqrt(q_i.shape[-1])
        s = np.where(allowed, q_i @ k_j.T * c, -np.inf)
        P = np.exp(s - lse_i)  # L_c subtracted from column c
        dP = dout_i @ v_j.T
        dS = P * (dP - delta_i[:, None])
        return c * dS @ k_j, c * dS.T @ q_i, P.T @ dout_i

    with pytest.raises(ExerciseFailed, match="lse_i\\[:, None\\]"):
        check("7.1", per_column_only_when_square)


def test_7_1_tiles_that_do_not_add_up_are_caught():
    calls = []

    def right_once(*args):  # right on the two single tiles, then wrong inside the whole head
        calls.append(1)
        dq, dk, dv = tile_backward(*args)
        return (dq, dk, dv) if len(calls) <= 2 else (dq, dk, 2 * dv)

    # A stateful answer cannot be judged twice alike, so the self-check alone (not the parity fixture's two runs).
    import attnlab.exercises

    with pytest.raises(ExerciseFailed, match="sums of your tiles' dv"):
        attnlab.exercises.check("7.1", right_once)


# ---------------------------------------------------------------------------------------------------------------------
# 7.2 grouped-query backward


def gqa_backward(q, k, v, dout, mask, *, mistake=None):
    """Grouped-query backward, right by default; ``mistake`` switches on one classic error."""
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    c = 1 / np.sqrt(D)
    expand = (lambda a: np.tile(a, (1, G, 1, 1))) if mistake == "np.tile" else (lambda a: np.repeat(a, G, axis=1))
    kr, vr = expand(k), expand(v)
    s = q @ kr.swapaxes(-1, -2) * (1.0 if mistake == "no scale in s" else c)
    if mistake == "mask after softmax":
        P = softmax(s) * (1 if mask is None else mask)
    elif mistake == "naive softmax":
        s = s if mask is None else np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        P = e / e.sum(-1, keepdims=True)
    else:
        P = softmax(s, mask)
    dP = dout @ vr.swapaxes(-1, -2)
    keep = mistake != "no keepdims"
    dS = P * (dP - (P * dP).sum(-1, keepdims=keep))
    g = 1.0 if mistake == "no scale in grads" else c
    dq = dS @ kr * g
    dkr = (dS @ q if mistake == "dk not transposed" else dS.swapaxes(-1, -2) @ q) * g
    dvr = P.T @ dout if mistake == ".T on a batch" else P.swapaxes(-1, -2) @ dout
    if mistake == "no group sum":
        return dq, dkr, dvr
    if mistake in ("np.tile", "wrong group"):
        dk, dv = dkr.reshape(B, G, Hkv, S, -1).sum(1), dvr.reshape(B, G, Hkv, S, -1).sum(1)
    elif mistake == "mean":
        dk, dv = dkr.reshape(B, Hkv, G, S, -1).mean(2), dvr.reshape(B, Hkv, G, S, -1).mean(2)
    else:
        dk, dv = dkr.reshape(B, Hkv, G, S, -1).sum(2), dvr.reshape(B, Hkv, G, S, -1).sum(2)
    if mistake == "float32":
        return dq.astype(np.float32), dk.astype(np.float32), dv.astype(np.float32)
    return dq, dk, dv


@pytest.mark.parametrize("mistake, hint", [
    ("mask after softmax", "apply the mask to the scores, before the softmax"),
    ("np.tile", "the np.tile way"),
    ("wrong group", "over the wrong group"),
    ("mean", "do not average"),
    ("no group sum", "dk has one gradient per query head"),
    ("no keepdims", "one number per row must stay a column"),
    ("no scale in s", "the scale is missing in the scores"),
    ("no scale in grads", "the scale is missing in the gradients"),
    ("dk not transposed", "matching inner sizes"),
    (".T on a batch", "swapaxes"),
    ("naive softmax", "NaN or inf"),
])
def test_7_2_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=f"(?s){hint}"):
        check("7.2", lambda q, k, v, d, m: gqa_backward(q, k, v, d, m, mistake=mistake))


def test_7_2_wrong_count_of_results():
    with pytest.raises(ExerciseFailed, match="must return three arrays"):
        check("7.2", lambda q, k, v, d, m: gqa_backward(q, k, v, d, m)[:2])


def test_7_2_an_answer_that_edits_its_inputs_fails_and_cannot_corrupt_the_reference():
    seen = []

    def spy(q, k, v, dout, mask):
        seen.append(mask)
        q += 1.0  # an answer that edits its inputs must not corrupt the reference
        return gqa_backward(q - 1.0, k, v, dout, mask)

    with pytest.raises(ExerciseFailed, match="changed its argument number 1 in place"):
        check("7.2", spy)
    assert seen[0][1].sum() == 0


# ---------------------------------------------------------------------------------------------------------------------
# 7.3 cross-entropy backward


def cross_entropy_backward(logits, targets, *, mistake=None):
    N, V = logits.shape
    p = softmax(logits)
    onehot = np.eye(V)[targets]
    if mistake == "unstable":
        p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    if mistake == "no keepdims":
        z = logits - logits.max(-1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(-1)
    if mistake == "float32":
        return ((p - onehot) / N).astype(np.float32)
    return {"no 1/N": p - onehot, "no onehot": p / N, "sign": (onehot - p) / N,
            "logits": (logits - onehot) / N}.get(mistake, (p - onehot) / N)


@pytest.mark.parametrize("mistake, hint", [
    ("no 1/N", "forgot the 1/N"),
    ("no onehot", "one-hot term is missing"),
    ("sign", "sign error"),
    ("logits", "not the logits"),
    ("unstable", "subtract each row's max"),
    ("no keepdims", "one number per row must stay a column"),
])
def test_7_3_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check("7.3", lambda z, y: cross_entropy_backward(z, y, mistake=mistake))


# ---------------------------------------------------------------------------------------------------------------------
# all three


def passes(exercise_id, fn, capsys):
    check(exercise_id, fn)
    return capsys.readouterr().out == f"Exercise {exercise_id}: passed\n"


@pytest.mark.parametrize("exercise_id, fn", [("7.1", tile_backward), ("7.2", gqa_backward),
                                             ("7.3", cross_entropy_backward)])
def test_reference_and_float32_answers_pass_and_stub_is_not_attempted(exercise_id, fn, capsys):
    assert passes(exercise_id, fn, capsys)
    assert passes(exercise_id, lambda *args: fn(*args, mistake="float32"), capsys)

    def stub(*args):
        raise NotImplementedError

    check(exercise_id, stub)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


def test_a_float32_answer_does_not_hide_a_mistake():
    """The float32 tolerance is a few hundred roundings, far below any mistake's error."""
    def missing_scale_float32(*args):
        return tuple(a.astype(np.float32) for a in tile_backward(*args, mistake="no scale in grads"))

    with pytest.raises(ExerciseFailed, match="the scale is missing in the gradients"):
        check("7.1", missing_scale_float32)


def test_forbidden_functions_are_named():
    assert {"attnlab.attention_backward", "attnlab.tiled_attention_backward"} <= set(forbidden("7.1"))
    assert {"attnlab.attention_backward", "attnlab.softmax_backward"} <= set(forbidden("7.2"))
    assert "attnlab.cross_entropy" in forbidden("7.3")


@pytest.mark.parametrize("exercise_id, call", [
    ("7.1", lambda q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed: __import__("attnlab").tiled_attention_backward(
        q_i[None], k_j[None], v_j[None], np.zeros((1, *dout_i.shape)), dout_i[None], lse_i[None])),
    ("7.2", lambda q, k, v, dout, mask: __import__("attnlab").attention_backward(q, k, v, dout, mask)),
])
def test_calling_the_reference_fails(exercise_id, call):
    with pytest.raises(ExerciseFailed, match="asks you to write this yourself"):
        check(exercise_id, call)


# ---------------------------------------------------------------------------------------------------------------------
# the same checkers as the grader runs them: in the trusted process, the answer behind the wire, a secret seed


def _judged(exercise_id, answer, monkeypatch):
    import socket
    import threading

    from attnlab import exercises
    from attnlab_course.grading import trusted
    from attnlab.exercises import _agent

    monkeypatch.setattr(exercises, "_SECRET", 12345)  # the grading draw: other sizes and values than the self-check
    a, b = socket.socketpair()
    session = _agent._Session(b, exercise_id, answer)
    thread = threading.Thread(target=lambda: pytest.raises(_agent._Verdict, session._wait), daemon=True)
    thread.start()
    with a, b:
        verdict = trusted.judge(exercise_id, a, 60.0)
        trusted.tell_kernel(a, verdict, "TOKEN")
        thread.join(5)
    return verdict


@pytest.mark.parametrize("exercise_id, fn, mistake, hint", [
    ("7.1", tile_backward, "no [:, None]", "one number per row must stay a column"),
    ("7.1", tile_backward, "tile delta", "use the given D_i"),
    ("7.2", gqa_backward, "no keepdims", "one number per row must stay a column"),
    ("7.2", gqa_backward, "mask after softmax", "before the softmax"),
    ("7.3", cross_entropy_backward, "no 1/N", "forgot the 1/N"),
])
def test_graded_over_the_wire_with_a_secret_seed(exercise_id, fn, mistake, hint, monkeypatch):
    assert _judged(exercise_id, fn, monkeypatch).status == "passed"
    assert _judged(exercise_id, lambda *args: fn(*args, mistake="float32"), monkeypatch).status == "passed"
    verdict = _judged(exercise_id, lambda *args: fn(*args, mistake=mistake), monkeypatch)
    assert verdict.status == "failed" and hint in verdict.message
