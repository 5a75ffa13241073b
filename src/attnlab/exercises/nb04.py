"""Checks for notebook 04, multi-head and grouped-query attention, and the KV cache.

4.1  ``gqa_attention(q, k, v)``: grouped-query attention, ``q (H, T, D)``, ``k, v (Hkv, S, D)`` -> ``(H, T, D)``.
4.2  ``kv_cache_size(S, *, layers, H, Hkv, D, dtype)``: bytes of the KV cache of one sequence.
4.3  ``split_into_heads(x, H)``: ``(..., T, H * D) -> (..., H, T, D)``.

Each checker calls the learner's function on fixed inputs, compares with ``attnlab``'s reference and, when they differ,
tries the classic mistakes one by one so that the message can name the one that was made.
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np

from ..attention import attention
from ..cost import BYTES_PER_ELEMENT, GiB, kv_cache_bytes
from ..heads import split_heads
from ..softmax import softmax
from . import exercise, fail, seeded


def _as_array(got, name: str, expected_shape: tuple[int, ...]) -> np.ndarray:
    """The learner's result as a float array of the expected shape, or a failure saying what is wrong with it."""
    if got is None:
        fail(f"{name} returned None", f"an array of shape {expected_shape}", "None",
             "did you forget the `return` statement?")
    arr = np.asarray(got)
    if arr.dtype.kind not in "fc":
        fail(f"{name} must return a floating-point array", "dtype float64", f"dtype {arr.dtype}")
    return arr


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-7, atol=1e-10)


# ---------------------------------------------------------------------------------------------------------- 4.1


def _tile_attention(q, k, v, scale=None):
    """What ``np.tile`` gives: query head ``h`` paired with K/V head ``h % Hkv`` instead of ``h // G``."""
    G = q.shape[-3] // k.shape[-3]
    return attention(q, np.tile(k, (G, 1, 1)), np.tile(v, (G, 1, 1)), scale=scale)


def _wrong_axis_attention(q, k, v):
    """Softmax over the query axis instead of the key axis."""
    G = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, G, axis=0), np.repeat(v, G, axis=0)  # (H, S, D)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])  # (H, T, S)
    return softmax(scores, axis=-2) @ v  # (H, T, D)


@exercise("4.1", forbids=('attnlab.attention', 'attnlab.repeat_kv', 'attnlab.multi_head_attention'))
def check_gqa_attention(gqa_attention) -> None:
    rng = seeded(41)
    # the first case has 1 < Hkv < H and T != S, so that every classic mistake shows; then MHA and MQA
    for H, Hkv, T, S, D in ((6, 2, 4, 5, 8), (4, 4, 3, 3, 4), (4, 1, 2, 6, 4)):
        q = rng.standard_normal((H, T, D))  # (H, T, D)
        k = rng.standard_normal((Hkv, S, D))  # (Hkv, S, D)
        v = rng.standard_normal((Hkv, S, D))  # (Hkv, S, D)
        G, d_model = H // Hkv, H * D
        expected = attention(q, k, v)  # (H, T, D)
        got = gqa_attention(q.copy(), k.copy(), v.copy())
        setup = f"for q {q.shape}, k and v {k.shape} (H={H}, Hkv={Hkv}, G={G}, T={T}, S={S}, D={D})"
        got = _as_array(got, "gqa_attention", expected.shape)
        if got.shape != expected.shape:
            hint = "the output has one row per query head and query position: (H, T, D)."
            if got.shape == (Hkv, G, T, D):
                hint = "you returned the grouped view (Hkv, G, T, D); reshape it back to (H, T, D) at the end."
            elif got.shape == (H, T, S):
                hint = "that is the shape of the weights (H, T, S); return weights @ v instead."
            elif got.shape == (Hkv, T, D):
                hint = "you returned one output per K/V head; every one of the H query heads needs its own output."
            fail(f"gqa_attention returned the wrong shape {setup}", expected.shape, got.shape, hint)
        if not np.all(np.isfinite(got)):
            fail(f"gqa_attention returned NaN or inf {setup}", "finite numbers", "NaN or inf",
                 "subtract the row maximum before np.exp.")
        if _close(got, expected):
            continue
        if 1 < Hkv < H and _close(got, _tile_attention(q, k, v)):
            pairs = ", ".join(f"q{h}->kv{h % Hkv}" for h in range(H))
            fail(f"query heads are paired with the wrong K/V heads {setup}",
                 f"query head h uses K/V head h // G: {', '.join(f'q{h}->kv{h // G}' for h in range(H))}",
                 pairs,
                 "this is the np.tile pattern [K0, K1, K0, K1, ...]; copy each K/V head G times in place with "
                 "np.repeat(k, G, axis=0) (heads [K0, K0, K0, K1, K1, K1]), or reshape q to (Hkv, G, T, D) "
                 "(not (G, Hkv, T, D)).")
        if _close(got, attention(q, k, v, scale=1 / np.sqrt(d_model))) or (
                1 < Hkv < H and _close(got, _tile_attention(q, k, v, scale=1 / np.sqrt(d_model)))):
            fail(f"the scores are scaled by the wrong factor {setup}",
                 f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}",
                 f"scores / sqrt(d_model) = scores / {np.sqrt(d_model):.3g}",
                 "each head is an attention of width D = d_model / H, so divide by sqrt(D) = sqrt(q.shape[-1]), "
                 "not by sqrt(H * D).")
        if _close(got, attention(q, k, v, scale=1.0)):
            fail(f"the scores are not scaled {setup}", f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}",
                 "scores without the 1 / sqrt(D) factor", "divide q @ k.T by np.sqrt(D) before the softmax.")
        if _close(got, attention(q, k, v, scale=1 / D)):
            fail(f"the scores are scaled by the wrong factor {setup}", f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}",
                 f"scores / D = scores / {D}", "the scale is the square root of the head width, np.sqrt(D).")
        tril = np.tril(np.ones((T, S), dtype=bool))  # a causal mask written by hand, aligned at the top left
        if _close(got, attention(q, k, v, causal=True)) or _close(got, attention(q, k, v, tril)):
            fail(f"gqa_attention applies a mask {setup}", "every query attends to all S keys (no mask)",
                 "a causal (triangular) mask", "this exercise asks for attention without a mask; drop the mask.")
        if _close(got, _wrong_axis_attention(q, k, v)):
            fail(f"the softmax normalises the wrong axis {setup}", "each row (one query, all keys) sums to 1",
                 "each column (one key, all queries) sums to 1",
                 "take the softmax over the last axis (the keys, S), axis=-1.")
        bad = [h for h in range(H) if not _close(got[h], expected[h])]
        fail(f"gqa_attention gives wrong outputs {setup}",
             f"out[0, 0, :3] = {np.round(expected[0, 0, :3], 4)}", f"out[0, 0, :3] = {np.round(got[0, 0, :3], 4)}",
             f"query heads {bad} differ from the reference. Compute scores = q @ k.T / sqrt(D) per head, softmax "
             "over the keys, then weights @ v, with query head h using K/V head h // G.")


# ---------------------------------------------------------------------------------------------------------- 4.2

# The classic mistakes as factors by which they multiply the right answer, given the case.
_CACHE_MISTAKES = {
    "forgot the factor 2 (the cache holds keys AND values)": lambda c: 0.5,
    "used bits per element where bytes are needed (BF16 is 16 bits but 2 bytes)": lambda c: 8.0,
    "divided by 8 once too often (the sizes are already in bytes)": lambda c: 1 / 8,
    "used the query heads H where the key/value heads Hkv belong": lambda c: c["H"] / c["Hkv"],
    "forgot to multiply by the number of layers": lambda c: 1 / c["layers"],
    "returned GiB (2**30 bytes) instead of bytes": lambda c: 1 / GiB,
    "returned GB (10**9 bytes) instead of bytes": lambda c: 1e-9,
}


def _diagnose_cache(cases: list[dict], ratios: list[float]) -> list[str] | None:
    """The smallest set of classic mistakes whose factors explain ``got / expected`` in every case, or None."""
    names = list(_CACHE_MISTAKES)
    for n in (1, 2, 3):
        for combo in itertools.combinations(names, n):
            predicted = [np.prod([_CACHE_MISTAKES[m](c) for m in combo]) for c in cases]
            # a mistake that changes nothing in these cases (H == Hkv, one layer) cannot be told apart: skip it
            if any(all(np.isclose(_CACHE_MISTAKES[m](c), 1.0) for c in cases) for m in combo):
                continue
            if all(np.isclose(r, p, rtol=1e-9) for r, p in zip(ratios, predicted)):
                return list(combo)
    return None


@exercise("4.2", forbids=('attnlab.kv_cache_bytes',))
def check_kv_cache_size(kv_cache_size) -> None:
    cases = [
        dict(S=8192, layers=32, H=32, Hkv=8, D=128, dtype="bf16"),
        dict(S=1000, layers=2, H=8, Hkv=2, D=64, dtype="fp32"),
        dict(S=4096, layers=3, H=4, Hkv=1, D=16, dtype="fp8"),
        dict(S=100, layers=5, H=6, Hkv=3, D=10, dtype="fp16"),
    ]
    expected, got = [], []
    for c in cases:
        e = kv_cache_bytes(c["S"], layers=c["layers"], Hkv=c["Hkv"], D=c["D"], dtype=c["dtype"])
        g = kv_cache_size(c["S"], layers=c["layers"], H=c["H"], Hkv=c["Hkv"], D=c["D"], dtype=c["dtype"])
        call = "kv_cache_size({S}, layers={layers}, H={H}, Hkv={Hkv}, D={D}, dtype={dtype!r})".format(**c)
        if g is None:
            fail(f"{call} returned None", f"{e:,} bytes", "None", "did you forget the `return` statement?")
        if isinstance(g, np.ndarray) and g.size == 1:
            g = g.item()
        if isinstance(g, bool) or not isinstance(g, numbers.Real):
            fail(f"{call} must return a number of bytes", f"{e:,}", f"{g!r} ({type(g).__name__})")
        expected.append(e)
        got.append(float(g))
    ratios = [g / e for g, e in zip(got, expected)]
    if all(np.isclose(r, 1.0, rtol=1e-12) for r in ratios):
        return
    i = next(i for i, r in enumerate(ratios) if not np.isclose(r, 1.0, rtol=1e-12))
    c = cases[i]
    call = "kv_cache_size({S}, layers={layers}, H={H}, Hkv={Hkv}, D={D}, dtype={dtype!r})".format(**c)
    mistakes = _diagnose_cache(cases, ratios)
    if mistakes:
        hint = "you " + "; and you ".join(mistakes) + "."
    else:
        hint = (f"your answer is {ratios[i]:.4g} times the right one. Bytes = 2 (K and V) x layers x Hkv x D x S "
                f"x bytes per element ({BYTES_PER_ELEMENT[c['dtype']]} for {c['dtype']}).")
    shown = f"{got[i]:,.0f} bytes" if got[i] == round(got[i]) else f"{got[i]:.6g}"
    fail(f"{call} is wrong", f"{expected[i]:,.0f} bytes", shown, hint)


# ---------------------------------------------------------------------------------------------------------- 4.3


@exercise("4.3", forbids=('attnlab.split_heads',))
def check_split_into_heads(split_into_heads) -> None:
    T, H, D = 5, 3, 4
    for batch in ((), (2,)):
        x = np.arange(np.prod(batch, dtype=int) * T * H * D, dtype=float).reshape(*batch, T, H * D)  # (..., T, H*D)
        expected = split_heads(x, H)  # (..., H, T, D)
        got = split_into_heads(x.copy(), H)
        setup = f"for x of shape {x.shape} and H={H} (so D={D})"
        got = _as_array(got, "split_into_heads", expected.shape)
        if got.shape != expected.shape:
            hint = "the result is (..., H, T, D): the head axis goes in front of the token axis."
            if got.shape == (*batch, T, H, D):
                hint = ("that is (..., T, H, D): the reshape is right, now swap the head axis in front of the token "
                        "axis with .swapaxes(-2, -3).")
            elif got.shape == (H, *batch, T, D) and batch:
                hint = "the head axis must go just before T, after any batch axes: use negative axes (-3, -2)."
            fail(f"split_into_heads returned the wrong shape {setup}", expected.shape, got.shape, hint)
        if np.array_equal(got, expected):
            continue
        if np.array_equal(got, x.reshape(*batch, H, T, D)):
            fail(f"the heads hold the wrong numbers {setup}",
                 f"head 0 = columns 0..{D - 1} of every token: {expected[(0,) * len(batch)][0, :2].tolist()}, ...",
                 f"head 0 = {got[(0,) * len(batch)][0, :2].tolist()}, ...",
                 "a reshape to (H, T, D) without a transpose cuts the row-major data into H consecutive blocks of T*D "
                 "numbers, so head 0 gets every column of the first tokens instead of the first D columns of every "
                 "token. "
                 "Reshape to (..., T, H, D) first (each token's row cut into H pieces of width D), then swap axes "
                 "-3 and -2.")
        interleaved = np.moveaxis(x.reshape(*batch, T, D, H), -1, -3)  # column c -> head c % H
        first = (0,) * len(batch)  # the first batch element, if there is a batch
        if np.array_equal(got, interleaved):
            fail(f"the heads hold interleaved columns {setup}",
                 f"head h = the contiguous columns h*D .. (h+1)*D - 1; head 0 row 0 = {expected[first][0, 0].tolist()}",
                 f"head 0 row 0 = {got[first][0, 0].tolist()} (every H-th column)",
                 "reshape the last axis to (H, D), not (D, H): head h owns a contiguous block of D columns.")
        fail(f"split_into_heads puts the wrong numbers in the heads {setup}",
             f"result[..., 0, 0, :] = {expected[(0,) * len(batch)][0, 0].tolist()}",
             f"result[..., 0, 0, :] = {np.asarray(got)[(0,) * len(batch)][0, 0].tolist()}",
             "reshape the last axis to (H, D), then move the head axis in front of the token axis.")
