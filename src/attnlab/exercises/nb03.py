"""Checks for notebook 03, "Why √d_k": the mean and spread of correlated q·k, how far a head's weights and output
move with its query (the softmax Jacobian in a chain rule), and the scale of every head's scores.

Every checker calls the learner's function on inputs drawn from :func:`seeded` (sizes too, for 3.2), compares with
the reference within the tolerances of the answer's precision, and on a mismatch names the classic mistake it
recognises.
"""

from __future__ import annotations

import numpy as np

from ..softmax import softmax
from . import close, exercise, fail, seeded

# ------------------------------------------------------------------------------------------------------------- helpers


def _number(value, call: str) -> float:
    """The learner's answer as one float, or a failure that says why it is not one."""
    if value is None:
        fail(f"{call} returned None", "one number (a float)", "None", hint="did you forget the `return` line?")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        fail(f"{call} did not return a number", "one number (a float)", f"{type(value).__name__}")
    if arr.size != 1:
        fail(f"{call} should return one number", "a float", f"an array of shape {arr.shape}",
             hint="each of the two results is one number")
    number = arr.reshape(())[()] if arr.dtype == np.float32 else float(arr.reshape(()))  # float32: judged as such
    if not np.isfinite(number):
        fail(f"{call} returned a non-finite number", "a finite float", number)
    return number


def _array(value, call: str, shape: tuple[int, ...]) -> np.ndarray:
    """The learner's answer as a float array of ``shape``, or a failure naming what came back instead."""
    if value is None:
        fail(f"{call} returned None", f"an array of shape {shape}", "None", hint="did you forget the `return` line?")
    try:
        arr = np.asarray(value)
        if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:  # a float32 answer stays float32, to be judged as such
            arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        fail(f"{call} did not return a numeric array", f"an array of shape {shape}", type(value).__name__)
    return arr


# ------------------------------------------------------------------------ 3.1 the mean and spread of correlated q·k


def _stats(d_k: int, var_q: float, var_k: float, rho: float) -> tuple[float, float]:
    """Mean and std of q·k: d_k independent terms of mean ρσ_qσ_k and variance σ_q²σ_k²(1 + ρ²)."""
    sigma = np.sqrt(var_q * var_k)  # σ_q σ_k
    return d_k * rho * sigma, sigma * np.sqrt(d_k * (1 + rho**2))


def _spread_cases() -> list[tuple[int, float, float, float]]:
    """(d_k, var_q, var_k, rho): section 1's case first, then random ones with every quantity different from 1."""
    rng = seeded(31)
    cases = [(64, 1.0, 1.0, 0.0)]
    for d_k, sign in ((16, 1.0), (100, 1.0), (256, -1.0)):
        var_q, var_k = (float(round(v, 3)) for v in rng.uniform(1.5, 4.0, size=2))
        rho = float(round(sign * rng.uniform(0.25, 0.8), 3))
        cases.append((d_k, var_q, var_k, rho))
    return cases


@exercise("3.1", forbids=())  # nothing in attnlab computes this: the answer is a formula
def check_score_mean_std(score_mean_std) -> None:
    """``score_mean_std(d_k, var_q, var_k, rho)`` must return ``(d_k ρ σ_q σ_k, σ_q σ_k √(d_k (1 + ρ²)))``."""
    cases, means, stds = _spread_cases(), [], []
    for d_k, var_q, var_k, rho in cases:
        call = f"score_mean_std({d_k}, {var_q}, {var_k}, {rho})"
        got = score_mean_std(d_k, var_q, var_k, rho)
        if got is None:
            fail(f"{call} returned None", "a pair of floats (mean, std)", "None",
                 hint="did you forget the `return` line?")
        if isinstance(got, (tuple, list)) and len(got) == 2:
            mean, std = (_number(g, call) for g in got)
        else:
            arr = None if isinstance(got, (str, dict)) else np.asarray(got)
            if arr is not None and arr.dtype.kind in "iuf" and arr.shape == (2,):
                mean, std = (g if arr.dtype == np.float32 else float(g) for g in arr)
            else:
                fail(f"{call} should return two numbers", "a pair (mean, std)", f"{got!r}"[:80],
                     hint="return mean, std")
        means.append(mean)
        stds.append(std)
    for name, got, variants in (("mean", means, _mean_variants), ("standard deviation", stds, _std_variants)):
        want = [variants(*c)[0][0] for c in cases]
        wrong = [i for i, (g, w) in enumerate(zip(got, want)) if not close(g, w, 1e-6, 1e-9)]
        if not wrong:
            continue
        # the classic mistake that explains the answer in every case (the first case alone is ambiguous)
        options = [variants(*c)[1:] for c in cases]
        for v, (_, hint) in enumerate(options[0]):
            if all(close(g, opts[v][0], 1e-6, 1e-9) for g, opts in zip(got, options)):
                break
        else:
            hint = variants(*cases[0])[0][1]
        i = wrong[0]
        fail(f"score_mean_std{cases[i]}: the {name} of q·k is wrong", f"{want[i]:.6g}", f"{got[i]:.6g}", hint=hint)


def _mean_variants(d_k: int, var_q: float, var_k: float, rho: float) -> list[tuple[float, str]]:
    """The right mean (with the general hint), then the classic wrong ones with their diagnoses."""
    sigma = np.sqrt(var_q * var_k)
    want = d_k * rho * sigma
    return [
        (want, "E[q·k] = Σ_i E[q_i k_i] = d_k · ρ σ_q σ_k"),
        (0.0, "q and k are correlated, so each product has mean E[q_i k_i] = ρ σ_q σ_k, not 0"),
        (d_k * rho, "the mean of one product is ρ σ_q σ_k: the correlation times both standard deviations; "
                    "you left out σ_q σ_k"),
        (d_k * rho * var_q * var_k, "ρ multiplies the standard deviations σ_q σ_k = √(var_q · var_k), "
                                    "not the variances"),
        (rho * sigma, "that is the mean of one product q_i k_i; q·k adds d_k of them, so its mean is d_k times that"),
        (np.sqrt(d_k) * rho * sigma, "means add like the terms themselves: d_k terms of mean ρσ_qσ_k sum to "
                                     "d_k·ρσ_qσ_k (it is the standard deviation that grows like √d_k)"),
        (d_k * abs(rho) * sigma, "the sign: a negative ρ gives a negative mean (did you take |ρ| or ρ²?)"),
    ]


def _std_variants(d_k: int, var_q: float, var_k: float, rho: float) -> list[tuple[float, str]]:
    """The right standard deviation (with the general hint), then the classic wrong ones with their diagnoses."""
    s2 = var_q * var_k  # σ_q² σ_k²
    return [
        (np.sqrt(d_k * s2 * (1 + rho**2)), "Var(q_i k_i) = E[q_i²k_i²] − (E[q_i k_i])², with E[q_i²k_i²] = "
                                           "σ_q²σ_k² + 2(ρσ_qσ_k)²; the d_k independent terms' variances add"),
        (np.sqrt(d_k * s2), "that is the spread for uncorrelated q and k; correlation adds variance: "
                            "Var(q_i k_i) = σ_q²σ_k²(1 + ρ²)"),
        (np.sqrt(d_k * s2 * (1 + 2 * rho**2)), "σ_q²σ_k²(1 + 2ρ²) is E[(q_i k_i)²], not the variance: subtract the "
                                               "squared mean (ρ σ_q σ_k)²"),
        (np.sqrt(d_k * s2 * (1 - rho**2)), "the sign of the ρ² term: Var(q_i k_i) = E[q_i²k_i²] − (E[q_i k_i])² = "
                                           "σ²σ²(1 + 2ρ²) − ρ²σ²σ² = σ_q²σ_k²(1 + ρ²)"),
        (d_k * s2 * (1 + rho**2), "that is the variance; the standard deviation is its square root"),
        (np.sqrt(d_k * (1 + rho**2)) * s2, "the variance of a product involves the variances: Var(q_i k_i) = "
                                           "var_q·var_k·(1 + ρ²); its square root has σ_q σ_k, not var_q·var_k"),
        (d_k * np.sqrt(s2 * (1 + rho**2)), "standard deviations of independent terms do not add, variances do: "
                                           "the std of the sum is √d_k times the std of one term"),
        (np.sqrt(s2 * (1 + rho**2)), "that is the spread of one product; q·k sums d_k independent ones, so its "
                                     "variance is d_k times larger"),
        (np.sqrt(d_k * (1 + rho**2)), "the variances var_q and var_k are missing: Var(q_i k_i) = "
                                      "var_q·var_k·(1 + ρ²)"),
    ]


# -------------------------------------------------------------------- 3.2 how far a head's output moves with its query


def _query_jacobians(q, K, V, mistake: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(dp/dq (S, d_k), do/dq (Dv, d_k))`` for scores ``s = K q / √d_k``, right or with one classic mistake."""
    d_k, S, Dv = q.shape[-1], K.shape[0], V.shape[1]
    width = {"sqrt S": S, "sqrt Dv": Dv}.get(mistake, d_k)
    c = {"d_k": 1 / d_k, "no scale": 1.0}.get(mistake, 1 / np.sqrt(width))  # the scale of the scores
    p = softmax(c * (K @ q))  # (S,)
    J = {"diag only": np.diag(p), "diagonal p(1-p)": np.diag(p * (1 - p)), "sign": np.outer(p, p) - np.diag(p),
         "no J": np.eye(S)}.get(mistake, np.diag(p) - np.outer(p, p))  # (S, S): dp/ds
    ds_dq = K if mistake == "scale only in s" else c * K  # (S, d_k)
    dp_dq = J @ ds_dq  # (S, d_k)
    return dp_dq, V.T @ dp_dq  # (Dv, d_k): o = Vᵀ p


# The classic mistakes, as "you ..." (the failure message and the instructor guide read them so) -> the variant
_QUERY_MISTAKES = {
    "left the scale out of ∂s/∂q: s = K q / √d_k, so ∂s/∂q = K / √d_k, not K (the scale is in the scores AND in "
    "their derivative)": "scale only in s",
    "left out the scale 1/√d_k altogether: the scores are s = K q / √d_k": "no scale",
    "divided by d_k instead of √d_k: the scores are s = K q / √d_k": "d_k",
    "took the width from the number of keys S: the scale is 1/√d_k, with d_k = q.shape[-1]": "sqrt S",
    "took the width from the values' Dv: the scale is 1/√d_k, with d_k = q.shape[-1]": "sqrt Dv",
    "used diag(p) for ∂p/∂s: the weights compete, so ∂p_i/∂s_j = -p_i·p_j off the diagonal; J = diag(p) - p pᵀ":
        "diag only",
    "kept only the diagonal p_i(1 - p_i) of J: off the diagonal ∂p_i/∂s_j = -p_i·p_j (raising one score takes weight "
    "from every other key)": "diagonal p(1-p)",
    "flipped the sign of J: raising a score raises its own weight, so J = diag(p) - p pᵀ has a positive diagonal":
        "sign",
    "skipped the softmax: p = softmax(s), so ∂p/∂q = J · ∂s/∂q with J = diag(p) - p pᵀ, not ∂s/∂q alone": "no J",
}


def _query_cases() -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(what, q, K, V): sizes and values drawn from :func:`seeded`, d_k, S and Dv all different (so that a scale or a
    transpose taken from the wrong axis shows); first a spread-out row, then a query pointed at the longest key, so
    that its weights are sharply peaked there."""
    rng = seeded(32)
    d_k, S, Dv = (int(n) for n in rng.choice(np.arange(3, 10), size=3, replace=False))
    K = np.round(rng.normal(size=(S, d_k)), 3)  # (S, d_k)
    V = np.round(rng.normal(size=(S, Dv)), 3)  # (S, Dv)
    spread = np.round(rng.normal(size=d_k) * 1.5, 3)  # (d_k,)
    j = int(np.argmax(np.linalg.norm(K, axis=1)))  # the longest key: no other key projects further along it
    matched = np.round(6 * np.sqrt(d_k) * K[j] / np.linalg.norm(K[j]) + rng.normal(size=d_k) * 0.1, 3)
    top = float(softmax(K @ matched / np.sqrt(d_k)).max())
    return [("a query whose weights are spread out", spread, K, V),
            (f"a query pointed at key {j} (its weight there is {top:.3f})", matched, K, V)]


def _pair(got, call: str):
    if got is None:
        fail(f"{call} returned None", "a pair (dp_dq, do_dq)", "None", hint="did you forget the `return` line?")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} should return two arrays", "a pair (dp_dq, do_dq)", type(got).__name__,
             hint="return dp_dq, do_dq")
    return got


@exercise("3.2", forbids=("attnlab.softmax_backward", "attnlab.attention_backward", "attnlab.tiled_attention_backward",
                          "attnlab.attention_layer_backward"))
def check_query_jacobians(query_jacobians) -> None:
    """``query_jacobians(q, K, V)`` must return ``(J c K, Vᵀ J c K)`` with ``J = diag(p) - p pᵀ``, ``c = 1/√d_k``."""
    for what, q, K, V in _query_cases():
        d_k, S, Dv = q.size, K.shape[0], V.shape[1]
        call = f"query_jacobians(q, K, V) for {what}, d_k = {d_k}, S = {S}, Dv = {Dv}"
        try:
            got = query_jacobians(q.copy(), K.copy(), V.copy())
        except ValueError as error:  # a product whose inner sizes do not match
            fail(f"{call} raised ValueError", f"a pair of arrays of shapes {(S, d_k)} and {(Dv, d_k)}",
                 f"ValueError: {error}",
                 hint=f"follow the shapes: J is (S, S) = ({S}, {S}), ∂s/∂q = K / √d_k is (S, d_k) = ({S}, {d_k}), so "
                      f"∂p/∂q = J @ (K / √d_k) is ({S}, {d_k}); o = Vᵀ p, so ∂o/∂q = V.T @ ∂p/∂q is ({Dv}, {d_k})")
        dp_dq, do_dq = _pair(got, call)
        want = _query_jacobians(q, K, V)
        for name, g, w, rows in (("dp_dq", dp_dq, want[0], "weight p_j"),
                                 ("do_dq", do_dq, want[1], "output o_i, and o = Vᵀ p gives V.T @ dp_dq")):
            g = _array(g, f"{call}: {name}", w.shape)
            if g.shape != w.shape:
                fail(f"{call}: {name} has the wrong shape", w.shape, g.shape,
                     hint=f"{name} has one row per {rows}, and one column per component q_a of the query"
                          + ("; yours is its transpose" if g.shape == w.shape[::-1] else ""))
            if close(g, w, 1e-6, 1e-9):
                continue
            index = 0 if name == "dp_dq" else 1
            for hint, mistake in _QUERY_MISTAKES.items():
                if close(g, _query_jacobians(q, K, V, mistake)[index], 1e-6, 1e-9):
                    fail(f"{call}: {name} is wrong; row 0:", np.round(w[0], 5).tolist(), np.round(g[0], 5).tolist(),
                         hint="you " + hint)
            fail(f"{call}: {name} is wrong; row 0:", np.round(w[0], 5).tolist(), np.round(g[0], 5).tolist(),
                 hint="chain rule: ∂p/∂q = J · ∂s/∂q with J = diag(p) - p pᵀ and ∂s/∂q = K / √d_k; then o = Vᵀ p "
                      "gives ∂o/∂q = Vᵀ · ∂p/∂q. Check yours against central finite differences, as section 3 did")


# ---------------------------------------------------------------------- 3.3 the scaled scores of every head

# (B, T, S, d_model, H) with every size different, so that a scale taken from the wrong axis is recognisable
_SCORE_CASES = ((None, 5, 7, 12, 3), (None, 3, 6, 40, 4), (2, 4, 5, 18, 3))


def _head_raw(q: np.ndarray, k: np.ndarray, H: int, *, interleaved: bool = False) -> np.ndarray:
    """Unscaled per-head scores ``(..., H, T, S)``; ``interleaved`` gives head h the columns h, h+H, ... instead."""
    D = q.shape[-1] // H
    cols = [np.arange(h, H * D, H) if interleaved else np.arange(h * D, (h + 1) * D) for h in range(H)]
    return np.stack([q[..., c] @ k[..., c].swapaxes(-1, -2) for c in cols], axis=-3)  # (..., H, T, S)


@exercise("3.3", forbids=("attnlab.split_heads", "attnlab.project_qkv", "attnlab.attention"))
def check_head_scores(head_scores) -> None:
    """``head_scores(q, k, H)`` must return every head's ``q_h k_hᵀ / √D``, shape ``(..., H, T, S)``, D = d_model/H."""
    rng = seeded(303)
    for B, T, S, d_model, H in _SCORE_CASES:
        lead = () if B is None else (B,)
        q = rng.standard_normal((*lead, T, d_model))  # (..., T, d_model)
        k = rng.standard_normal((*lead, S, d_model))  # (..., S, d_model)
        _check_head_scores_case(head_scores, q, k, H)


def _check_head_scores_case(head_scores, q: np.ndarray, k: np.ndarray, H: int) -> None:
    T, d_model = q.shape[-2:]
    S, D = k.shape[-2], d_model // H
    call = f"head_scores(q, k, H={H}) with q of shape {q.shape} and k of shape {k.shape} (so D = {D})"
    raw = _head_raw(q, k, H)  # (..., H, T, S)
    expected = raw / np.sqrt(D)
    try:
        got = head_scores(q.copy(), k.copy(), H)
    except ValueError as error:
        if q.ndim == 2:
            raise
        fail(f"{call} raised ValueError", f"scores of shape {expected.shape}", f"ValueError: {error}",
             hint="with a batch axis, k.T reverses every axis; transpose only the last two: k.swapaxes(-1, -2), "
                  "and slice the columns with [..., a:b]")
    got = _array(got, call, expected.shape)
    if got.shape == expected.shape[:-3] + (T, S):
        full = q @ k.swapaxes(-1, -2)  # (..., T, S): one score over all d_model columns
        fail(f"{call} returned one score matrix for all heads", f"shape {expected.shape} (..., H, T, S)",
             f"shape {got.shape}",
             hint="each head scores with its own D columns only: q[..., h*D:(h+1)*D] against k[..., h*D:(h+1)*D]; "
                  + ("your matrix is the dot product over all d_model columns, which is the sum of the heads' "
                     "scores" if np.allclose(got, full * (float(np.sum(got * full) / np.sum(full * full))),
                                             rtol=1e-6, atol=1e-9) else "stack the H results on a new axis -3"))
    if got.shape != expected.shape:
        hint = "one (T, S) matrix per head, stacked just before the last two axes: (..., H, T, S)"
        if got.shape == expected.shape[:-3] + (T, H, S):
            hint = "the head axis must come before the query axis: stack on axis -3 (np.stack(..., axis=-3))"
        elif got.shape == expected.swapaxes(-1, -2).shape:
            hint = "rows are queries and columns are keys: q_h @ k_hᵀ has shape (T, S), not (S, T)"
        elif q.ndim > 2 and got.shape == (H, *expected.shape[:-3], T, S):
            hint = "the head axis goes after the batch axes, just before T: stack on axis -3, not axis 0"
        fail(f"{call} has the wrong shape", expected.shape, got.shape, hint=hint)
    if close(got, expected, 1e-6, 1e-9):
        return
    if close(got, softmax(expected), 1e-6, 1e-9):
        fail(f"{call} returned softmax weights (each row sums to 1)", "the scores before the softmax",
             "the weights after it", hint="return the scaled scores themselves; the softmax comes next")
    if T == S and close(got, expected.swapaxes(-1, -2), 1e-6, 1e-9):
        fail(f"{call} returned the scores transposed", "rows = queries, columns = keys", "rows = keys",
             hint="q_h @ k_hᵀ, not k_h @ q_hᵀ")
    for layout, r in (("contiguous", raw), ("interleaved", _head_raw(q, k, H, interleaved=True))):
        c = float(np.sum(got * r) / np.sum(r * r))
        if close(got, c * r, 1e-6, 1e-9):
            if layout == "interleaved":
                fail(f"{call}: head h holds the wrong columns", "head h = columns h*D .. (h+1)*D - 1 (a block)",
                     "head h = columns h, h+H, h+2H, ... (every H-th column)",
                     hint="each head owns a contiguous block of D columns: q[..., h*D:(h+1)*D]; a reshape to "
                          "(..., T, D, H) instead of (..., T, H, D) makes the same mistake")
            fail(f"{call}: your scores are each head's q kᵀ times {c:.4g}",
                 f"times 1/√D = 1/√{D} = {1 / np.sqrt(D):.4g}", f"times {c:.4g}",
                 hint=_scale_hint(c, T, S, D, H, q.shape[0] if q.ndim == 3 else None))
    fail(f"{call} is not q_h k_hᵀ / √D; entry [..., 0, 0, 0]:", f"{expected[..., 0, 0, 0].ravel()[0]:.4f}",
         f"{got[..., 0, 0, 0].ravel()[0]:.4f}",
         hint="score of head h = q[..., h*D:(h+1)*D] @ k[..., h*D:(h+1)*D].swapaxes(-1, -2) / √D")


def _scale_hint(c: float, T: int, S: int, D: int, H: int, B: int | None) -> str:
    axis = "you divided by √{n}, {what}; the head width is D = d_model / H = {D}"
    candidates = [
        (1.0, "no scaling at all: divide by √D so that every head's scores have unit variance"),
        (1 / np.sqrt(H * D), f"you divided by √d_model = √{H * D} instead of √D = √{D}: each head's dot product "
                             "sums only its own D products, so its spread is √D"),
        (1 / D, "you divided by D instead of √D (or scaled both q and k by 1/√D): the spread shrinks to 1/√D and "
                "the softmax goes flat as heads get wider"),
        (1 / (H * D), "you divided by d_model: the square root is missing, and it is the head width D, not d_model"),
        (np.sqrt(D), "you multiplied by √D instead of dividing by it"),
        (1 / np.sqrt(H), axis.format(n=H, what="the number of heads H", D=D)),
        (1 / np.sqrt(T), axis.format(n=T, what="the number of queries T", D=D)),
        (1 / np.sqrt(S), axis.format(n=S, what="the number of keys S", D=D)),
    ]
    if B is not None:
        candidates.append((1 / np.sqrt(B), axis.format(n=B, what="the batch size", D=D)))
    for scale, hint in candidates:
        if np.isclose(c, scale, rtol=1e-6):
            return hint
    return f"the scale must be 1/√D with D = d_model // H = {D}"
