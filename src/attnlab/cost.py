"""What attention costs: FLOPs, score memory, KV-cache memory, and the bytes a tiled pass moves.

FLOPs are counted as floating-point operations, not multiply-adds: a matmul of ``(m, k)`` by ``(k, n)`` is ``2 m k n``.
Softmax, scaling and masking are ignored (they are ``O(T S)``, not ``O(T S D)``).

Bytes moved count the traffic between main memory (a GPU's HBM) and a small fast on-chip memory (its SRAM) of ``M``
numbers, for a tiled pass in the loop order of :func:`attnlab.tiled_attention`: blocks of ``Br`` query rows outside,
blocks of ``Bc`` keys inside.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ._checks import compute_dtype, positive_int
from ._qkv import check_causal_fits, check_qkv, group_query_heads, key_blocks, tile_mask
from .softmax import mask_inplace

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


def sram_block_sizes(M: int, D: int, *, outer: str = "kv") -> tuple[int, int]:
    """Tile sizes ``(Br, Bc)`` for an on-chip memory of ``M`` numbers and heads of width ``D`` (FlashAttention's rule).

    Parameters
    ----------
    M : int
        Numbers the on-chip memory holds (bytes / bytes per element), at least ``4 D``.
    D : int
        Head width.
    outer : {"kv", "q"}
        Which blocks the outer loop walks over. ``"kv"`` is the loop of FlashAttention's Algorithm 1 (Dao et al., 2022):
        ``Bc = ceil(M / 4D)``, ``Br = min(Bc, D)``. ``"q"`` is the loop of :func:`attnlab.tiled_attention` (and of
        FlashAttention-2): the roles swap, ``Br = ceil(M / 4D)``, ``Bc = min(Br, D)``.

    Notes
    -----
    The outer loop's block stays on chip while the inner blocks stream past it, so the inner operands are read once per
    outer block: the outer block should be as large as the memory allows. Each of the four ``(B, D)`` blocks
    (``Q_i``, ``K_j``, ``V_j``, ``O_i``) then takes about ``M / 4`` numbers, and capping the other block at ``D`` keeps
    the ``Br x Bc`` tile of scores at about ``M / 4`` too.

    Examples
    --------
    >>> sram_block_sizes(98304, 128)  # 192 KiB of BF16 numbers, D = 128: Bc = ceil(98304 / 512) = 192, Br = 128
    (128, 192)
    >>> sram_block_sizes(98304, 128, outer="q")
    (192, 128)
    """
    M, D = positive_int(M, "M"), positive_int(D, "D")
    if M < 4 * D:
        raise ValueError(f"M must hold one row of each of Q_i, K_j, V_j and O_i, M >= 4*D = {4 * D}, got M={M}")
    if outer not in ("kv", "q"):
        raise ValueError(f"outer must be 'kv' (FlashAttention's loop) or 'q' (tiled_attention's loop), got {outer!r}")
    big = -(-M // (4 * D))  # ceil(M / 4D)
    return (min(big, D), big) if outer == "kv" else (big, min(big, D))


def _io_result(q_read: int, k_read: int, v_read: int, o_written: int, flops: int) -> dict:
    total = q_read + k_read + v_read + o_written
    return {"q_read": q_read, "k_read": k_read, "v_read": v_read, "o_written": o_written, "total": total,
            "flops": flops, "intensity": flops / total}


def tiled_io_bytes(T: int, S: int, D: int, *, Br: int, Bc: int, H: int = 1, Hkv: int | None = None,
                   causal: bool = False, dtype="bf16") -> dict:
    """Bytes a tiled attention pass moves between main memory and on-chip memory, by formula.

    The loop is :func:`attnlab.tiled_attention`'s: each block of ``Br`` query rows (of all ``G = H / Hkv`` query heads
    that share a key/value head) is read once, every key block it must visit streams past it, and its output is written
    once. Under a causal mask the key blocks past the diagonal are not read.

    Returns
    -------
    dict
        ``q_read``, ``k_read``, ``v_read``, ``o_written`` and their ``total`` in bytes; ``flops`` of the tiles computed
        (``QK^T`` and ``PV``, every score of a visited tile); ``intensity`` = flops / total.

    Notes
    -----
    Query rows ``[i0, i1)`` read ``K_i = min(S, Bc * ceil((S - T + i1) / Bc))`` keys (``S`` without a mask), so::

        q_read = o_written = H T D b        k_read = v_read = Hkv D b sum_i K_i      (b bytes per number)

    Without a mask that is ``2 Hkv S D b ceil(T / Br)`` for K and V: they are re-read once per query block. With
    ``Br = ceil(M / 4D)`` (:func:`sram_block_sizes`) the traffic is ``Theta(N² D² / M)`` for ``T = S = N``, the count of
    FlashAttention's Theorem 2 (Dao et al., 2022), and the intensity tends to ``2 Br / b`` as ``S`` grows.

    Examples
    --------
    >>> io = tiled_io_bytes(4096, 4096, 128, Br=128, Bc=128)  # BF16: K and V read 32 times
    >>> io["k_read"] == 32 * 4096 * 128 * 2, round(io["intensity"], 1)
    (True, 124.1)
    """
    T, S, D = positive_int(T, "T"), positive_int(S, "S"), positive_int(D, "D")
    Br, Bc, H = positive_int(Br, "Br"), positive_int(Bc, "Bc"), positive_int(H, "H")
    Hkv = H if Hkv is None else positive_int(Hkv, "Hkv")
    if H % Hkv:
        raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
    check_causal_fits(causal, T, S)
    b = _bytes(dtype)
    rows = [min(Br, T - i0) for i0 in range(0, T, Br)]  # query rows in each block
    if causal:  # block ending at row i1 sees keys < S - T + i1, read in whole key blocks (the last one is short)
        keys = [min(S, Bc * -(-(S - T + i0 + r) // Bc)) for i0, r in zip(range(0, T, Br), rows)]
    else:
        keys = [S] * len(rows)
    kv_rows = sum(keys)
    flops = 4 * H * D * sum(r * n for r, n in zip(rows, keys))  # QK^T and PV: 2 D FLOPs each per score, per head
    return _io_result(H * T * D * b, Hkv * kv_rows * D * b, Hkv * kv_rows * D * b, H * T * D * b, flops)


def count_tiled_io(q, k, v, *, Br: int, Bc: int, causal: bool = False, dtype=None):
    """Tiled attention that counts, tile by tile, every byte it reads from and writes to main memory.

    The same loop as :func:`attnlab.tiled_attention` (same tiles, same output), written to show its memory traffic:
    ``load`` is a read from main memory into on-chip memory, ``store`` a write back. Everything between them works on
    blocks that would sit on chip.

    Parameters
    ----------
    q, k, v : (..., H, T, D), (..., Hkv, S, D), (..., Hkv, S, Dv) ndarray
        As in :func:`attnlab.attention`; no mask other than ``causal``.
    Br, Bc : int
        Query rows and keys per tile.
    dtype : str or int, optional
        Bytes per number to count (``"bf16"``, ``4``, ...); by default the inputs' own.

    Returns
    -------
    out : (..., H, T, Dv) ndarray
        The attention output.
    counts : dict
        ``q_read``, ``k_read``, ``v_read``, ``o_written``, ``total`` (bytes), ``flops``, ``intensity`` as in
        :func:`tiled_io_bytes`, plus ``tiles`` (tiles computed, summed over key/value heads) and ``on_chip`` (the most
        numbers one tile holds at once: ``Q_i``, ``K_j``, ``V_j``, the output block, the scores and ``m``, ``l``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 1, 64, 8))
    >>> out, counts = count_tiled_io(q, k, v, Br=16, Bc=16, dtype="bf16")
    >>> counts["k_read"] == tiled_io_bytes(64, 64, 8, Br=16, Bc=16)["k_read"] == 4 * 64 * 8 * 2  # 4 query blocks
    True
    """
    q, k, v = check_qkv(q, k, v)
    if q.ndim == 2:  # a single head: add the head axis and remove it again
        out, counts = count_tiled_io(q[None], k[None], v[None], Br=Br, Bc=Bc, causal=causal, dtype=dtype)
        return out[0], counts
    Br, Bc = positive_int(Br, "Br"), positive_int(Bc, "Bc")
    T, D, S, Hkv = q.shape[-2], q.shape[-1], k.shape[-2], k.shape[-3]
    check_causal_fits(causal, T, S)
    b = q.itemsize if dtype is None else _bytes(dtype)
    work = compute_dtype(q, k, v)
    moved = {"q": 0, "k": 0, "v": 0, "o": 0}
    flops = tiles = on_chip = 0

    def load(name, block):
        """Main memory -> on-chip memory."""
        moved[name] += block.size * b
        return block.astype(work)

    qg = group_query_heads(q, Hkv)  # (..., Hkv, G, T, D)
    out = np.empty((*qg.shape[:-1], v.shape[-1]), dtype=work)  # (..., Hkv, G, T, Dv), in main memory
    for idx in np.ndindex(*qg.shape[:-3]):
        for i0 in range(0, T, Br):
            i1 = min(i0 + Br, T)
            Q_i = load("q", qg[idx][:, i0:i1]) * work.type(1 / np.sqrt(D))  # (G, Br, D): on chip for the row block
            m = np.full((*Q_i.shape[:-1], 1), -np.inf, dtype=work)  # running row max
            l = np.zeros_like(m)  # running row sum
            acc = np.zeros((*Q_i.shape[:-1], v.shape[-1]), dtype=work)  # unnormalised output block
            for j0, j1 in key_blocks(i0, i1, S, T, Bc, causal):  # every key block this row block must see
                K_j, V_j = load("k", k[idx][j0:j1]), load("v", v[idx][j0:j1])  # (Bc, D), (Bc, Dv)
                S_ij = Q_i @ K_j.T  # (G, Br, Bc)
                mask_inplace(S_ij, tile_mask(None, causal, T, S, i0, i1, j0, j1))
                m_new = np.maximum(m, S_ij.max(axis=-1, keepdims=True))  # finite: key 0 is in the first tile
                P_ij = np.exp(S_ij - m_new)  # (G, Br, Bc)
                l = np.exp(m - m_new) * l + P_ij.sum(axis=-1, keepdims=True)  # l = e^(m - m_new) l + rowsum(P_ij)
                acc = np.exp(m - m_new) * acc + P_ij @ V_j  # acc = e^(m - m_new) acc + P_ij V_j
                m = m_new
                G, rows, cols = S_ij.shape
                flops += G * (matmul_flops(rows, D, cols) + matmul_flops(rows, cols, V_j.shape[-1]))
                tiles += 1
                on_chip = max(on_chip, Q_i.size + K_j.size + V_j.size + acc.size + S_ij.size + m.size + l.size)
            out[idx][:, i0:i1] = acc / l  # on chip -> main memory, once per row block
            moved["o"] += out[idx][:, i0:i1].size * b
    counts = _io_result(moved["q"], moved["k"], moved["v"], moved["o"], flops)
    counts.update(tiles=tiles, on_chip=on_chip)
    out = out.reshape(*q.shape[:-1], v.shape[-1]).astype(q.dtype, copy=False)  # (..., H, T, Dv)
    return out, counts


def format_bytes(n: numbers.Real) -> str:
    """``4294967296 -> '4 GiB'``: binary units, at most three significant digits."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or not math.isfinite(n) or n < 0:
        raise ValueError(f"n must be a non-negative number of bytes, got {n!r}")
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if n < 1000 else f"{n:.0f} {unit}"  # 1000-1023: no exponent ("1.02e+03")
        n /= 1024
