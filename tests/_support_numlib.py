"""Strategies and the differential check shared by the NumPy library tests (tests/test_numlib*.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _support import evaluations
from hypothesis import settings
from hypothesis import strategies as st
from strategies import RECORD_ERRORS, arrays, assert_values, dtypes, reference, shapes

import lazygraph as lg

FEW = settings(max_examples=25)
SOME = settings(max_examples=45)
COMPLEX = [np.dtype(np.complex64), np.dtype(np.complex128)]
dtypes_c = st.sampled_from(
    [*[np.dtype(t) for t in (np.bool_, np.int8, np.int64, np.float32, np.float64)], *COMPLEX]
)


def complex_arrays(dtype: np.dtype, shape, special: bool = False):
    parts = arrays(np.float64, shape, special=special)

    def join(p):
        out = np.empty(p[0].shape, dtype)
        out.real, out.imag = p
        return out

    return st.tuples(parts, parts).map(join)


def any_array(dtype_st=dtypes, shape_st=None, special=None):
    """NumPy arrays of drawn dtype and shape; complex dtypes included when dtype_st has them."""
    shape_st = shapes() if shape_st is None else shape_st

    @st.composite
    def draw_it(draw):
        dt = draw(dtype_st)
        shape = draw(shape_st)
        sp = draw(st.booleans()) if special is None else special
        if dt.kind == "c":
            return draw(complex_arrays(dt, shape, sp))
        return draw(arrays(dt, shape, special=sp))

    return draw_it()


def same(np_fn, lg_fn, errors=RECORD_ERRORS, **kw) -> None:
    """lg_fn records (no evaluation) what np_fn computes; both raise alike. Tuples/lists compare
    element by element, evaluated as one graph."""
    expected, err = reference(np_fn)
    before = evaluations()
    if err is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(errors):
                lg_fn()
        assert evaluations() == before, f"raised only after evaluating (NumPy: {err!r})"
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        actual = lg_fn()
    assert evaluations() == before, "recording evaluated something"
    many = isinstance(expected, (tuple, list))
    acts = list(actual) if many else [actual]
    exps = [np.asarray(e) for e in expected] if many else [np.asarray(expected)]
    assert isinstance(actual, tuple if isinstance(expected, tuple) else type(actual)), (
        type(actual),
        type(expected),
    )
    assert len(acts) == len(exps)
    for act in acts:
        assert isinstance(act, lg.Array), type(act)
    values = lg.eval(*acts) if acts else ()
    for act, val, exp in zip(acts, values, exps):
        assert act.shape == exp.shape, (act.shape, exp.shape)
        assert act.dtype == exp.dtype, (act.dtype, exp.dtype)
        assert_values(val, exp, **kw)
