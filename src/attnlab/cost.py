"""What attention costs: FLOPs, score memory and KV-cache memory.

FLOPs are counted as floating-point operations, not multiply-adds: a matmul of ``(m, k)`` by ``(k, n)`` is ``2 m k n``.
Softmax, scaling and masking are ignored (they are ``O(T S)``, not ``O(T S D)``).
"""

from __future__ import annotations

import math
import numbers

from ._checks import positive_int

GiB = 2**30

BYTES_PER_ELEMENT = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1, "int8": 1}


def _bytes(dtype) -> int:
    if isinstance(dtype, str):
        if dtype.lower() not in BYTES_PER_ELEMENT:
            raise ValueError(f"dtype must be one of {sorted(BYTES_PER_ELEMENT)} or a byte count, got {dtype!r}")
        return BYTES_PER_ELEMENT[dtype.lower()]
    return positive_int(dtype, "dtype (bytes per element)")


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an ``(m, k) @ (k, n)`` matmul: ``2 m k n`` (one multiply and one add per term)."""
    return 2 * positive_int(m, "m") * positive_int(k, "k") * positive_int(n, "n")


def causal_pairs(T: int, S: int) -> int:
    """Number of (query, key) pairs a causal mask allows when the ``T`` queries are the last of ``S`` positions."""
    T, S = positive_int(T, "T"), positive_int(S, "S")
    if T > S:
        raise ValueError(f"expected T <= S, got T={T}, S={S}")
    # query i (absolute position S - T + i) sees S - T + i + 1 keys
    return T * (S - T) + T * (T + 1) // 2


def attention_flops(S: int, d_model: int, *, T: int | None = None, causal: bool = False) -> int:
    """FLOPs of ``Q Kᵀ`` and ``P V`` over all heads: ``2 T S d_model`` each, so ``4 T S d_model`` in all.

    With ``causal=True`` only the allowed pairs are counted (about half), as a kernel that skips masked tiles does.
    The head count does not appear: ``H`` heads of width ``d_model / H`` cost the same as one wide head.

    Examples
    --------
    >>> attention_flops(8192, 4096) == 4 * 8192**2 * 4096
    True
    """
    S, d_model = positive_int(S, "S"), positive_int(d_model, "d_model")
    T = S if T is None else positive_int(T, "T")
    pairs = causal_pairs(T, S) if causal else T * S
    return 2 * 2 * pairs * d_model


def projection_flops(S: int, d_model: int, *, H: int | None = None, Hkv: int | None = None) -> int:
    """FLOPs of the ``W_q, W_k, W_v, W_o`` projections for ``S`` tokens: ``8 S d_model²`` for multi-head attention.

    With grouped-query attention (``Hkv < H``) ``W_k`` and ``W_v`` are narrower: ``Hkv * D`` columns each.
    """
    S, d_model = positive_int(S, "S"), positive_int(d_model, "d_model")
    H = 1 if H is None else positive_int(H, "H")
    Hkv = H if Hkv is None else positive_int(Hkv, "Hkv")
    if d_model % H or H % Hkv:
        raise ValueError(f"need d_model % H == 0 and H % Hkv == 0, got d_model={d_model}, H={H}, Hkv={Hkv}")
    kv_width = Hkv * (d_model // H)
    return 2 * S * d_model * (d_model + kv_width + kv_width + d_model)


def crossover_length(d_model: int, *, H: int | None = None, Hkv: int | None = None, causal: bool = False) -> float:
    """Context length ``S`` at which attention FLOPs equal projection FLOPs (beyond it, attention dominates).

    Attention grows as ``c S² d_model`` (``c = 4``, or about 2 when causal) and the projections as ``p S``, so they meet
    at ``S = p / (c d_model)``: ``2 d_model`` for multi-head attention, ``4 d_model`` when causal.

    Examples
    --------
    >>> crossover_length(4096)
    8192.0
    """
    d_model = positive_int(d_model, "d_model")
    per_token = projection_flops(1, d_model, H=H, Hkv=Hkv)
    return per_token / ((2 if causal else 4) * d_model)


def score_bytes(H: int, S: int, *, T: int | None = None, batch: int = 1, dtype="bf16") -> int:
    """Bytes of the full ``(batch, H, T, S)`` score matrix when it is materialised.

    Examples
    --------
    >>> score_bytes(32, 8192) / GiB  # 32 heads x 8,192² x 2 bytes
    4.0
    >>> score_bytes(32, 32768) / GiB
    64.0
    """
    H, S, batch = positive_int(H, "H"), positive_int(S, "S"), positive_int(batch, "batch")
    T = S if T is None else positive_int(T, "T")
    return batch * H * T * S * _bytes(dtype)


def kv_cache_bytes(S: int, *, layers: int, Hkv: int, D: int, batch: int = 1, dtype="bf16") -> int:
    """Bytes of the KV cache: keys and values (2) of every layer, key/value head and position.

    ``2 · layers · Hkv · D · S · batch · bytes``. Multi-head attention has ``Hkv = H``; grouped-query attention a few;
    multi-query attention one.

    Examples
    --------
    >>> kv_cache_bytes(8192, layers=32, Hkv=8, D=128) / GiB
    1.0
    """
    S = positive_int(S, "S")
    layers, Hkv, D = positive_int(layers, "layers"), positive_int(Hkv, "Hkv"), positive_int(D, "D")
    return 2 * layers * Hkv * D * S * positive_int(batch, "batch") * _bytes(dtype)


def decode_step_cost(S: int, *, d_model: int, H: int, Hkv: int | None = None, dtype="bf16") -> dict:
    """FLOPs and bytes of one decode step's attention for one layer: one query row against ``S`` cached positions.

    Returns a dict with ``flops`` (``4 S d_model``), ``bytes_read`` (the layer's KV cache, ``2 Hkv D S`` elements)
    and ``intensity`` = FLOPs per byte read. An intensity of about ``2 H / Hkv / bytes`` is far below what a processor
    needs to be compute-bound (tens to hundreds of FLOPs per byte), which is why decode is memory-bound.
    """
    Hkv = H if Hkv is None else Hkv
    d_model, H, Hkv = positive_int(d_model, "d_model"), positive_int(H, "H"), positive_int(Hkv, "Hkv")
    if d_model % H or H % Hkv:
        raise ValueError(f"need d_model % H == 0 and H % Hkv == 0, got d_model={d_model}, H={H}, Hkv={Hkv}")
    flops = attention_flops(S, d_model, T=1)
    bytes_read = kv_cache_bytes(S, layers=1, Hkv=Hkv, D=d_model // H, dtype=dtype)
    return {"flops": flops, "bytes_read": bytes_read, "intensity": flops / bytes_read}


def format_bytes(n: numbers.Real) -> str:
    """``4294967296 -> '4 GiB'``: binary units, at most three significant digits."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or not math.isfinite(n) or n < 0:
        raise ValueError(f"n must be a non-negative number of bytes, got {n!r}")
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if n < 1000 else f"{n:.0f} {unit}"  # 1000-1023: no exponent ("1.02e+03")
        n /= 1024
