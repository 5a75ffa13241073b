"""The reference every test compares with: masked scaled dot-product attention and its backward pass, written as plain
float64 loops.

Nothing here is vectorised: explicit Python loops over batch, head, query and key, ``math.exp``, and ``math.fsum`` for
every sum (correctly rounded, so the oracle's own error is far below float32's). It is slow on purpose and only meant
for the small sizes the tests use. It shares no code with ``attnlab``: the mask convention (True = may attend), the
causal offset (query ``i`` sits at absolute position ``S - T + i``) and the grouped-query head mapping (query head
``h`` reads key/value head ``h // G``, ``G = H // Hkv``) are written out again from their definitions.
"""

from __future__ import annotations

import math

import numpy as np


def softmax_row(scores: list[float], allowed: list[bool]) -> list[float]:
    """Softmax of one row over its allowed entries; masked entries get 0, and a row with none allowed is all zeros.

    A score of -inf is the same as a masked entry (exp(-inf) = 0), so a row of only -inf is all zeros too.
    """
    allowed = [a and s != -math.inf for s, a in zip(scores, allowed)]
    kept = [s for s, a in zip(scores, allowed) if a]
    if not kept:
        return [0.0] * len(scores)
    m = max(kept)
    e = [math.exp(s - m) if a else 0.0 for s, a in zip(scores, allowed)]
    total = math.fsum(e)
    return [x / total for x in e]


def softmax(x, mask=None) -> np.ndarray:
    """Softmax along the last axis of ``x (..., S)``, with an optional boolean mask broadcastable to ``x``."""
    x = np.asarray(x, dtype=np.float64)
    allowed = np.ones(x.shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), x.shape)
    rows = x.reshape(-1, x.shape[-1]).tolist()
    keep = allowed.reshape(-1, x.shape[-1]).tolist()
    out = [softmax_row(r, a) for r, a in zip(rows, keep)]
    return np.array(out, dtype=np.float64).reshape(x.shape)


def attention(q, k, v, mask=None, *, causal: bool = False, scale: float | None = None, return_weights: bool = False):
    """``softmax(q kᵀ · scale, masked) v`` for ``q (..., H, T, D)``, ``k (..., Hkv, S, D)``, ``v (..., Hkv, S, Dv)``.

    Two-dimensional inputs are one head. ``mask`` is boolean (True = may attend), broadcastable to ``(..., H, T, S)``.
    Rows with no allowed key give zero weights and a zero output.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if q.ndim == 2:
        res = attention(q[None], k[None], v[None], None if mask is None else np.asarray(mask)[None], causal=causal,
                        scale=scale, return_weights=return_weights)
        return (res[0][0], res[1][0]) if return_weights else res[0]
    *batch, H, T, D = q.shape
    Hkv, S, Dv = k.shape[-3], k.shape[-2], v.shape[-1]
    assert H % Hkv == 0, "the oracle expects Hkv to divide H"
    G = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    full = (*batch, H, T, S)
    allowed = np.ones(full, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), full)

    n = int(np.prod(batch, dtype=np.int64))  # flatten the batch axes so one loop visits them all
    qs = q.reshape(n, H, T, D).tolist()
    ks = k.reshape(n, Hkv, S, D).tolist()
    vs = v.reshape(n, Hkv, S, Dv).tolist()
    ms = allowed.reshape(n, H, T, S).tolist()
    out = [[[[0.0] * Dv for _ in range(T)] for _ in range(H)] for _ in range(n)]
    weights = [[[[0.0] * S for _ in range(T)] for _ in range(H)] for _ in range(n)]
    for b in range(n):
        for h in range(H):
            g = h // G  # grouped-query attention: query head h reads key/value head h // G
            for i in range(T):
                scores = []
                allow = []
                for j in range(S):
                    scores.append(math.fsum(qs[b][h][i][d] * ks[b][g][j][d] for d in range(D)) * scale)
                    allow.append(ms[b][h][i][j] and (not causal or j <= S - T + i))
                w = softmax_row(scores, allow)
                weights[b][h][i] = w
                for e in range(Dv):
                    out[b][h][i][e] = math.fsum(w[j] * vs[b][g][j][e] for j in range(S))
    out = np.array(out, dtype=np.float64).reshape(*batch, H, T, Dv)
    if return_weights:
        return out, np.array(weights, dtype=np.float64).reshape(full)
    return out


def softmax_backward_row(weights: list[float], dweights: list[float]) -> list[float]:
    """``dS_k = sum_j dP_j ∂P_j/∂S_k`` for one row, from the Jacobian ``∂P_j/∂S_k = P_j (δ_jk - P_k)`` written out."""
    n = len(weights)
    return [math.fsum(dweights[j] * weights[j] * ((1.0 if j == kk else 0.0) - weights[kk]) for j in range(n))
            for kk in range(n)]


def attention_backward(q, k, v, dout, mask=None, *, causal: bool = False, scale: float | None = None):
    """``(dq, dk, dv)`` of :func:`attention` for the loss ``sum(out * dout)``, by the chain rule, one element at a time.

    ``dv_j = sum_i P_ij dO_i``, ``dP_ij = dO_i · v_j``, ``dS_i = softmax_backward_row(P_i, dP_i)``,
    ``dq_i = scale sum_j dS_ij k_j`` and ``dk_j = scale sum_i dS_ij q_i``; under grouped-query attention the key/value
    head ``g`` collects the gradients of every query head ``h`` with ``h // G == g``.
    """
    q, k, v, dout = (np.asarray(a, dtype=np.float64) for a in (q, k, v, dout))
    if q.ndim == 2:
        mask = None if mask is None else np.asarray(mask)[None]
        res = attention_backward(q[None], k[None], v[None], dout[None], mask, causal=causal, scale=scale)
        return tuple(r[0] for r in res)
    _, P = attention(q, k, v, mask, causal=causal, scale=scale, return_weights=True)
    *batch, H, T, D = q.shape
    Hkv, S, Dv = k.shape[-3], k.shape[-2], v.shape[-1]
    G = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    n = int(np.prod(batch, dtype=np.int64))
    qs, ks, vs = q.reshape(n, H, T, D).tolist(), k.reshape(n, Hkv, S, D).tolist(), v.reshape(n, Hkv, S, Dv).tolist()
    dos, ps = dout.reshape(n, H, T, Dv).tolist(), P.reshape(n, H, T, S).tolist()
    dq = [[[[0.0] * D for _ in range(T)] for _ in range(H)] for _ in range(n)]
    dk_terms = [[[[[] for _ in range(D)] for _ in range(S)] for _ in range(Hkv)] for _ in range(n)]
    dv_terms = [[[[[] for _ in range(Dv)] for _ in range(S)] for _ in range(Hkv)] for _ in range(n)]
    for b in range(n):
        for h in range(H):
            g = h // G
            for i in range(T):
                p = ps[b][h][i]
                dp = [math.fsum(dos[b][h][i][e] * vs[b][g][j][e] for e in range(Dv)) for j in range(S)]
                ds = softmax_backward_row(p, dp)
                for d in range(D):
                    dq[b][h][i][d] = scale * math.fsum(ds[j] * ks[b][g][j][d] for j in range(S))
                for j in range(S):
                    for d in range(D):
                        dk_terms[b][g][j][d].append(scale * ds[j] * qs[b][h][i][d])
                    for e in range(Dv):
                        dv_terms[b][g][j][e].append(p[j] * dos[b][h][i][e])
    dk = [[[[math.fsum(t) for t in row] for row in head] for head in bb] for bb in dk_terms]
    dv = [[[[math.fsum(t) for t in row] for row in head] for head in bb] for bb in dv_terms]
    return (np.array(dq, dtype=np.float64).reshape(q.shape), np.array(dk, dtype=np.float64).reshape(k.shape),
            np.array(dv, dtype=np.float64).reshape(v.shape))
