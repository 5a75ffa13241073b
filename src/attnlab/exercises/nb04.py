"""Checks for notebook 04, multi-head and grouped-query attention, and the KV cache.

4.1  ``gqa_chunk_attention(q, k, v)``: causal grouped-query attention for the ``T`` newest tokens against ``S`` cached
     positions, ``q (H, T, D)``, ``k, v (Hkv, S, D)`` -> ``(H, T, D)``.
4.2  ``cache_memory(lengths, *, max_len, block_size, layers, H, Hkv, D, dtype)``: the bytes of KV cache that a batch
     of sequences holds in a preallocated cache and in a paged one, as a pair.
4.3  ``split_qkv(qkv, H, Hkv)``: a fused projection ``(..., T, (H + 2 Hkv) D)`` -> ``q (..., H, T, D)``,
     ``k, v (..., Hkv, T, D)``.

Each checker calls the learner's function on inputs drawn from :func:`seeded` (4.2: every size and length drawn; 4.3:
sizes and values drawn), compares with ``attnlab``'s reference and, when they differ, tries the classic mistakes one by
one so that the message can name the one that was made.
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np

from ..attention import attention
from ..cost import BYTES_PER_ELEMENT, GiB, kv_cache_bytes
from ..softmax import softmax
from . import close, exercise, fail, seeded, tolerances


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
    """The learner's ``a`` equals ``b`` within the tolerances of ``a``'s precision (float32 answers: float32 error)."""
    return close(a, b, 1e-7, 1e-10)


# ---------------------------------------------------------------------------------------------------------- 4.1


def _tile_attention(q, k, v, mask=None, scale=None):
    """What ``np.tile`` gives: query head ``h`` paired with K/V head ``h % Hkv`` instead of ``h // G``."""
    G = q.shape[-3] // k.shape[-3]
    return attention(q, np.tile(k, (G, 1, 1)), np.tile(v, (G, 1, 1)), mask, scale=scale)


def _grouped_scores(q, k, scale=None):
    """Correctly paired, scaled scores ``(H, T, S)``."""
    G = q.shape[-3] // k.shape[-3]
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    return q @ np.repeat(k, G, axis=0).swapaxes(-1, -2) * scale  # (H, T, S)


def _mask_after_softmax(q, k, v, mask):
    """Softmax over every key, then the future zeroed: rows no longer sum to 1."""
    G = q.shape[-3] // k.shape[-3]
    return (softmax(_grouped_scores(q, k)) * mask) @ np.repeat(v, G, axis=0)  # (H, T, D)


def _wrong_axis_attention(q, k, v, mask):
    """Softmax over the query axis instead of the key axis."""
    G = q.shape[-3] // k.shape[-3]
    return softmax(_grouped_scores(q, k), np.broadcast_to(mask, (q.shape[-3], *mask.shape)), axis=-2) @ np.repeat(
        v, G, axis=0)


@exercise("4.1", forbids=("attnlab.attention", "attnlab.repeat_kv", "attnlab.causal_mask", "attnlab.decode_step"))
def check_gqa_chunk_attention(gqa_chunk_attention) -> None:
    rng = seeded(41)
    # a chunk with 1 < Hkv < H and 1 < T < S, where every classic mistake shows; then a whole prompt (MHA, T = S)
    # and one decode step (MQA, T = 1)
    for H, Hkv, T, S, D in ((6, 2, 3, 7, 8), (4, 4, 4, 4, 4), (4, 1, 1, 6, 4)):
        q = rng.standard_normal((H, T, D))  # (H, T, D): the T newest positions
        k = rng.standard_normal((Hkv, S, D))  # (Hkv, S, D)
        v = rng.standard_normal((Hkv, S, D))  # (Hkv, S, D)
        G, d_model = H // Hkv, H * D
        mask = np.tril(np.ones((T, S), dtype=bool), k=S - T)  # (T, S): query i is at position S - T + i
        expected = attention(q, k, v, causal=True)  # (H, T, D)
        got = gqa_chunk_attention(q.copy(), k.copy(), v.copy())
        setup = f"for q {q.shape}, k and v {k.shape} (H={H}, Hkv={Hkv}, G={G}, T={T}, S={S}, D={D})"
        got = _as_array(got, "gqa_chunk_attention", expected.shape)
        if got.shape != expected.shape:
            hint = "the output has one row per query head and new token: (H, T, D)."
            if got.shape == (Hkv, G, T, D):
                hint = "you returned the grouped view (Hkv, G, T, D); reshape it back to (H, T, D) at the end."
            elif got.shape == (H, T, S):
                hint = "that is the shape of the weights (H, T, S); return weights @ v instead."
            elif got.shape == (Hkv, T, D):
                hint = "you returned one output per K/V head; every one of the H query heads needs its own output."
            fail(f"gqa_chunk_attention returned the wrong shape {setup}", expected.shape, got.shape, hint)
        if not np.all(np.isfinite(got)):
            fail(f"gqa_chunk_attention returned NaN or inf {setup}", "finite numbers", "NaN or inf",
                 "no row is fully masked here (every new token sees at least the keys before it); subtract the row "
                 "maximum before np.exp, and mask with -inf (or a large negative number) before the softmax.")
        if _close(got, expected):
            continue
        _diagnose_chunk(got, q, k, v, mask, setup, G, Hkv, H, T, S, D, d_model)


def _diagnose_chunk(got, q, k, v, mask, setup, G, Hkv, H, T, S, D, d_model) -> None:
    if 1 < Hkv < H and (_close(got, _tile_attention(q, k, v, mask)) or _close(got, _tile_attention(q, k, v))):
        fail(f"query heads are paired with the wrong K/V heads {setup}",
             f"query head h uses K/V head h // G: {', '.join(f'q{h}->kv{h // G}' for h in range(H))}",
             ", ".join(f"q{h}->kv{h % Hkv}" for h in range(H)),
             "this is the np.tile pattern [K0, K1, K0, K1, ...]; copy each K/V head G times in place with "
             "np.repeat(k, G, axis=0) (heads [K0, K0, K0, K1, K1, K1]), or reshape q to (Hkv, G, T, D) "
             "(not (G, Hkv, T, D)).")
    for scale, expected_text, got_text, hint in (
            (1 / np.sqrt(d_model), f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}",
             f"scores / sqrt(d_model) = scores / {np.sqrt(d_model):.3g}",
             "each head is an attention of width D = d_model / H, so divide by sqrt(D) = sqrt(q.shape[-1]), "
             "not by sqrt(H * D)."),
            (1.0, f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}", "scores without the 1 / sqrt(D) factor",
             "divide the scores by np.sqrt(D) before the softmax."),
            (1 / D, f"scores / sqrt(D) = scores / {np.sqrt(D):.3g}", f"scores / D = scores / {D}",
             "the scale is the square root of the head width, np.sqrt(D).")):
        if _close(got, attention(q, k, v, mask, scale=scale)):
            fail(f"the scores are scaled by the wrong factor {setup}", expected_text, got_text, hint)
    if T > 1 and _close(got, attention(q, k, v)):
        fail(f"gqa_chunk_attention applies no mask {setup}",
             f"new token i sees keys 0 .. S - T + i = 0 .. {S - T} + i", "every new token sees all S keys",
             "one new token may see the whole cache, but with several new tokens each must not see the new tokens "
             "after it: mask key j unless j <= S - T + i.")
    top_left = np.tril(np.ones((T, S), dtype=bool))
    if T < S and _close(got, attention(q, k, v, top_left)):
        fail(f"the causal mask is aligned at the top left {setup}",
             f"new token i is at position S - T + i and sees keys 0 .. {S - T} + i",
             "new token i sees keys 0 .. i (np.tril(np.ones((T, S))))",
             f"the T queries are the LAST T of the S positions: shift the diagonal, np.tril(..., k=S - T), "
             f"here k={S - T}.")
    if T > 1 and _close(got, _mask_after_softmax(q, k, v, mask)):
        fail(f"the mask is applied after the softmax {setup}", "each row of weights sums to 1 over the visible keys",
             "rows that sum to less than 1 (the future's share was removed, not redistributed)",
             "set the masked scores to -inf BEFORE the softmax, so that the visible keys share all the weight.")
    if _close(got, _wrong_axis_attention(q, k, v, mask)):
        fail(f"the softmax normalises the wrong axis {setup}", "each row (one query, all keys) sums to 1",
             "each column (one key, all queries) sums to 1",
             "take the softmax over the last axis (the keys, S), axis=-1.")
    expected = attention(q, k, v, mask)
    bad = [h for h in range(H) if not _close(got[h], expected[h])]
    fail(f"gqa_chunk_attention gives wrong outputs {setup}",
         f"out[0, 0, :3] = {np.round(expected[0, 0, :3], 4)}", f"out[0, 0, :3] = {np.round(got[0, 0, :3], 4)}",
         f"query heads {bad} differ from the reference. Per head: scores = q @ k.T / sqrt(D), mask key j unless "
         "j <= S - T + i, softmax over the keys, then weights @ v, with query head h using K/V head h // G.")


# ---------------------------------------------------------------------------------------------------------- 4.2

# The classic mistakes in the bytes one position takes, as factors of the right per-position bytes, given the case.
_CACHE_MISTAKES = {
    "forgot the factor 2 (the cache holds keys AND values)": lambda c: 0.5,
    "used bits per element where bytes are needed (BF16 is 16 bits but 2 bytes)": lambda c: 8.0,
    "divided by 8 once too often (the sizes are already in bytes)": lambda c: 1 / 8,
    "used the query heads H where the key/value heads Hkv belong": lambda c: c["H"] / c["Hkv"],
    "forgot to multiply by the number of layers": lambda c: 1 / c["layers"],
    "returned GiB (2**30 bytes) instead of bytes": lambda c: 1 / GiB,
    "returned GB (10**9 bytes) instead of bytes": lambda c: 1e-9,
}


def _ceil_blocks(lengths: np.ndarray, block_size: int) -> np.ndarray:
    return -(-lengths // block_size)  # ceil(length / block_size), per sequence


# The positions each policy holds for the batch, right and in the classic wrong ways (name -> positions, given the case).
_RIGHT = {
    "preallocated": lambda c: len(c["lengths"]) * c["max_len"],
    "paged": lambda c: c["block_size"] * int(_ceil_blocks(c["lengths"], c["block_size"]).sum()),
}
_RESERVED = {
    "sized every sequence by the longest one, max(lengths); a preallocated cache reserves max_len positions for "
    "every sequence, whatever its length": lambda c: len(c["lengths"]) * int(c["lengths"].max()),
    "counted the positions stored, sum(lengths); a preallocated cache reserves max_len positions for every sequence, "
    "used or not": lambda c: int(c["lengths"].sum()),
    "reserved max_len positions once for the whole batch; every sequence has its own": lambda c: c["max_len"],
}
_PAGED = {
    "counted the positions stored, sum(lengths); a paged cache holds whole blocks, so every sequence is rounded UP "
    "to a multiple of block_size": lambda c: int(c["lengths"].sum()),
    "rounded each sequence DOWN to whole blocks (lengths // block_size); its last, partly filled block is "
    "allocated too: ceil(length / block_size) blocks": lambda c: c["block_size"] * int(
        (c["lengths"] // c["block_size"]).sum()),
    "counted lengths // block_size + 1 blocks, one too many when a length is a multiple of block_size; use "
    "ceil(length / block_size), e.g. -(-length // block_size)": lambda c: c["block_size"] * int(
        (c["lengths"] // c["block_size"] + 1).sum()),
    "rounded the batch's total up to whole blocks once; blocks are never shared between sequences, so round every "
    "sequence up on its own": lambda c: c["block_size"] * int(-(-int(c["lengths"].sum()) // c["block_size"])),
}
_BLOCKS_ONLY = ("returned the number of blocks, not bytes; each block holds block_size positions of "
                "2 x layers x Hkv x D x bytes per element")


# Pairs of mistakes that no one makes together (and that would cancel or be told apart by nothing).
_CANCELLING = (
    ("used bits per element where bytes are needed (BF16 is 16 bits but 2 bytes)",
     "divided by 8 once too often (the sizes are already in bytes)"),
    ("returned GiB (2**30 bytes) instead of bytes", "returned GB (10**9 bytes) instead of bytes"),
)


def _per_position(c: dict) -> int:
    """Bytes of one cached position: keys and values of every layer and key/value head."""
    return kv_cache_bytes(1, layers=c["layers"], Hkv=c["Hkv"], D=c["D"], dtype=c["dtype"])


def _explanations(c: dict, part: str) -> dict[tuple[str, ...], float]:
    """Every value ``part`` ("preallocated" or "paged") takes under no or one policy mistake and up to two
    per-position mistakes: (names of the mistakes; () for the right answer) -> bytes."""
    table = _RESERVED if part == "preallocated" else _PAGED
    found = {}
    for policy, positions in ((None, _RIGHT[part]), *table.items()):
        for n in (0, 1, 2):
            for combo in itertools.combinations(_CACHE_MISTAKES, n):
                if any(set(pair) <= set(combo) for pair in _CANCELLING):
                    continue
                factor = np.prod([_CACHE_MISTAKES[m](c) for m in combo])
                names = (*(() if policy is None else (policy,)), *combo)
                found[names] = positions(c) * _per_position(c) * factor
    if part == "paged":
        found[(_BLOCKS_ONLY,)] = float(_ceil_blocks(c["lengths"], c["block_size"]).sum())
    return found


def _distinct(cases: list[dict]) -> bool:
    """No two explanations of a part give the same bytes (within 0.1%) in every case, so each mistake can be named."""
    for part in ("preallocated", "paged"):
        tables = [_explanations(c, part) for c in cases]
        vectors = np.array([[t[names] for t in tables] for names in tables[0]])  # (explanations, cases)
        same = np.all(np.isclose(vectors[:, None], vectors[None, :], rtol=1e-3, atol=0.0), axis=-1)  # (n, n)
        if np.count_nonzero(same) > len(vectors):  # more than each explanation with itself
            return False
    return True


def _memory_cases() -> list[dict]:
    """Three batches, every size and length drawn from :func:`seeded`, so that no table of answers works. Each batch
    has a length that is a multiple of block_size and lengths that are not, and the draws are kept only if every
    classic mistake gives a different answer."""
    rng = seeded(42)
    while True:
        cases = []
        for _ in range(3):
            block_size = int(rng.choice([8, 16, 32]))
            B = int(rng.integers(3, 7))
            lengths = rng.integers(1, 40 * block_size, size=B)
            lengths[rng.integers(B)] = block_size * int(rng.integers(1, 40))  # a length on a block boundary
            H = int(rng.choice([8, 16, 32, 64]))
            cases.append(dict(lengths=lengths.astype(np.int64), max_len=int(rng.choice([2048, 4096, 8192])),
                              block_size=block_size, layers=int(rng.integers(2, 41)), H=H,
                              Hkv=H // int(rng.choice([1, 2, 4, 8])), D=int(rng.choice([64, 128])),
                              dtype=str(rng.choice(["bf16", "fp16", "fp32", "fp8"]))))
        if all((c["lengths"] % c["block_size"]).any() for c in cases) and _distinct(cases):
            return cases


def _memory_call(c: dict) -> str:
    return ("cache_memory({lengths}, max_len={max_len}, block_size={block_size}, layers={layers}, H={H}, "
            "Hkv={Hkv}, D={D}, dtype={dtype!r})").format(**{**c, "lengths": np.array2string(c["lengths"],
                                                                                           separator=", ")})


def _as_count(g, call: str, expected: int, part: str) -> tuple[float, float]:
    """The learner's number of bytes as a float, and the relative tolerance its precision earns."""
    rtol = 1e-12
    if isinstance(g, (np.ndarray, np.generic)) and g.size == 1:
        rtol = max(rtol, tolerances(g, 1e-12, 0.0)[0])  # a count given as float32: judged within float32 error
        g = g.item()
    if g is None or isinstance(g, bool) or not isinstance(g, numbers.Real):
        fail(f"{call}: {part} must be a number of bytes", f"{expected:,}", f"{g!r} ({type(g).__name__})")
    return float(g), rtol


@exercise("4.2", forbids=("attnlab.kv_cache_bytes",))
def check_cache_memory(cache_memory) -> None:
    cases = _memory_cases()
    answers = {"preallocated": [], "paged": []}  # part -> [(bytes, rtol)], one per case
    for c in cases:
        expected = {part: _explanations(c, part)[()] for part in answers}
        call = _memory_call(c)
        got = cache_memory(c["lengths"].copy(), max_len=c["max_len"], block_size=c["block_size"],
                           layers=c["layers"], H=c["H"], Hkv=c["Hkv"], D=c["D"], dtype=c["dtype"])
        want = f"(preallocated, paged) = ({expected['preallocated']:,.0f}, {expected['paged']:,.0f}) bytes"
        if got is None:
            fail(f"{call} returned None", want, "None", "did you forget the `return` statement?")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            fail(f"{call} must return two numbers", want,
                 f"{type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""),
                 "return preallocated, paged")
        (pre, pre_rtol), (paged, paged_rtol) = (_as_count(g, call, expected[part], part)
                                                for part, g in zip(answers, got))
        if (not np.isclose(pre, expected["preallocated"], rtol=pre_rtol, atol=0)
                and np.isclose(pre, expected["paged"], rtol=pre_rtol, atol=0)
                and np.isclose(paged, expected["preallocated"], rtol=paged_rtol, atol=0)):
            fail(f"{call} returned the two sizes in the wrong order", want,
                 f"({pre:,.0f}, {paged:,.0f})", "return (preallocated, paged): the preallocated cache first.")
        answers["preallocated"].append((pre, pre_rtol))
        answers["paged"].append((paged, paged_rtol))
    wrong = [part for part, got in answers.items()
             if not all(np.isclose(g, _explanations(c, part)[()], rtol=rtol, atol=0) for c, (g, rtol) in zip(cases, got))]
    if wrong:
        found = [_diagnose_memory(part, answers[part], cases) for part in wrong]  # (case index, expected, got, hint)
        c = cases[found[0][0]]
        if len(found) == 1:
            _, expected, shown, hint = found[0]
        else:  # both wrong: show both, in the first case where the first is wrong
            i = found[0][0]
            expected = "(" + ", ".join(f"{_explanations(c, part)[()]:,.0f}" for part in wrong) + ") bytes"
            shown = "(" + ", ".join(_shown(answers[part][i][0]) for part in wrong) + ") bytes"
            hint = " ".join(f"{part}: {h}" for part, (_, _, _, h) in zip(wrong, found))
        fail(f"{_memory_call(c)}: {' and '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} wrong", expected,
             shown, hint)


def _shown(g: float) -> str:
    return f"{g:,.0f}" if g == round(g) and abs(g) >= 1 else f"{g:.6g}"


def _diagnose_memory(part: str, got: list[tuple[float, float]], cases: list[dict]) -> tuple[int, str, str, str]:
    """The first case where ``part`` is wrong, the right and the learner's bytes there, and a hint naming the smallest
    set of classic mistakes that explains ``part`` in every case (the cases were drawn so that no two sets of mistakes
    give the same answers), or giving the formula when none does."""
    tables = [_explanations(c, part) for c in cases]
    i = next(i for i, (table, (g, rtol)) in enumerate(zip(tables, got))
             if not np.isclose(g, table[()], rtol=rtol, atol=0))
    c, g, expected = cases[i], got[i][0], tables[i][()]
    for names in sorted(tables[0], key=len):
        if names and all(np.isclose(value, table[names], rtol=max(rtol, 1e-9), atol=0)
                         for table, (value, rtol) in zip(tables, got)):
            return i, f"{expected:,.0f} bytes", f"{_shown(g)} bytes", "you " + "; and you ".join(names) + "."
    how = ("max_len positions for every sequence" if part == "preallocated"
           else "ceil(length / block_size) blocks of block_size positions for every sequence")
    return i, f"{expected:,.0f} bytes", f"{_shown(g)} bytes", (
        f"your answer is {g / expected:.4g} times the right one. The {part} cache holds {how}; one position takes "
        f"2 (K and V) x layers x Hkv x D x bytes per element ({BYTES_PER_ELEMENT[c['dtype']]} for {c['dtype']}).")


# ---------------------------------------------------------------------------------------------------------- 4.3


def _heads(block: np.ndarray, n: int, D: int) -> np.ndarray:
    """``(..., T, n*D) -> (..., n, T, D)``, head h = columns h*D .. (h+1)*D - 1."""
    return block.reshape(*block.shape[:-1], n, D).swapaxes(-2, -3)


def _split_cases():
    """``(qkv, H, Hkv, D)``: GQA, MQA with a batch axis, MHA, with every size different within a case; sizes and the
    order of the values drawn from :func:`seeded`, so that no table of answers works. The values are distinct whole
    numbers, so that a misplaced column shows."""
    rng = seeded(43)
    cases = []
    for kind in ("gqa", "mqa", "mha"):
        while True:
            batch = (int(rng.integers(2, 4)),) if kind == "mqa" else ()
            T, D = int(rng.integers(2, 7)), int(rng.integers(2, 6))
            Hkv = {"gqa": int(rng.integers(2, 4)), "mqa": 1, "mha": int(rng.integers(2, 5))}[kind]
            H = {"gqa": 2 * Hkv, "mqa": int(rng.integers(3, 7)), "mha": Hkv}[kind]
            sizes = [*batch, T, D, H] + ([Hkv] if kind == "gqa" else [])
            if len(set(sizes)) == len(sizes):
                break
        width = (H + 2 * Hkv) * D
        n = int(np.prod(batch, dtype=int)) * T * width
        cases.append((rng.permutation(n).astype(float).reshape(*batch, T, width), H, Hkv, D))
    return cases


@exercise("4.3", forbids=("attnlab.split_heads", "attnlab.project_qkv"))
def check_split_qkv(split_qkv) -> None:
    for qkv, H, Hkv, D in _split_cases():
        *batch, T, width = qkv.shape
        batch = tuple(batch)
        blocks = np.split(qkv, [H * D, (H + Hkv) * D], axis=-1)  # (..., T, H*D), (..., T, Hkv*D) twice
        expected = [_heads(b, n, D) for b, n in zip(blocks, (H, Hkv, Hkv))]
        setup = f"for qkv of shape {qkv.shape}, H={H}, Hkv={Hkv} (so D={D})"
        try:
            got = split_qkv(qkv.copy(), H, Hkv)
        except ValueError as error:
            fail(f"split_qkv raised ValueError {setup}", "a tuple (q, k, v)", f"ValueError: {error}",
                 f"the three blocks are not equally wide when Hkv < H: the queries take H*D = {H * D} columns, the "
                 f"keys and the values Hkv*D = {Hkv * D} each. np.split(qkv, 3) asks for three equal parts; cut at "
                 f"the column indices [H*D, (H + Hkv)*D] instead.")
        if got is None:
            fail(f"split_qkv returned None {setup}", "a tuple (q, k, v)", "None", "did you forget the `return`?")
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            fail(f"split_qkv must return three arrays {setup}", "a tuple (q, k, v)",
                 f"{type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""),
                 "return q, k, v")
        for name, g, want, block, n in zip("qkv", got, expected, blocks, (H, Hkv, Hkv)):
            g = _as_array(g, f"split_qkv's {name}", want.shape)
            _check_split_part(name, g, want, block, n, expected, setup, batch, T, H, Hkv, D)


def _check_split_part(name, got, want, block, n, expected, setup, batch, T, H, Hkv, D) -> None:
    if got.shape != want.shape:
        hint = f"{name} has {'H' if name == 'q' else 'Hkv'} = {n} heads of width D = {D}: shape (..., {n}, T, D)."
        if got.shape == (*batch, T, n, D):
            hint = (f"that is (..., T, {n}, D): the reshape is right, now swap the head axis in front of the token "
                    "axis with .swapaxes(-2, -3).")
        elif name != "q" and n != H and got.shape[-3] == H:
            hint = (f"the keys and values have Hkv = {Hkv} heads, not H = {H}: their blocks are Hkv*D = {Hkv * D} "
                    "columns wide each.")
        elif got.shape[-1] != D:
            hint = (f"the head width is D = width / (H + 2*Hkv) = {(H + 2 * Hkv) * D} / {H + 2 * Hkv} = {D}: the "
                    "width holds H query heads and Hkv key and Hkv value heads.")
        elif batch and got.shape == (n, *batch, T, D):
            hint = "the head axis must go just before T, after any batch axes: use negative axes (-3, -2)."
        elif batch and sorted(got.shape) == sorted(want.shape):
            hint = (f"with batch axes in front, axes 0 and 1 are not (T, heads): count the axes from the end and swap "
                    f"the head axis in front of the token axis with .swapaxes(-3, -2).")
        fail(f"split_qkv's {name} has the wrong shape {setup}", want.shape, got.shape, hint)
    if np.array_equal(got, want):
        return
    first = (0,) * len(batch)
    other = {"k": expected[2], "v": expected[1]}.get(name)
    if other is not None and other.shape == got.shape and np.array_equal(got, other):
        fail(f"split_qkv's k and v are swapped {setup}", "the key block first, then the value block",
             "the value block as k", "the columns are [queries | keys | values], in that order.")
    if np.array_equal(got, block.reshape(*batch, n, T, D)):
        fail(f"split_qkv's {name} heads hold the wrong numbers {setup}",
             f"head 0 = columns 0..{D - 1} of the {name} block for every token: {want[first][0, :2].tolist()}, ...",
             f"head 0 = {got[first][0, :2].tolist()}, ...",
             "a reshape to (n, T, D) without a transpose cuts the data into consecutive blocks of T*D numbers, so "
             "head 0 gets whole rows of the first tokens. Reshape to (..., T, n, D), then swap axes -3 and -2.")
    if np.array_equal(got, np.moveaxis(block.reshape(*batch, T, D, n), -1, -3)):
        fail(f"split_qkv's {name} heads hold interleaved columns {setup}",
             f"head h = the contiguous columns h*D .. (h+1)*D - 1 of its block; row 0 of head 0 = "
             f"{want[first][0, 0].tolist()}", f"row 0 of head 0 = {got[first][0, 0].tolist()} (every n-th column)",
             "reshape the last axis to (n, D), not (D, n): each head owns a contiguous block of D columns.")
    fail(f"split_qkv puts the wrong numbers in {name} {setup}",
         f"{name}[..., 0, 0, :] = {want[first][0, 0].tolist()}", f"{name}[..., 0, 0, :] = {got[first][0, 0].tolist()}",
         "the columns are [H*D query | Hkv*D key | Hkv*D value]; cut them there, then split each block into heads "
         "as in section 1.")
