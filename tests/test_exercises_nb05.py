"""The checkers of notebook 05 accept the reference solutions and name each classic mistake."""

import numpy as np
import pytest

from attnlab.exercises import check
from helpers import expect_failure, not_attempted






@pytest.mark.parametrize("exercise_id", ["5.1", "5.2", "5.3", "5.4"])
def test_unattempted_stub(exercise_id, capsys):
    check(exercise_id, not_attempted)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


@pytest.mark.parametrize("exercise_id", ["5.1", "5.2", "5.3", "5.4"])
def test_none_is_diagnosed(exercise_id):
    expect_failure(exercise_id, lambda *args, **kwargs: None, "returned None", "return")


# ------------------------------------------------------------------------------------------------- 5.1 layer FLOPs


def layer_flops(S, d_model, *, flops_per_mac=2, projections=4, attention_matmuls=2, causal=False, swap=False):
    """The count of 5.1, with switches for the classic mistakes."""
    if swap:
        S, d_model = d_model, S
    proj = projections * flops_per_mac * S * d_model * d_model
    pairs = S * (S + 1) // 2 if causal else S * S
    attn = attention_matmuls * flops_per_mac * pairs * d_model
    return proj, attn


def test_layer_flops_reference_passes(capsys):
    check("5.1", layer_flops)
    assert capsys.readouterr().out == "Exercise 5.1: passed\n"


def test_layer_flops_as_floats_and_numpy_ints_pass(capsys):
    check("5.1", lambda S, d: (float(8 * S * d**2), np.int64(4) * S**2 * d))
    assert capsys.readouterr().out == "Exercise 5.1: passed\n"


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda S, d: layer_flops(S, d, flops_per_mac=1), ["half the right count in both parts", "MACs", "2·m·k·n"]),
        (lambda S, d: layer_flops(S, d, attention_matmuls=1), ["wrong attention FLOPs", "only Q Kᵀ", "P V"]),
        (lambda S, d: layer_flops(S, d, projections=3), ["wrong projection FLOPs", "6·S·d_model²", "W_o"]),
        (lambda S, d: layer_flops(S, d, causal=True), ["wrong attention FLOPs", "causal"]),
        (lambda S, d: layer_flops(S, d)[::-1], ["wrong order"]),
        (lambda S, d: (layer_flops(S, d)[0] / 2, layer_flops(S, d)[1]), ["wrong projection FLOPs", "MACs"]),
        (lambda S, d: (layer_flops(S, d)[0], layer_flops(S, d)[1] / 4), ["only Q Kᵀ", "and you counted multiply-adds"]),
        (lambda S, d: (layer_flops(S, d)[0], layer_flops(S, d, swap=True)[1]), ["swapped S and d_model"]),
        (lambda S, d: (layer_flops(S, d, swap=True)[0], layer_flops(S, d)[1]), ["swapped S and d_model",
                                                                                 "projection"]),
    ],
)
def test_layer_flops_mistakes_are_named(wrong, phrases):
    expect_failure("5.1", wrong, *phrases)


def test_layer_flops_per_head_count_gives_the_formula():
    # 4·S²·D with D = d_model / 8: forgetting to sum over the heads
    msg = expect_failure("5.1", lambda S, d: (8 * S * d * d, 4 * S * S * d // 8), "times the right one", "2·S²·D")
    assert "only Q Kᵀ" not in msg


@pytest.mark.parametrize("bad", [lambda S, d: 8 * S * d * d, lambda S, d: "lots", lambda S, d: (1, 2, 3)])
def test_layer_flops_must_return_a_pair(bad):
    expect_failure("5.1", bad, "two numbers")


def test_layer_flops_non_number_inside_the_pair_is_rejected():
    expect_failure("5.1", lambda S, d: ("8SD²", 4 * S * S * d), "must return a number")


# ------------------------------------------------------------------------------------------------- 5.2 score memory


def score_memory(H, S, bytes_per_element):
    return H * S * S * bytes_per_element


def test_score_memory_reference_passes(capsys):
    check("5.2", score_memory)
    assert capsys.readouterr().out == "Exercise 5.2: passed\n"


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda H, S, b: H * S * S * b * 8, ["bits"]),
        (lambda H, S, b: S * S * b, ["forgot the heads"]),
        (lambda H, S, b: H * S * b, ["S x S"]),
        (lambda H, S, b: H * S * S, ["bytes_per_element"]),
        (lambda H, S, b: H * S * S * b / 2**30, ["returned GiB"]),
        (lambda H, S, b: H * S * S * b / 1e9, ["returned GB"]),
        (lambda H, S, b: H * S * S * b / 2**30 * 1e9, ["mixed up GiB and GB", "2**30"]),
        (lambda H, S, b: S * S * b * 8, ["forgot the heads", "bits"]),
    ],
)
def test_score_memory_mistakes_are_named(wrong, phrases):
    expect_failure("5.2", wrong, *phrases)


def test_score_memory_unexplained_error_gives_the_formula():
    expect_failure("5.2", lambda H, S, b: H * S * S * b + 1, "H x S x S", absent=("you counted",))


def test_score_memory_string_is_rejected():
    expect_failure("5.2", lambda H, S, b: "4 GiB", "must return a number")


# ------------------------------------------------------------------------------------------------- 5.3 crossover


def crossover(d_model, H, Hkv, causal=False, *, gqa=True, inverted=False, causal_rule="double", with_wo=True,
              attention_matmuls=2):
    """Solve attention FLOPs = projection FLOPs for S, with switches for the classic mistakes."""
    kv = Hkv / H if gqa else 1.0
    if inverted:
        kv = H / Hkv
    # per token: W_q (d x d), W_k and W_v (d x d·Hkv/H each), W_o (d x d), 2 FLOPs per multiply-add
    per_token_proj = 2 * d_model * (d_model + 2 * d_model * kv + (d_model if with_wo else 0))
    per_pair = 2 * attention_matmuls * d_model  # FLOPs per (query, key) pair over all heads
    if causal and causal_rule == "double":
        per_pair /= 2  # about half the pairs are computed
    elif causal and causal_rule == "halve":
        per_pair *= 2
    return per_token_proj / per_pair


def test_crossover_reference_passes(capsys):
    check("5.3", crossover)
    assert capsys.readouterr().out == "Exercise 5.3: passed\n"


def test_crossover_exact_causal_solution_passes(capsys):
    # with S(S+1)/2 causal pairs the crossover is one token earlier; both are right
    check("5.3", lambda d, H, Hkv, causal: crossover(d, H, Hkv, causal) - (1 if causal else 0))
    assert capsys.readouterr().out == "Exercise 5.3: passed\n"


@pytest.mark.parametrize(
    "switches, phrases",
    [
        (dict(gqa=False), ["ignored grouped-query attention"]),
        (dict(inverted=True), ["upside down"]),
        (dict(causal_rule="halve"), ["halved the crossover", "doubles"]),
        (dict(causal_rule="ignore"), ["ignored the causal flag"]),
        (dict(attention_matmuls=1), ["only Q Kᵀ"]),
        (dict(with_wo=False), ["W_o"]),
        (dict(gqa=False, causal_rule="ignore"), ["ignored grouped-query attention", "ignored the causal flag"]),
    ],
)
def test_crossover_mistakes_are_named(switches, phrases):
    expect_failure("5.3", lambda d, H, Hkv, causal: crossover(d, H, Hkv, causal, **switches), *phrases)


def test_crossover_unexplained_error_gives_the_equation():
    expect_failure("5.3", lambda d, H, Hkv, causal: d / 3, "solve for S")


# ------------------------------------------------------------------------------------------------- 5.4 decode intensity


def intensity(S, d_model, H, Hkv, bytes_per_element, *, kv_tensors=2, bits=False, cache_heads=None, flop_factor=1.0,
              queries=1):
    D = d_model // H
    flops = 4 * queries * S * d_model * flop_factor
    size = 8 * bytes_per_element if bits else bytes_per_element
    heads = Hkv if cache_heads is None else cache_heads
    return flops / (kv_tensors * heads * D * S * size)


def test_intensity_reference_passes(capsys):
    check("5.4", intensity)
    assert capsys.readouterr().out == "Exercise 5.4: passed\n"


def test_intensity_counting_the_query_and_output_rows_passes(capsys):
    def with_q_and_out(S, d, H, Hkv, b):
        return 4 * S * d / (2 * Hkv * (d // H) * S * b + 2 * d * b)

    check("5.4", with_q_and_out)
    assert capsys.readouterr().out == "Exercise 5.4: passed\n"


@pytest.mark.parametrize(
    "switches, phrases",
    [
        (dict(kv_tensors=1), ["only the keys"]),
        (dict(bits=True), ["bits"]),
        (dict(flop_factor=0.5), ["half the FLOPs"]),
        (dict(queries="S"), ["ONE new query row"]),
        (dict(cache_heads="H"), ["query heads H", "Hkv"]),
        (dict(bits=True, kv_tensors=1), ["bits", "only the keys"]),
    ],
)
def test_intensity_mistakes_are_named(switches, phrases):
    def wrong(S, d, H, Hkv, b):
        kw = dict(switches)
        if kw.get("queries") == "S":
            kw["queries"] = S
        if kw.get("cache_heads") == "H":
            kw["cache_heads"] = H
        return intensity(S, d, H, Hkv, b, **kw)

    expect_failure("5.4", wrong, *phrases)


def test_intensity_unexplained_error_gives_the_formula():
    expect_failure("5.4", lambda S, d, H, Hkv, b: 3.0, "S cancels")


def test_layer_flops_wrong_only_for_some_inputs_shows_a_failing_input():
    # attention right except when S < d_model: the message must show an input where it is wrong
    msg = expect_failure("5.1", lambda S, d: (8 * S * d * d, 4 * S * S * d if S > d else 0.5 * 4 * S * S * d),
                         "wrong attention FLOPs")
    assert "(100, 768)" in msg
