"""A small causal attention model trained in numpy: embeddings, attention layers, cross-entropy, Adam.

``tokens (B, T) -> h = E[tokens] + P[:T] -> h = h + layer_l(h) for each layer -> logits = h W_out + b_out (B, T, V)``.
A layer is :func:`attnlab.multi_head_attention`'s ``merge_heads(attention(x W_q, x W_k, x W_v)) W_o``, with the mask
and the softmax ``scale`` passed through, so that a model can be trained with a wrong mask or without ``1/sqrt(D)``.
Every part has a hand-written backward; the task in the notebook is copying, which only attention can solve.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from ._checks import float_dtype, positive_int, scale_value
from ._parallel import limit_threads
from .attention import attention
from .backward import attention_backward
from .heads import AttentionWeights, KVCache, decode_step, merge_heads, project_qkv, split_heads
from .softmax import softmax

LAYER_PARAMS = ("W_q", "W_k", "W_v", "W_o")


@dataclass
class Model:
    """Parameters ``params`` (name -> array, trained in place) and the fixed shape of the model.

    ``embed (V, d_model)``, ``pos (max_len, d_model)``, ``layers.l.W_q (d_model, H*D)`` (and ``W_k``, ``W_v``
    ``(d_model, Hkv*D)``, ``W_o (H*D, d_model)``) for each layer ``l``, ``W_out (d_model, V)``, ``b_out (V,)``.
    ``scale`` is the softmax scale of every layer (``None``: ``1/sqrt(D)``).
    """

    params: dict
    H: int
    Hkv: int
    n_layers: int
    scale: float | None = None
    learned_positions: bool = True
    frozen: tuple = field(default=())  # parameters that get no gradient (fixed positions)

    def __post_init__(self):
        H, Hkv = positive_int(self.H, "H"), positive_int(self.Hkv, "Hkv")
        n_layers = positive_int(self.n_layers, "n_layers")
        if H % Hkv:
            raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
        if not isinstance(self.params, dict):
            raise ValueError(f"params must be a dict of arrays (see init_model), got {type(self.params).__name__}")
        needed = ["embed", "pos", *(f"layers.{l}.{n}" for l in range(n_layers) for n in LAYER_PARAMS), "W_out", "b_out"]
        missing = [n for n in needed if n not in self.params]
        if missing:
            raise ValueError(f"params must hold {needed}, missing {missing}")
        if self.scale is not None:
            scale_value(self.scale, self.params["layers.0.W_q"].shape[1] // H)
        for l in range(n_layers):
            self.layer(l)  # AttentionWeights checks the shapes of every layer

    @property
    def vocab(self) -> int:
        return self.params["embed"].shape[0]

    @property
    def max_len(self) -> int:
        return self.params["pos"].shape[0]

    @property
    def D(self) -> int:
        return self.params["layers.0.W_q"].shape[1] // self.H

    @property
    def n_params(self) -> int:
        return sum(p.size for name, p in self.params.items() if name not in self.frozen)

    def layer(self, l: int) -> AttentionWeights:
        return AttentionWeights(*(self.params[f"layers.{l}.{n}"] for n in LAYER_PARAMS), self.H, self.Hkv)

    def copy(self) -> "Model":
        return Model({n: p.copy() for n, p in self.params.items()}, self.H, self.Hkv, self.n_layers, self.scale,
                     self.learned_positions, self.frozen)


def sinusoidal_positions(max_len: int, d_model: int) -> np.ndarray:
    """The fixed positions of Vaswani et al. (2017): ``sin, cos`` of ``pos / 10000^(2i/d)``, ``(max_len, d_model)``."""
    max_len, d_model = positive_int(max_len, "max_len"), positive_int(d_model, "d_model")
    pos = np.arange(max_len)[:, None] / 10_000 ** (np.arange(0, d_model, 2)[None, :] / d_model)  # (T, d/2)
    out = np.zeros((max_len, d_model))
    out[:, 0::2], out[:, 1::2] = np.sin(pos), np.cos(pos[:, : d_model // 2])
    return out


def init_model(vocab: int, max_len: int, *, d_model: int = 32, H: int = 2, Hkv: int | None = None,
               D: int | None = None, n_layers: int = 1, scale=None, learned_positions: bool = True, seed: int = 0,
               dtype=np.float64) -> Model:
    """A model with unit-variance inputs: embeddings and positions of variance 1/2 each, weights of variance 1/fan_in.

    ``D`` (the head width) defaults to ``d_model // H``; it may be set independently, e.g. wide heads on a narrow model.

    Examples
    --------
    >>> m = init_model(10, 16, d_model=8, H=2, Hkv=1)
    >>> m.params["layers.0.W_k"].shape, m.D
    ((8, 4), 4)
    """
    vocab, max_len, d_model, H = (positive_int(x, n) for x, n in ((vocab, "vocab"), (max_len, "max_len"),
                                                                   (d_model, "d_model"), (H, "H")))
    Hkv = H if Hkv is None else positive_int(Hkv, "Hkv")
    n_layers = positive_int(n_layers, "n_layers")
    if H % Hkv:
        raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
    if D is None:
        if d_model % H:
            raise ValueError(f"d_model={d_model} is not a multiple of H={H} (or give the head width D)")
        D = d_model // H
    D = positive_int(D, "D")
    if scale is not None:
        scale_value(scale, D)
    dtype = float_dtype(dtype)
    rng = np.random.default_rng(seed)

    def normal(*shape, var):
        return (rng.standard_normal(shape) * np.sqrt(var)).astype(dtype)

    params = {"embed": normal(vocab, d_model, var=0.5)}
    params["pos"] = (normal(max_len, d_model, var=0.5) if learned_positions
                     else (sinusoidal_positions(max_len, d_model) * np.sqrt(0.5)).astype(dtype))  # variance 1/2 too
    for l in range(n_layers):
        for name, shape in (("W_q", (d_model, H * D)), ("W_k", (d_model, Hkv * D)), ("W_v", (d_model, Hkv * D)),
                            ("W_o", (H * D, d_model))):
            params[f"layers.{l}.{name}"] = normal(*shape, var=1 / shape[0])
    params["W_out"] = normal(d_model, vocab, var=1 / d_model)
    params["b_out"] = np.zeros(vocab, dtype=dtype)
    return Model(params, H, Hkv, n_layers, scale, learned_positions, () if learned_positions else ("pos",))


def _check_model(model) -> Model:
    if not isinstance(model, Model):
        raise ValueError(f"model must be a Model (see init_model), got {type(model).__name__}")
    return model


def _check_tokens(tokens, model: Model, name: str = "tokens") -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array of token ids, got dtype {tokens.dtype}")
    if tokens.ndim != 2 or tokens.shape[1] == 0 or tokens.shape[0] == 0:
        raise ValueError(f"{name} must have shape (B, T) with B, T >= 1, got shape {tokens.shape}")
    if tokens.shape[1] > model.max_len:
        raise ValueError(f"{name} has T={tokens.shape[1]} positions but the model has max_len={model.max_len}")
    if tokens.min() < 0 or tokens.max() >= model.vocab:
        raise ValueError(f"{name} must be ids in [0, {model.vocab}), got values in [{tokens.min()}, {tokens.max()}]")
    return tokens


def attention_layer(x, weights: AttentionWeights, mask=None, *, causal: bool = True, scale=None,
                    return_weights: bool = False):
    """One layer, ``x (..., T, d_model) -> (..., T, d_model)``: project, attend (mask, ``scale``), merge, ``W_o``."""
    y, attn, _ = _layer_forward(x, weights, mask, causal, scale)
    return (y, attn) if return_weights else y


def _layer_forward(x, weights, mask, causal, scale):
    q, k, v = project_qkv(x, weights)  # (..., H, T, D), (..., Hkv, T, D)
    out, attn = attention(q, k, v, mask, causal=causal, scale=scale, return_weights=True)
    merged = merge_heads(out)  # (..., T, H*D)
    return merged @ weights.W_o, attn, (x, q, k, v, attn, merged)  # y (..., T, d_model), and what the backward needs


def attention_layer_backward(x, weights: AttentionWeights, dy, mask=None, *, causal: bool = True, scale=None):
    """Gradients of :func:`attention_layer`: ``dy (..., T, d_model)`` -> ``dx`` and ``{"W_q": ..., "W_o": ...}``.

    Notes
    -----
    ``y = O W_o`` gives ``dW_o = Oᵀ dy`` and ``dO = dy W_oᵀ``; :func:`attnlab.attention_backward` turns ``dO`` into
    ``dq, dk, dv``; ``q = x W_q`` gives ``dW_q = xᵀ dq`` and ``dx = dq W_qᵀ + dk W_kᵀ + dv W_vᵀ``. The batch axes are
    summed into the weight gradients.
    """
    _, _, saved = _layer_forward(x, weights, mask, causal, scale)  # the forward again: nothing was kept
    if np.shape(dy) != np.shape(x):
        raise ValueError(f"dy must have the shape of x {np.shape(x)}, got {np.shape(dy)}")
    return _layer_backward(saved, weights, dy, mask, causal, scale)


def _layer_backward(saved, weights, dy, mask, causal, scale):
    x, q, k, v, attn, merged = saved
    dO = split_heads(dy @ weights.W_o.T, weights.H)  # (..., H, T, D)
    dq, dk, dv = attention_backward(q, k, v, dO, mask, causal=causal, scale=scale, weights=attn)  # P kept: not redone
    dq, dk, dv = merge_heads(dq), merge_heads(dk), merge_heads(dv)  # (..., T, H*D), (..., T, Hkv*D)

    def outer(a, b):  # sum over every batch axis and T: (..., T, m), (..., T, n) -> (m, n)
        return a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])

    grads = {"W_q": outer(x, dq), "W_k": outer(x, dk), "W_v": outer(x, dv), "W_o": outer(merged, dy)}
    dx = dq @ weights.W_q.T + dk @ weights.W_k.T + dv @ weights.W_v.T  # (..., T, d_model)
    return dx, grads


def cross_entropy(logits, targets):
    """Mean cross-entropy of ``logits (..., V)`` against integer ``targets (...)``, and its gradient ``dlogits``.

    ``dlogits = (softmax(logits) - onehot(targets)) / N``: the gradient of ``-log p_target`` never passes through the
    softmax Jacobian (notebook 03), because the log undoes the exp.
    """
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if logits.dtype.kind != "f" or logits.ndim < 1:
        raise ValueError(f"logits must be a floating-point array (..., V), got dtype {logits.dtype}, "
                         f"shape {logits.shape}")
    if targets.dtype.kind not in "iu" or targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must be integers of shape {logits.shape[:-1]}, got {targets.dtype} {targets.shape}")
    if targets.size and (targets.min() < 0 or targets.max() >= logits.shape[-1]):
        raise ValueError(f"targets must be in [0, {logits.shape[-1]}), got [{targets.min()}, {targets.max()}]")
    m = logits.max(axis=-1, keepdims=True)
    shifted = logits - m
    log_z = np.log(np.exp(shifted).sum(axis=-1))  # log sum_j e^(x_j - m): the stable log-sum-exp
    N = max(targets.size, 1)
    loss = (log_z - np.take_along_axis(shifted, targets[..., None], axis=-1)[..., 0]).sum() / N  # -log p_target
    dlogits = softmax(logits)
    np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(dlogits, targets[..., None], -1) - 1, axis=-1)
    return float(loss), dlogits / N


def model_forward(model: Model, tokens, mask=None, *, causal: bool = True, return_weights: bool = False):
    """Logits ``(B, T, V)`` of next-token predictions; with ``return_weights`` also each layer's ``(B, H, T, T)``.

    ``mask`` (True = may attend, broadcastable to ``(B, H, T, T)``) and ``causal`` go to every layer unchanged.
    """
    logits, _, attn = _forward(_check_model(model), _check_tokens(tokens, model), mask, causal)
    return (logits, attn) if return_weights else logits


def _forward(model, tokens, mask, causal):
    T = tokens.shape[1]
    h = model.params["embed"][tokens] + model.params["pos"][:T]  # (B, T, d_model)
    saved, attn = [], []
    for l in range(model.n_layers):
        y, w, s = _layer_forward(h, model.layer(l), mask, causal, model.scale)
        h = h + y  # the residual stream
        saved.append(s)
        attn.append(w)
    logits = h @ model.params["W_out"] + model.params["b_out"]  # (B, T, V)
    return logits, (h, saved), attn


def loss_and_grads(model: Model, tokens, targets, mask=None, *, causal: bool = True):
    """Mean cross-entropy of next-token predictions and the gradient of every trained parameter (a dict like
    ``model.params``)."""
    tokens = _check_tokens(tokens, _check_model(model))
    targets = _check_tokens(targets, model, "targets")
    if targets.shape != tokens.shape:
        raise ValueError(f"targets must have the shape of tokens {tokens.shape}, got {targets.shape}")
    logits, (h, saved), _ = _forward(model, tokens, mask, causal)
    loss, dlogits = cross_entropy(logits, targets)
    p = model.params
    grads = {"W_out": h.reshape(-1, h.shape[-1]).T @ dlogits.reshape(-1, dlogits.shape[-1]),
             "b_out": dlogits.sum(axis=(0, 1))}
    dh = dlogits @ p["W_out"].T  # (B, T, d_model)
    for l in reversed(range(model.n_layers)):
        dx, g = _layer_backward(saved[l], model.layer(l), dh, mask, causal, model.scale)
        grads.update({f"layers.{l}.{n}": g[n] for n in LAYER_PARAMS})
        dh = dh + dx  # h_{l+1} = h_l + layer(h_l)
    grads["embed"] = np.zeros_like(p["embed"])
    np.add.at(grads["embed"], tokens, dh)  # a token used twice collects both gradients
    if "pos" not in model.frozen:
        grads["pos"] = np.zeros_like(p["pos"])
        grads["pos"][: tokens.shape[1]] = dh.sum(axis=0)
    return loss, grads


def _real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


class Adam:
    """Adam (Kingma & Ba, 2015): ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g²``, ``x -= lr m̂ / (sqrt(v̂) + eps)``
    with the bias corrections ``m̂ = m / (1 - b1^t)``, ``v̂ = v / (1 - b2^t)``."""

    def __init__(self, lr: float = 1e-2, betas: tuple = (0.9, 0.999), eps: float = 1e-8):
        for name, x in (("lr", lr), ("eps", eps)):
            if not _real(x) or not np.isfinite(x) or x <= 0:
                raise ValueError(f"{name} must be a positive finite number, got {x!r}")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2 or not all(_real(b) and 0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.lr, self.betas, self.eps = float(lr), tuple(map(float, betas)), float(eps)
        self.t, self.m, self.v = 0, {}, {}

    def step(self, params: dict, grads: dict) -> None:
        """Update every ``params[name]`` that has a gradient, in place."""
        b1, b2 = self.betas
        self.t += 1
        for name, g in grads.items():
            if name not in params or np.shape(params[name]) != np.shape(g):
                raise ValueError(f"gradient {name!r} of shape {np.shape(g)} matches no parameter")
            m = self.m[name] = b1 * self.m.get(name, 0.0) + (1 - b1) * g
            v = self.v[name] = b2 * self.v.get(name, 0.0) + (1 - b2) * g * g
            params[name] -= self.lr * (m / (1 - b1 ** self.t)) / (np.sqrt(v / (1 - b2 ** self.t)) + self.eps)


def train(model: Model, batches, steps: int, *, lr: float = 1e-2, mask=None, causal: bool = True,
          snapshot_every: int = 0):
    """Train ``model`` in place with Adam on ``batches(step) -> (tokens, targets)``; return the loss of every step.

    With ``snapshot_every = n``, also return copies of the model before step 0 and after every n-th step.
    """
    steps = positive_int(steps, "steps")
    if not callable(batches):
        raise ValueError(f"batches must be a function step -> (tokens, targets), got {type(batches).__name__}")
    opt, losses, snapshots = Adam(lr), np.empty(steps), []
    with limit_threads(1):  # small matmuls: several BLAS threads wait for each other longer than they compute
        for step in range(steps):
            if snapshot_every and step % snapshot_every == 0:
                snapshots.append((step, model.copy()))
            tokens, targets = batches(step)
            losses[step], grads = loss_and_grads(model, tokens, targets, mask, causal=causal)
            opt.step(model.params, grads)
    if snapshot_every:
        snapshots.append((steps, model.copy()))
        return losses, snapshots
    return losses


def train_many(models, batches, steps: int, *, lr=1e-2, mask=None, causal: bool = True, snapshot_every: int = 0):
    """Train several independent models of one shape at once (e.g. one per seed), each as :func:`train` would.

    ``models`` is a list of ``N`` models with the same parameter shapes, heads and layers; their ``scale`` may differ.
    ``batches(step) -> (tokens, targets)``, each ``(N, B, T)`` (one batch per model) or ``(B, T)`` (shared). ``lr`` is
    one learning rate or one per model. Returns the losses ``(N, steps)``; with ``snapshot_every = n`` also a list of
    ``(step, [N model copies])`` before step 0 and after every n-th step. The models are trained in place.

    Notes
    -----
    The ``N`` models are stacked along a new leading axis and every matmul of the forward and backward pass runs on
    the stack at once, so ``N`` small models cost little more than one (numpy's overhead per call dominates at these
    sizes). The arithmetic is :func:`loss_and_grads` and :class:`Adam`'s, evaluated in another order, so a model
    trained here equals the same model trained alone up to rounding.

    Examples
    --------
    >>> ms = [init_model(6, 8, d_model=8, H=2, seed=s) for s in range(3)]
    >>> losses = train_many(ms, lambda step: copy_task(4, 4, 6, seed=step), 5)
    >>> losses.shape
    (3, 5)
    """
    models, N = _check_stack(models)
    steps = positive_int(steps, "steps")
    if not callable(batches):
        raise ValueError(f"batches must be a function step -> (tokens, targets), got {type(batches).__name__}")
    lrs = np.broadcast_to(np.asarray(lr, dtype=float), (N,)) if np.ndim(lr) <= 1 and np.size(lr) in (1, N) else None
    if lrs is None or not np.all(np.isfinite(lrs)) or np.any(lrs <= 0):
        raise ValueError(f"lr must be a positive number or {N} positive numbers (one per model), got {lr!r}")
    first = models[0]
    params = {name: np.stack([m.params[name] for m in models]) for name in first.params}  # (N, ...) each
    scales = np.array([1 / np.sqrt(m.D) if m.scale is None else m.scale for m in models])  # (N,)
    opt, losses, snapshots = Adam(1.0), np.empty((N, steps)), []
    b1, b2 = opt.betas

    def unstack():
        return [Model({name: p[n].copy() for name, p in params.items()}, m.H, m.Hkv, m.n_layers, m.scale,
                      m.learned_positions, m.frozen) for n, m in enumerate(models)]

    with limit_threads(1):  # small matmuls: several BLAS threads wait for each other longer than they compute
        for step in range(steps):
            if snapshot_every and step % snapshot_every == 0:
                snapshots.append((step, unstack()))
            tokens, targets = (_stack_tokens(a, N, first, name) for a, name in zip(batches(step), ("tokens", "targets")))
            if targets.shape != tokens.shape:
                raise ValueError(f"targets must have the shape of tokens {tokens.shape}, got {targets.shape}")
            losses[:, step], grads = _stacked_loss_and_grads(params, first, scales, tokens, targets, mask, causal)
            opt.t += 1
            for name, g in grads.items():  # Adam, one learning rate per model
                m = opt.m[name] = b1 * opt.m.get(name, 0.0) + (1 - b1) * g
                v = opt.v[name] = b2 * opt.v.get(name, 0.0) + (1 - b2) * g * g
                lr_n = lrs.reshape(N, *([1] * (g.ndim - 1)))
                params[name] -= lr_n * (m / (1 - b1 ** opt.t)) / (np.sqrt(v / (1 - b2 ** opt.t)) + opt.eps)
    for n, m in enumerate(models):  # in place, as train does
        for name in m.params:
            m.params[name][...] = params[name][n]
    if snapshot_every:
        snapshots.append((steps, unstack()))
        return losses, snapshots
    return losses


def _check_stack(models):
    if not isinstance(models, (list, tuple)) or not models:
        raise ValueError(f"models must be a non-empty list of Model, got {type(models).__name__}")
    models = [_check_model(m) for m in models]
    first = models[0]
    for i, m in enumerate(models[1:], 1):
        same = (m.H, m.Hkv, m.n_layers, m.frozen) == (first.H, first.Hkv, first.n_layers, first.frozen)
        if not same or m.params.keys() != first.params.keys() or any(
                m.params[n].shape != p.shape or m.params[n].dtype != p.dtype for n, p in first.params.items()):
            raise ValueError(f"models[{i}] differs from models[0] in shape (H, Hkv, layers, parameter shapes or "
                             "dtypes): train_many stacks models of one shape")
    return models, len(models)


def _stack_tokens(a, N, model, name):
    a = np.asarray(a)
    if a.ndim == 2:
        a = np.broadcast_to(a, (N, *a.shape))  # one batch shared by every model
    if a.ndim != 3 or a.shape[0] != N:
        raise ValueError(f"{name} must have shape (N={N}, B, T) or (B, T), got {a.shape}")
    _check_tokens(a.reshape(-1, a.shape[-1]), model, name)
    return a


def _stacked_loss_and_grads(params, model, scales, tokens, targets, mask, causal):
    """:func:`loss_and_grads` for ``N`` models stacked on axis 0: losses ``(N,)`` and gradients ``(N, ...)``.

    The projections are stacked matmuls; attention and its backward are :func:`attnlab.attention` and
    :func:`attnlab.attention_backward` on ``(N, B, H, T, D)``, each model's scale folded into its queries."""
    N, B, T = tokens.shape
    H, Hkv = model.H, model.Hkv
    n_idx = np.arange(N)[:, None, None]
    c = scales.reshape(N, 1, 1, 1, 1)  # one scale per model, on (N, B, H, T, D): softmax((c q) kᵀ) is softmax(c q kᵀ)

    def rows(a):  # (N, B, T, X) -> (N, B*T, X)
        return a.reshape(N, B * T, a.shape[-1])

    def heads(a, n):  # (N, B, T, n*D) -> (N, B, n, T, D), contiguous so that every matmul below runs on BLAS
        return np.ascontiguousarray(split_heads(a, n))

    h = params["embed"][n_idx, tokens] + params["pos"][:, None, :T]  # (N, B, T, d_model)
    saved = []
    for l in range(model.n_layers):
        W = {n: params[f"layers.{l}.{n}"] for n in LAYER_PARAMS}  # (N, d_model, H*D), ...
        q = c * heads((rows(h) @ W["W_q"]).reshape(N, B, T, -1), H)  # (N, B, H, T, D), scaled
        k = heads((rows(h) @ W["W_k"]).reshape(N, B, T, -1), Hkv)  # (N, B, Hkv, T, D)
        v = heads((rows(h) @ W["W_v"]).reshape(N, B, T, -1), Hkv)
        out, P = attention(q, k, v, mask, causal=causal, scale=1.0, return_weights=True)  # (N, B, H, T, D|T)
        merged = merge_heads(out)  # (N, B, T, H*D)
        saved.append((h, q, k, v, P, merged, W))
        h = h + (rows(merged) @ W["W_o"]).reshape(h.shape)  # the residual stream
    logits = rows(h) @ params["W_out"] + params["b_out"][:, None]  # (N, B*T, V)
    flat_targets = targets.reshape(N, B * T, 1)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=-1))  # (N, B*T)
    losses = (log_z - np.take_along_axis(shifted, flat_targets, -1)[..., 0]).mean(axis=1)  # -log p_target, (N,)
    dlogits = softmax(logits)
    np.put_along_axis(dlogits, flat_targets, np.take_along_axis(dlogits, flat_targets, -1) - 1, axis=-1)
    dlogits /= B * T  # (N, B*T, V)
    grads = {"W_out": rows(h).swapaxes(1, 2) @ dlogits, "b_out": dlogits.sum(axis=1)}
    dh = (dlogits @ params["W_out"].swapaxes(1, 2)).reshape(h.shape)  # (N, B, T, d_model)
    for l in reversed(range(model.n_layers)):
        x, q, k, v, P, merged, W = saved[l]
        grads[f"layers.{l}.W_o"] = rows(merged).swapaxes(1, 2) @ rows(dh)
        dO = heads((rows(dh) @ W["W_o"].swapaxes(1, 2)).reshape(N, B, T, -1), H)  # (N, B, H, T, D)
        dq, dk, dv = attention_backward(q, k, v, dO, mask, causal=causal, scale=1.0, weights=P)
        dq = rows(merge_heads(c * dq))  # d/dq of the unscaled queries: (N, B*T, H*D)
        dk, dv = rows(merge_heads(dk)), rows(merge_heads(dv))  # (N, B*T, Hkv*D)
        xr = rows(x).swapaxes(1, 2)  # (N, d_model, B*T)
        grads.update({f"layers.{l}.W_q": xr @ dq, f"layers.{l}.W_k": xr @ dk, f"layers.{l}.W_v": xr @ dv})
        dx = dq @ W["W_q"].swapaxes(1, 2) + dk @ W["W_k"].swapaxes(1, 2) + dv @ W["W_v"].swapaxes(1, 2)
        dh = dh + dx.reshape(dh.shape)  # h_{l+1} = h_l + layer(h_l)
    onehot = np.zeros((N, B * T, params["embed"].shape[1]), dtype=dh.dtype)  # (N, B*T, V)
    np.put_along_axis(onehot, tokens.reshape(N, B * T, 1), 1.0, axis=-1)
    grads["embed"] = onehot.swapaxes(1, 2) @ rows(dh)  # a token used twice collects both gradients
    if "pos" not in model.frozen:
        grads["pos"] = np.zeros_like(params["pos"])
        grads["pos"][:, :T] = dh.sum(axis=1)
    return losses, grads


def generate(model: Model, prompt, n_new: int, *, use_cache: bool = True) -> np.ndarray:
    """Greedy continuation of ``prompt (B, T0)`` by ``n_new`` tokens; returns ``(B, T0 + n_new)``.

    ``use_cache=True`` runs one :func:`attnlab.decode_step` per token and layer with a :class:`attnlab.KVCache`;
    ``False`` reruns the whole (causal) model on the growing sequence for every new token.
    """
    prompt = _check_tokens(prompt, _check_model(model), "prompt")
    n_new = positive_int(n_new, "n_new", allow_zero=True)
    if prompt.shape[1] + n_new - 1 > model.max_len:  # the last new token is never fed back in
        raise ValueError(f"prompt of {prompt.shape[1]} + {n_new} new tokens needs {prompt.shape[1] + n_new - 1} "
                         f"positions, more than max_len={model.max_len}")
    with limit_threads(1):  # small matmuls: several BLAS threads wait for each other longer than they compute
        return _generate(model, prompt, n_new, use_cache)


def _generate(model, prompt, n_new, use_cache):
    seq = prompt
    if not use_cache:
        for _ in range(n_new):
            nxt = _forward(model, seq, None, True)[0][:, -1].argmax(-1)  # (B,)
            seq = np.concatenate([seq, nxt[:, None]], axis=1)
        return seq
    # decode_step uses the default scale 1/sqrt(D): fold the model's own scale into W_q instead
    fold = 1.0 if model.scale is None else model.scale * np.sqrt(model.D)
    layers = [model.layer(l) for l in range(model.n_layers)]
    layers = [AttentionWeights(w.W_q * fold, w.W_k, w.W_v, w.W_o, w.H, w.Hkv) for w in layers] if fold != 1 else layers
    dtype = model.params["embed"].dtype
    caches = [KVCache(model.Hkv, model.D, model.max_len, batch_shape=(len(seq),), dtype=dtype) for _ in layers]
    logits = None
    for t in range(prompt.shape[1] + n_new - 1):
        h = model.params["embed"][seq[:, t : t + 1]] + model.params["pos"][t : t + 1]  # (B, 1, d_model)
        for w, cache in zip(layers, caches):
            h = h + decode_step(h, w, cache)  # one query row against the cached keys and values
        logits = h[:, -1] @ model.params["W_out"] + model.params["b_out"]  # (B, V)
        if t + 1 >= seq.shape[1]:
            seq = np.concatenate([seq, logits.argmax(-1)[:, None]], axis=1)
    return seq


def copy_task(n: int, L: int, vocab: int, *, seed: int = 0):
    """``n`` sequences ``x_0 .. x_{L-1} SEP x_0 .. x_{L-1}`` of random ids ``1 .. vocab-1`` (``SEP = 0``).

    Returns ``tokens, targets``, each ``(n, 2L)``: the sequence without its last id, and shifted by one.
    """
    n, L, vocab = positive_int(n, "n"), positive_int(L, "L"), positive_int(vocab, "vocab")
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2 (the separator and at least one symbol), got {vocab}")
    x = np.random.default_rng(seed).integers(1, vocab, size=(n, L))
    seq = np.concatenate([x, np.zeros((n, 1), dtype=x.dtype), x], axis=1)  # (n, 2L + 1)
    return seq[:, :-1], seq[:, 1:]
