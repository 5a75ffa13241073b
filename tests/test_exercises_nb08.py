"""The checkers of notebook 08: right answers pass (float32 ones too), each classic mistake fails with its own
diagnosis."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab import softmax
from attnlab.exercises import ExerciseFailed, check

# ---------------------------------------------------------------------------------------------------------------------
# 8.1 the rolling-buffer KV cache


def window_step(cache_k, cache_v, t, q_t, k_t, v_t, *, mistake=None):
    W = cache_k.shape[0]
    cache_k, cache_v = cache_k.copy(), cache_v.copy()
    n = W if mistake == "empty slots" else min(t + 1, W)
    if mistake == "append":
        cache_k, cache_v = np.vstack([cache_k, k_t]), np.vstack([cache_v, v_t])
    elif mistake != "read before write":
        cache_k[t % W], cache_v[t % W] = k_t, v_t
    c = 1.0 if mistake == "no scale" else 1 / np.sqrt(q_t.shape[-1])
    if mistake == "read before write":
        n = min(t, W)
        w = softmax(c * cache_k[:n] @ q_t) if n else np.zeros(0)
        out = w @ cache_v[:n] if n else np.zeros(cache_v.shape[1])
        cache_k[t % W], cache_v[t % W] = k_t, v_t
        return out, cache_k, cache_v
    rows = slice(None) if mistake in ("empty slots", "append") else slice(0, n)
    w = softmax(c * cache_k[rows] @ q_t)
    out = w @ cache_v[rows]
    if mistake == "float32":
        return out.astype(np.float32), cache_k, cache_v
    return out, cache_k, cache_v


def test_8_1_right_answers_pass(capsys):
    check("8.1", window_step)
    check("8.1", lambda *a: window_step(*a, mistake="float32"))
    assert capsys.readouterr().out.count("passed") == 2


@pytest.mark.parametrize("mistake, hint", [
    ("empty slots", "attended to the empty slots"),
    ("read before write", "read the cache before writing the new token"),
    ("no scale", "forgot the scale"),
    ("append", "overwrite the oldest slot"),
])
def test_8_1_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check("8.1", lambda *a: window_step(*a, mistake=mistake))


# ---------------------------------------------------------------------------------------------------------------------
# 8.2 the recurrent step of linear attention


def elu_plus_one(x):
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


def linear_step(state, z, q_t, k_t, v_t, *, mistake=None):
    phi = (lambda x: x) if mistake == "no feature map" else elu_plus_one
    fq, fk = phi(q_t), phi(k_t)
    if mistake == "read before write":
        out = fq @ state / (fq @ z)
    if mistake == "overwrite":
        state, z = np.outer(fk, v_t), fk
    elif mistake == "transposed":
        state, z = state + np.outer(v_t, fk).T.T, z + fk
    else:
        state, z = state + np.outer(fk, v_t), z + (k_t if mistake == "raw z" else fk)
    if mistake == "no normaliser":
        out = fq @ state
    elif mistake != "read before write":
        out = fq @ state / (fq @ z)
    return out, state, z


def test_8_2_right_answer_passes(capsys):
    check("8.2", linear_step)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("read before write", "read the state before adding the new token|NaN"),
    ("no normaliser", "left out the normaliser"),
    ("overwrite", "replaced the state instead of adding to it"),
    ("no feature map", "without the feature map"),
    ("raw z", "added k_t to z without the feature map"),
    ("transposed", "keys first"),
])
def test_8_2_mistakes_are_diagnosed(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check("8.2", lambda *a: linear_step(*a, mistake=mistake))


# ---------------------------------------------------------------------------------------------------------------------
# 8.3 the capacity of a (D, Dv) state


def test_8_3_right_answer_passes(capsys):
    check("8.3", lambda D, Dv: D)
    check("8.3", lambda D, Dv: float(D))  # a whole number as a float is still a count
    assert capsys.readouterr().out.count("passed") == 2


@pytest.mark.parametrize("answer, hint", [
    (lambda D, Dv: D * Dv, "counted the numbers in the state"),
    (lambda D, Dv: D * Dv + D, "counted the state and the normaliser"),
    (lambda D, Dv: min(D, Dv), "took min\\(D, Dv\\)|too small|counted the value width"),
    (lambda D, Dv: Dv, "counted the value width|took min\\(D, Dv\\)"),
    (lambda D, Dv: D - 1, "too small"),
    (lambda D, Dv: D + 1, "too large"),
    (lambda D, Dv: D + 0.5, "not a whole number"),
    (lambda D, Dv: None, "returned None"),
])
def test_8_3_mistakes_are_diagnosed(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check("8.3", answer)


def test_8_3_the_run_in_the_message_shows_what_the_count_gives():
    with pytest.raises(ExerciseFailed, match="come back with a largest error of"):
        check("8.3", lambda D, Dv: D * Dv)


def test_8_3_best_state_recalls_exactly_up_to_D_pairs():
    from attnlab.exercises.nb08 import best_state_recall_error

    rng = np.random.default_rng(0)
    for D, Dv in ((3, 5), (6, 2)):
        assert best_state_recall_error(D, D, Dv, rng) < 1e-9
        assert best_state_recall_error(D + 1, D, Dv, rng) > 1e-3
