"""The checkers of notebook 02 (masks): the reference solutions pass, each classic mistake fails with its diagnosis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnlab.exercises import ExerciseFailed, check

# ---------------------------------------------------------------------------------------------------------- 2.1


def causal_ok(T, S, start):
    i = start + np.arange(T)[:, None]  # (T, 1) positions of the new queries
    j = np.arange(S)[None, :]  # (1, S) slots of the cache
    return j <= i


def causal_inverted(T, S, start):
    return ~causal_ok(T, S, start)


def causal_triu(T, S, start):
    return np.triu(np.ones((T, S), dtype=bool), k=start)


def causal_off_by_one(T, S, start):
    return np.tril(np.ones((T, S), dtype=bool), k=start + 1)


def causal_no_diagonal(T, S, start):
    return np.tril(np.ones((T, S), dtype=bool), k=start - 1)


def causal_no_start(T, S, start):
    return np.tril(np.ones((T, S), dtype=bool))


def causal_at_the_end(T, S, start):
    return np.tril(np.ones((T, S), dtype=bool), k=S - T)  # what causal_mask(T, S) gives: queries in the last slots


def causal_empty_slots_only(T, S, start):
    return np.broadcast_to(np.arange(S) < start + T, (T, S)).copy()  # hides the empty slots, not the future


def causal_written_slots_only(T, S, start):
    return np.tril(np.ones((T, start + T), dtype=bool), k=start)  # no columns for the empty slots


def causal_int(T, S, start):
    return np.tril(np.ones((T, S), dtype=int), k=start)


def causal_bias(T, S, start):
    return np.where(causal_ok(T, S, start), 0.0, -np.inf)


def causal_transposed(T, S, start):
    return causal_ok(T, S, start).T  # for a square mask this is the upper triangle


def causal_keys_as_rows(T, S, start):
    return np.tril(np.ones((S, T), dtype=bool), k=-start)  # right for T == S, shape (S, T) otherwise


def causal_square(T, S, start):
    return np.tril(np.ones((S, S), dtype=bool))


def causal_last_row_wrong(T, S, start):
    mask = causal_ok(T, S, start)
    if T > 1:
        mask[-1, 0] = False
    return mask


def not_attempted(*args):
    raise NotImplementedError


def test_causal_reference_passes(capsys):
    check("2.1", causal_ok)
    assert capsys.readouterr().out == "Exercise 2.1: passed\n"


@pytest.mark.parametrize("exercise_id", ["2.1", "2.2", "2.3"])
def test_not_attempted(exercise_id, capsys):
    check(exercise_id, not_attempted)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


@pytest.mark.parametrize("wrong, diagnosis", [
    (causal_inverted, "your mask is inverted"),
    (causal_triu, "upper triangle"),
    (causal_off_by_one, "off by one"),
    (causal_no_diagonal, "the diagonal is missing"),
    (causal_no_start, "treats them as the first T positions"),
    (causal_at_the_end, "you placed the queries at the END of the cache"),
    (causal_empty_slots_only, "you hid the empty slots but not the future"),
    (causal_written_slots_only, "the empty ones after the queries need columns too"),
    (causal_int, "masks in this course are boolean"),
    (causal_bias, "additive bias"),
    (causal_transposed, "upper triangle"),
    (causal_keys_as_rows, "your mask is transposed"),
    (causal_square, "one row for each new token"),
    (causal_last_row_wrong, "(the query at position 4) is wrong"),
    (lambda T, S, start: None, "forget the `return`"),
])
def test_causal_mistakes_are_diagnosed(wrong, diagnosis):
    with pytest.raises(ExerciseFailed, match="hint") as info:
        check("2.1", wrong)
    assert diagnosis in str(info.value)


def test_causal_int_with_right_pattern_says_so():
    with pytest.raises(ExerciseFailed) as info:
        check("2.1", causal_int)
    assert "the pattern is right" in str(info.value)
    assert "dtype int64" in str(info.value)


def test_causal_first_message_is_the_docs_example():
    """docs/checking.md shows the grader's message for an inverted mask: the checker's first case is still (5, 5, 0)."""
    with pytest.raises(ExerciseFailed) as info:
        check("2.1", causal_inverted)
    assert str(info.value).startswith("my_causal_mask(5, 5, 0) is not the causal mask\n"
                                      "  expected: [[1 0 0 0 0] [1 1 0 0 0] [1 1 1 0 0] [1 1 1 1 0] [1 1 1 1 1]]")
    docs = (Path(__file__).resolve().parents[1] / "docs" / "checking.md").read_text(encoding="utf-8")
    assert "my_causal_mask(5, 5, 0) is not the causal mask\n" in docs
    assert "expected: [[1 0 0 0 0] [1 1 0 0 0] [1 1 1 0 0] [1 1 1 1 0] [1 1 1 1 1]]" in docs


def test_forbids():
    from attnlab.exercises import forbidden

    assert forbidden("2.1") == ("attnlab.causal_mask", "attnlab.sliding_window_mask")
    assert {"attnlab.attention", "attnlab.softmax"} <= set(forbidden("2.2"))
    assert forbidden("2.3") == ()


# ---------------------------------------------------------------------------------------------------------- 2.2


def _scores(q, k):
    return q @ k.T / np.sqrt(q.shape[-1])  # (T, S)


def masked_ok(q, k, v, mask):
    scores = np.where(mask, _scores(q, k), -np.inf)  # (T, S)
    m = scores.max(axis=-1, keepdims=True)  # (T, 1)
    m = np.where(np.isneginf(m), 0.0, m)  # a row with no allowed key has no max
    e = np.exp(scores - m)  # (T, S)
    total = e.sum(axis=-1, keepdims=True)  # (T, 1)
    weights = e / np.where(total == 0, 1.0, total)  # 0 / 1 = 0 for rows with no allowed key
    return weights @ v, weights


def _filled(scores, mask, fill):
    x = np.where(mask, scores, fill)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def masked_neg_inf_nan(q, k, v, mask):
    w = _filled(_scores(q, k), mask, -np.inf)
    return w @ v, w


def masked_neg_1e9(q, k, v, mask):
    w = _filled(_scores(q, k), mask, -1e9)
    return w @ v, w


def masked_inverted(q, k, v, mask):
    return masked_ok(q, k, v, ~mask)


def masked_ignored(q, k, v, mask):
    return masked_ok(q, k, v, np.ones_like(mask))


def masked_multiplied(q, k, v, mask):
    s = _scores(q, k) * mask
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    return w @ v, w


def masked_zeroed_after(q, k, v, mask):
    _, w = masked_ok(q, k, v, np.ones_like(mask))
    w = w * mask
    return w @ v, w


def masked_no_scale(q, k, v, mask):
    return masked_ok(q * np.sqrt(q.shape[-1]), k, v, mask)


def masked_scale_d(q, k, v, mask):
    return masked_ok(q / np.sqrt(q.shape[-1]), k, v, mask)


def masked_unstable(q, k, v, mask):
    e = np.where(mask, np.exp(_scores(q, k)), 0.0)  # no max subtracted: overflows for large scores
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(total == 0, 1.0, total)
    return w @ v, w


def masked_nan_to_num(q, k, v, mask):
    w = np.nan_to_num(_filled(_scores(q, k), mask, -np.inf))
    return w @ v, w


def masked_times_k(q, k, v, mask):
    out, w = masked_ok(q, k, v, mask)
    return w @ k, w


def masked_only_out(q, k, v, mask):
    return masked_ok(q, k, v, mask)[0]


def masked_wrong_out(q, k, v, mask):
    out, w = masked_ok(q, k, v, mask)
    return w @ v[::-1], w


def test_masked_reference_passes(capsys):
    check("2.2", masked_ok)
    assert capsys.readouterr().out == "Exercise 2.2: passed\n"


@pytest.mark.parametrize("wrong, diagnosis", [
    (masked_neg_inf_nan, "your output there is NaN"),
    (masked_neg_1e9, "-1e9"),
    (masked_inverted, "the mask is inverted"),
    (masked_ignored, "the mask is ignored"),
    (masked_multiplied, "exp(0) = 1"),
    (masked_zeroed_after, "AFTER the softmax"),
    (masked_no_scale, "scores without the 1 / sqrt(D) factor"),
    (masked_scale_d, "scores / D = scores / 8"),
    (masked_unstable, "Subtract each row's maximum"),
    (masked_nan_to_num, "emitted a warning"),
    (masked_times_k, "instead of v"),
    (masked_only_out, "must return a pair"),
    (masked_wrong_out, "out = weights @ v"),
])
def test_masked_mistakes_are_diagnosed(wrong, diagnosis):
    with pytest.raises(ExerciseFailed, match="hint") as info:
        check("2.2", wrong)
    assert diagnosis in str(info.value)


def test_masked_nan_message_names_the_dead_row():
    with pytest.raises(ExerciseFailed) as info:
        check("2.2", masked_neg_inf_nan)
    assert "row 0 has no allowed key" in str(info.value)


# ---------------------------------------------------------------------------------------------------------- 2.3


def influence_ok(attend, x):
    T = x.shape[0]
    base = attend(x)  # (T, Dv)
    changed = np.zeros((T, T), dtype=bool)
    for p in range(T):
        edited = x.copy()
        edited[p] += 1.0
        changed[:, p] = np.any(attend(edited) != base, axis=-1)
    return changed


def influence_allclose(attend, x):
    T = x.shape[0]
    base = attend(x)
    changed = np.zeros((T, T), dtype=bool)
    for p in range(T):
        edited = x.copy()
        edited[p] += 1.0
        changed[:, p] = ~np.isclose(attend(edited), base).all(axis=-1)
    return changed


def influence_in_place(attend, x):
    base = attend(x.copy())
    changed = np.zeros((x.shape[0],) * 2, dtype=bool)
    for p in range(x.shape[0]):
        x[p] += 1.0
        changed[:, p] = np.any(attend(x) != base, axis=-1)
    return changed


def influence_accumulating(attend, x):
    base = attend(x)
    edited = x.copy()
    changed = np.zeros((x.shape[0],) * 2, dtype=bool)
    for p in range(x.shape[0]):
        edited[p] += 1.0
        changed[:, p] = np.any(attend(edited) != base, axis=-1)
    return changed


def influence_transposed(attend, x):
    return influence_ok(attend, x).T


def influence_float(attend, x):
    return influence_ok(attend, x).astype(float)


def test_influence_reference_passes(capsys):
    check("2.3", influence_ok)
    assert capsys.readouterr().out == "Exercise 2.3: passed\n"


@pytest.mark.parametrize("wrong, diagnosis", [
    (influence_allclose, "compare exactly"),
    (influence_in_place, "changed the x it was given"),
    (influence_accumulating, "fresh copy of x"),
    (influence_transposed, "transposed"),
    (influence_float, "must return a boolean array"),
])
def test_influence_mistakes_are_diagnosed(wrong, diagnosis):
    with pytest.raises(ExerciseFailed, match="hint") as info:
        check("2.3", wrong)
    assert diagnosis in str(info.value)


def test_influence_of_the_checkers_layers():
    """The test layers are what their names say: the leaks show up only in an exact comparison."""
    from attnlab import causal_mask
    from attnlab.exercises.nb02 import _layers

    x, layers = _layers()
    window_name = next(name for name in layers if "sees only the last" in name)
    window = int(window_name.split("last ")[1].split()[0])
    lower = causal_mask(x.shape[0])
    assert np.array_equal(influence_ok(layers["a correct causal layer"], x), lower)
    assert np.array_equal(influence_ok(layers["a layer whose mask is off by one (j <= i + 1)"], x),
                          np.tril(np.ones_like(lower), k=1))
    assert np.array_equal(influence_ok(layers[window_name], x), lower & ~np.tril(np.ones_like(lower), k=-window))
    leaks = layers["a layer that leaks about 1e-11 of its weight to the future"]
    assert np.array_equal(influence_ok(leaks, x), np.ones_like(lower))
    assert np.array_equal(influence_allclose(leaks, x), lower)
    assert np.array_equal(influence_ok(layers["a layer without a mask"], x), np.ones_like(lower))


def test_the_layers_and_their_order_come_from_the_grading_seed(monkeypatch):
    from attnlab import exercises
    from attnlab.exercises.nb02 import _layers

    drawn = set()
    for secret in range(8):
        monkeypatch.setattr(exercises, "_SECRET", secret)
        x, layers = _layers()
        drawn.add((x.shape, tuple(layers)))
    assert len(drawn) >= 6
