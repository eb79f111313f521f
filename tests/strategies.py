"""Shared hypothesis strategies and differential-testing helpers for the lazy core.

Values are chosen so that the NumPy reference is well defined: integers stay small (so
`**` and `<<` do not run into overflow corner cases), floats are finite unless a test asks
for nan/inf, and shapes include 0-d arrays and dimensions of size 0 and 1.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazygraph as lg

# -- dtypes ---------------------------------------------------------------------------

MAIN_DTYPES = [np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32, np.float64)]
EXTRA_DTYPES = [np.dtype(np.int8), np.dtype(np.uint8)]
ALL_DTYPES = MAIN_DTYPES + EXTRA_DTYPES
INT_DTYPES = [np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.int64)]
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float64)]
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES

# int8/uint8 appear occasionally (2 in 17 draws).
dtypes = st.sampled_from(MAIN_DTYPES * 3 + EXTRA_DTYPES)
int_dtypes = st.sampled_from(INT_DTYPES)
float_dtypes = st.sampled_from(FLOAT_DTYPES)
numeric_dtypes = st.sampled_from(NUMERIC_DTYPES)
int_or_bool_dtypes = st.sampled_from([np.dtype(np.bool_), *INT_DTYPES])

# -- shapes ---------------------------------------------------------------------------

MAX_DIMS = 4
MAX_SIDE = 4


def shapes(min_dims: int = 0, max_dims: int = MAX_DIMS, min_side: int = 0, max_side: int = MAX_SIDE):
    """Shapes including 0-d, size-0 and size-1 dimensions."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def nonempty_shapes(min_dims: int = 0, max_dims: int = MAX_DIMS, max_side: int = MAX_SIDE):
    return shapes(min_dims, max_dims, 1, max_side)


def broadcast_shapes(num: int = 2, min_dims: int = 0, max_dims: int = MAX_DIMS, min_side: int = 0):
    """Tuples of `num` mutually broadcastable shapes."""
    return hnp.mutually_broadcastable_shapes(
        num_shapes=num, min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=MAX_SIDE
    ).map(lambda bs: bs.input_shapes)


# -- element values -------------------------------------------------------------------


def elements(dtype: Any, special: bool = False, lo: int | None = None, hi: int | None = None):
    """Element strategy: small integers, finite floats (nan/inf when `special`)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind == "u":
        return st.integers(0 if lo is None else max(lo, 0), 15 if hi is None else hi)
    if dtype.kind == "i":
        return st.integers(-8 if lo is None else lo, 8 if hi is None else hi)
    width = dtype.itemsize * 8
    finite = st.floats(-10.0, 10.0, width=width, allow_subnormal=False) | st.sampled_from(
        [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, 3.0]
    )
    if special:
        return finite | st.sampled_from([math.nan, math.inf, -math.inf])
    return finite


def arrays(dtype: Any, shape: Any, special: bool = False, lo: int | None = None, hi: int | None = None):
    """NumPy arrays of `dtype` and `shape` (either may be a strategy)."""
    if isinstance(dtype, st.SearchStrategy):
        return dtype.flatmap(lambda d: arrays(d, shape, special, lo, hi))
    return hnp.arrays(dtype, shape, elements=elements(dtype, special, lo, hi))


@st.composite
def array_and_dtype(draw, dtype_st=dtypes, shape_st=None, special: bool | None = None):
    dt = draw(dtype_st)
    shape = draw(shape_st if shape_st is not None else shapes())
    sp = draw(st.booleans()) if special is None else special
    return draw(arrays(dt, shape, special=sp))


def any_arrays(dtype_st=dtypes, shape_st=None, special: bool | None = False):
    return array_and_dtype(dtype_st, shape_st, special)


# -- Python scalars (weak operands) -----------------------------------------------------

small_ints = st.integers(-5, 5)
py_ints = small_ints | st.sampled_from([0, 1, 2, 127, 300, -300, 2**40])
py_floats = st.floats(-10.0, 10.0) | st.sampled_from([0.0, 0.5, -2.5, 1e30])
py_floats_special = py_floats | st.sampled_from([math.nan, math.inf, -math.inf])
py_bools = st.booleans()
py_scalars = py_ints | py_floats | py_bools


# -- differential checking --------------------------------------------------------------

RECORD_ERRORS = (TypeError, ValueError, OverflowError, IndexError)


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing float results of the same NumPy kernel run twice."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        # a complex value's parts are floats of half its size: complex64 rounds like float32
        dtype = np.dtype(f"f{dtype.itemsize // 2}")
    if dtype == np.float16:
        return 2e-3, 1e-3
    if dtype == np.float32:
        return 2e-6, 1e-6
    return 1e-12, 1e-12


def assert_matches(
    actual: Any,
    expected: Any,
    exact_float: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """`actual` (a lazy Array) equals the NumPy value in shape, dtype and values (nan-aware)."""
    assert isinstance(actual, lg.Array), f"expected a lazygraph Array, got {type(actual).__name__}"
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    value = actual.numpy()
    assert isinstance(value, np.ndarray)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert_values(value, expected, exact_float=exact_float, rtol=rtol, atol=atol)


def assert_values(
    value: np.ndarray,
    expected: np.ndarray,
    exact_float: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    if expected.dtype.kind in "fc" and not exact_float:
        r, a = tolerance(expected.dtype)
        r = r if rtol is None else rtol
        a = a if atol is None else atol
        np.testing.assert_allclose(value, expected, rtol=r, atol=a, equal_nan=True)
    else:
        np.testing.assert_array_equal(value, expected, strict=True)


def reference(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """Run the NumPy program; (result, None) or (None, exception). Warnings are silenced."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(), None
        except Exception as e:  # noqa: BLE001 - any NumPy error is the expected outcome
            return None, e


def check(
    np_fn: Callable[[], Any], lg_fn: Callable[[], Any], errors: tuple = RECORD_ERRORS, **kw: Any
) -> Any:
    """Differential check: NumPy raising means lazygraph raises while recording.

    `lg_fn` must only record (it is called before anything is evaluated); its result is
    then evaluated and compared with NumPy's.
    """
    expected, err = reference(np_fn)
    if err is not None:
        before = lg.debug.evaluation_stats()["evaluations"]
        with pytest.raises(errors):
            lg_fn()
        assert lg.debug.evaluation_stats()["evaluations"] == before, "raised only after evaluating"
        return None
    actual = lg_fn()
    assert_matches(actual, expected, **kw)
    return actual


def lazy(x: Any) -> Any:
    """A lazy copy of a NumPy array; Python scalars stay as they are."""
    return lg.asarray(x) if isinstance(x, np.ndarray) else x
