"""Checks for notebook 05, what attention costs. Each exercise takes an idea of the notebook to a new situation.

5.1  ``cross_attention_flops(T, S, d_model)`` -> ``(projection FLOPs, attention FLOPs)`` of one cross-attention layer:
     ``T`` queries attend to ``S`` keys (the FLOP count of section 1, with ``T != S``).
5.2  ``longest_context(memory_bytes, H, bytes_per_element)``: the longest whole ``S`` whose ``H x S x S`` scores fit
     (the score memory of section 4, solved for ``S``).
5.3  ``block_crossover(d_model, H, Hkv, d_ff, causal)``: the context length at which attention's FLOPs catch up with
     the rest of a transformer block, projections with grouped-query attention plus an MLP (section 2, whole block).
5.4  ``batched_decode_intensity(B, S, d_model, H, Hkv, bytes_per_element)``: FLOPs per byte of a decode step of a
     whole layer for a batch (section 5's intensity, with the weights shared by the batch and one cache per sequence).

Every classic mistake changes the answer in a known way (counting multiply-adds halves a FLOP count, bits instead of
bytes multiply a size by 8, ...). Each checker calls the learner's function on fixed cases and one drawn from
:func:`seeded` (so that no table of answers works) and, when the answers are off, looks for the smallest set of
mistakes that reproduces them in every case, so that the message can name the mistake that was made.
"""

from __future__ import annotations

import itertools
import math
import numbers

import numpy as np

from . import exercise, fail, seeded, tolerances

_COST_FUNCTIONS = ("attnlab.attention_flops", "attnlab.projection_flops", "attnlab.matmul_flops",
                   "attnlab.crossover_length", "attnlab.score_bytes", "attnlab.kv_cache_bytes",
                   "attnlab.decode_step_cost", "attnlab.causal_pairs")


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


def _explain(model, mistakes: dict, cases: list, got: list[float], *, rtol: float, most: int = 2) -> list[str] | None:
    """The smallest set of mistakes (at most ``most``) with which ``model(case, **switches)`` gives ``got`` in every case.

    ``mistakes`` maps a description to the switches of ``model`` that make that mistake. A mistake that changes no
    case's answer cannot be told apart from no mistake and is never named.
    """
    right = [model(c) for c in cases]
    names = [m for m, sw in mistakes.items()
             if not all(np.isclose(model(c, **sw), r, rtol=1e-12, atol=0) for c, r in zip(cases, right))]
    for n in range(1, most + 1):
        for combo in itertools.combinations(names, n):
            switches = {}
            for m in combo:
                switches.update(mistakes[m])
            if len(switches) < sum(len(mistakes[m]) for m in combo):
                continue  # two mistakes that set the same switch differently
            predicted = [model(c, **switches) for c in cases]
            if all(np.isclose(g, p, rtol=rtol, atol=0) for g, p in zip(got, predicted)):
                return list(combo)
    return None


def _hint(found: list[str] | None, fallback: str) -> str:
    return "you " + "; and you ".join(found) + "." if found else fallback


def _first_wrong(got, expected, rtol):
    return next(i for i, (g, e) in enumerate(zip(got, expected)) if not np.isclose(g, e, rtol=rtol, atol=0))


# ---------------------------------------------------------------------------------------------------------- 5.1


def _cross(c, *, part="both", qo_rows="T", kv_rows="S", n_proj=4, pairs="TS", attn_matmuls=2, flops_per_mac=2,
           proj_mac=None, attn_mac=None):
    """(projections, attention) of a cross-attention layer ``c = (T, S, d_model)``, with switches for the mistakes."""
    T, S, d = c
    rows = {"T": T, "S": S}
    f_proj = flops_per_mac if proj_mac is None else proj_mac
    f_attn = flops_per_mac if attn_mac is None else attn_mac
    qo = 2 if n_proj == 4 else 1  # n_proj = 3: W_o forgotten
    proj = f_proj * d * d * (qo * rows[qo_rows] + 2 * rows[kv_rows])
    attn = attn_matmuls * f_attn * {"TS": T * S, "TT": T * T, "SS": S * S}[pairs] * d
    return {"both": (proj, attn), "proj": proj, "attn": attn}[part]


_CROSS_PROJECTION_MISTAKES = {
    "projected the keys and values of the T query tokens: W_k and W_v act on the S source tokens": dict(kv_rows="T"),
    "projected the queries (and the output) of the S source tokens: W_q and W_o act on the T query tokens":
        dict(qo_rows="S"),
    "forgot the output projection W_o: a layer has four projections, W_q, W_k, W_v AND W_o": dict(n_proj=3),
    "counted the projections in multiply-adds (MACs): each multiply-add is 2 FLOPs, so a (m, k) @ (k, n) matmul is "
    "2·m·k·n FLOPs": dict(proj_mac=1),
}
_CROSS_ATTENTION_MISTAKES = {
    "counted T x T (query, query) pairs: every one of the T queries meets every one of the S keys, T x S pairs":
        dict(pairs="TT"),
    "counted S x S pairs: the scores are (T, S), one per query and key, not (S, S)": dict(pairs="SS"),
    "counted only Q Kᵀ and forgot P V: the weighted sum of values is a second matmul of the same size, "
    "(T, S) @ (S, D) in every head": dict(attn_matmuls=1),
    "counted the attention in multiply-adds (MACs): each multiply-add is 2 FLOPs": dict(attn_mac=1),
}


@exercise("5.1", forbids=_COST_FUNCTIONS)
def check_cross_attention_flops(cross_attention_flops) -> None:
    cases = [(1, 4096, 512), (77, 1024, 768), (300, 50, 256), (512, 512, 64)]  # (T, S, d_model); the last is T == S
    rng = seeded(51)  # and one drawn per grading, so that no table of answers works
    cases.append((int(rng.integers(2, 400)), int(rng.integers(401, 5000)), 64 * int(rng.integers(2, 17))))
    got_proj, got_attn, answers = [], [], []
    for c in cases:
        call = f"cross_attention_flops{c}"
        ep, ea = _cross(c)
        expected = f"({ep:,}, {ea:,})"
        got = cross_attention_flops(*c)
        if got is None:
            fail(f"{call} returned None", expected, "None", "did you forget the `return` statement?")
        if isinstance(got, (str, bytes)) or not hasattr(got, "__len__") or len(got) != 2:
            fail(f"{call} must return two numbers, (projection FLOPs, attention FLOPs)", expected, repr(got),
                 "end with `return proj, attn`.")
        answers += [got[0], got[1]]
        got_proj.append(_number(got[0], f"{call}[0] (the projection FLOPs)", f"{ep:,}"))
        got_attn.append(_number(got[1], f"{call}[1] (the attention FLOPs)", f"{ea:,}"))
    exp_proj = [_cross(c, part="proj") for c in cases]
    exp_attn = [_cross(c, part="attn") for c in cases]
    rtol = max(tolerances(np.asarray(a), 1e-9, 0.0)[0] for a in answers)  # counts given as float32: float32 error

    def ok(got, exp):
        return all(np.isclose(g, e, rtol=rtol) for g, e in zip(got, exp))

    if ok(got_proj, exp_proj) and ok(got_attn, exp_attn):
        return
    if ok(got_proj, exp_attn) and ok(got_attn, exp_proj):
        i = _first_wrong(got_proj, exp_proj, rtol)
        fail(f"cross_attention_flops{cases[i]} returned the two numbers in the wrong order",
             f"({exp_proj[i]:,}, {exp_attn[i]:,})", f"({_fmt(got_proj[i])}, {_fmt(got_attn[i])})",
             "return (projection FLOPs, attention FLOPs), in that order.")
    if not ok(got_proj, exp_proj):
        i = _first_wrong(got_proj, exp_proj, rtol)
        found = _explain(lambda c, **s: _cross(c, part="proj", **s), _CROSS_PROJECTION_MISTAKES, cases, got_proj,
                         rtol=rtol)
        fail(f"cross_attention_flops{cases[i]} has the wrong projection FLOPs", f"{exp_proj[i]:,}",
             _fmt(got_proj[i]),
             _hint(found, f"your count is {got_proj[i] / exp_proj[i]:.4g} times the right one. W_q and W_o are "
                          "(T, d_model) @ (d_model, d_model), W_k and W_v (S, d_model) @ (d_model, d_model), "
                          "each 2·rows·d_model² FLOPs."))
    i = _first_wrong(got_attn, exp_attn, rtol)
    found = _explain(lambda c, **s: _cross(c, part="attn", **s), _CROSS_ATTENTION_MISTAKES, cases, got_attn,
                     rtol=rtol)
    fail(f"cross_attention_flops{cases[i]} has the wrong attention FLOPs", f"{exp_attn[i]:,}", _fmt(got_attn[i]),
         _hint(found, f"your count is {got_attn[i] / exp_attn[i]:.4g} times the right one. Per head, Q Kᵀ is "
                      "(T, D) @ (D, S) and P V is (T, S) @ (S, D), each 2·T·S·D FLOPs; over H heads D becomes "
                      "H·D = d_model."))


# ---------------------------------------------------------------------------------------------------------- 5.2


def _root(c, *, heads=True, square=True, size="bytes"):
    """The unrounded longest context of ``c = (memory_bytes, H, bytes_per_element)``, with switches for mistakes."""
    memory, H, b = c
    per = (H if heads else 1) * {"bytes": b, "bits": 8 * b, "none": 1}[size]
    return memory / per if not square else math.sqrt(memory / per)


_CONTEXT_MISTAKES = {
    "forgot the heads: every one of the H heads has its own S x S score matrix": dict(heads=False),
    "forgot that the matrix is S x S: the memory grows as S², so S is a square root": dict(square=False),
    "counted bits where bytes are needed (BF16 is 16 bits but 2 bytes per element)": dict(size="bits"),
    "forgot bytes_per_element: the memory holds H·S² numbers of bytes_per_element bytes each": dict(size="none"),
}


@exercise("5.2", forbids=_COST_FUNCTIONS)
def check_longest_context(longest_context) -> None:
    # (memory_bytes, H, bytes_per_element): an 80 GB accelerator, an exact fit (4 GiB is 8,192 tokens exactly), ...
    cases = [(80e9, 32, 2), (4 * 2**30, 32, 2), (24 * 2**30, 12, 4), (123_456_789, 7, 2), (10**9, 40, 1)]
    rng = seeded(52)  # and one drawn per grading
    cases.append((int(rng.integers(10**8, 10**11)), int(rng.integers(1, 64)), int(rng.choice([1, 2, 4]))))
    got, expected = [], []
    for c in cases:
        e = math.isqrt(int(c[0] // (c[1] * c[2])))
        call = f"longest_context({_fmt(c[0])}, {c[1]}, {c[2]})"
        got.append(_number(longest_context(*c), call, f"{e:,} tokens"))
        expected.append(e)
    if all(g == e for g, e in zip(got, expected)):
        return
    i = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
    memory, H, b = cases[i]
    call = f"longest_context({_fmt(memory)}, {H}, {b})"
    g, e = got[i], expected[i]
    if not g.is_integer() and abs(g - _root(cases[i])) < 1e-6 * e:
        fail(f"{call} is not a whole number of tokens", f"{e:,} tokens", _fmt(g),
             "a context is a whole number of tokens: round the square root DOWN (math.isqrt, or int() of a "
             "positive number), since one token more would no longer fit.")
    if g == e + 1 and H * g * g * b > memory:
        fail(f"{call} does not fit", f"{e:,} tokens", _fmt(g),
             f"S = {g:,.0f} needs {H * g * g * b:,.0f} bytes, more than the {_fmt(memory)} available: round the "
             "square root down, not to the nearest whole number or up.")
    if g == e - 1 and H * e * e * b == memory:
        fail(f"{call} is one token short", f"{e:,} tokens", _fmt(g),
             f"S = {e:,} fills the memory exactly ({H * e * e * b:,} bytes) and so it fits: the test is "
             "H·S²·b <= memory, with <=, not <.")
    mistakes = {m: sw for m, sw in _CONTEXT_MISTAKES.items()}
    found = None
    for n in (1, 2):
        for combo in itertools.combinations(mistakes, n):
            sw = {k: v for m in combo for k, v in mistakes[m].items()}
            if len(sw) == sum(len(mistakes[m]) for m in combo) and all(
                    abs(gg - _root(c, **sw)) <= 1 + 1e-9 * abs(gg) for gg, c in zip(got, cases)):
                found = list(combo)
                break
        if found:
            break
    fail(f"{call} is wrong", f"{e:,} tokens", _fmt(g),
         _hint(found, f"your answer is {g / e:.4g} times the right one. The scores take H·S²·bytes_per_element "
                      "bytes; set that <= memory_bytes and solve for the largest whole S."))


# ---------------------------------------------------------------------------------------------------------- 5.3


def _block(c, *, gqa="right", wo=True, mlp_matmuls=2, attn_matmuls=2, causal_rule="double"):
    """The crossover of a whole block ``c = (d_model, H, Hkv, d_ff, causal)``, with switches for the mistakes."""
    d, H, Hkv, d_ff, causal = c
    kv = {"right": Hkv / H, "ignored": 1.0, "inverted": H / Hkv}[gqa]
    per_token = 2 * d * (d + 2 * d * kv + (d if wo else 0)) + 2 * mlp_matmuls * d * d_ff
    per_pair = 2 * attn_matmuls * d
    if causal:
        per_pair *= {"double": 0.5, "halve": 2.0, "ignore": 1.0}[causal_rule]
    return per_token / per_pair


_BLOCK_MISTAKES = {
    "left out the MLP: the block's other FLOPs are the four projections AND the MLP's 2·2·S·d_model·d_ff":
        dict(mlp_matmuls=0),
    "counted only one of the MLP's two matmuls (d_model -> d_ff and d_ff -> d_model), or counted it in multiply-adds":
        dict(mlp_matmuls=1),
    "ignored grouped-query attention: W_k and W_v have only Hkv·D = d_model·Hkv/H columns": dict(gqa="ignored"),
    "turned the GQA ratio upside down: W_k and W_v shrink to d_model·Hkv/H columns, not d_model·H/Hkv":
        dict(gqa="inverted"),
    "halved the crossover for a causal mask; the mask halves the ATTENTION FLOPs, so attention needs twice as many "
    "tokens to catch up: the crossover doubles": dict(causal_rule="halve"),
    "ignored the causal flag: with a causal mask only about half of the S x S pairs are computed":
        dict(causal_rule="ignore"),
    "counted only Q Kᵀ on the attention side (P V costs as much again), or counted attention in multiply-adds "
    "but the rest in FLOPs": dict(attn_matmuls=1),
    "forgot the output projection W_o: a layer has four projections, W_q, W_k, W_v and W_o": dict(wo=False),
}


@exercise("5.3", forbids=_COST_FUNCTIONS)
def check_block_crossover(block_crossover) -> None:
    cases = [(4096, 32, 32, 0, False), (4096, 32, 32, 16384, False), (4096, 32, 8, 14336, True),
             (768, 12, 12, 3072, True), (2048, 16, 1, 5632, False), (1024, 16, 4, 0, True)]
    rng = seeded(53)  # and one drawn per grading
    H = int(rng.choice([8, 16, 32]))
    d_model = int(rng.choice([64, 96, 128])) * H  # any MLP width: too many cases for a table of answers
    cases.append((d_model, H, H // int(rng.choice([1, 2, 4, 8])), int(rng.integers(d_model, 8 * d_model)),
                  bool(rng.integers(2))))
    got, expected = [], []
    for c in cases:
        d, H, Hkv, d_ff, causal = c
        e = _block(c)
        call = f"block_crossover({d}, {H}, {Hkv}, {d_ff}, causal={causal})"
        got.append(_number(block_crossover(d, H, Hkv, d_ff, causal), call, f"about {e:,.0f} tokens"))
        expected.append(e)
    rtol = 1e-3  # S and S + 1 are both right: the exact causal count is S(S+1)/2 pairs, not S²/2
    if all(np.isclose(g, e, rtol=rtol) for g, e in zip(got, expected)):
        return
    i = _first_wrong(got, expected, rtol)
    d, H, Hkv, d_ff, causal = cases[i]
    found = _explain(_block, _BLOCK_MISTAKES, cases, got, rtol=rtol)
    fail(f"block_crossover({d}, {H}, {Hkv}, {d_ff}, causal={causal}) is wrong", f"about {expected[i]:,.0f} tokens",
         _fmt(got[i]),
         _hint(found, f"your answer is {got[i] / expected[i]:.4g} times the right one. Set the attention FLOPs "
                      "(4·S²·d_model, half that when causal) equal to the projections' 2·S·d_model·(2·d_model + "
                      "2·d_model·Hkv/H) plus the MLP's 4·S·d_model·d_ff, and solve for S."))


# ---------------------------------------------------------------------------------------------------------- 5.4


def _batched(c, *, weights_per_sequence=False, one_cache=False, cache_heads="Hkv", kv_tensors=2, gqa_weights=True,
             proj_flops=True, weight_bytes=True, size="bytes", flops_per_mac=2, queries="one"):
    """FLOPs per byte of a batched decode step ``c = (B, S, d_model, H, Hkv, bytes_per_element)``, with switches."""
    B, S, d, H, Hkv, b = c
    D = d // H
    kv_cols = (Hkv if gqa_weights else H) * D
    per_mac = flops_per_mac / 2
    flops = B * per_mac * ((2 * d * (2 * d + 2 * kv_cols) if proj_flops else 0)
                           + 4 * S * d * (S if queries == "all" else 1))
    size = {"bytes": b, "bits": 8 * b}[size]
    w = (2 * d * d + 2 * d * kv_cols) * size * (B if weights_per_sequence else 1) if weight_bytes else 0
    cache = (1 if one_cache else B) * kv_tensors * {"Hkv": Hkv, "H": H}[cache_heads] * D * S * size
    return flops / (w + cache)


_BATCHED_MISTAKES = {
    "read the weights once per sequence: they are shared, read once per step for the whole batch, which is what "
    "batching buys": dict(weights_per_sequence=True),
    "read one cache for the whole batch: every sequence has its own KV cache, so B caches are read":
        dict(one_cache=True),
    "sized the cache with the query heads H; it holds only the Hkv key/value heads": dict(cache_heads="H"),
    "counted only the keys as cache bytes: each step reads the cached values too, as many bytes again":
        dict(kv_tensors=1),
    "ignored grouped-query attention in the weights: W_k and W_v have only Hkv·D columns": dict(gqa_weights=False),
    "left out the projections' FLOPs: every sequence multiplies its new row by W_q, W_k, W_v and W_o":
        dict(proj_flops=False),
    "left out the weights' bytes: a step reads W_q, W_k, W_v and W_o from memory once": dict(weight_bytes=False),
    "counted bits where bytes are needed (BF16 is 16 bits but 2 bytes per element)": dict(size="bits"),
    "counted multiply-adds (MACs): each is 2 FLOPs": dict(flops_per_mac=1),
    "counted the attention FLOPs of all S queries; a decode step computes ONE new query row per sequence":
        dict(queries="all"),
}


@exercise("5.4", forbids=_COST_FUNCTIONS)
def check_batched_decode_intensity(batched_decode_intensity) -> None:
    cases = [(1, 4096, 4096, 32, 32, 2), (64, 4096, 4096, 32, 8, 2), (256, 512, 2048, 16, 16, 2),
             (16, 32768, 4096, 32, 1, 1), (8, 1000, 1024, 8, 2, 4)]  # (B, S, d_model, H, Hkv, bytes_per_element)
    rng = seeded(54)  # and one drawn per grading
    H = int(rng.choice([8, 16, 32]))
    cases.append((int(rng.integers(1, 129)), int(rng.integers(256, 32769)), 128 * H, H, H // int(rng.choice([1, 2, 8])),
                  int(rng.choice([1, 2, 4]))))
    got, expected = [], []
    for c in cases:
        e = _batched(c)
        call = f"batched_decode_intensity{c}"
        got.append(_number(batched_decode_intensity(*c), call, f"{e:.4g} FLOPs per byte"))
        expected.append(e)
    rtol = 1e-2  # counting the rows of activations as traffic too changes the answer by well under 1%
    if all(np.isclose(g, e, rtol=rtol) for g, e in zip(got, expected)):
        return
    i = _first_wrong(got, expected, rtol)
    found = _explain(_batched, _BATCHED_MISTAKES, cases, got, rtol=rtol)
    fail(f"batched_decode_intensity{cases[i]} is wrong", f"{expected[i]:.4g} FLOPs per byte", f"{got[i]:.4g}",
         _hint(found, f"your answer is {got[i] / expected[i]:.4g} times the right one. FLOPs: B sequences, each "
                      "2·d_model·(2·d_model + 2·Hkv·D) for the projections plus 4·S·d_model for attention. Bytes: "
                      "the weights once, (2·d_model² + 2·d_model·Hkv·D) numbers, plus B caches of 2·Hkv·D·S numbers."))
