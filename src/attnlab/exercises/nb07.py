"""Checks for notebook 07, attention that learns: a tile of the FlashAttention-2 backward, the backward of a
grouped-query head, and the gradient of the loss.

7.1 ``tile_backward(q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed)`` -> ``(dq_i, dk_j, dv_j)``: one tile's share of
    the gradients, rebuilt from the log-sum-exp ``L_i`` and ``D_i = rowsum(dO_i ∘ O_i)`` of its rows (the inner loop of
    ``attnlab.tiled_attention_backward``). The check calls it once per tile, sums the shares, and compares the sums with
    ``attnlab.attention_backward``.
7.2 ``gqa_backward(q, k, v, dout, mask)`` -> ``(dq, dk, dv)``: the backward of a batch of grouped-query heads, ``H``
    query heads sharing ``Hkv`` key/value heads, so that ``dk`` and ``dv`` sum over each group.
7.3 ``cross_entropy_backward(logits, targets)``: the gradient of the mean cross-entropy, ``(softmax − onehot) / N``.

Each checker calls the learner's function on inputs drawn from :func:`seeded` (sizes included, masked entries and a
row with no allowed key among them), compares with the exact gradient within a tolerance set by the dtype of the
answer (a float32 answer passes), and on a mismatch recomputes the classic mistakes (a missing ``keepdims`` or
``[:, None]``, the mask applied after the softmax, the scale forgotten, a transposed product, a softmax over the tile
instead of ``exp(s − L)``, the tile's own row sum instead of ``D``, the group summed the ``np.tile`` way, the mean's
``1/N`` forgotten, ...) to name the one the learner made.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from ..backward import attention_backward as _reference_backward
from ..softmax import softmax
from . import exercise, fail, float_array, seeded


def _fmt(a) -> str:
    return np.array2string(np.asarray(a, dtype=float), precision=4, suppress_small=True, separator=", ",
                           max_line_width=10_000, prefix=" " * 12)


def _quiet(fn, *args):
    """Call the learner's function with copies of the inputs and without numpy's warnings (0/0 shows up as NaN)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))


def _tolerance(dtype) -> tuple[float, float]:
    """(rtol, atol relative to the answer's size) for an answer of ``dtype``: a float32 answer rounds every product."""
    eps = np.finfo(dtype).eps if np.issubdtype(dtype, np.floating) else np.finfo(float).eps
    return (1e-7, 1e-10) if eps < 1e-10 else (300 * eps, 300 * eps)


def _close(got, expected, dtype=np.float64) -> bool:
    rtol, atol = _tolerance(dtype)
    scale = max(float(np.nanmax(np.abs(expected), initial=0.0)), 1.0) if np.size(expected) else 1.0
    with np.errstate(all="ignore"):
        return got.shape == expected.shape and np.allclose(got, expected, rtol=rtol, atol=atol * scale, equal_nan=True)


def _answer_dtype(g):
    dtype = getattr(g, "dtype", None)
    return dtype if dtype is not None and np.issubdtype(dtype, np.floating) else np.dtype(np.float64)


_SHAPES = re.compile(r"\(([\d, ]*)\)")


_KEEPDIMS = ("one number per row must stay a column: keep the summed axis (sum(axis=-1, keepdims=True)) or add it back "
             "with [..., None], so that it broadcasts against the (rows, keys) array row by row, not column by column")


def _is_row_broadcast(error: Exception, row_axis_shape: tuple) -> bool:
    """Is ``error`` numpy's broadcast error between an array and one number per row that lost its last axis?"""
    text = str(error)
    shapes = [tuple(int(x) for x in s.replace(" ", "").split(",") if x) for s in _SHAPES.findall(text)]
    return "broadcast" in text and row_axis_shape in shapes


def _raised_hint(error: Exception, row_axis_shape: tuple, keepdims: str, products: str) -> str:
    """The hint for a ValueError the learner's code raised: a lost row axis, or a product of mismatched sizes."""
    if _is_row_broadcast(error, row_axis_shape):
        return keepdims
    return ("every product must have matching inner sizes (the sizes differ on purpose, so a transposed product fails "
            f"loudly): {products}")


# ---------------------------------------------------------------------------------------------------------------------
# 7.1 one tile of the FlashAttention-2 backward


def _tile_variant(q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed, mistake=None):
    """One tile's ``(dq_i, dk_j, dv_j)``, right or with one classic mistake."""
    with np.errstate(all="ignore"):
        c = 1 / np.sqrt(q_i.shape[-1])
        s = q_i @ k_j.T * (1.0 if mistake == "no scale in s" else c)  # (Br, Bc)
        if allowed is not None and mistake != "mask ignored":
            s = np.where(allowed, s, -np.inf)
        L = np.where(np.isneginf(lse_i), np.inf, lse_i)[:, None]  # a row with no allowed key: P = exp(-inf) = 0
        if mistake == "L per column":
            P = np.exp(s - L[:, 0][None, :])
        elif mistake == "tile softmax":
            P = softmax(s)
        else:
            P = np.exp(s - L)  # (Br, Bc), exactly the forward's weights
        dv = P.T @ dout_i  # (Bc, Dv)
        dP = dout_i @ v_j.T  # (Br, Bc)
        D = {"tile delta": (P * dP).sum(-1, keepdims=True), "no delta": 0.0}.get(mistake, delta_i[:, None])
        dS = P * (dP - D)
        g = 1.0 if mistake == "no scale in grads" else c
        dq, dk = dS @ k_j * g, dS.T @ q_i * g
        if mistake == "sign":
            return -dq, -dk, dv
        return dq, dk, dv


# The classic mistakes, as "you ..." (the failure message and the instructor guide both read them so) -> the variant
_TILE_MISTAKES = {
    "took a softmax over this tile's keys: P_ij = exp(s_ij − L_i) with the whole row's log-sum-exp L_i, not a softmax "
    "over this tile (the tile holds only part of the row, so its own softmax normalises over the wrong keys)":
        "tile softmax",
    "summed rowsum(P_ij ∘ dP_ij) over this tile: use the given D_i = rowsum(dO_i ∘ O_i) of the whole row (the tile sees "
    "only its own keys, and the tiles' shares add up to the gradient only with the row's D_i)": "tile delta",
    "left out D_i: dS_ij = P_ij ∘ (dP_ij − D_i), and the second term, the row's D_i, is missing": "no delta",
    "forgot the scale in the scores: s_ij = q_i k_jᵀ / √D are the scores the forward took its log-sum-exp of, so the "
    "scale is missing before exp(s − L)": "no scale in s",
    "forgot the scale in the gradients: s = c q kᵀ with c = 1/√D, so dq_i = c dS_ij k_j and dk_j = c dS_ijᵀ q_i (the "
    "scale is missing in the gradients)": "no scale in grads",
    "ignored the mask: masked pairs must get P = 0, so set their scores to −inf before exp(s − L) (allowed is False "
    "there)": "mask ignored",
    "subtracted L along the keys: L_i is one number per query row, subtract it as a column, lse_i[:, None], so that row "
    "r of the tile uses L_r (without [:, None] a square tile subtracts L_c from column c)": "L per column",
    "flipped the sign of dS: dS = P ∘ (dP − D), not P ∘ (D − dP)": "sign",
}


def _tile_case(rng, Br, Bc, D, Dv, *, dead_row):
    """A tile cut from a bigger head, with L and D of its rows computed over all keys of those rows."""
    S = Bc + int(rng.integers(3, 6))  # the row has keys outside the tile
    q, k = rng.normal(size=(Br, D)) * 1.5, rng.normal(size=(S, D))
    v, dout = rng.normal(size=(S, Dv)), rng.normal(size=(Br, Dv))
    allowed_row = rng.random((Br, S)) < 0.7  # masked pairs inside the tile and outside it
    allowed_row[:, 0] = True  # every row has an allowed key outside the tile ...
    if dead_row:
        allowed_row[Br - 1] = False  # ... but one: a row with no allowed key at all has L = -inf
    j0 = S - Bc  # the tile is the last Bc keys
    lse, delta = _lse_and_delta(q, k, v, dout, allowed_row)
    return q, k[j0:], v[j0:], dout, lse, delta, allowed_row[:, j0:]


def _lse_and_delta(q, k, v, dout, mask):
    """What the forward pass leaves for the backward: ``L = log Σ_j e^(s_ij)`` (−inf for a row with no allowed key) and
    ``D = rowsum(dO ∘ O)``, each (T,)."""
    s = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)  # (T, S)
    m = s.max(-1)
    shift = np.where(np.isneginf(m), 0.0, m)  # a row with no allowed key: nothing to subtract
    with np.errstate(divide="ignore"):
        lse = np.where(np.isneginf(m), -np.inf, m + np.log(np.exp(s - shift[:, None]).sum(-1)))
    return lse, (dout * (softmax(s, mask) @ v)).sum(-1)


def _unpack_three(got, call, shapes, names=("dq", "dk", "dv")):
    if got is None:
        fail(f"{call} returned None", f"a tuple ({', '.join(names)})", "None", "did you forget the `return`?")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        fail(f"{call} must return three arrays", f"({', '.join(names)})",
             type(got).__name__ if not isinstance(got, (tuple, list)) else f"{len(got)} items")
    arrays, dtypes = {}, {}
    for name, g in zip(names, got):
        shape = shapes[name]
        if g is not None and np.shape(g) != shape:
            swapped = [n for n, sh in shapes.items() if sh == np.shape(g)]
            hint = f"that is the shape of {swapped[0]}: return ({', '.join(names)}) in this order" if swapped else ""
            fail(f"{call}: {name} has the wrong shape", shape, np.shape(g), hint)
        dtypes[name] = _answer_dtype(g)
        arrays[name] = float_array(g, f"{call}: {name}", shape)
    return arrays, dtypes


_TILE_PRODUCTS = ("s = q_i k_jᵀ is (Br, D) @ (D, Bc), dv_j = P_ijᵀ dO_i is (Bc, Br) @ (Br, Dv), dP = dO_i v_jᵀ is "
                  "(Br, Dv) @ (Dv, Bc), dq_i = dS k_j is (Br, Bc) @ (Bc, D), dk_j = dSᵀ q_i is (Bc, Br) @ (Br, D)")
_NAN_TILE = ("a row with no allowed key has L_i = −inf, and exp(−inf − (−inf)) = exp(nan) = nan: give such a row "
             "P = 0 (e.g. subtract +inf instead of L_i where L_i is −inf, or zero its P)")


def _check_one_tile(fn, args, call):
    q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed = args
    try:
        got = _quiet(fn, *args)
    except ValueError as error:
        fail(f"{call} raised ValueError", "(dq_i, dk_j, dv_j)", f"ValueError: {error}",
             _raised_hint(error, lse_i.shape, _KEEPDIMS, _TILE_PRODUCTS))
    shapes = {"dq": q_i.shape, "dk": k_j.shape, "dv": v_j.shape}
    arrays, dtypes = _unpack_three(got, call, shapes)
    expected = dict(zip(("dq", "dk", "dv"), _tile_variant(*args)))
    for name in ("dv", "dq", "dk"):
        g, e = arrays[name], expected[name]
        if _close(g, e, dtypes[name]):
            continue
        if not np.isfinite(g).all():
            fail(f"{call}: {name} contains NaN or inf", "finite gradients (the last row has no allowed key)",
                 _fmt(g), _NAN_TILE)
        index = ("dq", "dk", "dv").index(name)
        for hint, mistake in _TILE_MISTAKES.items():
            try:
                variant = _tile_variant(*args, mistake=mistake)[index]
            except ValueError:  # L per column on a non-square tile: numpy refuses it, and so did the learner's code
                continue
            if _close(g, variant, dtypes[name]):
                fail(f"{call}: {name} is wrong", _fmt(e), _fmt(g), "you " + hint)
        fail(f"{call}: {name} is wrong", _fmt(e), _fmt(g),
             "P_ij = exp(s_ij − L_i) (0 where not allowed), dv_j = P_ijᵀ dO_i, dS_ij = P_ij ∘ (dO_i v_jᵀ − D_i), "
             "dq_i = c dS_ij k_j, dk_j = c dS_ijᵀ q_i with c = 1/√D")


@exercise("7.1", forbids=("attnlab.attention_backward", "attnlab.tiled_attention_backward", "attnlab.softmax_backward",
                          "attnlab.attention_layer_backward", "attnlab.loss_and_grads"))
def check_tile_backward(tile_backward) -> None:
    """One tile (non-square, square, masked, a dead row), then a whole head assembled from the learner's tiles."""
    rng = seeded(701)
    D, Dv = int(rng.integers(3, 6)), 2
    Br = int(rng.integers(3, 5))
    for Bc, dead in ((Br + 2, True), (Br, False)):  # the square tile catches L subtracted along the wrong axis
        args = _tile_case(rng, Br, Bc, D, Dv, dead_row=dead)
        _check_one_tile(tile_backward, args, f"tile_backward(q_i, k_j, v_j, dout_i, lse_i, delta_i, allowed) for a "
                                             f"({Br} x {Bc}) tile of queries x keys, D = {D}, Dv = {Dv}")
    # a whole head: the learner's tiles, summed, must give attention_backward's gradients
    T, S = int(rng.integers(6, 9)), int(rng.integers(9, 12))
    q, k = rng.normal(size=(T, D)), rng.normal(size=(S, D))
    v, dout = rng.normal(size=(S, Dv)), rng.normal(size=(T, Dv))
    mask = np.tril(np.ones((T, S), dtype=bool), k=S - T)  # causal, the queries are the last T positions
    mask[2] = False  # a query with no allowed key
    lse, delta = _lse_and_delta(q, k, v, dout, mask)
    Br, Bc = 3, 4
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for i0 in range(0, T, Br):
        for j0 in range(0, S, Bc):
            rows, cols = slice(i0, i0 + Br), slice(j0, j0 + Bc)
            call = f"tile_backward for the tile of queries {i0}:{min(i0 + Br, T)} and keys {j0}:{min(j0 + Bc, S)}"
            got = _quiet(tile_backward, q[rows], k[cols], v[cols], dout[rows], lse[rows], delta[rows], mask[rows, cols])
            shapes = {"dq": q[rows].shape, "dk": k[cols].shape, "dv": v[cols].shape}
            arrays, _ = _unpack_three(got, call, shapes)
            dq[rows] += arrays["dq"]
            dk[cols] += arrays["dk"]
            dv[cols] += arrays["dv"]
    ref = _reference_backward(q, k, v, dout, mask)
    for name, g, e in zip(("dq", "dk", "dv"), (dq, dk, dv), ref):
        if not _close(g, e, np.float32):
            fail(f"the sums of your tiles' {name} over a head with T = {T} queries, S = {S} keys, tiles of 3 x 4 are "
                 "not attention_backward's gradient", _fmt(e), _fmt(g),
                 f"{name} of a {'query block' if name == 'dq' else 'key block'} sums the shares of every tile in its "
                 f"{'row' if name == 'dq' else 'column'} of tiles; each share uses only the tile's own q_i, k_j, v_j")


# ---------------------------------------------------------------------------------------------------------------------
# 7.2 the backward of a batch of grouped-query heads


def _gqa_variant(q, k, v, dout, mask, mistake=None):
    """``(dq, dk, dv)`` of grouped-query attention, right or with one classic mistake, and the weights ``P``."""
    with np.errstate(all="ignore"):
        B, H, T, D = q.shape
        Hkv = k.shape[1]
        G = H // Hkv
        c = 1 / np.sqrt(D)
        if mistake == "tile":  # heads [K0, K1, K0, K1]: query head h on key head h % Hkv
            kr, vr = np.tile(k, (1, G, 1, 1)), np.tile(v, (1, G, 1, 1))
        else:  # heads [K0, K0, K1, K1]: query head h on key head h // G
            kr, vr = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)  # (B, H, S, D)
        s = q @ kr.swapaxes(-1, -2) * (1.0 if mistake == "no scale in s" else c)  # (B, H, T, S)
        if mistake == "mask after softmax":
            P = softmax(s) * (1 if mask is None else mask)  # zeroed after the softmax: rows no longer sum to 1
        else:
            P = softmax(s, mask)
        dP = dout @ vr.swapaxes(-1, -2)  # (B, H, T, S)
        dS = P * (dP - (P * dP).sum(-1, keepdims=True))
        g = 1.0 if mistake == "no scale in grads" else c
        dq, dkr, dvr = dS @ kr * g, dS.swapaxes(-1, -2) @ q * g, P.swapaxes(-1, -2) @ dout  # (B, H, ...)
        S = k.shape[2]
        if mistake in ("tile", "tile sum"):  # query heads h, h + Hkv, ... summed into key head h % Hkv
            dk, dv = dkr.reshape(B, G, Hkv, S, -1).sum(1), dvr.reshape(B, G, Hkv, S, -1).sum(1)
        elif mistake == "mean":
            dk, dv = dkr.reshape(B, Hkv, G, S, -1).mean(2), dvr.reshape(B, Hkv, G, S, -1).mean(2)
        elif mistake == "first head only":
            dk, dv = dkr[:, ::G], dvr[:, ::G]
        else:
            dk, dv = dkr.reshape(B, Hkv, G, S, -1).sum(2), dvr.reshape(B, Hkv, G, S, -1).sum(2)
        return dq, dk, dv


_GQA_MISTAKES = {  # "you ..." -> the variant
    "applied the mask after the softmax: apply the mask to the scores, before the softmax (a masked score becomes −inf, "
    "so its weight is 0 and the other weights of the row are renormalised); zeroing weights after the softmax leaves "
    "rows that no longer sum to 1, and the forward pass is not attention": "mask after softmax",
    "paired the heads the np.tile way: query head h uses key/value head h // G (np.repeat: K0, K0, K1, K1 for G = 2, not "
    "K0, K1, K0, K1), so dk and dv of key head j sum the query heads jG … jG + G − 1: reshape to (B, Hkv, G, S, D) and "
    "sum over axis 2": "tile",
    "summed dk and dv over the wrong group: query heads h, h + Hkv, … do not share a key head; query head h uses key/value "
    "head h // G, so reshape (B, H, S, D) to (B, Hkv, G, S, D) and sum over axis 2": "tile sum",
    "averaged the G query heads of a group: sum them, do not average them, since each query head's use of a key adds "
    "its own gradient": "mean",
    "kept only the first query head of each group: every query head of a group uses the key/value head, so dk and dv "
    "sum the gradients of all G of them": "first head only",
    "forgot the scale in the scores: the forward pass uses softmax(q kᵀ / √D), so the scale is missing in the scores":
        "no scale in s",
    "forgot the scale in the gradients: s = c q kᵀ with c = 1/√D, so dq = c dS k and dk = c dSᵀ q, summed over the "
    "group (the scale is missing in the gradients)": "no scale in grads",
}


def _gqa_inputs(rng, *, Hkv, G, masked):
    B, T, D, Dv = 2, int(rng.integers(3, 6)), int(rng.integers(3, 5)), 2
    S = T + int(rng.integers(2, 5))  # T != S and D != Dv: a transposed product cannot go unnoticed
    H = Hkv * G
    q, k = rng.normal(size=(B, H, T, D)) * 1.5, rng.normal(size=(B, Hkv, S, D))
    v, dout = rng.normal(size=(B, Hkv, S, Dv)), rng.normal(size=(B, H, T, Dv))
    mask = None
    if masked:
        mask = np.tril(np.ones((T, S), dtype=bool), k=S - T)  # causal, queries are the last T positions
        mask[1] = False  # query 1 may attend to nothing: zero output, zero gradients
    return q, k, v, dout, mask


_GQA_PRODUCTS = ("with K and V expanded to the H query heads, s = q kᵀ is (T, D) @ (D, S), dv = Pᵀ dO is (S, T) @ "
                 "(T, Dv), dP = dO vᵀ is (T, Dv) @ (Dv, S), dq = dS k is (T, S) @ (S, D), dk = dSᵀ q is (S, T) @ (T, D), "
                 "per head; use .swapaxes(-1, -2) for a transpose of a batch (.T reverses every axis)")


@exercise("7.2", forbids=("attnlab.attention_backward", "attnlab.softmax_backward", "attnlab.tiled_attention_backward",
                          "attnlab.attention_layer_backward", "attnlab.loss_and_grads"))
def check_gqa_backward(gqa_backward) -> None:
    """Grouped-query (G = 2), multi-query (Hkv = 1) and plain heads, with and without a mask with a dead row."""
    rng = seeded(702)
    cases = [dict(Hkv=2, G=2, masked=True), dict(Hkv=1, G=3, masked=False), dict(Hkv=2, G=1, masked=True),
             dict(Hkv=3, G=2, masked=False)]
    for case in cases:
        q, k, v, dout, mask = _gqa_inputs(rng, **case)
        B, H, T, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        call = (f"gqa_backward(q, k, v, dout, mask) with q {q.shape}, k {k.shape}, v {v.shape} (H = {H}, Hkv = {Hkv}), "
                f"mask {'None' if mask is None else 'causal with query 1 fully masked'}")
        try:
            got = _quiet(gqa_backward, q, k, v, dout, mask)
        except ValueError as error:
            fail(f"{call} raised ValueError", "(dq, dk, dv)", f"ValueError: {error}",
                 _raised_hint(error, (B, H, T), _KEEPDIMS, _GQA_PRODUCTS))
        shapes = {"dq": q.shape, "dk": k.shape, "dv": v.shape}
        if isinstance(got, (tuple, list)) and len(got) == 3:
            for name, g in zip(("dk", "dv"), got[1:]):
                if np.shape(g) == (B, H, S, shapes[name][-1]) and H != Hkv:
                    fail(f"{call}: {name} has one gradient per query head", shapes[name], np.shape(g),
                         f"{name} belongs to the Hkv = {Hkv} key/value heads: sum the G = {H // Hkv} query heads that "
                         f"share each one (reshape to (B, Hkv, G, S, ...) and sum axis 2)")
        arrays, dtypes = _unpack_three(got, call, shapes)
        expected = dict(zip(("dq", "dk", "dv"), _gqa_variant(q, k, v, dout, mask)))
        for name in ("dv", "dk", "dq"):
            g, e = arrays[name], expected[name]
            if _close(g, e, dtypes[name]):
                continue
            if not np.isfinite(g).all():
                fail(f"{call}: {name} contains NaN or inf", "finite gradients (a fully masked row gives zeros)",
                     f"{int(np.sum(~np.isfinite(g)))} of {g.size} entries",
                     "a row with no allowed key has P = 0 everywhere; compute the weights with a softmax that "
                              "returns zeros for such a row (attnlab.softmax does) instead of 0/0")
            index = ("dq", "dk", "dv").index(name)
            with np.errstate(all="ignore"):
                b, h = np.unravel_index(np.nanargmax(np.abs(g - e).reshape(*g.shape[:2], -1).max(-1)), g.shape[:2])
            what = f"{call}: {name} is wrong, e.g. {name}[{b}, {h}]"  # one head of the batch is enough to read
            for hint, mistake in _GQA_MISTAKES.items():
                if _close(g, _gqa_variant(q, k, v, dout, mask, mistake)[index], dtypes[name]):
                    fail(what, _fmt(e[b, h]), _fmt(g[b, h]), "you " + hint)
            fail(what, _fmt(e[b, h]), _fmt(g[b, h]),
                 "per query head h on key/value head h // G: dv_h = Pᵀ dO, dS = P ∘ (dO vᵀ − rowsum(P ∘ dO vᵀ)), "
                 "dq = c dS k, dk_h = c dSᵀ q; then dk and dv of a key/value head sum its G query heads")


# ---------------------------------------------------------------------------------------------------------------------
# 7.3 the cross-entropy backward


_CE_MISTAKES = {  # "you ..." -> the variant
    "forgot the 1/N: the loss is the mean over the N positions, so is its gradient": "no 1/N",
    "left out the one-hot term: d(−log p_y)/dz = p − onehot(y), and the one-hot term is missing (the target's logit must "
    "go up)": "no onehot",
    "made a sign error: the gradient is p − onehot (gradient descent then raises the target)": "sign",
    "used the logits themselves: use the softmax of the logits, p = softmax(z), not the logits": "logits",
    "divided by N·V: divide by N (the positions), not by N·V": "N*V",
}


@exercise("7.3", forbids=("attnlab.cross_entropy", "attnlab.loss_and_grads"))
def check_cross_entropy_backward(cross_entropy_backward) -> None:
    """``cross_entropy_backward(logits, targets)`` must return ``(softmax(logits) − onehot(targets)) / N``."""
    rng = seeded(704)
    N, V = int(rng.integers(5, 8)), 4
    logits = rng.normal(size=(N, V)) * 2
    logits[2] += 800.0  # large logits: exp overflows unless the row max is subtracted
    targets = rng.integers(0, V, size=N)
    call = f"cross_entropy_backward(logits, targets) for logits of shape {(N, V)}"
    try:
        got = _quiet(cross_entropy_backward, logits, targets)
    except ValueError as error:
        fail(f"{call} raised ValueError", f"an array of shape {(N, V)}", f"ValueError: {error}",
             _raised_hint(error, (N,), _KEEPDIMS, "the gradient has one entry per logit, (N, V)"))
    dtype = _answer_dtype(got)
    got = float_array(got, call, (N, V), "one gradient per logit: shape (N, V)")
    p = softmax(logits)
    onehot = np.eye(V)[targets]
    expected = (p - onehot) / N
    if _close(got, expected, dtype):
        return
    if not np.isfinite(got).all():
        fail(f"{call} contains NaN or inf", "finite gradients", _fmt(got),
             "row 2 has logits near 800: e^800 overflows; subtract each row's max before exp (a stable softmax)")
    variants = {"no 1/N": p - onehot, "no onehot": p / N, "sign": (onehot - p) / N, "logits": (logits - onehot) / N,
                "N*V": (p - onehot) / (N * V)}
    for hint, mistake in _CE_MISTAKES.items():
        if _close(got, variants[mistake], dtype):
            fail(f"{call} is wrong (targets = {targets.tolist()})", _fmt(expected), _fmt(got), "you " + hint)
    fail(f"{call} is wrong (targets = {targets.tolist()})", _fmt(expected), _fmt(got), "dz = (softmax(z) − onehot(y)) / N")
