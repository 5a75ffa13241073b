"""Bytes a tiled pass moves: the formula (`tiled_io_bytes`) against the metered pass (`count_tiled_io`), and that
metered pass against what `attnlab.tiled_attention` itself reads.

:class:`ReadMeter` is an ndarray subclass that adds its own size to a tally each time it is an operand of a numpy ufunc
(``@`` included) and hands back plain arrays. Wrapped around ``q``, ``k`` and ``v``, it counts the elements of every
slice of them that ``tiled_attention`` computes with, so it measures the real pass, not a model of it.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import oracle
from attnlab import count_tiled_io, sram_block_sizes, tiled_attention, tiled_io_bytes
from helpers import make_qkv


class ReadMeter(np.ndarray):
    """An ndarray that adds its size to ``ReadMeter.reads[name]`` whenever it is an operand of a ufunc."""

    reads: dict[str, int] = {}
    _lock = threading.Lock()  # tiled_attention may run blocks of rows on a thread pool

    @classmethod
    def wrap(cls, **arrays):
        cls.reads = dict.fromkeys(arrays, 0)
        wrapped = []
        for name, a in arrays.items():
            w = np.asarray(a).view(cls)
            w.name = name
            wrapped.append(w)
        return wrapped

    def __array_finalize__(self, obj):
        self.name = getattr(obj, "name", None)  # slices, transposes and astype copies keep their tensor's name

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = []
        for x in inputs:
            if isinstance(x, ReadMeter):
                with ReadMeter._lock:
                    ReadMeter.reads[x.name] += x.size
                x = x.view(np.ndarray)
            plain.append(x)
        if out is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, ReadMeter) else o for o in out)
        return getattr(ufunc, method)(*plain, **kwargs)  # plain results: what is computed from a slice is not re-counted


CASES = [  # batch, H, Hkv, T, S, D, Br, Bc, causal
    ((), 1, 1, 1, 1, 1, 1, 1, False),
    ((), 2, 2, 37, 37, 5, 8, 6, False),
    ((), 2, 2, 37, 37, 5, 8, 6, True),
    ((2,), 4, 2, 9, 23, 3, 4, 5, True),  # GQA, T < S, blocks that do not divide T or S
    ((), 3, 1, 16, 16, 4, 64, 64, True),  # blocks larger than the sequence
    ((), 2, 1, 13, 40, 6, 3, 7, False),
]


@pytest.mark.parametrize("batch, H, Hkv, T, S, D, Br, Bc, causal", CASES)
def test_metered_pass_computes_attention(batch, H, Hkv, T, S, D, Br, Bc, causal):
    q, k, v = make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D, Dv=D + 1)
    out, _ = count_tiled_io(q, k, v, Br=Br, Bc=Bc, causal=causal)
    np.testing.assert_allclose(out, oracle.attention(q, k, v, causal=causal), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch, H, Hkv, T, S, D, Br, Bc, causal", CASES)
@pytest.mark.parametrize("dtype, b", [("bf16", 2), ("fp32", 4), (None, 8)])
def test_counted_bytes_equal_the_formula(batch, H, Hkv, T, S, D, Br, Bc, causal, dtype, b):
    q, k, v = make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D)
    _, counts = count_tiled_io(q, k, v, Br=Br, Bc=Bc, causal=causal, dtype=dtype)
    n = math.prod(batch)
    formula = tiled_io_bytes(T, S, D, Br=Br, Bc=Bc, H=H, Hkv=Hkv, causal=causal, dtype=b)
    for key in ("q_read", "k_read", "v_read", "o_written", "total", "flops"):
        assert counts[key] == n * formula[key], key
    assert counts["intensity"] == pytest.approx(formula["intensity"], rel=1e-12)
    assert counts["q_read"] == counts["o_written"] == n * H * T * D * b, "Q read once, O written once"


@pytest.mark.parametrize("batch, H, Hkv, T, S, D, Br, Bc, causal", CASES)
def test_count_is_what_tiled_attention_reads(batch, H, Hkv, T, S, D, Br, Bc, causal):
    """The metered pass reads exactly the elements of q, k and v that attnlab.tiled_attention computes with, and visits
    as many tiles."""
    q, k, v = make_qkv(batch=batch, H=H, Hkv=Hkv, T=T, S=S, D=D)
    _, counts = count_tiled_io(q, k, v, Br=Br, Bc=Bc, causal=causal, dtype=1)  # 1 byte a number: elements
    mq, mk, mv = ReadMeter.wrap(q=q, k=k, v=v)
    out, stats = tiled_attention(mq, mk, mv, causal=causal, Br=Br, Bc=Bc, return_stats=True)
    assert ReadMeter.reads == {"q": counts["q_read"], "k": counts["k_read"], "v": counts["v_read"]}
    assert counts["tiles"] == math.prod(batch) * Hkv * stats.tiles_computed  # every head visits the same tiles
    np.testing.assert_allclose(out, count_tiled_io(q, k, v, Br=Br, Bc=Bc, causal=causal)[0], rtol=1e-12)


def test_without_a_mask_k_and_v_are_read_once_per_query_block():
    io = tiled_io_bytes(4096, 4096, 128, Br=128, Bc=64, H=32, dtype="bf16")
    assert io["k_read"] == io["v_read"] == 32 * (4096 // 128) * 4096 * 128 * 2
    assert io["flops"] == 4 * 4096**2 * 32 * 128
    # 4 S² D / (2 S D b (1 + S / Br)) = 2 S / (b (1 + S / Br)): 124.1 at S = 4096, Br = 128, BF16
    assert io["intensity"] == pytest.approx(2 * 4096 / (2 * (1 + 4096 / 128)), rel=1e-12)
    assert round(io["intensity"], 1) == 124.1
    long = tiled_io_bytes(2**20, 2**20, 128, Br=128, Bc=128)
    assert 127 < long["intensity"] < 128 == 2 * 128 / 2, "tends to 2 Br / b"


def test_causal_halves_both_traffic_and_flops():
    full = tiled_io_bytes(4096, 4096, 64, Br=64, Bc=64)
    causal = tiled_io_bytes(4096, 4096, 64, Br=64, Bc=64, causal=True)
    n = 4096 // 64  # n(n+1)/2 of n² tiles
    assert causal["k_read"] * 2 * n == full["k_read"] * (n + 1)
    assert causal["flops"] * 2 * n == full["flops"] * (n + 1)


@pytest.mark.parametrize("M, D, kv, q", [(98304, 128, (128, 192), (192, 128)), (512, 128, (1, 1), (1, 1)),
                                         (513, 128, (2, 2), (2, 2)), (4096, 16, (16, 64), (64, 16)),
                                         (1000, 64, (4, 4), (4, 4))])
def test_sram_block_sizes_follow_flashattention(M, D, kv, q):
    assert sram_block_sizes(M, D) == kv  # Bc = ceil(M / 4D), Br = min(Bc, D)
    assert sram_block_sizes(M, D, outer="q") == q
    Br, Bc = kv
    assert Bc * D >= M / 4 > (Bc - 1) * D, "the K_j block is the largest that fits a quarter of M"
    assert Br * Bc <= max(1, D * math.ceil(M / (4 * D)))


@pytest.mark.parametrize("D", [16, 32])
def test_traffic_is_theta_n2_d2_over_m(D):
    """With the outer block sized by M, K/V traffic falls as 1/M: N² D² / M up to a constant, until Br reaches T."""
    N, b = 1024, 2
    kv = []
    for M in (4 * D * 4, 4 * D * 8, 4 * D * 16, 4 * D * 32):
        Br, Bc = sram_block_sizes(M, D, outer="q")
        io = tiled_io_bytes(N, N, D, Br=Br, Bc=Bc, dtype=b)
        kv.append(io["k_read"] + io["v_read"])
        assert kv[-1] == 8 * b * N**2 * D**2 / M  # 2 N D b · N / Br with Br = M / 4D
    assert kv == [kv[0] / 2**i for i in range(4)]
    # FlashAttention's own sizes in this loop order: Br stops at D, and so does the traffic
    capped = [tiled_io_bytes(N, N, D, Br=sram_block_sizes(M, D)[0], Bc=sram_block_sizes(M, D)[1])["k_read"]
              for M in (4 * D * D, 16 * D * D)]
    assert capped[0] == capped[1]


@pytest.mark.parametrize("M, D, outer", [(4096, 16, "q"), (4096, 16, "kv"), (1000, 8, "q"), (65536, 64, "kv")])
def test_on_chip_working_set_is_about_m(M, D, outer):
    """Five blocks of at most about M/4 numbers each (Q_i, O_i, K_j, V_j and the tile of scores), and the outer two
    alone take about M/2: the working set is M up to a constant factor, which is all Theorem 2 needs."""
    Br, Bc = sram_block_sizes(M, D, outer=outer)
    q, k, v = make_qkv(H=1, T=300, S=300, D=D)
    _, counts = count_tiled_io(q, k, v, Br=Br, Bc=Bc)
    assert counts["on_chip"] == 2 * Br * D + 2 * Bc * D + Br * Bc + 2 * Br  # Q_i, O_i, K_j, V_j, S_ij, m, l
    assert M / 2 <= counts["on_chip"] <= 5 * (M / 4 + D) + 2 * Br


def test_errors_name_what_was_expected():
    with pytest.raises(ValueError, match=r"M >= 4\*D = 512, got M=511"):
        sram_block_sizes(511, 128)
    with pytest.raises(ValueError, match="outer must be 'kv'"):
        sram_block_sizes(4096, 16, outer="rows")
    with pytest.raises(ValueError, match="Br must be >= 1, got 0"):
        tiled_io_bytes(8, 8, 4, Br=0, Bc=4)
    with pytest.raises(ValueError, match="H=4 is not a multiple of Hkv=3"):
        tiled_io_bytes(8, 8, 4, Br=4, Bc=4, H=4, Hkv=3)
    with pytest.raises(ValueError, match="expected T <= S"):
        tiled_io_bytes(9, 8, 4, Br=4, Bc=4, causal=True)
    with pytest.raises(ValueError, match="dtype must be one of"):
        tiled_io_bytes(8, 8, 4, Br=4, Bc=4, dtype="fp12")
    q, k, v = make_qkv(H=2, T=5, S=7, D=4)
    with pytest.raises(ValueError, match="k has D=3 but q has D=4"):
        count_tiled_io(q, k[..., :3], v, Br=2, Bc=2)
    with pytest.raises(ValueError, match="Bc must be an integer"):
        count_tiled_io(q, k, v, Br=2, Bc=2.0)
    with pytest.raises(ValueError, match="T=7 queries cannot be the last T positions of S=5 keys"):
        count_tiled_io(k, q, q, Br=2, Bc=2, causal=True)


def test_a_single_head_keeps_its_shape():
    q, k, v = make_qkv(H=1, T=6, S=6, D=3)
    out, counts = count_tiled_io(q[0], k[0], v[0], Br=4, Bc=4)
    assert out.shape == (6, 3)
    assert counts == count_tiled_io(q, k, v, Br=4, Bc=4)[1]
