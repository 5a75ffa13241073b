"""Checks for notebook 07, attention that learns: the backward passes of the softmax, of attention and of the loss.

7.1 ``softmax_backward(weights, dweights)``: ``dscores = P ∘ (dP − rowsum(P ∘ dP))`` for every row of a batch.
7.2 ``attention_backward(q, k, v, dout, mask)``: ``(dq, dk, dv)`` of one head with the scale ``1/√D``.
7.3 ``cross_entropy_backward(logits, targets)``: the gradient of the mean cross-entropy, ``(softmax − onehot) / N``.

Each checker calls the learner's function on inputs drawn from :func:`seeded` (masked entries and a row with no
allowed key included), compares with the exact gradient, and on a mismatch recomputes the classic mistakes (the
row sum forgotten or taken over the wrong axis, the factor ``P`` dropped, the scale missing or doubled, ``Pᵀ`` written
as ``P``, the softmax skipped, the mean's ``1/N`` forgotten) to name the one the learner made.
"""

from __future__ import annotations

import warnings

import numpy as np

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


def _close(a, b) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-7, atol=1e-10)


def _first_match(got, variants):
    """The hint of the first mistaken variant that ``got`` equals, or ``None``."""
    for variant, hint in variants:
        with np.errstate(all="ignore"):
            variant = np.asarray(variant, dtype=float)
        if variant.shape == got.shape and np.allclose(got, variant, rtol=1e-7, atol=1e-10, equal_nan=True):
            return hint
    return None


# ---------------------------------------------------------------------------------------------------------------------
# 7.1 the softmax backward


def _softmax_inputs():
    rng = seeded(701)
    scores = rng.normal(size=(4, 5)) * 1.5
    mask = np.ones((4, 5), dtype=bool)
    mask[1, [0, 3]] = False  # two masked keys: their weights are exactly 0
    mask[3] = False  # a row with no allowed key: all-zero weights
    return softmax(scores, mask), rng.normal(size=(4, 5))


@exercise("7.1", forbids=("attnlab.softmax_backward", "attnlab.attention_backward"))
def check_softmax_backward(softmax_backward) -> None:
    """``softmax_backward(weights, dweights)`` must return ``P ∘ (dP − rowsum(P ∘ dP))`` row by row."""
    P, dP = _softmax_inputs()
    call = "softmax_backward(P, dP) for P, dP of shape (4, 5)"
    got = float_array(_quiet(softmax_backward, P, dP), call, P.shape,
                 "dscores has the shape of the scores: one gradient per weight")
    expected = P * (dP - (P * dP).sum(-1, keepdims=True))
    if _close(got, expected):
        one_hint = "sum over the last axis (axis=-1, keepdims=True) so that one row (S,) works as well as a batch"
        try:
            one = _quiet(softmax_backward, P[0], dP[0])
        except ValueError as error:  # numpy's AxisError is a ValueError: axis=1 of a 1-D array
            fail("softmax_backward(P[0], dP[0]) for one row of shape (5,) raised an error (a batch works)",
                 "an array of shape (5,)", f"{type(error).__name__}: {error}", one_hint)
        one = float_array(one, "softmax_backward(P[0], dP[0]) for one row (5,)", (5,), one_hint)
        if not _close(one, expected[0]):
            fail("softmax_backward is right for a batch but not for one row of shape (5,)", _fmt(expected[0]),
                 _fmt(one), "sum over axis=-1 with keepdims=True, not over axis=1")
        return
    if not np.isfinite(got).all():
        fail(f"{call} contains NaN or inf", "finite gradients (row 3 has no allowed key: all zeros)", _fmt(got),
             "the formula needs no division: P ∘ (dP − rowsum(P ∘ dP)) is 0 wherever P is 0")
    col = P * (dP - (P * dP).sum(0, keepdims=True))
    variants = (
        (P * dP, "you returned P ∘ dP and forgot the second term: raising one score lowers every other weight, "
                 "so subtract each row's rowsum(P ∘ dP) before multiplying by P"),
        (dP - (P * dP).sum(-1, keepdims=True), "the factor P is missing in front: dS = P ∘ (dP − rowsum(P ∘ dP)); "
                                              "masked keys (P = 0) must get exactly zero gradient"),
        (P * (dP - dP.sum(-1, keepdims=True)), "the row sum must be weighted by P: rowsum(P ∘ dP), the weighted "
                                              "average of dP, not the plain sum of dP"),
        (P * (dP - (P * dP).mean(-1, keepdims=True)), "use the sum over the row, not the mean: rowsum(P ∘ dP)"),
        (col, "the sum runs over the wrong axis: each row (one query's weights, the last axis) has its own "
              "rowsum(P ∘ dP); use axis=-1 with keepdims=True"),
        (-expected, "sign error: dS = P ∘ (dP − rowsum(P ∘ dP)), not P ∘ (rowsum(P ∘ dP) − dP)"),
        (P * (dP - (P * dP).sum()), "the sum must be taken per row (axis=-1, keepdims=True), not over the whole array"),
    )
    hint = _first_match(got, variants) or ("dS_j = P_j (dP_j − Σ_k P_k dP_k) in every row: J = diag(P) − P Pᵀ "
                                            "applied to dP (notebook 03's Jacobian, without building it)")
    bad = int(np.argmax(np.abs(got - expected).max(-1)))
    fail(f"{call}: row {bad} is wrong (P = {_fmt(P[bad])}, dP = {_fmt(dP[bad])})", _fmt(expected[bad]),
         _fmt(got[bad]), hint)


# ---------------------------------------------------------------------------------------------------------------------
# 7.2 the attention backward of one head


def _attention_reference(q, k, v, dout, mask):
    """Forward and backward of one head, ``(dq, dk, dv)`` and the pieces a mistake might reuse."""
    D = q.shape[-1]
    c = 1 / np.sqrt(D)
    s = q @ k.T * c  # (T, S)
    P = softmax(s, mask)
    dv = P.T @ dout  # (S, Dv)
    dP = dout @ v.T  # (T, S)
    dS = P * (dP - (P * dP).sum(-1, keepdims=True))
    return dict(P=P, dP=dP, dS=dS, c=c, dq=dS @ k * c, dk=dS.T @ q * c, dv=dv)


def _attention_inputs(mask_kind: str):
    rng = seeded(702 if mask_kind == "none" else 703)
    T, S, D, Dv = 4, 6, 3, 2  # all different, so that a transposed or swapped gradient has the wrong shape
    q, k, v, dout = rng.normal(size=(T, D)), rng.normal(size=(S, D)), rng.normal(size=(S, Dv)), rng.normal(size=(T, Dv))
    mask = None
    if mask_kind == "dead row":
        mask = np.tril(np.ones((T, S), dtype=bool), k=S - T)  # causal, queries are the last T positions
        mask[1] = False  # query 1 may attend to nothing: zero output, zero gradients
    return q, k, v, dout, mask


@exercise("7.2", forbids=("attnlab.attention_backward", "attnlab.softmax_backward",
                          "attnlab.tiled_attention_backward", "attnlab.attention_layer_backward",
                          "attnlab.loss_and_grads"))
def check_attention_backward(attention_backward) -> None:
    """``attention_backward(q, k, v, dout, mask)`` must return ``(dq, dk, dv)`` of one head, scale ``1/√D``."""
    for kind in ("none", "dead row"):
        q, k, v, dout, mask = _attention_inputs(kind)
        call = (f"attention_backward(q, k, v, dout, mask) with q {q.shape}, k {k.shape}, v {v.shape}, "
                f"mask {'None' if mask is None else 'causal with row 1 fully masked'}")
        try:
            got = _quiet(attention_backward, q, k, v, dout, mask)
        except ValueError as error:  # a matmul of mismatched shapes, T != S being deliberate
            fail(f"{call} raised ValueError", "(dq, dk, dv)", f"ValueError: {error}",
                 "T = 4 queries and S = 6 keys differ here, so every product must have matching inner sizes: "
                 "dv = Pᵀ dO is (S, T) @ (T, Dv), dP = dO vᵀ is (T, Dv) @ (Dv, S), dq = dS k is (T, S) @ (S, D), "
                 "dk = dSᵀ q is (S, T) @ (T, D)")
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            fail(f"{call} must return three arrays", "(dq, dk, dv)",
                 type(got).__name__ if not isinstance(got, (tuple, list)) else f"{len(got)} items")
        ref = _attention_reference(q, k, v, dout, mask)
        shapes = {"dq": q.shape, "dk": k.shape, "dv": v.shape}
        arrays = {}
        for name, g in zip(("dq", "dk", "dv"), got):
            if g is not None and np.shape(g) != shapes[name]:
                swapped = [n for n, shape in shapes.items() if shape == np.shape(g)]
                hint = f"that is the shape of {swapped[0]}: return (dq, dk, dv) in this order" if swapped else ""
                if name == "dv" and np.shape(g) == dout.shape:
                    hint = "dv = Pᵀ dO: the transpose of the weights, (S, T) @ (T, Dv), not P dO"
                elif name == "dk" and np.shape(g) == q.shape:
                    hint = "dk = dSᵀ q · scale: transpose dS, so that each key collects the gradient of every query"
                fail(f"{call}: {name} has the wrong shape", shapes[name], np.shape(g), hint)
            arrays[name] = float_array(g, f"{call}: {name}", shapes[name])
        for name in ("dv", "dq", "dk"):
            g, e = arrays[name], ref[name]
            if _close(g, e):
                continue
            if not np.isfinite(g).all():
                fail(f"{call}: {name} contains NaN or inf", "finite gradients (a fully masked row gives zeros)",
                     _fmt(g), "a row with no allowed key has P = 0 everywhere; compute the weights with a softmax "
                              "that returns zeros for such a row (attnlab.softmax does) instead of 0/0")
            _diagnose_attention(name, g, ref, q, k, v, dout, mask, call)


def _diagnose_attention(name, got, ref, q, k, v, dout, mask, call):
    P, dP, dS, c = ref["P"], ref["dP"], ref["dS"], ref["c"]
    D = q.shape[-1]
    if name == "dv":
        variants = ((softmax(q @ k.T, mask).T @ dout, "you computed the weights without the scale 1/√D: the "
                                                     "forward pass uses softmax(q kᵀ / √D)"),
                    ((P.T @ dout) * c, "dv = Pᵀ dO has no scale factor: the scale acts on "
                                                               "the scores, before the softmax"))
        hint = _first_match(got, variants) or "o = P v, so dv = Pᵀ dO: each value collects dO weighted by its P"
    else:
        other = "k" if name == "dq" else "q"
        base = dS @ k if name == "dq" else dS.T @ q
        skipped = dP @ k * c if name == "dq" else dP.T @ q * c
        no_p = (dP - (P * dP).sum(-1, keepdims=True))
        no_p = no_p @ k * c if name == "dq" else no_p.T @ q * c
        variants = ((base, f"the scale is missing: s = q kᵀ · c with c = 1/√D = {c:.4f}, so {name} = "
                           f"{'dS k' if name == 'dq' else 'dSᵀ q'} · c"),
                    (base * c * c, f"the scale is applied twice: {name} = {'dS k' if name == 'dq' else 'dSᵀ q'} · c, "
                                   "once"),
                    (base / c, f"you multiplied by √D = {np.sqrt(D):.4f} instead of dividing: c = 1/√D"),
                    (base / D, "the scale is 1/√D, not 1/D"),
                    (skipped, "you skipped the softmax backward: dP = dO vᵀ must become dS = P ∘ (dP − rowsum(P ∘ dP)) "
                              f"before it meets {other}"),
                    (no_p, "the factor P is missing in dS = P ∘ (dP − rowsum(P ∘ dP)): masked keys must get zero"),
                    ((P * dP) @ k * c if name == "dq" else (P * dP).T @ q * c,
                     "dS lacks the second term: subtract rowsum(P ∘ dP) from dP before multiplying by P"),
                    (-ref[name], "sign error"))
        hint = _first_match(got, variants) or (f"{name} = {'dS k' if name == 'dq' else 'dSᵀ q'} / √D with "
                                               "dS = P ∘ (dP − rowsum(P ∘ dP)) and dP = dO vᵀ")
    fail(f"{call}: {name} is wrong", _fmt(ref[name]), _fmt(got), hint)


# ---------------------------------------------------------------------------------------------------------------------
# 7.3 the cross-entropy backward


@exercise("7.3", forbids=("attnlab.cross_entropy", "attnlab.loss_and_grads"))
def check_cross_entropy_backward(cross_entropy_backward) -> None:
    """``cross_entropy_backward(logits, targets)`` must return ``(softmax(logits) − onehot(targets)) / N``."""
    rng = seeded(704)
    N, V = 5, 4
    logits = rng.normal(size=(N, V)) * 2
    logits[2] += 800.0  # large logits: exp overflows unless the row max is subtracted
    targets = rng.integers(0, V, size=N)
    call = f"cross_entropy_backward(logits, targets) for logits of shape {(N, V)}"
    got = float_array(_quiet(cross_entropy_backward, logits, targets), call, (N, V),
                 "one gradient per logit: shape (N, V)")
    p = softmax(logits)
    onehot = np.eye(V)[targets]
    expected = (p - onehot) / N
    if _close(got, expected):
        return
    if not np.isfinite(got).all():
        fail(f"{call} contains NaN or inf", "finite gradients", _fmt(got),
             "row 2 has logits near 800: e^800 overflows; subtract each row's max before exp (a stable softmax)")
    variants = ((p - onehot, "you forgot the 1/N: the loss is the mean over the N positions, so is its gradient"),
                (p / N, "the one-hot term is missing: d(-log p_y)/dz = p − onehot(y); the target's logit must go up"),
                ((onehot - p) / N, "sign error: the gradient is p − onehot (gradient descent then raises the target)"),
                ((logits - onehot) / N, "use the softmax of the logits, p = softmax(z), not the logits themselves"),
                ((p - onehot) / (N * V), "divide by N (the positions), not by N·V"))
    hint = _first_match(got, variants) or "dz = (softmax(z) − onehot(y)) / N"
    fail(f"{call} is wrong (targets = {targets.tolist()})", _fmt(expected), _fmt(got), hint)
