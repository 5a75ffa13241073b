"""Rotary position embeddings: ``attnlab.rope`` against references written independently here.

``attnlab.rope`` pairs coordinate j with j + D/2 (the "rotate_half" convention of GPT-NeoX and Hugging Face Llama).
The references below are (1) the complex-number form, x_j + i x_{j+D/2} times exp(i m theta_j), and (2) a plain
float64 loop that applies a 2x2 rotation matrix to each neighbouring pair (2j, 2j+1), the RoFormer paper's
"interleaved" convention; the two conventions agree after a fixed permutation of the coordinates.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attnlab
from attnlab import rope


def theta(D, base=10000.0):
    return np.array([base ** (-2.0 * j / D) for j in range(D // 2)])


def rope_complex(x, positions, base=10000.0):
    """Reference 1: halves as the real and imaginary parts of D/2 complex numbers, each turned by m * theta_j."""
    x = np.asarray(x, dtype=np.float64)
    D = x.shape[-1]
    z = x[..., : D // 2] + 1j * x[..., D // 2:]
    z = z * np.exp(1j * np.asarray(positions)[..., None] * theta(D, base))
    return np.concatenate([z.real, z.imag], axis=-1)


def rope_interleaved_loop(x, positions, base=10000.0):
    """Reference 2: a loop over vectors and neighbouring pairs (2j, 2j+1), each multiplied by a rotation matrix."""
    x = np.asarray(x, dtype=np.float64)
    T, D = x.shape
    out = np.empty_like(x)
    for t in range(T):
        for j in range(D // 2):
            a = positions[t] * base ** (-2.0 * j / D)
            R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
            out[t, 2 * j: 2 * j + 2] = R @ x[t, 2 * j: 2 * j + 2]
    return out


def halves_to_interleaved(D):
    """The permutation p with interleaved[..., p] = halves: coordinate j goes to 2j, coordinate j + D/2 to 2j + 1."""
    return np.stack([np.arange(D // 2), np.arange(D // 2) + D // 2], axis=-1).reshape(-1)


@pytest.mark.parametrize("shape", [(1, 2), (5, 8), (3, 7, 16), (2, 3, 4, 6)])
def test_rope_matches_the_complex_form(shape, rng):
    x = rng.normal(size=shape)
    positions = rng.integers(0, 5000, size=shape[:-1])  # a position per vector, (..., T)
    np.testing.assert_allclose(rope(x, positions), rope_complex(x, positions), rtol=1e-12, atol=1e-12)


def test_default_positions_are_0_to_T_minus_1(rng):
    x = rng.normal(size=(2, 9, 4))
    np.testing.assert_allclose(rope(x), rope_complex(x, np.arange(9)), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(rope(x[..., :1, :]), x[..., :1, :])  # position 0 is no rotation at all


@pytest.mark.parametrize("D", [2, 4, 10])
def test_halves_are_the_interleaved_convention_permuted(D, rng):
    x = rng.normal(size=(6, D))
    positions = np.array([0, 1, 2, 7, 100, 4095])
    p = halves_to_interleaved(D)
    # the loop sees the coordinates in interleaved order; its output, read back in halves order, is rope's
    interleaved = rope_interleaved_loop(x[:, p], positions)
    np.testing.assert_allclose(interleaved, rope(x, positions)[:, p], rtol=1e-12, atol=1e-12)


def test_rotate_half_formula(rng):
    """The Hugging Face form: x * cos + rotate_half(x) * sin, with cos and sin repeated over both halves."""
    x = rng.normal(size=(5, 8))
    angle = np.arange(5)[:, None] * theta(8)  # (T, D/2)
    cos, sin = np.tile(np.cos(angle), 2), np.tile(np.sin(angle), 2)  # (T, D)
    rotate_half = np.concatenate([-x[:, 4:], x[:, :4]], axis=-1)
    np.testing.assert_allclose(rope(x), x * cos + rotate_half * sin, rtol=1e-12, atol=1e-12)


def test_base_changes_the_frequencies(rng):
    x = rng.normal(size=(4, 6))
    np.testing.assert_allclose(rope(x, base=500.0), rope_complex(x, np.arange(4), base=500.0), rtol=1e-12,
                               atol=1e-12)
    assert not np.allclose(rope(x, base=500.0), rope(x))


def test_rotation_keeps_lengths(rng):
    x = rng.normal(size=(3, 11, 8))
    np.testing.assert_allclose(np.linalg.norm(rope(x), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)


@given(m=st.integers(0, 10_000), n=st.integers(0, 10_000), shift=st.integers(0, 10_000),
       seed=st.integers(0, 2**32 - 1), D=st.sampled_from([2, 4, 8, 16]))
def test_scores_depend_only_on_the_offset(m, n, shift, seed, D):
    """rope(q, m) . rope(k, n) == rope(q, m + s) . rope(k, n + s): only m - n matters."""
    q, k = np.random.default_rng(seed).normal(size=(2, 1, D))
    score = (rope(q, [m]) @ rope(k, [n]).T).item()
    shifted = (rope(q, [m + shift]) @ rope(k, [n + shift]).T).item()
    # both are the same real part of a complex sum; float64 angles up to 2e4 rad carry ~1e-12 absolute error
    assert shifted == pytest.approx(score, rel=1e-9, abs=1e-9 * np.abs(q).sum() * np.abs(k).sum())


def test_scores_of_a_sequence_are_a_function_of_the_offset(rng):
    """The whole (T, T) score matrix is constant along each diagonal when q and k are the same vector everywhere."""
    q, k = rng.normal(size=(2, 8))
    scores = rope(np.tile(q, (6, 1))) @ rope(np.tile(k, (6, 1))).T  # (T, T)
    for offset in range(-5, 6):
        diagonal = np.diagonal(scores, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-12, atol=1e-12)
    assert not np.allclose(scores, scores.T)  # m - n and n - m are different offsets


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float16, 2e-3)])
def test_dtype_is_kept(dtype, rtol, rng):
    x = rng.normal(size=(7, 8))
    got = rope(x.astype(dtype))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, rope_complex(x.astype(dtype), np.arange(7)), rtol=rtol, atol=rtol)


def test_per_sequence_positions_broadcast_over_heads(rng):
    x = rng.normal(size=(2, 3, 4, 8))  # (B, H, T, D)
    positions = np.array([[0, 0, 0, 1], [3, 4, 5, 6]])  # (B, T)
    got = rope(x, positions[:, None, :])
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(got[b, h], rope_complex(x[b, h], positions[b]), rtol=1e-12, atol=1e-12)


def test_input_is_not_modified(rng):
    x = rng.normal(size=(4, 6))
    before = x.copy()
    rope(x, np.arange(4))
    np.testing.assert_array_equal(x, before)


def _causal_rope_attention(x, W_q, W_k, W_v, positions):
    q, k, v = rope(x @ W_q, positions), rope(x @ W_k, positions), x @ W_v  # (T, D) each
    return attnlab.attention(q, k, v, causal=True)  # (T, D)


def test_left_padding_with_position_ids_gives_the_unpadded_outputs(rng):
    """The real tokens of a left-padded sequence, rotated to their position_ids, get the outputs of the sequence alone."""
    D, L, S = 8, 3, 5
    x = rng.normal(size=(L, D))
    W_q, W_k, W_v = rng.normal(size=(3, D, D)) / np.sqrt(D)
    alone = _causal_rope_attention(x, W_q, W_k, W_v, np.arange(L))
    padded = np.concatenate([np.zeros((S - L, D)), x])  # (S, D): two pads first
    pos = attnlab.position_ids([L], S, side="left")[0]  # (S,) = [0, 0, 0, 1, 2]
    q, k, v = rope(padded @ W_q, pos), rope(padded @ W_k, pos), padded @ W_v
    mask = attnlab.combine_masks(attnlab.causal_mask(S), attnlab.padding_mask([L], S, side="left")[0, 0])
    out = attnlab.attention(q, k, v, mask)
    np.testing.assert_allclose(out[S - L:], alone, rtol=1e-12, atol=1e-12)


def _decode_with_cache(x, W_q, W_k, W_v, start, step_position):
    """Prefill x[:start] into a cache of rotated keys, then decode x[start] at ``step_position``; its output row."""
    k_cache = rope(x[:start] @ W_k, np.arange(start))  # (start, D) keys are stored already rotated
    v_cache = x[:start] @ W_v
    q = rope(x[start:start + 1] @ W_q, [step_position])  # (1, D)
    k_new = rope(x[start:start + 1] @ W_k, [step_position])
    k_all, v_all = np.concatenate([k_cache, k_new]), np.concatenate([v_cache, x[start:start + 1] @ W_v])
    return attnlab.attention(q, k_all, v_all)[0]  # (D,) one query sees the whole cache


def test_kv_cache_with_rotated_keys_matches_the_full_pass_and_catches_a_wrong_position(rng):
    D, T = 8, 6
    x = rng.normal(size=(T, D))
    W_q, W_k, W_v = rng.normal(size=(3, D, D)) / np.sqrt(D)
    full = _causal_rope_attention(x, W_q, W_k, W_v, np.arange(T))
    np.testing.assert_allclose(_decode_with_cache(x, W_q, W_k, W_v, T - 1, T - 1), full[-1], rtol=1e-12, atol=1e-12)
    for wrong in (0, T - 2, T):  # restarted at 0, off by one either way
        assert not np.allclose(_decode_with_cache(x, W_q, W_k, W_v, T - 1, wrong), full[-1], rtol=1e-6, atol=1e-6)
