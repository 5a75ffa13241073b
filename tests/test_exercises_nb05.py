"""The checkers of notebook 05 accept the reference solutions and name each classic mistake."""

import math

import numpy as np
import pytest

from attnlab.exercises import check, forbidden
from helpers import expect_failure, not_attempted

IDS = ["5.1", "5.2", "5.3", "5.4"]


@pytest.mark.parametrize("exercise_id", IDS)
def test_unattempted_stub(exercise_id, capsys):
    check(exercise_id, not_attempted)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


@pytest.mark.parametrize("exercise_id", IDS)
def test_none_is_diagnosed(exercise_id):
    expect_failure(exercise_id, lambda *args, **kwargs: None, "returned None", "return")


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_exercise_forbids_the_cost_functions(exercise_id):
    assert {"attnlab.attention_flops", "attnlab.score_bytes", "attnlab.decode_step_cost",
            "attnlab.crossover_length"} <= set(forbidden(exercise_id))


# ------------------------------------------------------------------------------------------- 5.1 cross-attention FLOPs


def cross_flops(T, S, d, *, flops_per_mac=2, kv_rows=None, qo_rows=None, with_wo=True, pairs=None,
                attention_matmuls=2):
    """The count of 5.1, with switches for the classic mistakes."""
    kv_rows = S if kv_rows is None else kv_rows
    qo_rows = T if qo_rows is None else qo_rows
    proj = flops_per_mac * d * d * ((2 if with_wo else 1) * qo_rows + 2 * kv_rows)
    attn = attention_matmuls * flops_per_mac * (T * S if pairs is None else pairs) * d
    return proj, attn


def test_cross_flops_reference_passes(capsys):
    check("5.1", cross_flops)
    assert capsys.readouterr().out == "Exercise 5.1: passed\n"


def test_cross_flops_numpy_integers_pass(capsys):
    check("5.1", lambda T, S, d: tuple(np.int64(x) for x in cross_flops(T, S, d)))
    assert capsys.readouterr().out == "Exercise 5.1: passed\n"


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda T, S, d: cross_flops(T, S, d, kv_rows=T), ["wrong projection FLOPs", "keys and values of the T"]),
        (lambda T, S, d: cross_flops(T, S, d, qo_rows=S), ["wrong projection FLOPs", "W_q and W_o act on the T"]),
        (lambda T, S, d: cross_flops(T, S, d, with_wo=False), ["wrong projection FLOPs", "W_o"]),
        (lambda T, S, d: (cross_flops(T, S, d)[0] / 2, cross_flops(T, S, d)[1]), ["projection", "MACs"]),
        (lambda T, S, d: cross_flops(T, S, d, pairs=T * T), ["wrong attention FLOPs", "T x T"]),
        (lambda T, S, d: cross_flops(T, S, d, pairs=S * S), ["wrong attention FLOPs", "S x S pairs"]),
        (lambda T, S, d: cross_flops(T, S, d, attention_matmuls=1), ["wrong attention FLOPs", "only Q Kᵀ", "P V"]),
        (lambda T, S, d: cross_flops(T, S, d, attention_matmuls=1, pairs=S * S), ["only Q Kᵀ", "S x S pairs"]),
        (lambda T, S, d: cross_flops(T, S, d)[::-1], ["wrong order"]),
        (lambda T, S, d: cross_flops(T, S, d, kv_rows=T, with_wo=False), ["keys and values of the T", "W_o"]),
    ],
)
def test_cross_flops_mistakes_are_named(wrong, phrases):
    expect_failure("5.1", wrong, *phrases)


def test_cross_flops_unexplained_error_gives_the_formula():
    expect_failure("5.1", lambda T, S, d: (cross_flops(T, S, d)[0], 3 * T * S * d), "times the right one",
                   "2·T·S·D", absent=("you counted",))


@pytest.mark.parametrize("bad", [lambda T, S, d: 8 * S * d * d, lambda T, S, d: "lots", lambda T, S, d: (1, 2, 3)])
def test_cross_flops_must_return_a_pair(bad):
    expect_failure("5.1", bad, "two numbers")


def test_cross_flops_non_number_inside_the_pair_is_rejected():
    expect_failure("5.1", lambda T, S, d: ("4TD²", 4 * T * S * d), "must return a number")


def test_cross_flops_wrong_only_for_some_inputs_shows_a_failing_input():
    # right except when T > S: the message must show such an input
    msg = expect_failure("5.1", lambda T, S, d: cross_flops(T, S, d, kv_rows=T if T > S else S),
                         "wrong projection FLOPs")
    assert "(300, 50, 256)" in msg


# ------------------------------------------------------------------------------------------- 5.2 longest context


def longest(memory, H, b):
    return math.isqrt(int(memory // (H * b)))


def test_longest_context_reference_passes(capsys):
    check("5.2", longest)
    assert capsys.readouterr().out == "Exercise 5.2: passed\n"


def test_longest_context_float_floor_passes(capsys):
    check("5.2", lambda memory, H, b: float(int((memory / (H * b)) ** 0.5)))
    assert capsys.readouterr().out == "Exercise 5.2: passed\n"


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda M, H, b: math.sqrt(M / (H * b)), ["not a whole number", "round the square root DOWN"]),
        (lambda M, H, b: math.ceil(math.sqrt(M / (H * b))), ["does not fit", "round the square root down"]),
        (lambda M, H, b: math.isqrt(int(M // (H * b))) - (H * math.isqrt(int(M // (H * b))) ** 2 * b == M),
         ["one token short", "<="]),
        (lambda M, H, b: math.isqrt(int(M // b)), ["forgot the heads"]),
        (lambda M, H, b: M // (H * b), ["S x S", "square root"]),
        (lambda M, H, b: math.isqrt(int(M // (8 * H * b))), ["bits"]),
        (lambda M, H, b: math.isqrt(int(M // H)), ["bytes_per_element"]),
        (lambda M, H, b: math.isqrt(int(M // (8 * b))), ["forgot the heads", "bits"]),
    ],
)
def test_longest_context_mistakes_are_named(wrong, phrases):
    expect_failure("5.2", wrong, *phrases)


def test_longest_context_unexplained_error_gives_the_inequality():
    expect_failure("5.2", lambda M, H, b: 1000, "H·S²·bytes_per_element", absent=("you forgot",))


def test_longest_context_string_is_rejected():
    expect_failure("5.2", lambda M, H, b: "35k", "must return a number")


# ------------------------------------------------------------------------------------------- 5.3 whole-block crossover


def block(d, H, Hkv, d_ff, causal=False, *, gqa=True, inverted=False, causal_rule="double", with_wo=True,
          attention_matmuls=2, mlp_matmuls=2):
    """Solve attention FLOPs = projection + MLP FLOPs for S, with switches for the classic mistakes."""
    kv = Hkv / H if gqa else 1.0
    if inverted:
        kv = H / Hkv
    per_token = 2 * d * (d + 2 * d * kv + (d if with_wo else 0)) + 2 * mlp_matmuls * d * d_ff
    per_pair = 2 * attention_matmuls * d
    if causal and causal_rule == "double":
        per_pair /= 2
    elif causal and causal_rule == "halve":
        per_pair *= 2
    return per_token / per_pair


def test_block_crossover_reference_passes(capsys):
    check("5.3", block)
    assert capsys.readouterr().out == "Exercise 5.3: passed\n"


def test_block_crossover_exact_causal_solution_passes(capsys):
    check("5.3", lambda d, H, Hkv, d_ff, causal: block(d, H, Hkv, d_ff, causal) - (1 if causal else 0))
    assert capsys.readouterr().out == "Exercise 5.3: passed\n"


@pytest.mark.parametrize(
    "switches, phrases",
    [
        (dict(mlp_matmuls=0), ["left out the MLP"]),
        (dict(mlp_matmuls=1), ["only one of the MLP's two matmuls"]),
        (dict(gqa=False), ["ignored grouped-query attention"]),
        (dict(inverted=True), ["upside down"]),
        (dict(causal_rule="halve"), ["halved the crossover", "doubles"]),
        (dict(causal_rule="ignore"), ["ignored the causal flag"]),
        (dict(attention_matmuls=1), ["only Q Kᵀ"]),
        (dict(with_wo=False), ["W_o"]),
        (dict(mlp_matmuls=0, causal_rule="ignore"), ["left out the MLP", "ignored the causal flag"]),
    ],
)
def test_block_crossover_mistakes_are_named(switches, phrases):
    expect_failure("5.3", lambda d, H, Hkv, d_ff, causal: block(d, H, Hkv, d_ff, causal, **switches), *phrases)


def test_block_crossover_unexplained_error_gives_the_equation():
    expect_failure("5.3", lambda d, H, Hkv, d_ff, causal: d / 3, "solve for S")


# ------------------------------------------------------------------------------------------- 5.4 batched decode


def batched(B, S, d, H, Hkv, b, *, weights_per_sequence=False, one_cache=False, kv_tensors=2, gqa_weights=True,
            weight_bytes=True, bits=False):
    D = d // H
    kv_cols = (Hkv if gqa_weights else H) * D
    flops = B * (2 * d * (2 * d + 2 * kv_cols) + 4 * S * d)
    size = 8 * b if bits else b
    w = (2 * d * d + 2 * d * kv_cols) * size * (B if weights_per_sequence else 1) if weight_bytes else 0
    cache = (1 if one_cache else B) * kv_tensors * Hkv * D * S * size
    return flops / (w + cache)


def test_batched_intensity_reference_passes(capsys):
    check("5.4", batched)
    assert capsys.readouterr().out == "Exercise 5.4: passed\n"


def test_batched_intensity_counting_the_activation_rows_passes(capsys):
    def with_rows(B, S, d, H, Hkv, b):
        D = d // H
        flops = B * (2 * d * (2 * d + 2 * Hkv * D) + 4 * S * d)
        return flops / ((2 * d * d + 2 * d * Hkv * D) * b + B * 2 * Hkv * D * S * b + B * 2 * d * b)

    check("5.4", with_rows)
    assert capsys.readouterr().out == "Exercise 5.4: passed\n"


@pytest.mark.parametrize(
    "switches, phrases",
    [
        (dict(weights_per_sequence=True), ["once per sequence", "shared"]),
        (dict(one_cache=True), ["one cache for the whole batch"]),
        (dict(kv_tensors=1), ["only the keys"]),
        (dict(gqa_weights=False), ["grouped-query attention in the weights"]),
        (dict(weight_bytes=False), ["left out the weights' bytes"]),
        (dict(bits=True), ["bits"]),
        (dict(bits=True, kv_tensors=1), ["bits", "only the keys"]),
    ],
)
def test_batched_intensity_mistakes_are_named(switches, phrases):
    expect_failure("5.4", lambda *c: batched(*c, **switches), *phrases)


def test_batched_intensity_without_the_projections_is_named():
    def attention_only(B, S, d, H, Hkv, b):
        D = d // H
        return B * 4 * S * d / ((2 * d * d + 2 * d * Hkv * D) * b + B * 2 * Hkv * D * S * b)

    expect_failure("5.4", attention_only, "left out the projections' FLOPs")


def test_batched_intensity_single_sequence_formula_is_diagnosed():
    # section 5's 2·H / (Hkv·b) is attention alone: no projections, no weights
    expect_failure("5.4", lambda B, S, d, H, Hkv, b: 2 * H / (Hkv * b), "left out the projections' FLOPs",
                   "left out the weights' bytes")


def test_batched_intensity_unexplained_error_gives_the_formula():
    expect_failure("5.4", lambda B, S, d, H, Hkv, b: 3.0, "times the right one", absent=("you ",))
