"""The NumPy library layer's comparisons, statistics and elementwise functions
(lazygraph.numlib_math) against NumPy; the differential check is tests/_support_numlib.py's `same`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _support import lazy_inputs
from _support_numlib import COMPLEX, SOME, any_array, dtypes_c, same
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    arrays,
    broadcast_shapes,
    dtypes,
    float_dtypes,
    numeric_dtypes,
    reference,
    shapes,
)

import lazygraph as lg
from lazygraph import numlib as nl

# -- comparison and statistics -------------------------------------------------------------------


@SOME
@given(st.data(), broadcast_shapes(2), st.booleans())
def test_isclose_allclose_array_equal(data, bshapes, equal_nan):
    a = data.draw(any_array(dtypes_c, st.just(bshapes[0]), special=True))
    b = data.draw(any_array(dtypes_c, st.just(bshapes[1]), special=True))
    if data.draw(st.booleans()):
        b = (a + data.draw(st.sampled_from([0, 1e-9, 1e-3]))).astype(a.dtype) if a.dtype != bool else a
    x, y = data.draw(lazy_inputs(a)), data.draw(lazy_inputs(b))
    rtol, atol = data.draw(st.sampled_from([(1e-5, 1e-8), (0.0, 0.0), (0.1, 1)]))
    same(lambda: np.isclose(a, b, rtol, atol, equal_nan), lambda: nl.isclose(x, y, rtol, atol, equal_nan))
    expected, err = reference(lambda: np.allclose(a, b, rtol, atol, equal_nan))
    if err is None:
        assert nl.allclose(x, y, rtol, atol, equal_nan) is expected
    assert nl.array_equal(x, y, equal_nan) is np.array_equal(a, b, equal_nan)
    assert nl.array_equal(x, x, equal_nan) is np.array_equal(a, a, equal_nan)


def test_isclose_scalars():
    same(lambda: np.isclose(1.0, 1.0 + 1e-9), lambda: nl.isclose(1.0, 1.0 + 1e-9))
    same(lambda: np.isclose(3, np.array([3, 4])), lambda: nl.isclose(3, lg.asarray(np.array([3, 4]))))
    assert nl.allclose([1.0, np.inf], [1.0, np.inf]) is True


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3), special=None), st.booleans())
def test_count_nonzero_ptp(data, a, keepdims):
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-3, 2) | st.just((0, -1)))
    if axis is not None or keepdims:
        same(
            lambda: np.count_nonzero(a, axis=axis, keepdims=keepdims),
            lambda: nl.count_nonzero(x, axis=axis, keepdims=keepdims),
        )
    else:  # NumPy gives a Python int here; lazygraph a lazy 0-d intp array
        got = nl.count_nonzero(x)
        assert got.shape == () and got.dtype == np.intp and int(got) == np.count_nonzero(a)
    if a.dtype.kind != "c":
        same(lambda: np.ptp(a, axis, keepdims=keepdims), lambda: nl.ptp(x, axis, keepdims))


@SOME
@given(
    st.data(),
    any_array(numeric_dtypes | st.sampled_from(COMPLEX), shapes(0, 3)),
    st.booleans(),
    st.booleans(),
)
def test_average(data, a, returned, keepdims):
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-a.ndim - 1, a.ndim) | st.just((0, -1)))
    form = data.draw(st.sampled_from(["none", "full", "axis"]))
    w = None
    if form == "full":
        w = data.draw(arrays(np.float64, a.shape, special=False)) + 20.0
    elif form == "axis" and isinstance(axis, int) and -a.ndim <= axis < a.ndim:
        w = data.draw(arrays(data.draw(numeric_dtypes), (a.shape[axis],), lo=1, hi=5))
        w = np.abs(w) + 1
    tol = {"rtol": 1e-5, "atol": 1e-6}
    wl = None if w is None else data.draw(lazy_inputs(w))
    if isinstance(reference(lambda: np.average(a, axis, w))[1], ZeroDivisionError):
        return  # weights summing to zero: see test_average_zero_weights_give_nan
    same(
        lambda: np.average(a, axis, w, returned, keepdims=keepdims),
        lambda: nl.average(x, axis, wl, returned, keepdims=keepdims),
        **tol,
    )


def test_average_zero_weights_give_nan():
    """NumPy raises ZeroDivisionError; the lazy version cannot see values and gives 0/0."""
    with pytest.raises(ZeroDivisionError):
        np.average([1.0, 2.0], weights=[0.0, 0.0])
    assert math.isnan(float(nl.average(lg.asarray([1.0, 2.0]), weights=[0.0, 0.0])))


@SOME
@given(
    st.data(),
    any_array(numeric_dtypes | st.sampled_from(COMPLEX), shapes(0, 2, max_side=4)),
    st.booleans(),
    st.booleans(),
)
def test_cov_corrcoef(data, m, rowvar, bias):
    x = data.draw(lazy_inputs(m))
    y = data.draw(st.none() | any_array(float_dtypes, st.just(m.shape)))
    yl = None if y is None else data.draw(lazy_inputs(y))
    ddof = data.draw(st.sampled_from([None, 0, 1, 2]))
    tol = {"rtol": 1e-4, "atol": 1e-5}
    same(lambda: np.cov(m, y, rowvar, bias, ddof), lambda: nl.cov(x, yl, rowvar, bias, ddof), **tol)
    same(
        lambda: np.cov(m, y, rowvar, dtype=np.float32),
        lambda: nl.cov(x, yl, rowvar, dtype=np.float32),
        rtol=1e-3,
        atol=1e-3,
    )
    n = (m.shape[1] if rowvar else m.shape[0]) if m.ndim == 2 else 0
    if n >= 1:
        fw = data.draw(arrays(np.int64, (n,), lo=1, hi=3))  # zero-sum weights: see average
        aw = data.draw(arrays(np.float64, (n,))) ** 2 + 0.5
        same(
            lambda: np.cov(m, None, rowvar, bias, ddof, fw, aw),
            lambda: nl.cov(x, None, rowvar, bias, ddof, fw, lg.asarray(aw)),
            **tol,
        )
    if m.dtype.kind != "c":
        same(lambda: np.corrcoef(m, y, rowvar), lambda: nl.corrcoef(x, yl, rowvar), **tol)


def test_cov_weight_errors():
    m = lg.asarray(np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match="fweights must be integer"):
        nl.cov(m, fweights=[1.5, 1, 1])
    with pytest.raises(ValueError, match="aweights cannot be negative"):
        nl.cov(m, aweights=[-1.0, 1, 1])
    with pytest.raises(RuntimeError, match="incompatible numbers of samples"):
        nl.cov(m, fweights=[1, 1])


NAN_FUNCS = ["nansum", "nanprod", "nanmean", "nanvar", "nanstd", "nanmax", "nanmin"]


@SOME
@given(
    st.data(), any_array(numeric_dtypes | st.just(np.dtype(bool)), shapes(0, 3), special=True), st.booleans()
)
def test_nan_reductions(data, a, keepdims):
    if a.dtype.kind == "f" and a.size and data.draw(st.booleans()):
        a = a.copy()
        a[(0,) * (a.ndim - 1)] = np.nan if a.ndim else a  # an all-NaN slice (a row)
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-3, 2) | st.just((0, -1)))
    tol = {"rtol": 1e-5, "atol": 1e-6}
    for name in NAN_FUNCS:
        same(
            lambda name=name: getattr(np, name)(a, axis=axis, keepdims=keepdims),
            lambda name=name: getattr(nl, name)(x, axis=axis, keepdims=keepdims),
            **tol,
        )
    ddof = data.draw(st.sampled_from([0, 1, 2]))
    dtype = data.draw(st.sampled_from([None, np.float64]))
    same(lambda: np.nanvar(a, axis, dtype, ddof=ddof), lambda: nl.nanvar(x, axis, dtype, ddof=ddof), **tol)
    same(lambda: np.nanmean(a, axis, dtype), lambda: nl.nanmean(x, axis, dtype), **tol)


@SOME
@given(st.data(), any_array(numeric_dtypes | st.sampled_from(COMPLEX), shapes(0, 3), special=True))
def test_nan_reductions_complex_and_dtypes(data, a):
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-3, 2))
    tol = {"rtol": 1e-5, "atol": 1e-6}
    for name in ("nansum", "nanmean", "nanvar") if a.dtype.kind != "c" else ("nansum", "nanmean"):
        same(
            lambda name=name: getattr(np, name)(a, axis=axis),
            lambda name=name: getattr(nl, name)(x, axis=axis),
            **tol,
        )


@SOME
@given(st.data(), any_array(numeric_dtypes, shapes(0, 3), special=True), st.booleans())
def test_nanargmax_nanargmin(data, a, keepdims):
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-3, 2))
    for name in ("nanargmax", "nanargmin"):
        expected, err = reference(lambda name=name: getattr(np, name)(a, axis=axis, keepdims=keepdims))
        if err is not None:  # all-NaN slices: ValueError, found by evaluating the mask
            with pytest.raises(type(err)):
                getattr(nl, name)(x, axis=axis, keepdims=keepdims)
            continue
        got = getattr(nl, name)(x, axis=axis, keepdims=keepdims)
        assert got.dtype == expected.dtype and got.shape == np.shape(expected)
        np.testing.assert_array_equal(got.numpy(), expected)


def test_nanargmax_all_nan_raises_valueerror():
    x = lg.asarray(np.array([[1.0, np.nan], [np.nan, np.nan]]))
    with pytest.raises(ValueError, match="All-NaN slice"):
        nl.nanargmax(x, axis=1)
    y = lg.asarray(np.array([[1.0, np.nan], [np.nan, 2.0]]))
    assert nl.nanargmax(y, axis=0).tolist() == [0, 1]
    assert int(nl.nanargmin(lg.asarray(np.array([np.nan, 2.0, 1.0])))) == 2


def test_nan_all_nan_slices_give_nan_without_raising():
    a = np.array([[np.nan, np.nan], [1.0, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("nanmean", "nanmax", "nanmin", "nanvar", "nanstd"):
            np.testing.assert_array_equal(
                getattr(nl, name)(lg.asarray(a), axis=1).numpy(), getattr(np, name)(a, axis=1)
            )


@SOME
@given(st.data(), any_array(numeric_dtypes | st.just(np.dtype(bool)), shapes(0, 3), special=True))
def test_nan_to_num(data, a):
    x = data.draw(lazy_inputs(a))
    nan, posinf, neginf = data.draw(
        st.sampled_from([(0.0, None, None), (-1.0, 5.0, -5.0), (np.nan, 1e300, None)])
    )
    same(
        lambda: np.nan_to_num(a, nan=nan, posinf=posinf, neginf=neginf),
        lambda: nl.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf),
    )


def test_nan_to_num_in_place():
    a = np.array([1.0, np.nan, -np.inf])
    x = lg.asarray(a)
    r = nl.nan_to_num(x, copy=False)
    assert r is x
    np.testing.assert_array_equal(x.numpy(), np.nan_to_num(a))
    with pytest.raises(TypeError, match="complex"):
        nl.nan_to_num(lg.asarray(np.array([1j])))


# -- elementwise ---------------------------------------------------------------------------------


@SOME
@given(st.data(), broadcast_shapes(2))
def test_elementwise(data, bshapes):
    a = data.draw(any_array(dtypes, st.just(bshapes[0]), special=True))
    b = data.draw(any_array(dtypes, st.just(bshapes[1]), special=True))
    x, y = data.draw(lazy_inputs(a)), data.draw(lazy_inputs(b))
    for name in ("copysign", "heaviside", "fmax", "fmin"):
        same(lambda name=name: getattr(np, name)(a, b), lambda name=name: getattr(nl, name)(x, y))
    same(lambda: np.fmax(a, 2.5), lambda: nl.fmax(x, 2.5))
    same(lambda: np.copysign(a, -0.0), lambda: nl.copysign(x, -0.0))
    same(lambda: np.signbit(a), lambda: nl.signbit(x))
    dt = reference(lambda: np.hypot(a, b))[0]
    if dt is not None:
        # within 2 ulp of NumPy's (a scaled square root, not libm's hypot)
        eps = np.finfo(dt.dtype).eps
        same(lambda: np.hypot(a, b), lambda: nl.hypot(x, y), rtol=2 * eps, atol=0)
    else:
        same(lambda: np.hypot(a, b), lambda: nl.hypot(x, y))


def test_elementwise_special_values():
    z = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e-308, 3.0])
    zz = lg.asarray(z)
    for name in ("copysign", "fmax", "fmin", "heaviside"):
        got = getattr(nl, name)(zz[:, None], zz[None, :]).numpy()
        want = getattr(np, name)(z[:, None], z[None, :])
        np.testing.assert_array_equal(got, want, err_msg=name)
        if name in ("copysign", "heaviside"):  # fmax/fmin of +0 and -0: NumPy's own sign varies by length
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)
    # fmax/fmin of equal values return the first, as NumPy's scalar loop (its SIMD loop differs)
    assert np.signbit(nl.fmax(-0.0, 0.0).numpy()) and not np.signbit(nl.fmin(0.0, -0.0).numpy())
    np.testing.assert_allclose(
        nl.hypot(zz[:, None], zz[None, :]).numpy(), np.hypot(z[:, None], z[None, :]), rtol=4e-16
    )
    np.testing.assert_array_equal(nl.signbit(zz).numpy(), np.signbit(z))
    assert nl.signbit(-3).dtype == np.bool_ and bool(nl.signbit(-3))
