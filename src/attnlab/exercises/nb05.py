"""Checks for notebook 05, what attention costs.

5.1  ``attention_layer_flops(S, d_model)`` -> ``(projection FLOPs, attention FLOPs)`` of one multi-head self-attention
     layer over ``S`` tokens, no mask.
5.2  ``score_memory_bytes(H, S, bytes_per_element)``: bytes of the ``H x S x S`` score matrix of one sequence.
5.3  ``attention_crossover(d_model, H, Hkv, causal)``: the context length at which attention FLOPs catch up with the
     projections' FLOPs.
5.4  ``decode_intensity(S, d_model, H, Hkv, bytes_per_element)``: FLOPs per byte of KV cache read in one decode step.

Every classic mistake multiplies the right answer by a known factor (counting multiply-adds halves a FLOP count, bits
instead of bytes multiplies a size by 8, ...). Each checker calls the learner's function on fixed cases, and when the
answers are off it looks for the smallest set of mistakes whose factors explain the ratio ``got / expected`` in every
case, so that the message can name the mistake that was made.
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np

from ..cost import GiB, attention_flops, crossover_length, decode_step_cost, projection_flops, score_bytes
from . import exercise, fail


def _number(got, call: str, expected: str):
    """The learner's result as a float, or a failure saying why it is not a number."""
    if got is None:
        fail(f"{call} returned None", expected, "None", "did you forget the `return` statement?")
    if isinstance(got, np.ndarray) and got.size == 1:
        got = got.item()
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, numbers.Real):
        fail(f"{call} must return a number", expected, f"{got!r} ({type(got).__name__})")
    got = float(got)
    if not np.isfinite(got):
        fail(f"{call} returned {got}", expected, got, "check for a division by zero.")
    return got


def _fmt(x: float) -> str:
    """A count as people write it: ``16,777,216`` when whole, else six significant digits."""
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:,.6g}"


def _explain(mistakes: dict, cases: list, ratios: list[float], *, rtol: float, most: int = 2) -> list[str] | None:
    """The smallest set of mistakes (at most ``most``) whose factors multiply to ``got / expected`` in every case.

    ``mistakes`` maps a description to ``factor(case)``. A mistake whose factor is 1 in every case (it changes nothing
    there, e.g. ignoring ``Hkv`` when ``Hkv == H``) cannot be told apart from no mistake and is never named.
    """
    names = [m for m in mistakes if not all(np.isclose(mistakes[m](c), 1.0) for c in cases)]
    for n in range(1, most + 1):
        for combo in itertools.combinations(names, n):
            predicted = [np.prod([mistakes[m](c) for m in combo]) for c in cases]
            if all(np.isclose(r, p, rtol=rtol, atol=0) for r, p in zip(ratios, predicted)):
                return list(combo)
    return None


def _hint(found: list[str] | None, fallback: str) -> str:
    return "you " + "; and you ".join(found) + "." if found else fallback


# ---------------------------------------------------------------------------------------------------------- 5.1

_PROJECTION_MISTAKES = {
    "counted multiply-adds (MACs): each multiply-add is 2 FLOPs, so a (m, k) @ (k, n) matmul is 2·m·k·n FLOPs":
        lambda c: 0.5,
    "forgot one of the four projections (6·S·d_model² instead of 8): W_q, W_k, W_v AND the output projection W_o":
        lambda c: 0.75,
    "swapped S and d_model: the projections are S x d_model times d_model x d_model, so S·d_model², not S²·d_model":
        lambda c: c[0] / c[1],
}

_ATTENTION_MISTAKES = {
    "counted only Q Kᵀ and forgot P V: the weighted sum of values is a second matmul of the same size, "
    "(S, S) @ (S, d_model) summed over the heads": lambda c: 0.5,
    "counted multiply-adds (MACs) on the attention side: each multiply-add is 2 FLOPs": lambda c: 0.5,
    "counted only the pairs a causal mask allows; this exercise has no mask, so all S x S pairs count":
        lambda c: (c[0] + 1) / (2 * c[0]),
    "swapped S and d_model: every head's scores are S x S, so attention is S²·d_model, not S·d_model²":
        lambda c: c[1] / c[0],
}


@exercise("5.1", forbids=('attnlab.attention_flops', 'attnlab.projection_flops'))
def check_attention_layer_flops(attention_layer_flops) -> None:
    cases = [(512, 64), (100, 768), (3000, 4096)]  # S > d_model, S < d_model, a realistic width
    got_proj, got_attn, exp_proj, exp_attn = [], [], [], []
    for S, d_model in cases:
        call = f"attention_layer_flops({S}, {d_model})"
        ep, ea = projection_flops(S, d_model), attention_flops(S, d_model)
        expected = f"({ep:,}, {ea:,})"
        got = attention_layer_flops(S, d_model)
        if got is None:
            fail(f"{call} returned None", expected, "None", "did you forget the `return` statement?")
        if isinstance(got, (str, bytes)) or not hasattr(got, "__len__") or len(got) != 2:
            fail(f"{call} must return two numbers, (projection FLOPs, attention FLOPs)", expected, repr(got),
                 "end with `return proj, attn`.")
        gp = _number(got[0], f"{call}[0] (the projection FLOPs)", f"{ep:,}")
        ga = _number(got[1], f"{call}[1] (the attention FLOPs)", f"{ea:,}")
        got_proj.append(gp)
        got_attn.append(ga)
        exp_proj.append(ep)
        exp_attn.append(ea)

    def ok(got, exp):
        return all(np.isclose(g, e, rtol=1e-9) for g, e in zip(got, exp))

    if ok(got_proj, exp_proj) and ok(got_attn, exp_attn):
        return
    i = next(i for i in range(len(cases)) if not (np.isclose(got_proj[i], exp_proj[i], rtol=1e-9)
                                                   and np.isclose(got_attn[i], exp_attn[i], rtol=1e-9)))
    S, d_model = cases[i]
    call = f"attention_layer_flops({S}, {d_model})"
    expected = f"({exp_proj[i]:,}, {exp_attn[i]:,})"
    got = f"({_fmt(got_proj[i])}, {_fmt(got_attn[i])})"
    if ok(got_proj, exp_attn) and ok(got_attn, exp_proj):
        fail(f"{call} returned the two numbers in the wrong order", expected, got,
             "return (projection FLOPs, attention FLOPs), in that order.")
    p_ratio = [g / e for g, e in zip(got_proj, exp_proj)]
    a_ratio = [g / e for g, e in zip(got_attn, exp_attn)]
    if all(np.isclose(r, 0.5) for r in p_ratio + a_ratio):
        fail(f"{call} is half the right count in both parts", expected, got,
             "you counted multiply-adds (MACs). A FLOP is one multiply or one add, and every term of a dot product "
             "needs both, so an (m, k) @ (k, n) matmul is 2·m·k·n FLOPs.")
    if not ok(got_proj, exp_proj):
        i = next(i for i, r in enumerate(p_ratio) if not np.isclose(r, 1.0, rtol=1e-9))
        found = _explain(_PROJECTION_MISTAKES, cases, p_ratio, rtol=1e-9)
        fail(f"attention_layer_flops{cases[i]} has the wrong projection FLOPs", f"{exp_proj[i]:,}",
             _fmt(got_proj[i]),
             _hint(found, f"your count is {p_ratio[i]:.4g} times the right one. Four matmuls (S, d_model) @ "
                          "(d_model, d_model), for W_q, W_k, W_v and W_o, each 2·S·d_model² FLOPs."))
    i = next(i for i, r in enumerate(a_ratio) if not np.isclose(r, 1.0, rtol=1e-9))
    found = _explain(_ATTENTION_MISTAKES, cases, a_ratio, rtol=1e-9)
    fail(f"attention_layer_flops{cases[i]} has the wrong attention FLOPs", f"{exp_attn[i]:,}", _fmt(got_attn[i]),
         _hint(found, f"your count is {a_ratio[i]:.4g} times the right one. Per head, Q Kᵀ is (S, D) @ (D, S) and "
                      "P V is (S, S) @ (S, D), each 2·S²·D FLOPs; over H heads D becomes H·D = d_model. "
                      "The head count itself drops out."))


# ---------------------------------------------------------------------------------------------------------- 5.2

_MEMORY_MISTAKES = {
    "counted bits where bytes are needed (BF16 is 16 bits but 2 bytes per element)": lambda c: 8.0,
    "forgot the heads: every one of the H heads has its own S x S score matrix": lambda c: 1 / c[0],
    "counted S elements per head instead of S x S (one score per query-key pair)": lambda c: 1 / c[1],
    "forgot to multiply by bytes_per_element": lambda c: 1 / c[2],
    "returned GiB (2**30 bytes) instead of bytes": lambda c: 1 / GiB,
    "returned GB (10**9 bytes) instead of bytes": lambda c: 1e-9,
    "mixed up GiB and GB: converting GiB to bytes multiplies by 2**30, not 10**9": lambda c: 1e9 / GiB,
}


@exercise("5.2", forbids=('attnlab.score_bytes',))
def check_score_memory_bytes(score_memory_bytes) -> None:
    cases = [(32, 8192, 2), (12, 1000, 4), (6, 300, 1)]  # (H, S, bytes_per_element)
    got, expected = [], []
    for H, S, b in cases:
        e = score_bytes(H, S, dtype=b)
        call = f"score_memory_bytes({H}, {S}, {b})"
        got.append(_number(score_memory_bytes(H, S, b), call, f"{e:,} bytes"))
        expected.append(e)
    ratios = [g / e for g, e in zip(got, expected)]
    if all(np.isclose(r, 1.0, rtol=1e-9) for r in ratios):
        return
    i = next(i for i, r in enumerate(ratios) if not np.isclose(r, 1.0, rtol=1e-9))
    H, S, b = cases[i]
    found = _explain(_MEMORY_MISTAKES, cases, ratios, rtol=1e-9)
    fail(f"score_memory_bytes({H}, {S}, {b}) is wrong", f"{expected[i]:,} bytes", _fmt(got[i]),
         _hint(found, f"your answer is {ratios[i]:.4g} times the right one. The scores are H x S x S numbers of "
                      "bytes_per_element bytes each."))


# ---------------------------------------------------------------------------------------------------------- 5.3


def _kv_fraction(c) -> float:
    """``Hkv / H``: the width of W_k (and W_v) as a fraction of d_model."""
    return c[2] / c[1]


_CROSSOVER_MISTAKES = {
    "ignored grouped-query attention: W_k and W_v have only Hkv·D = d_model·Hkv/H columns, so the projections "
    "cost 2·S·d_model·(2·d_model + 2·d_model·Hkv/H) FLOPs, less than 8·S·d_model²":
        lambda c: 2 / (1 + _kv_fraction(c)),
    "turned the GQA ratio upside down: W_k and W_v shrink to d_model·Hkv/H columns, not d_model·H/Hkv":
        lambda c: (1 + 1 / _kv_fraction(c)) / (1 + _kv_fraction(c)),
    "halved the crossover for a causal mask; the mask halves the ATTENTION FLOPs, so attention needs twice as many "
    "tokens to catch up: the crossover doubles": lambda c: 0.25 if c[3] else 1.0,
    "ignored the causal flag: with a causal mask only about half of the S x S pairs are computed":
        lambda c: 0.5 if c[3] else 1.0,
    "counted only Q Kᵀ on the attention side (P V costs as much again), or counted attention in multiply-adds "
    "but the projections in FLOPs": lambda c: 2.0,
    "forgot the output projection W_o: a layer has four projections, W_q, W_k, W_v and W_o":
        lambda c: (1 + 2 * _kv_fraction(c)) / (2 + 2 * _kv_fraction(c)),
}


@exercise("5.3", forbids=('attnlab.crossover_length', 'attnlab.attention_flops', 'attnlab.projection_flops'))
def check_attention_crossover(attention_crossover) -> None:
    cases = [(4096, 32, 32, False), (4096, 32, 8, False), (4096, 32, 8, True), (768, 12, 12, True),
             (2048, 16, 1, False)]  # (d_model, H, Hkv, causal)
    got, expected = [], []
    for d_model, H, Hkv, causal in cases:
        e = crossover_length(d_model, H=H, Hkv=Hkv, causal=causal)
        call = f"attention_crossover({d_model}, {H}, {Hkv}, causal={causal})"
        got.append(_number(attention_crossover(d_model, H, Hkv, causal), call, f"about {e:,.0f} tokens"))
        expected.append(e)
    ratios = [g / e for g, e in zip(got, expected)]
    rtol = 1e-3  # S and S + 1 are both right: the exact causal count is S(S+1)/2 pairs, not S²/2
    if all(np.isclose(r, 1.0, rtol=rtol) for r in ratios):
        return
    i = next(i for i, r in enumerate(ratios) if not np.isclose(r, 1.0, rtol=rtol))
    d_model, H, Hkv, causal = cases[i]
    found = _explain(_CROSSOVER_MISTAKES, cases, ratios, rtol=rtol)
    fail(f"attention_crossover({d_model}, {H}, {Hkv}, causal={causal}) is wrong", f"about {expected[i]:,.0f} tokens",
         _fmt(got[i]),
         _hint(found, f"your answer is {ratios[i]:.4g} times the right one. Set the attention FLOPs (4·S²·d_model, "
                      "half that when causal) equal to the projection FLOPs (2·S·d_model·(2·d_model + "
                      "2·d_model·Hkv/H)) and solve for S."))


# ---------------------------------------------------------------------------------------------------------- 5.4

_INTENSITY_MISTAKES = {
    "counted only the keys as bytes read: each step reads the cached values too, as many bytes again":
        lambda c: 2.0,
    "counted bits where bytes are needed (BF16 is 16 bits but 2 bytes per element)": lambda c: 1 / 8,
    "sized the cache with the query heads H; it holds only the Hkv key/value heads": lambda c: c[3] / c[2],
    "got half the FLOPs: count both matmuls (q Kᵀ and p V) and 2 FLOPs per multiply-add": lambda c: 0.5,
    "counted the FLOPs of all S queries; a decode step computes ONE new query row against the S cached positions":
        lambda c: float(c[0]),
}


@exercise("5.4", forbids=('attnlab.decode_step_cost',))
def check_decode_intensity(decode_intensity) -> None:
    cases = [(4096, 4096, 32, 32, 2), (8192, 4096, 32, 8, 2), (16384, 2048, 16, 1, 4), (5000, 1024, 8, 2, 1)]
    got, expected = [], []
    for S, d_model, H, Hkv, b in cases:
        e = decode_step_cost(S, d_model=d_model, H=H, Hkv=Hkv, dtype=b)["intensity"]
        call = f"decode_intensity({S}, {d_model}, {H}, {Hkv}, {b})"
        got.append(_number(decode_intensity(S, d_model, H, Hkv, b), call, f"{e:.4g} FLOPs per byte"))
        expected.append(e)
    ratios = [g / e for g, e in zip(got, expected)]
    rtol = 1e-2  # counting the query row and the output row as traffic too changes the answer by well under 1%
    if all(np.isclose(r, 1.0, rtol=rtol) for r in ratios):
        return
    i = next(i for i, r in enumerate(ratios) if not np.isclose(r, 1.0, rtol=rtol))
    S, d_model, H, Hkv, b = cases[i]
    found = _explain(_INTENSITY_MISTAKES, cases, ratios, rtol=rtol)
    fail(f"decode_intensity({S}, {d_model}, {H}, {Hkv}, {b}) is wrong", f"{expected[i]:.4g} FLOPs per byte",
         f"{got[i]:.4g}",
         _hint(found, f"your answer is {ratios[i]:.4g} times the right one. FLOPs: one query row against S keys, "
                      "4·S·d_model. Bytes: the cached K and V, 2·Hkv·D·S elements of bytes_per_element bytes, "
                      "with D = d_model / H. Notice that S cancels."))
