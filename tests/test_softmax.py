"""attnlab.softmax against the oracle, and its properties: normalised rows, exact zeros, no warnings, NaN spreads."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle
from attnlab import softmax

# float64 softmax against the correctly rounded oracle: a few ulp per entry
RTOL, ATOL = 1e-12, 1e-15


@contextlib.contextmanager
def no_float_warnings():
    """Record every warning, and raise on any floating-point error numpy would otherwise report (except underflow)."""
    with warnings.catch_warnings(record=True) as caught, np.errstate(divide="raise", over="raise", invalid="raise"):
        warnings.simplefilter("always")
        yield caught


@pytest.mark.parametrize("shape", [(1,), (7,), (113,), (3, 113), (2, 3, 5), (4, 1)])
def test_matches_oracle(rng, shape):
    x = 3 * rng.standard_normal(shape)
    np.testing.assert_allclose(softmax(x), oracle.softmax(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [(9,), (5, 113), (2, 3, 17)])
def test_matches_oracle_with_mask_and_fully_masked_rows(rng, shape):
    x = 3 * rng.standard_normal(shape)
    mask = rng.random(shape) < 0.6
    mask.reshape(-1, shape[-1])[0] = False  # one fully masked row
    got = softmax(x, mask)
    np.testing.assert_allclose(got, oracle.softmax(x, mask), rtol=RTOL, atol=ATOL)
    assert np.all(got[~mask] == 0.0), "masked entries must be exactly 0"
    assert np.all(got.reshape(-1, shape[-1])[0] == 0.0), "a fully masked row is all zeros"


def test_mask_broadcasts_over_rows(rng):
    x = rng.standard_normal((4, 6))
    keep = np.array([True, False, True, True, False, True])
    expected = oracle.softmax(x, np.broadcast_to(keep, x.shape))
    np.testing.assert_allclose(softmax(x, keep), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("axis", [0, 1, -2])
def test_axis(rng, axis):
    x = rng.standard_normal((4, 6, 3))
    expected = np.moveaxis(oracle.softmax(np.moveaxis(x, axis, -1)), -1, axis)
    np.testing.assert_allclose(softmax(x, axis=axis), expected, rtol=RTOL, atol=ATOL)


def test_shift_invariant_and_no_overflow():
    """Subtracting the row max: logits of 1000 would overflow exp() without it."""
    x = np.array([1.0, 2.0, 3.0])
    with no_float_warnings() as caught:
        big = softmax(x + 1000.0)
        tiny = softmax(x - 1000.0)
    assert not caught
    np.testing.assert_allclose(big, oracle.softmax(x), rtol=1e-12)
    np.testing.assert_allclose(tiny, oracle.softmax(x), rtol=1e-12)


def test_does_not_modify_input(rng):
    x = rng.standard_normal((3, 4))
    before = x.copy()
    softmax(x, rng.random((3, 4)) < 0.5)
    assert np.array_equal(x, before)


@given(
    x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                 elements=st.floats(allow_nan=False, allow_infinity=False)),
    data=st.data(),
)
def test_rows_sum_to_one_or_zero(x, data):
    """Any finite logits, any mask: weights in [0, 1], masked ones exactly 0, rows sum to 1 or (fully masked) to 0."""
    mask = data.draw(hnp.arrays(np.bool_, x.shape))
    w = softmax(x, mask)
    assert w.shape == x.shape and w.dtype == x.dtype
    assert np.all((w >= 0) & (w <= 1))
    assert np.all(w[~mask] == 0.0)
    sums = w.sum(axis=-1)
    alive = mask.any(axis=-1)
    np.testing.assert_allclose(sums[alive], 1.0, rtol=1e-12)
    assert np.all(sums[~alive] == 0.0)


@given(x=hnp.arrays(np.float16, hnp.array_shapes(min_dims=1, max_dims=2, max_side=9),
                    elements=st.floats(-1e4, 1e4, width=16)))
def test_float16_logits_near_1e4_are_finite(x):
    """float16 goes up to 65504: logits near ±1e4 are fine as long as the max is subtracted (computed in float32)."""
    w = softmax(x)
    assert w.dtype == np.float16
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w.astype(np.float64).sum(axis=-1), 1.0, atol=x.shape[-1] * 2e-3)
    # float16 is computed in float32 and rounded once at the end
    assert np.array_equal(w, softmax(x.astype(np.float32)).astype(np.float16))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_fully_masked_row_never_warns_never_nan(dtype):
    """pytest turns RuntimeWarning into errors for the whole suite; this checks it explicitly too."""
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=dtype)
    mask = np.array([[False, False, False], [True, False, True]])
    with no_float_warnings() as caught:
        w = softmax(x, mask)
        w_all_masked = softmax(x, np.zeros_like(mask))
        w_neg_inf = softmax(np.full((2, 3), -np.inf, dtype=dtype))  # -inf logits act as masked
    assert caught == []
    assert w.dtype == dtype
    assert np.array_equal(w[0], np.zeros(3, dtype=dtype))
    assert np.array_equal(w_all_masked, np.zeros((2, 3), dtype=dtype))
    assert np.array_equal(w_neg_inf, np.zeros((2, 3), dtype=dtype))
    assert not np.isnan(w).any()


@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 8)),
                    elements=st.floats(allow_nan=False, allow_infinity=False)))
def test_never_warns_on_finite_logits(x):
    """Even logits near ±1.8e308, whose differences overflow to -inf, give clean weights and no warning."""
    with no_float_warnings() as caught:
        w = softmax(x)
    assert caught == []
    assert np.all(np.isfinite(w))


def test_nan_propagates_to_its_row_only():
    """Documented: NaN in the scores is not hidden; it spreads over its own row and nowhere else."""
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]])
    w = softmax(x)
    assert np.isnan(w[0]).all()
    np.testing.assert_allclose(w[1], oracle.softmax(x[1]), rtol=RTOL)


def test_masked_nan_is_never_read():
    """A masked score is replaced before anything reads it, so garbage (even NaN) in a padded slot does no harm."""
    x = np.array([1.0, np.nan, 2.0])
    w = softmax(x, np.array([True, False, True]))
    np.testing.assert_allclose(w, oracle.softmax([1.0, 0.0, 2.0], [True, False, True]), rtol=RTOL)


def plain_float32_softmax(x):
    """The textbook float32 softmax, no tricks: the baseline the float32 error is measured against."""
    x = x.astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_float32_error_within_a_small_factor_of_plain_float32(rng):
    x = (4 * rng.standard_normal((64, 113))).astype(np.float32)
    exact = oracle.softmax(x.astype(np.float64))
    err = np.abs(softmax(x).astype(np.float64) - exact).max()
    err_plain = np.abs(plain_float32_softmax(x).astype(np.float64) - exact).max()
    assert softmax(x).dtype == np.float32
    assert err <= 2 * err_plain + np.finfo(np.float32).eps * exact.max()


def test_out_writes_the_weights_in_place_and_is_checked():
    from attnlab import softmax as sm

    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    mask = np.arange(5) < 3
    expected = sm(x, mask)
    buf = x.copy()
    assert sm(buf, mask, out=buf) is buf
    np.testing.assert_array_equal(buf, expected)
    other = np.empty_like(x)
    assert sm(x, mask, out=other) is other and np.array_equal(other, expected)
    np.testing.assert_allclose(sm(x.T.copy(), axis=0, out=np.empty((5, 3), np.float32)), sm(x).T, rtol=1e-6)
    for bad in (np.empty((3, 4), np.float32), np.empty((3, 5), np.float64), [0.0] * 5):
        with pytest.raises(ValueError, match="out must be a float32 or float64 array of the shape and dtype of scores"):
            sm(x, out=bad)
