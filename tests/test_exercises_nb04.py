"""The checkers of notebook 04 accept the reference solutions and name each classic mistake."""

import numpy as np
import pytest

from attnlab.exercises import check
from helpers import expect_failure, not_attempted


def softmax_rows(scores):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)






@pytest.mark.parametrize("exercise_id", ["4.1", "4.2", "4.3"])
def test_unattempted_stub(exercise_id, capsys):
    check(exercise_id, not_attempted)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


# ------------------------------------------------------------------------------------------------- 4.1 GQA


def gqa(q, k, v, *, kv_layout="repeat", scale="D", axis=-1):
    H, T, D = q.shape
    Hkv = k.shape[0]
    G = H // Hkv
    if kv_layout == "repeat":
        k, v = np.repeat(k, G, axis=0), np.repeat(v, G, axis=0)  # (H, S, D)
    else:
        k, v = np.tile(k, (G, 1, 1)), np.tile(v, (G, 1, 1))  # (H, S, D), wrong pairing
    divisor = {"D": np.sqrt(D), "d_model": np.sqrt(H * D), "none": 1.0}[scale]
    scores = q @ k.swapaxes(-1, -2) / divisor  # (H, T, S)
    if axis == -1:
        weights = softmax_rows(scores)
    else:
        weights = np.exp(scores - scores.max(axis=-2, keepdims=True))
        weights /= weights.sum(axis=-2, keepdims=True)
    return weights @ v  # (H, T, D)


def gqa_by_reshape(q, k, v):
    H, T, D = q.shape
    Hkv = k.shape[0]
    qg = q.reshape(Hkv, H // Hkv, T, D)  # (Hkv, G, T, D)
    scores = qg @ k[:, None].swapaxes(-1, -2) / np.sqrt(D)  # (Hkv, G, T, S)
    return (softmax_rows(scores) @ v[:, None]).reshape(H, T, D)  # (H, T, D)


@pytest.mark.parametrize("solution", [gqa, gqa_by_reshape])
def test_gqa_reference_passes(solution, capsys):
    check("4.1", solution)
    assert capsys.readouterr().out == "Exercise 4.1: passed\n"


def test_gqa_tile_is_diagnosed():
    msg = expect_failure("4.1", lambda q, k, v: gqa(q, k, v, kv_layout="tile"), "np.tile", "np.repeat", "h // G")
    assert "q1->kv1" in msg  # the learner's pairing table


def test_gqa_reshape_in_the_wrong_order_is_diagnosed_like_tile():
    def wrong(q, k, v):
        H, T, D = q.shape
        Hkv = k.shape[0]
        qg = q.reshape(H // Hkv, Hkv, T, D).swapaxes(0, 1)  # (Hkv, G, T, D) but head h -> kv h % Hkv
        out = softmax_rows(qg @ k[:, None].swapaxes(-1, -2) / np.sqrt(D)) @ v[:, None]
        return out.swapaxes(0, 1).reshape(H, T, D)

    expect_failure("4.1", wrong, "wrong K/V heads", "np.tile")


def test_gqa_sqrt_d_model_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, scale="d_model"), "sqrt(d_model)", "sqrt(D)")


def test_gqa_missing_scale_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, scale="none"), "not scaled")


def test_gqa_softmax_over_queries_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, axis=-2), "wrong axis")


def test_gqa_causal_mask_is_diagnosed():
    def causal(q, k, v):
        H, T, D = q.shape
        k, v = np.repeat(k, H // k.shape[0], axis=0), np.repeat(v, H // v.shape[0], axis=0)
        scores = q @ k.swapaxes(-1, -2) / np.sqrt(D)  # (H, T, S)
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
        return softmax_rows(scores) @ v

    expect_failure("4.1", causal, "applies a mask")


def test_gqa_grouped_shape_is_diagnosed():
    def grouped(q, k, v):
        H, T, D = q.shape
        return gqa(q, k, v).reshape(k.shape[0], H // k.shape[0], T, D)

    expect_failure("4.1", grouped, "wrong shape", "(Hkv, G, T, D)")


def test_gqa_returning_weights_is_diagnosed():
    def weights_only(q, k, v):
        k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)
        return softmax_rows(q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]))

    expect_failure("4.1", weights_only, "shape of the weights")


def test_gqa_none_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: None, "returned None", "return")


def test_gqa_other_error_names_the_wrong_heads():
    def off(q, k, v):
        out = gqa(q, k, v)
        out[1] += 0.5
        return out

    expect_failure("4.1", off, "query heads [1]")


# ------------------------------------------------------------------------------------------------- 4.2 cache size

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8}


def cache_size(S, *, layers, H, Hkv, D, dtype="bf16"):
    return 2 * layers * Hkv * D * S * BYTES[dtype]


def test_cache_size_reference_passes(capsys):
    check("4.2", cache_size)
    assert capsys.readouterr().out == "Exercise 4.2: passed\n"


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda S, *, layers, H, Hkv, D, dtype: layers * Hkv * D * S * BYTES[dtype], ["factor 2", "keys AND values"]),
        (lambda S, *, layers, H, Hkv, D, dtype: 2 * layers * Hkv * D * S * BITS[dtype], ["bits", "bytes"]),
        (lambda S, *, layers, H, Hkv, D, dtype: 2 * layers * Hkv * D * S * BYTES[dtype] / 8, ["divided by 8"]),
        (lambda S, *, layers, H, Hkv, D, dtype: 2 * layers * H * D * S * BYTES[dtype], ["query heads H", "Hkv"]),
        (lambda S, *, layers, H, Hkv, D, dtype: 2 * Hkv * D * S * BYTES[dtype], ["layers"]),
        (lambda S, *, layers, H, Hkv, D, dtype: 2 * layers * Hkv * D * S * BYTES[dtype] / 2**30, ["GiB"]),
        (lambda S, *, layers, H, Hkv, D, dtype: layers * Hkv * D * S * BITS[dtype], ["factor 2", "bits"]),
    ],
)
def test_cache_size_mistakes_are_named(wrong, phrases):
    expect_failure("4.2", wrong, *phrases)


def test_cache_size_bits_and_missing_two_is_not_mistaken_for_query_heads():
    msg = expect_failure("4.2", lambda S, *, layers, H, Hkv, D, dtype: layers * Hkv * D * S * BITS[dtype], "factor 2")
    assert "query heads" not in msg


def test_cache_size_unexplained_error_gives_the_formula():
    expect_failure("4.2", lambda S, *, layers, H, Hkv, D, dtype: 3 * layers * Hkv * D * S * BYTES[dtype] + 1,
                   "2 (K and V) x layers x Hkv x D x S")


def test_cache_size_non_number_is_rejected():
    expect_failure("4.2", lambda S, *, layers, H, Hkv, D, dtype: "1 GiB", "number of bytes")


# ------------------------------------------------------------------------------------------------- 4.3 split heads


def split(x, H):
    x = x.reshape(*x.shape[:-1], H, x.shape[-1] // H)  # (..., T, H, D)
    return x.swapaxes(-2, -3)  # (..., H, T, D)


def test_split_reference_passes(capsys):
    check("4.3", split)
    assert capsys.readouterr().out == "Exercise 4.3: passed\n"


def test_split_reshape_without_transpose_is_diagnosed():
    expect_failure("4.3", lambda x, H: x.reshape(*x.shape[:-2], H, x.shape[-2], x.shape[-1] // H),
                   "without a transpose")


def test_split_forgotten_transpose_is_diagnosed():
    expect_failure("4.3", lambda x, H: x.reshape(*x.shape[:-1], H, x.shape[-1] // H), "(..., T, H, D)", "swap")


def test_split_interleaved_columns_is_diagnosed():
    expect_failure("4.3", lambda x, H: np.moveaxis(x.reshape(*x.shape[:-1], x.shape[-1] // H, H), -1, -3),
                   "interleaved", "(H, D), not (D, H)")


def test_split_positive_axes_fail_on_a_batch():
    expect_failure("4.3", lambda x, H: x.reshape(x.shape[0], H, -1).transpose(1, 0, 2) if x.ndim == 2
                   else x.reshape(*x.shape[:-1], H, -1).transpose(2, 0, 1, 3), "batch axes")
