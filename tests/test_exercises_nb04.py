"""The checkers of notebook 04 accept the reference solutions and name each classic mistake."""

import math

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


def chunk_mask(T, S, *, aligned="bottom"):
    return np.tril(np.ones((T, S), dtype=bool), k=S - T if aligned == "bottom" else 0)


def gqa(q, k, v, *, kv_layout="repeat", scale="D", axis=-1, mask="bottom", after_softmax=False):
    H, T, D = q.shape
    Hkv, S = k.shape[0], k.shape[1]
    G = H // Hkv
    if kv_layout == "repeat":
        k, v = np.repeat(k, G, axis=0), np.repeat(v, G, axis=0)  # (H, S, D)
    else:
        k, v = np.tile(k, (G, 1, 1)), np.tile(v, (G, 1, 1))  # (H, S, D), wrong pairing
    divisor = {"D": np.sqrt(D), "d_model": np.sqrt(H * D), "none": 1.0}[scale]
    scores = q @ k.swapaxes(-1, -2) / divisor  # (H, T, S)
    allowed = np.ones((T, S), dtype=bool) if mask is None else chunk_mask(T, S, aligned=mask)
    if not after_softmax:
        scores = np.where(allowed, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=axis, keepdims=True))
    weights = e / e.sum(axis=axis, keepdims=True)
    if after_softmax:
        weights = weights * allowed
    return weights @ v  # (H, T, D)


def gqa_by_reshape(q, k, v):
    H, T, D = q.shape
    Hkv, S = k.shape[0], k.shape[1]
    qg = q.reshape(Hkv, H // Hkv, T, D)  # (Hkv, G, T, D)
    scores = qg @ k[:, None].swapaxes(-1, -2) / np.sqrt(D)  # (Hkv, G, T, S)
    scores = np.where(chunk_mask(T, S), scores, -1e9)  # a large negative number works as well as -inf
    return (softmax_rows(scores) @ v[:, None]).reshape(H, T, D)  # (H, T, D)


@pytest.mark.parametrize("solution", [gqa, gqa_by_reshape])
def test_gqa_reference_passes(solution, capsys):
    check("4.1", solution)
    assert capsys.readouterr().out == "Exercise 4.1: passed\n"


def test_gqa_attnlab_softmax_with_a_mask_passes(capsys):
    import attnlab

    def with_library_softmax(q, k, v):
        H, T, D = q.shape
        k, v = np.repeat(k, H // k.shape[0], axis=0), np.repeat(v, H // v.shape[0], axis=0)
        return attnlab.softmax(q @ k.swapaxes(-1, -2) / np.sqrt(D), chunk_mask(T, k.shape[1])) @ v

    check("4.1", with_library_softmax)
    assert capsys.readouterr().out == "Exercise 4.1: passed\n"


def test_gqa_tile_is_diagnosed():
    msg = expect_failure("4.1", lambda q, k, v: gqa(q, k, v, kv_layout="tile"), "np.tile", "np.repeat", "h // G")
    assert "q1->kv1" in msg  # the learner's pairing table


def test_gqa_reshape_in_the_wrong_order_is_diagnosed_like_tile():
    def wrong(q, k, v):
        H, T, D = q.shape
        Hkv, S = k.shape[0], k.shape[1]
        qg = q.reshape(H // Hkv, Hkv, T, D).swapaxes(0, 1)  # (Hkv, G, T, D) but head h -> kv h % Hkv
        scores = np.where(chunk_mask(T, S), qg @ k[:, None].swapaxes(-1, -2) / np.sqrt(D), -np.inf)
        return (softmax_rows(scores) @ v[:, None]).swapaxes(0, 1).reshape(H, T, D)

    expect_failure("4.1", wrong, "wrong K/V heads", "np.tile")


def test_gqa_sqrt_d_model_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, scale="d_model"), "sqrt(d_model)", "sqrt(D)")


def test_gqa_missing_scale_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, scale="none"), "without the 1 / sqrt(D)")


def test_gqa_softmax_over_queries_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, axis=-2), "wrong axis")


def test_gqa_missing_mask_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, mask=None), "no mask", "several new tokens")


def test_gqa_top_left_mask_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, mask="top"), "top left", "LAST T", "k=4")


def test_gqa_mask_after_softmax_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v, after_softmax=True), "after the softmax", "BEFORE")


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


def test_gqa_nan_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: gqa(q, k, v) * np.nan, "NaN or inf")


def test_gqa_none_is_diagnosed():
    expect_failure("4.1", lambda q, k, v: None, "returned None", "return")


def test_gqa_other_error_names_the_wrong_heads():
    def off(q, k, v):
        out = gqa(q, k, v)
        out[1] += 0.5
        return out

    expect_failure("4.1", off, "query heads [1]")


# ------------------------------------------------------------------------------------------------- 4.2 cache memory

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8}


def cache_memory(lengths, *, max_len, block_size, layers, H, Hkv, D, dtype="bf16", per_position=None,
                 reserved=None, blocks=None, paged_in_blocks=False):
    """The right answer, or one with a classic mistake put in: ``per_position`` (bytes of one position), ``reserved``
    (positions of the preallocated cache), ``blocks`` (blocks of each sequence)."""
    lengths = np.asarray(lengths)
    position = 2 * layers * Hkv * D * BYTES[dtype] if per_position is None else per_position(
        layers=layers, H=H, Hkv=Hkv, D=D, dtype=dtype)
    n_reserved = len(lengths) * max_len if reserved is None else reserved(lengths, max_len)
    n_blocks = -(-lengths // block_size) if blocks is None else blocks(lengths, block_size)
    paged = np.sum(n_blocks) if paged_in_blocks else np.sum(n_blocks) * block_size * position
    return n_reserved * position, paged


def cache_memory_by_loop(lengths, *, max_len, block_size, layers, H, Hkv, D, dtype="bf16"):  # another right way
    per_position = 2 * layers * Hkv * D * BYTES[dtype]
    pre = paged = 0
    for n in lengths:
        pre += max_len * per_position
        paged += math.ceil(n / block_size) * block_size * per_position
    return pre, float(paged)


def with_mistake(**mistake):
    return lambda lengths, **kw: cache_memory(lengths, **kw, **mistake)


@pytest.mark.parametrize("solution", [cache_memory, cache_memory_by_loop])
def test_cache_memory_reference_passes(solution, capsys):
    check("4.2", solution)
    assert capsys.readouterr().out == "Exercise 4.2: passed\n"


PER_POSITION = {
    "no two": lambda layers, H, Hkv, D, dtype: layers * Hkv * D * BYTES[dtype],
    "bits": lambda layers, H, Hkv, D, dtype: 2 * layers * Hkv * D * BITS[dtype],
    "over 8": lambda layers, H, Hkv, D, dtype: 2 * layers * Hkv * D * BYTES[dtype] / 8,
    "H": lambda layers, H, Hkv, D, dtype: 2 * layers * H * D * BYTES[dtype],
    "no layers": lambda layers, H, Hkv, D, dtype: 2 * Hkv * D * BYTES[dtype],
    "GiB": lambda layers, H, Hkv, D, dtype: 2 * layers * Hkv * D * BYTES[dtype] / 2**30,
    "no two, bits": lambda layers, H, Hkv, D, dtype: layers * Hkv * D * BITS[dtype],
}


@pytest.mark.parametrize("secret", [None, 1, 2, 3])
@pytest.mark.parametrize(
    "mistake, phrases",
    [
        (dict(per_position=PER_POSITION["no two"]), ["factor 2", "keys AND values"]),
        (dict(per_position=PER_POSITION["bits"]), ["bits", "bytes"]),
        (dict(per_position=PER_POSITION["over 8"]), ["divided by 8"]),
        (dict(per_position=PER_POSITION["H"]), ["query heads H", "Hkv"]),
        (dict(per_position=PER_POSITION["no layers"]), ["layers"]),
        (dict(per_position=PER_POSITION["GiB"]), ["GiB"]),
        (dict(per_position=PER_POSITION["no two, bits"]), ["factor 2", "bits"]),
        (dict(reserved=lambda lengths, max_len: len(lengths) * lengths.max()), ["preallocated is wrong", "longest"]),
        (dict(reserved=lambda lengths, max_len: lengths.sum()), ["preallocated is wrong", "used or not"]),
        (dict(reserved=lambda lengths, max_len: max_len), ["preallocated is wrong", "once for the whole batch"]),
        (dict(blocks=lambda lengths, bs: lengths / bs), ["paged is wrong", "rounded UP"]),
        (dict(blocks=lambda lengths, bs: lengths // bs), ["paged is wrong", "DOWN"]),
        (dict(blocks=lambda lengths, bs: lengths // bs + 1), ["paged is wrong", "one too many"]),
        (dict(blocks=lambda lengths, bs: -(-lengths.sum() // bs)), ["paged is wrong", "never shared"]),
        (dict(paged_in_blocks=True), ["paged is wrong", "number of blocks, not bytes"]),
        (dict(blocks=lambda lengths, bs: lengths // bs, per_position=PER_POSITION["H"]),
         ["preallocated and paged are wrong", "preallocated: you used the query heads H", "paged: you rounded each "
          "sequence DOWN", "blocks; and you used the query heads H"]),
    ],
)
def test_cache_memory_mistakes_are_named(mistake, phrases, secret, monkeypatch):
    """Each classic mistake earns its own message, under the self-check's seed and under grading seeds."""
    from attnlab import exercises

    monkeypatch.setattr(exercises, "_SECRET", secret)
    expect_failure("4.2", with_mistake(**mistake), *phrases)


def test_cache_memory_swapped_pair_is_diagnosed():
    expect_failure("4.2", lambda lengths, **kw: cache_memory(lengths, **kw)[::-1], "wrong order")


def test_cache_memory_unexplained_error_gives_the_formula():
    expect_failure("4.2", lambda lengths, **kw: (cache_memory(lengths, **kw)[0], 3 * cache_memory(lengths, **kw)[1] + 1),
                   "paged is wrong", "2 (K and V) x layers x Hkv x D")


def test_cache_memory_wrong_returns_are_rejected():
    expect_failure("4.2", lambda lengths, **kw: cache_memory(lengths, **kw)[1], "must return two numbers")
    expect_failure("4.2", lambda lengths, **kw: ("1 GiB", 2), "number of bytes")
    expect_failure("4.2", lambda lengths, **kw: None, "returned None")


def test_cache_memory_draws_every_case_from_the_seed(monkeypatch):
    from attnlab import exercises
    from attnlab.exercises import nb04

    monkeypatch.setattr(exercises, "_SECRET", None)
    mine = nb04._memory_cases()
    monkeypatch.setattr(exercises, "_SECRET", 12345)
    graded = nb04._memory_cases()
    assert all(not np.array_equal(a["lengths"], b["lengths"]) for a, b in zip(mine, graded))
    for c in mine + graded:  # every case has a length on a block boundary and one off it, and max_len holds them
        assert (c["lengths"] % c["block_size"] == 0).any() and (c["lengths"] % c["block_size"] != 0).any()
        assert c["lengths"].max() <= c["max_len"]


# ------------------------------------------------------------------------------------------------- 4.3 split QKV


def heads(block, n):
    return block.reshape(*block.shape[:-1], n, block.shape[-1] // n).swapaxes(-2, -3)  # (..., n, T, D)


def split_qkv(qkv, H, Hkv, *, how=heads, order="qkv", kv_heads=None):
    D = qkv.shape[-1] // (H + 2 * Hkv)
    q, k, v = np.split(qkv, [H * D, (H + Hkv) * D], axis=-1)
    if order == "qvk":
        k, v = v, k
    n_kv = Hkv if kv_heads is None else kv_heads
    return how(q, H), how(k, n_kv), how(v, n_kv)


def split_qkv_by_slicing(qkv, H, Hkv):  # another correct way: slices and a loop over the heads
    D = qkv.shape[-1] // (H + 2 * Hkv)
    starts = {"q": 0, "k": H * D, "v": (H + Hkv) * D}
    out = []
    for name, n in (("q", H), ("k", Hkv), ("v", Hkv)):
        cols = [qkv[..., starts[name] + h * D: starts[name] + (h + 1) * D] for h in range(n)]
        out.append(np.stack(cols, axis=-3))
    return tuple(out)


@pytest.mark.parametrize("solution", [split_qkv, split_qkv_by_slicing])
def test_split_qkv_reference_passes(solution, capsys):
    check("4.3", solution)
    assert capsys.readouterr().out == "Exercise 4.3: passed\n"


def test_split_qkv_reshape_without_transpose_is_diagnosed():
    expect_failure("4.3", lambda x, H, Hkv: split_qkv(
        x, H, Hkv, how=lambda b, n: b.reshape(*b.shape[:-2], n, b.shape[-2], b.shape[-1] // n)), "without a transpose")


def test_split_qkv_forgotten_transpose_is_diagnosed():
    expect_failure("4.3", lambda x, H, Hkv: split_qkv(
        x, H, Hkv, how=lambda b, n: b.reshape(*b.shape[:-1], n, b.shape[-1] // n)), "that is (..., T, ", "swap")


def test_split_qkv_interleaved_columns_is_diagnosed():
    expect_failure("4.3", lambda x, H, Hkv: split_qkv(
        x, H, Hkv, how=lambda b, n: np.moveaxis(b.reshape(*b.shape[:-1], b.shape[-1] // n, n), -1, -3)),
        "interleaved", "(n, D), not (D, n)")


def test_split_qkv_swapped_k_and_v_is_diagnosed():
    expect_failure("4.3", lambda x, H, Hkv: split_qkv(x, H, Hkv, order="qvk"), "k and v are swapped")


def test_split_qkv_with_H_key_heads_is_diagnosed():
    def three_equal_blocks(x, H, Hkv):  # the MHA layout assumed: [q | k | v] of H*D columns each
        D = x.shape[-1] // (H + 2 * Hkv)
        return heads(x[..., :H * D], H), heads(x[..., H * D:2 * H * D], H), heads(x[..., 2 * H * D:3 * H * D], H)

    expect_failure("4.3", three_equal_blocks, "the keys and values have Hkv = ", "heads, not H = ")


def test_split_qkv_wrong_head_width_is_diagnosed():
    def thirds(x, H, Hkv):  # D from width / 3H, as if every block had H heads
        D = x.shape[-1] // (3 * H)
        q, k, v = x[..., :H * D], x[..., H * D:(H + Hkv) * D], x[..., (H + Hkv) * D:(H + 2 * Hkv) * D]
        return heads(q, H), heads(k, Hkv), heads(v, Hkv)

    expect_failure("4.3", thirds, "D = width / (H + 2*Hkv)")


def test_split_qkv_positive_axes_fail_on_a_batch():
    def positive_axes(x, H, Hkv):
        q, k, v = split_qkv(x, H, Hkv)
        return (q, k, v) if x.ndim == 2 else tuple(np.moveaxis(a, -3, 0) for a in (q, k, v))

    expect_failure("4.3", positive_axes, "batch axes")


def test_split_qkv_swapaxes_0_1_on_a_batch_names_the_axes():
    def first_axes(x, H, Hkv):  # section 1's .swapaxes(0, 1), right without batch axes only
        return split_qkv(x, H, Hkv, how=lambda b, n: b.reshape(*b.shape[:-1], n, b.shape[-1] // n).swapaxes(0, 1))

    expect_failure("4.3", first_axes, "count the axes from the end", "swapaxes(-3, -2)")


def test_split_qkv_split_in_three_equal_parts_gets_context():
    def thirds(x, H, Hkv):
        return tuple(heads(b, n) for b, n in zip(np.split(x, 3, axis=-1), (H, Hkv, Hkv)))

    expect_failure("4.3", thirds, "raised ValueError", "np.split(qkv, 3)", "[H*D, (H + Hkv)*D]")


def test_split_qkv_wrong_return_is_diagnosed():
    expect_failure("4.3", lambda x, H, Hkv: split_qkv(x, H, Hkv)[0], "three arrays")
    expect_failure("4.3", lambda x, H, Hkv: None, "return")


def test_split_qkv_other_error_is_diagnosed():
    expect_failure("4.3", lambda x, H, Hkv: tuple(a + 1 for a in split_qkv(x, H, Hkv)), "wrong numbers in q")


def test_every_exercise_of_notebook_04_forbids_the_functions_it_asks_for():
    from attnlab.exercises import forbidden

    assert {"attnlab.attention", "attnlab.repeat_kv", "attnlab.causal_mask"} <= set(forbidden("4.1"))
    assert forbidden("4.2") == ("attnlab.kv_cache_bytes",)  # the one-sequence formula it builds on
    assert "attnlab.split_heads" in forbidden("4.3")
