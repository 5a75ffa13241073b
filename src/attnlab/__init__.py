"""attnlab: scaled dot-product attention from first principles, in numpy.

Shape legend, used in every docstring, comment and einsum string of this package:

    B    batch                          T    queries (rows of the scores)
    H    query heads                    S    keys and values (columns of the scores)
    Hkv  key/value heads                D    head width (d_k); Dv the value width when it differs
    G    query heads per K/V head, G = H // Hkv

    q        (..., H, T, D)        k, v     (..., Hkv, S, D)
    scores   (..., H, T, S)  before the softmax
    weights  (..., H, T, S)  after it; each row sums to 1, or is all zeros when fully masked

A gradient carries a ``d`` and the shape of what it is the gradient of: ``dout`` (``dO``) is ``(..., H, T, Dv)`` like
the output, ``dq, dk, dv`` are shaped like ``q, k, v``, ``dweights`` and ``dscores`` like the weights and scores.

Masks are boolean with True = may attend, broadcastable to (..., H, T, S). They become an additive -inf bias in exactly
one place, :func:`attnlab.softmax`. A row with no allowed key gets zero weights, a zero output and zero gradients,
never NaN. NaN in the inputs is not hidden: it propagates to the rows it touches.
"""

from ._parallel import limit_threads
from .attention import attention, repeat_kv
from .backward import attention_backward, softmax_backward, tiled_attention_backward
from .cost import (
    GiB,
    attention_flops,
    causal_pairs,
    count_tiled_io,
    crossover_length,
    decode_step_cost,
    format_bytes,
    kv_cache_bytes,
    matmul_flops,
    projection_flops,
    score_bytes,
    sram_block_sizes,
    tiled_io_bytes,
)
from .heads import (
    AttentionWeights,
    KVCache,
    decode,
    decode_step,
    init_weights,
    merge_heads,
    multi_head_attention,
    project_qkv,
    split_heads,
)
from .linear import (
    elu_feature,
    linear_attention,
    linear_attention_backward,
    linear_attention_recurrent,
    linear_attention_step,
)
from .masks import causal_mask, combine_masks, document_mask, padding_mask, position_ids, sliding_window_mask
from .model import (
    Adam,
    Model,
    attention_layer,
    attention_layer_backward,
    copy_task,
    cross_entropy,
    generate,
    init_model,
    loss_and_grads,
    model_forward,
    train,
    train_many,
)
from .online import TiledResult, TiledStats, online_softmax, online_softmax_stats, tiled_attention
from .position import rope
from .recall import (
    RecallModels,
    init_recall,
    recall_accuracy,
    recall_logits,
    recall_loss_and_grads,
    recall_task,
    train_recall,
)
from .softmax import softmax
from .window import WindowStats, window_attention, window_decode

__version__ = "0.1.0"

__all__ = [
    "Adam", "AttentionWeights", "GiB", "KVCache", "Model", "TiledResult", "TiledStats", "attention", "attention_backward",
    "attention_flops", "attention_layer", "attention_layer_backward", "causal_mask", "causal_pairs", "combine_masks",
    "copy_task", "count_tiled_io", "cross_entropy", "crossover_length", "decode", "decode_step", "decode_step_cost",
    "document_mask",
    "format_bytes", "generate", "init_model", "init_weights", "kv_cache_bytes", "limit_threads", "loss_and_grads",
    "matmul_flops",
    "merge_heads", "model_forward", "multi_head_attention", "online_softmax", "online_softmax_stats", "padding_mask",
    "position_ids", "project_qkv", "projection_flops", "repeat_kv", "rope", "score_bytes",
    "sliding_window_mask", "softmax", "sram_block_sizes",
    "softmax_backward", "split_heads", "tiled_attention", "tiled_attention_backward", "tiled_io_bytes", "train",
    "train_many",
    # notebook 08: beyond quadratic attention
    "RecallModels", "WindowStats", "elu_feature", "init_recall", "linear_attention", "linear_attention_backward",
    "linear_attention_recurrent", "linear_attention_step", "recall_accuracy", "recall_logits", "recall_loss_and_grads",
    "recall_task", "train_recall", "window_attention", "window_decode",
]


def __getattr__(name: str):
    """Import ``attnlab.plot``, ``attnlab.widgets`` and ``attnlab.exercises`` on first use (they need matplotlib or
    ipywidgets, which ``import attnlab`` itself does not)."""
    if name in {"plot", "widgets", "exercises"}:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
