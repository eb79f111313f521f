"""Differential tests against NumPy for Array API cases closed late: array `rtol` in
`linalg.pinv` and lazy `repeats` in `repeat`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg


@settings(max_examples=25, deadline=None)
@given(
    batch=st.sampled_from([(), (1,), (3,)]),
    m=st.integers(0, 4),
    n=st.integers(0, 4),
    dtype=st.sampled_from([np.float32, np.float64, np.complex128]),
    rtol=st.sampled_from([0.0, 1e-6, 0.3, 0.9]),
    deficient=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pinv_array_rtol_matches_numpy(batch, m, n, dtype, rtol, deficient, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, n))
    if dtype == np.complex128:
        a = a + 1j * rng.standard_normal(a.shape)
    if deficient and n > 1:
        a[..., 0] = a[..., 1]
    a = a.astype(dtype)
    # a per-matrix tolerance, broadcast over the stack the way the Array API allows
    tol = np.full(batch, rtol) * (1 + np.arange(int(np.prod(batch))).reshape(batch))
    got = lg.linalg.pinv(lg.asarray(a), rtol=lg.asarray(tol)).numpy()
    want = np.linalg.pinv(a, rtol=tol)
    assert got.shape == want.shape and got.dtype == want.dtype
    tight = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tight, atol=tight)


def test_pinv_array_rtol_on_a_view_with_negative_strides():
    a = np.random.default_rng(1).standard_normal((2, 5, 3))[:, ::-1, :]
    tol = np.array([1e-6, 0.5])
    got = lg.linalg.pinv(lg.asarray(a), rtol=lg.asarray(tol)).numpy()
    np.testing.assert_allclose(got, np.linalg.pinv(a, rtol=tol), rtol=1e-10, atol=1e-10)


def test_pinv_scalar_rtol_unchanged():
    a = np.random.default_rng(2).standard_normal((4, 3))
    np.testing.assert_allclose(
        lg.linalg.pinv(lg.asarray(a), rtol=0.2).numpy(), np.linalg.pinv(a, rtol=0.2), rtol=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(
    shape=st.sampled_from([(), (0,), (1,), (4,), (2, 3), (3, 0)]),
    axis=st.sampled_from([None, 0, -1]),
    dtype=st.sampled_from([np.bool_, np.int8, np.float32, np.complex64]),
    counts_dtype=st.sampled_from([np.int8, np.int64, np.uint8]),
    seed=st.integers(0, 2**16),
)
def test_repeat_with_lazy_counts_matches_numpy(shape, axis, dtype, counts_dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if axis is not None and x.ndim == 0:
        axis = None
    n = x.size if axis is None else x.shape[axis]
    reps = rng.integers(0, 3, size=n).astype(counts_dtype)
    got = lg.repeat(lg.asarray(x), lg.asarray(reps), axis=axis).numpy()
    want = np.repeat(x, reps, axis=axis)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_repeat_with_lazy_scalar_count_and_nan():
    x = np.array([np.nan, np.inf, -0.0])
    got = lg.repeat(lg.asarray(x), lg.asarray(np.int64(2)) + 0).numpy()
    np.testing.assert_array_equal(got, np.repeat(x, 2))


def test_repeat_with_lazy_counts_of_wrong_length_raises_like_numpy():
    with pytest.raises(ValueError):
        np.repeat(np.arange(3), np.array([1, 2]))
    with pytest.raises(ValueError, match="broadcast"):
        lg.repeat(lg.arange(3), lg.asarray(np.array([1, 2])))


@pytest.mark.parametrize("name", ["sin", "negative", "sqrt", "logical_not", "abs", "exp"])
@pytest.mark.parametrize(
    "method,args",
    [
        ("reduce", ([1.0, 2.0],)),
        ("accumulate", ([1.0, 2.0],)),
        ("outer", ([1.0], [2.0])),
        ("reduceat", ([1.0], [0])),
    ],
)
def test_unary_ufunc_methods_raise_numpys_error_without_evaluating(name, method, args):
    with pytest.raises(ValueError) as want:
        getattr(getattr(np, name), method)(*args)
    lazy = [lg.asarray(np.asarray(x)) for x in args]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: nothing is evaluated
        for fn in (getattr(lg, name), getattr(np, name)):
            with pytest.raises(ValueError, match=str(want.value)):
                getattr(fn, method)(*lazy)


@pytest.mark.parametrize("index", [slice(1, 4), slice(None, None, -2), 2, (Ellipsis,), ()])
@pytest.mark.parametrize("name", ["negative", "sqrt", "sin", "isnan"])
def test_unary_at_with_basic_index_is_recorded_like_numpy(name, index):
    base = np.array([0.5, -0.0, np.inf, 4.0, np.nan, 9.0])
    x = base.copy()
    a = lg.asarray(base.copy())
    view = a[::-1]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error", lg.LazygraphFallbackWarning)  # recorded, not a fallback
        ok = True
        try:
            getattr(np, name).at(x, index)
        except (TypeError, ValueError):
            ok = False
        if ok:
            getattr(lg, name).at(a, index)
            np.testing.assert_array_equal(a.numpy(), x)
            np.testing.assert_array_equal(view.numpy(), x[::-1])
        else:
            with pytest.raises((TypeError, ValueError)):
                getattr(lg, name).at(a, index)
                a.numpy()


def test_unary_at_with_repeated_indices_applies_repeatedly():
    x = np.arange(5.0)
    a = lg.asarray(x.copy())
    np.negative.at(x, [0, 1, 1, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lg.LazygraphFallbackWarning)
        lg.negative.at(a, [0, 1, 1, 3])
    np.testing.assert_array_equal(a.numpy(), x)
    with pytest.raises(ValueError, match="second operand provided when ufunc is unary"):
        lg.negative.at(a, [0], 1.0)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.sampled_from([(), (0,), (1,), (5,), (2, 3), (3, 0)]),
    new_shape=st.sampled_from([(), 0, 4, (0, 2), (3, 5), (2, 2, 2), (7,)]),
    dtype=st.sampled_from([np.bool_, np.int8, np.float64, np.complex64]),
    reverse=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_resize_function_matches_numpy(shape, new_shape, dtype, reverse, seed):
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)
    if reverse and x.ndim:
        x = x[::-1]  # a view with a negative stride
    with warnings.catch_warnings():
        warnings.simplefilter("error", lg.LazygraphFallbackWarning)  # recorded, no fallback
        got = lg.resize(lg.asarray(x), new_shape)
        through_numpy = np.resize(lg.asarray(x), new_shape)
    want = np.resize(x, new_shape)
    for r in (got, through_numpy):
        assert isinstance(r, lg.Array)
        assert r.shape == want.shape and r.dtype == want.dtype
        np.testing.assert_array_equal(r.numpy(), want)


def test_resize_negative_shape_raises_like_numpy():
    with pytest.raises(ValueError, match="non-negative"):
        np.resize(np.arange(3), (2, -1))
    with pytest.raises(ValueError, match="non-negative"):
        lg.resize(lg.arange(3), (2, -1))
