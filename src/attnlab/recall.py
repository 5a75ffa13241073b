"""Associative recall: store ``P`` key-value pairs, then answer queries by key. The task that tells a fixed-size state
from a softmax over every key (Arora et al., 2023, "Zoology").

A sequence holds ``P`` pairs ``(key_i, value_i)`` with distinct keys from ``n_keys`` ids and values from ``n_values``
ids; then every key is asked once, in another order, and the answer is its value. :func:`recall_task` draws such
sequences.

The model is one attention layer and nothing else, ``kind="softmax"`` or ``kind="linear"`` (:mod:`attnlab.linear`)::

    q = E_k[query] W_q  (Q, D)      k = E_k[key] W_k  (P, D)      v = E_v[value] W_v  (P, Dv)
    out = attention(q, k, v)  (Q, Dv)      logits = out W_o + b_o  (Q, n_values)

so that whatever it recalls passes through the attention: softmax attention looks at all ``P`` keys again for every
query, linear attention only at its ``(D, Dv)`` state. Several models (one per seed) are stacked on a leading axis
``N`` and trained at once (:func:`train_recall`), each on its own batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import positive_int
from ._parallel import limit_threads
from .linear import _elu_feature_grad, elu_feature
from .model import Adam
from .softmax import softmax

KINDS = ("softmax", "linear")
_NAMES = ("E_k", "E_v", "W_q", "W_k", "W_v", "W_o", "b_o")


def recall_task(n: int, pairs: int, n_keys: int, n_values: int, *, seed=0):
    """``n`` recall problems of ``pairs`` key-value pairs each.

    Returns
    -------
    keys : (n, pairs) int ndarray
        Distinct key ids in ``0 .. n_keys-1`` per sequence.
    values : (n, pairs) int ndarray
        Value ids in ``0 .. n_values-1``.
    queries : (n, pairs) int ndarray
        The same keys in another random order: every pair is asked once.
    targets : (n, pairs) int ndarray
        The value stored with each query's key.

    Examples
    --------
    >>> keys, values, queries, targets = recall_task(1, 3, 10, 5, seed=0)
    >>> bool(np.all(values[0][np.argsort(keys[0])][np.searchsorted(np.sort(keys[0]), queries[0])] == targets[0]))
    True
    """
    n, pairs = positive_int(n, "n"), positive_int(pairs, "pairs")
    n_keys, n_values = positive_int(n_keys, "n_keys"), positive_int(n_values, "n_values")
    if pairs > n_keys:
        raise ValueError(f"pairs must be <= n_keys (the keys of a sequence are distinct), got pairs={pairs} > "
                         f"n_keys={n_keys}")
    rng = np.random.default_rng(seed)
    keys = np.argsort(rng.random((n, n_keys)), axis=1)[:, :pairs]  # (n, pairs), distinct per row
    values = rng.integers(0, n_values, size=(n, pairs))
    order = np.argsort(rng.random((n, pairs)), axis=1)  # (n, pairs), which pair each query asks
    return keys, values, np.take_along_axis(keys, order, 1), np.take_along_axis(values, order, 1)


@dataclass
class RecallModels:
    """``N`` recall models of one shape, stacked: ``params[name]`` is ``(N, ...)``. ``kind`` is ``"softmax"`` or
    ``"linear"``; ``D`` the key width, ``Dv`` the value width, so the linear state is ``D x Dv``."""

    params: dict
    kind: str

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.params, dict) or set(self.params) != set(_NAMES):
            got = sorted(self.params) if isinstance(self.params, dict) else type(self.params).__name__
            raise ValueError(f"params must be a dict with the keys {sorted(_NAMES)} (see init_recall), got {got}")
        N = {np.shape(p)[0] if np.ndim(p) else 0 for p in self.params.values()}
        if len(N) != 1 or 0 in N:
            raise ValueError(f"every parameter must have the same leading axis N (one model per seed), got "
                             f"{ {n: np.shape(p) for n, p in self.params.items()} }")

    @property
    def N(self) -> int:
        return self.params["E_k"].shape[0]

    @property
    def state_size(self) -> tuple[int, int]:
        return self.params["W_k"].shape[-1], self.params["W_v"].shape[-1]


def init_recall(kind: str, n_keys: int, n_values: int, *, seeds=(0,), d_model: int = 32, D: int = 8,
                Dv: int | None = None) -> RecallModels:
    """One model per seed, each drawn as :func:`attnlab.init_model` draws its weights (variance ``1/fan_in``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n_keys, n_values = positive_int(n_keys, "n_keys"), positive_int(n_values, "n_values")
    d_model, D = positive_int(d_model, "d_model"), positive_int(D, "D")
    Dv = d_model if Dv is None else positive_int(Dv, "Dv")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    shapes = {"E_k": (n_keys, d_model), "E_v": (n_values, d_model), "W_q": (d_model, D), "W_k": (d_model, D),
              "W_v": (d_model, Dv), "W_o": (Dv, n_values)}
    params = {name: np.empty((len(seeds), *shape)) for name, shape in shapes.items()}
    for n, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        for name, shape in shapes.items():
            params[name][n] = rng.standard_normal(shape) * np.sqrt(1.0 if name.startswith("E") else 1 / shape[0])
    params["b_o"] = np.zeros((len(seeds), n_values))
    return RecallModels(params, kind)


def _check_ids(models, keys, values, queries, targets=None):
    arrays = [np.asarray(a) for a in (keys, values, queries, *(() if targets is None else (targets,)))]
    N = models.N
    out = []
    for name, a in zip(("keys", "values", "queries", "targets"), arrays):
        if a.dtype.kind not in "iu":
            raise ValueError(f"{name} must be an integer array of ids, got dtype {a.dtype}")
        if a.ndim == 2:
            a = np.broadcast_to(a, (N, *a.shape))  # one batch shared by every model
        if a.ndim != 3 or a.shape[0] != N:
            raise ValueError(f"{name} must have shape (B, P) or (N={N}, B, P), got {a.shape}")
        out.append(a)
    if out[0].shape != out[1].shape:
        raise ValueError(f"values must have the shape of keys {out[0].shape}, got {out[1].shape}")
    return out


def _forward(models, keys, values, queries):
    p, n = models.params, np.arange(models.N)[:, None, None]
    xq, xk, xv = p["E_k"][n, queries], p["E_k"][n, keys], p["E_v"][n, values]  # (N, B, Q|P, d_model)
    q = xq @ p["W_q"][:, None]  # (N, B, Q, D)
    k = xk @ p["W_k"][:, None]  # (N, B, P, D)
    v = xv @ p["W_v"][:, None]  # (N, B, P, Dv)
    if models.kind == "softmax":  # attnlab.attention's arithmetic, inline: these matrices are tiny, calls dominate
        weights = softmax(q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]))  # (N, B, Q, P)
        out = weights @ v  # (N, B, Q, Dv)
    else:  # attnlab.linear_attention's: φ(q) φ(k)ᵀ normalised by its row sums
        weights = elu_feature(q) @ elu_feature(k).swapaxes(-1, -2)  # (N, B, Q, P), positive
        weights = weights / weights.sum(axis=-1, keepdims=True)
        out = weights @ v
    logits = out @ p["W_o"][:, None] + p["b_o"][:, None, None]  # (N, B, Q, n_values)
    return logits, (xq, xk, xv, q, k, v, out, weights)


def recall_logits(models: RecallModels, keys, values, queries, *, return_weights: bool = False):
    """Logits ``(N, B, Q, n_values)`` of every model for every query; ids ``(B, P)`` shared or ``(N, B, P)``.

    With ``return_weights``, also the attention weights ``(N, B, Q, P)``: how much each query reads from each pair.
    """
    keys, values, queries = _check_ids(models, keys, values, queries)
    logits, saved = _forward(models, keys, values, queries)
    return (logits, saved[-1]) if return_weights else logits


def recall_loss_and_grads(models: RecallModels, keys, values, queries, targets):
    """Mean cross-entropy of each model ``(N,)`` over its batch, and the gradients ``(N, ...)`` of every parameter."""
    keys, values, queries, targets = _check_ids(models, keys, values, queries, targets)
    if targets.shape != queries.shape:
        raise ValueError(f"targets must have the shape of queries {queries.shape}, got {targets.shape}")
    p, N = models.params, models.N
    logits, (xq, xk, xv, q, k, v, out, weights) = _forward(models, keys, values, queries)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=-1))  # (N, B, Q)
    picked = np.take_along_axis(shifted, targets[..., None], -1)[..., 0]
    losses = (log_z - picked).mean(axis=(1, 2))  # (N,)
    dlogits = np.exp(shifted - log_z[..., None])  # softmax
    np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(dlogits, targets[..., None], -1) - 1, -1)
    dlogits /= targets.shape[1] * targets.shape[2]  # (N, B, Q, n_values): the mean over B·Q

    def outer(a, b):  # (N, B, X, m), (N, B, X, n) -> (N, m, n), summed over B and X
        return a.reshape(N, -1, a.shape[-1]).swapaxes(1, 2) @ b.reshape(N, -1, b.shape[-1])

    grads = {"W_o": outer(out, dlogits), "b_o": dlogits.sum(axis=(1, 2))}
    dout = dlogits @ p["W_o"][:, None].swapaxes(-1, -2)  # (N, B, Q, Dv)
    dq, dk, dv = _attention_backward(models.kind, q, k, v, out, weights, dout)  # shaped like q, k, v
    grads.update(W_q=outer(xq, dq), W_k=outer(xk, dk), W_v=outer(xv, dv))
    dxq = dq @ p["W_q"][:, None].swapaxes(-1, -2)  # (N, B, Q, d_model)
    dxk = dk @ p["W_k"][:, None].swapaxes(-1, -2)
    dxv = dv @ p["W_v"][:, None].swapaxes(-1, -2)
    n = np.broadcast_to(np.arange(N)[:, None, None], queries.shape)
    grads["E_k"] = np.zeros_like(p["E_k"])
    np.add.at(grads["E_k"], (n, queries), dxq)  # a key used as query and as key collects both gradients
    np.add.at(grads["E_k"], (np.broadcast_to(np.arange(N)[:, None, None], keys.shape), keys), dxk)
    grads["E_v"] = np.zeros_like(p["E_v"])
    np.add.at(grads["E_v"], (np.broadcast_to(np.arange(N)[:, None, None], values.shape), values), dxv)
    return losses, grads


def _attention_backward(kind, q, k, v, out, weights, dout):
    """``(dq, dk, dv)`` of one unmasked head, as :func:`attnlab.attention_backward` and
    :func:`attnlab.linear_attention_backward` compute them (the tests check both against finite differences)."""
    dv = weights.swapaxes(-1, -2) @ dout  # dV = Pᵀ dO, (N, B, P, Dv)
    dP = dout @ v.swapaxes(-1, -2)  # (N, B, Q, P)
    if kind == "softmax":
        c = 1 / np.sqrt(q.shape[-1])
        dS = weights * (dP - (weights * dP).sum(axis=-1, keepdims=True))  # dS = P ∘ (dP − rowsum(P ∘ dP))
        return c * dS @ k, c * dS.swapaxes(-1, -2) @ q, dv
    A = elu_feature(q) @ elu_feature(k).swapaxes(-1, -2)  # (N, B, Q, P), the unnormalised kernel
    dA = (dP - (dout * out).sum(axis=-1, keepdims=True)) / A.sum(axis=-1, keepdims=True)  # through A / rowsum(A)
    dq = (dA @ elu_feature(k)) * _elu_feature_grad(q)  # dφ(q) ∘ φ'(q)
    dk = (dA.swapaxes(-1, -2) @ elu_feature(q)) * _elu_feature_grad(k)
    return dq, dk, dv


def recall_accuracy(models: RecallModels, keys, values, queries, targets) -> np.ndarray:
    """The share of queries each model answers right (argmax of its logits), ``(N,)``."""
    keys, values, queries, targets = _check_ids(models, keys, values, queries, targets)
    return (_forward(models, keys, values, queries)[0].argmax(-1) == targets).mean(axis=(1, 2))


def train_recall(models: RecallModels, pairs: int, steps: int, *, batch: int = 32, lr: float = 1e-2, seed: int = 0):
    """Train every model in place with Adam on fresh batches of :func:`recall_task` with ``pairs`` pairs (each model
    its own batch); return the losses ``(N, steps)``.

    The key and value vocabularies are the sizes of ``E_k`` and ``E_v``.
    """
    steps, batch = positive_int(steps, "steps"), positive_int(batch, "batch")
    n_keys, n_values = models.params["E_k"].shape[1], models.params["E_v"].shape[1]
    opt, losses, N = Adam(lr), np.empty((models.N, steps)), models.N
    with limit_threads(1):
        for step in range(steps):
            ids = recall_task(N * batch, pairs, n_keys, n_values, seed=(seed, step))
            losses[:, step], grads = recall_loss_and_grads(models, *(a.reshape(N, batch, -1) for a in ids))
            opt.step(models.params, grads)
    return losses
