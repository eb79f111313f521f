"""The NumPy library layer's polynomials, running sums and differences (lazygraph.numlib_signal)
against NumPy; the differential check is tests/_support_numlib.py's `same`.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import lazy_inputs
from _support_numlib import SOME, any_array, dtypes_c, same
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    arrays,
    dtypes,
    float_dtypes,
    shapes,
)

import lazygraph as lg
from lazygraph import numlib as nl

# -- polynomials, running sums, differences ------------------------------------------------------


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 2, max_side=4)), any_array(dtypes_c, shapes(0, 2)))
def test_polyval(data, p, a):
    x = data.draw(lazy_inputs(a))
    lazy_p = data.draw(st.booleans())
    same(lambda: np.polyval(p, a), lambda: nl.polyval(lg.asarray(p) if lazy_p else p, x))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 2)), st.none() | st.integers(-1, 5), st.booleans())
def test_vander(data, a, N, increasing):
    x = data.draw(lazy_inputs(a))
    same(lambda: np.vander(a, N, increasing), lambda: nl.vander(x, N, increasing))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3)), st.booleans())
def test_cumulative(data, a, initial):
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-3, 2))
    dtype = data.draw(st.sampled_from([None, np.float64, np.int64]))
    if a.dtype.kind == "c" and dtype is not None:
        dtype = None
    for name in ("cumulative_sum", "cumulative_prod"):
        same(
            lambda name=name: getattr(np, name)(a, axis=axis, dtype=dtype, include_initial=initial),
            lambda name=name: getattr(nl, name)(x, axis=axis, dtype=dtype, include_initial=initial),
        )


@SOME
@given(st.data(), any_array(dtypes, shapes(0, 3)), st.integers(1, 2))
def test_gradient(data, a, edge_order):
    x = data.draw(lazy_inputs(a))
    axis = data.draw(st.none() | st.integers(-a.ndim - 1, max(a.ndim - 1, 0)))
    spacing = data.draw(st.sampled_from([(), (2,), (0.5,), (np.float64(3.0),)]))
    same(
        lambda: np.gradient(a, *spacing, axis=axis, edge_order=edge_order),
        lambda: nl.gradient(x, *spacing, axis=axis, edge_order=edge_order),
    )


@SOME
@given(
    st.data(),
    any_array(float_dtypes | st.just(np.dtype(np.int64)), shapes(0, 2)),
    st.integers(1, 5),
    st.booleans(),
)
def test_interp(data, xv, n, lazy_xp):
    xp = np.sort(data.draw(arrays(np.float64, (n,), special=False)))
    if n > 2 and data.draw(st.booleans()):
        xp[1] = xp[2]  # a repeated sample point
    fp = data.draw(arrays(np.float64, (n,), special=data.draw(st.booleans())))
    if data.draw(st.booleans()):
        xv = np.concatenate([np.ravel(xv).astype(np.float64), xp, [np.nan, np.inf, -np.inf]])
    left, right = data.draw(st.sampled_from([(None, None), (-100.0, 100.0), (np.nan, None)]))
    x = data.draw(lazy_inputs(xv))
    xpl, fpl = (lg.asarray(xp), lg.asarray(fp)) if lazy_xp else (xp, fp)
    same(lambda: np.interp(xv, xp, fp, left, right), lambda: nl.interp(x, xpl, fpl, left, right))


def test_interp_errors_and_complex():
    with pytest.raises(ValueError, match="interp: array of sample points is empty"):
        nl.interp(lg.arange(3), [], [])
    with pytest.raises(ValueError, match="same length"):
        nl.interp(lg.arange(3), [1, 2], [1])
    with pytest.raises(NotImplementedError, match="period"):
        nl.interp(lg.arange(3), [1, 2], [1, 2], period=3)
    xp, fp = np.array([0.0, 1.0, 3.0]), np.array([1 + 2j, -1j, 4.0])
    xv = np.array([-1.0, 0.0, 0.5, 2.0, 3.0, 9.0])
    np.testing.assert_allclose(nl.interp(xv, xp, fp).numpy(), np.interp(xv, xp, fp), rtol=1e-15)


@SOME
@given(
    st.data(),
    any_array(dtypes_c, shapes(0, 2, max_side=5)),
    any_array(dtypes_c, shapes(0, 1, max_side=5)),
    st.sampled_from(["full", "same", "valid", "f", "bad"]),
)
def test_convolve_correlate(data, a, v, mode):
    x, y = data.draw(lazy_inputs(a)), data.draw(lazy_inputs(v))
    tol = {"rtol": 1e-5, "atol": 1e-5}
    if "c" in a.dtype.kind + v.dtype.kind and not (np.isfinite(a).all() and np.isfinite(v).all()):
        return  # non-finite complex products: NumPy's dot kernels give inf or nan by their own order
    same(lambda: np.convolve(a, v, mode), lambda: nl.convolve(x, y, mode), **tol)
    same(lambda: np.correlate(a, v, mode), lambda: nl.correlate(x, y, mode), **tol)


def test_convolve_no_zero_times_inf():
    a, v = np.array([1.0, np.inf, 2.0]), np.array([1.0, 2.0, 3.0])
    for mode in ("full", "same", "valid"):
        np.testing.assert_array_equal(nl.convolve(a, v, mode).numpy(), np.convolve(a, v, mode))
        np.testing.assert_array_equal(nl.correlate(a, v, mode).numpy(), np.correlate(a, v, mode))
