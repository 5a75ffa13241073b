"""Checks for notebook 03, "Why √d_k": the mean and spread of correlated q·k, the softmax Jacobian, and the scale of
every head's scores.

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


# ------------------------------------------------------------------------------------- 3.2 the softmax Jacobian

def _jacobian_inputs() -> tuple[np.ndarray, np.ndarray]:
    """Scores of one row ``(S,)`` and of a batch ``(T, S')``, sizes and values drawn from :func:`seeded` (so that no
    table of answers works); the batch has a spread-out row, a sharp one and a uniform one."""
    rng = seeded(32)
    row = np.round(rng.normal(0.0, 1.5, size=int(rng.integers(4, 8))), 2)  # (S,)
    T, S = int(rng.integers(3, 5)), int(rng.integers(3, 7))
    batch = np.round(rng.normal(0.0, 1.0, size=(T, S)), 2)  # (T, S)
    batch[1] *= 5.0  # a sharp row: one weight near 1
    batch[2] = float(np.round(rng.normal(), 2))  # a uniform row: every weight 1/S
    return row, batch


def _jacobian(p: np.ndarray) -> np.ndarray:
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]  # (..., S, S)


@exercise("3.2", forbids=())  # nothing in attnlab returns a Jacobian
def check_softmax_jacobian(softmax_jacobian) -> None:
    """``softmax_jacobian(p)`` must return ``diag(p) - p pᵀ`` for one row ``(S,)`` and for a batch ``(..., S)``."""
    scores, batch = _jacobian_inputs()
    p = softmax(scores)  # (S,)
    S = p.size
    got = _array(softmax_jacobian(p.copy()), f"softmax_jacobian(p) for p of shape {p.shape}", (S, S))
    if got.shape != (S, S):
        fail(f"softmax_jacobian(p) has the wrong shape for one row p of shape {p.shape}", (S, S), got.shape,
             hint="J has one row per weight p_i and one column per score s_j: shape (S, S)")
    expected = _jacobian(p)
    if not close(got, expected, 1e-6, 1e-9):
        _diagnose_jacobian(p, got, expected)

    P = softmax(batch)  # (T, S): T rows of weights
    T, S = P.shape
    call = f"softmax_jacobian(p) for a batch p of shape {P.shape}"
    batch_hint = ("one (S, S) Jacobian per row: np.diag and np.outer only work on 1-D arrays (np.diag of a 2-D array "
                  "extracts its diagonal, np.outer flattens); build diag(p) as p[..., :, None] * np.eye(S) and the "
                  "outer product as p[..., :, None] * p[..., None, :]")
    try:
        got = softmax_jacobian(P.copy())
    except ValueError as error:  # a broadcasting error: the function only handles one row
        fail(f"{call} raised ValueError (it works for one row)", f"an array of shape {(T, S, S)}",
             f"ValueError: {error}", hint=batch_hint)
    got = _array(got, call, (T, S, S))
    if got.shape != (T, S, S):
        fail(f"{call} has the wrong shape", (T, S, S), got.shape, hint=batch_hint)
    expected = _jacobian(P)
    for t in range(T):
        if not close(got[t], expected[t], 1e-6, 1e-9):
            fail(f"{call}: block {t} is not the Jacobian of row p[{t}] = {np.round(P[t], 4).tolist()}",
                 np.round(expected[t], 4).tolist(), np.round(got[t], 4).tolist(),
                 hint="your function is right for one row but mixes the rows of a batch; "
                      "index the last axis with p[..., :, None] and p[..., None, :], never axis 0")


def _diagnose_jacobian(p: np.ndarray, got: np.ndarray, expected: np.ndarray) -> None:
    S = p.size
    outer = np.outer(p, p)
    variants = (
        (np.diag(p), "the off-diagonal entries are missing: you returned diag(p) without the outer-product term "
                     "-p pᵀ. Raising one score takes weight away from every other key, so dp_i/ds_j = -p_i·p_j "
                     "for i != j (and each row of J sums to 0)"),
        (-expected, "sign error: you returned p pᵀ - diag(p). Raising a score raises its own weight, so the "
                    "diagonal dp_i/ds_i = p_i(1 - p_i) must be positive"),
        (np.diag(p * (1 - p)), "the diagonal p_i(1 - p_i) is right but the off-diagonal entries are 0; they are "
                               "-p_i·p_j: raising s_j lowers every other weight"),
        (-outer, "you returned -p pᵀ and forgot the diag(p) term, which is what makes the diagonal p_i(1 - p_i)"),
        (p[:, None] * (1 - p[None, :]), "p_i(1 - p_j) is the derivative only on the diagonal (i = j); "
                                        "off the diagonal it is -p_i·p_j. Together: J = diag(p) - p pᵀ"),
        (np.eye(S) - p[None, :], "the factor p_i is missing: dp_i/ds_j = p_i(δ_ij - p_j), i.e. diag(p) - p pᵀ, "
                                 "not I - 1 pᵀ"),
        (np.eye(S) - p[:, None], "the factor p_i is missing: dp_i/ds_j = p_i(δ_ij - p_j), i.e. diag(p) - p pᵀ"),
    )
    for variant, hint in variants:
        if close(got, variant, 1e-6, 1e-9):
            break
    else:
        hint = ("J[i, j] = p_i(δ_ij - p_j): diag(p) - np.outer(p, p). Each row of J must sum to 0 (adding the same "
                f"number to every score changes no weight); your rows sum to {np.round(got.sum(axis=1), 4).tolist()}")
    fail(f"softmax_jacobian(p) is not diag(p) - p pᵀ for p = {np.round(p, 4).tolist()}; row 0:",
         np.round(expected[0], 4).tolist(), np.round(got[0], 4).tolist(), hint=hint)


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
