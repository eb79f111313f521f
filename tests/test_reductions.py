"""Reductions and scans against NumPy: axis None/int/negative/tuple, keepdims, dtype=, ddof.

Empty reductions without an identity (max/min/argmax/argmin) must raise while recording,
as NumPy raises.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import arrays, assert_matches, check, dtypes, shapes

import lazygraph as lg

# Evaluating an empty mean warns exactly as NumPy does ("Mean of empty slice").
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

REDUCE_ERRORS = (TypeError, ValueError, IndexError)  # AxisError is both ValueError and IndexError

REDUCTIONS = ["sum", "prod", "mean", "var", "std", "max", "min", "any", "all"]
NP_REDUCTIONS = {
    "sum": np.sum,
    "prod": np.prod,
    "mean": np.mean,
    "var": np.var,
    "std": np.std,
    "max": np.max,
    "min": np.min,
    "any": np.any,
    "all": np.all,
}
WITH_DTYPE = {"sum", "prod", "mean", "var", "std"}


@st.composite
def axis_arg(draw, ndim: int, allow_tuple: bool = True, allow_invalid: bool = True):
    kinds = ["none", "tuple"] if allow_tuple else ["none"]
    if ndim:
        kinds += ["int", "int"]
    if allow_invalid:
        kinds.append("invalid")
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    if kind == "tuple":
        return draw(hnp.valid_tuple_axes(ndim))
    return draw(st.sampled_from([ndim, -ndim - 1, (0, 0) if ndim else 1]))


def reduction_input(special: bool | None = None):
    return arrays(dtypes, shapes(max_dims=4), special=True if special is None else special)


@pytest.mark.parametrize("name", REDUCTIONS)
@given(data=st.data())
def test_reduction_function_and_method(name, data):
    x = data.draw(reduction_input(special=data.draw(st.booleans())))
    axis = data.draw(axis_arg(x.ndim))
    keepdims = data.draw(st.booleans())
    kwargs = {"axis": axis, "keepdims": keepdims}
    if name in WITH_DTYPE and data.draw(st.booleans()):
        kwargs["dtype"] = data.draw(
            st.sampled_from(
                [np.float32, np.float64]
                if name in ("var", "std")
                else [np.int32, np.int64, np.float32, np.float64, np.bool_]
            )
        )
    if name in ("var", "std") and data.draw(st.booleans()):
        kwargs["ddof"] = data.draw(st.integers(0, 3))
    ref = NP_REDUCTIONS[name]
    lx = lg.asarray(x)
    check(lambda: ref(x, **kwargs), lambda: getattr(lg, name)(lx, **kwargs), REDUCE_ERRORS)
    check(lambda: ref(x, **kwargs), lambda: getattr(lx, name)(**kwargs), REDUCE_ERRORS)


@pytest.mark.parametrize("name", ["var", "std"])
@given(
    x=reduction_input(), correction=st.sampled_from([0, 1, 2, 0.5]), keepdims=st.booleans(), data=st.data()
)
@settings(max_examples=40)
def test_var_std_correction(name, x, correction, keepdims, data):
    axis = data.draw(axis_arg(x.ndim, allow_invalid=False))
    ref = NP_REDUCTIONS[name]
    check(
        lambda: ref(x, axis=axis, correction=correction, keepdims=keepdims),
        lambda: getattr(lg, name)(lg.asarray(x), axis=axis, correction=correction, keepdims=keepdims),
        REDUCE_ERRORS,
    )


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(data=st.data())
def test_arg_reductions(name, data):
    x = data.draw(reduction_input(special=data.draw(st.booleans())))
    axis = data.draw(axis_arg(x.ndim, allow_tuple=False))
    keepdims = data.draw(st.booleans())
    ref = getattr(np, name)
    lx = lg.asarray(x)
    check(
        lambda: ref(x, axis=axis, keepdims=keepdims),
        lambda: getattr(lg, name)(lx, axis=axis, keepdims=keepdims),
        REDUCE_ERRORS,
    )
    check(lambda: ref(x, axis=axis), lambda: getattr(lx, name)(axis=axis), REDUCE_ERRORS)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(data=st.data())
def test_scans(name, data):
    x = data.draw(reduction_input(special=data.draw(st.booleans())))
    axis = data.draw(axis_arg(x.ndim, allow_tuple=False))
    kwargs = {"axis": axis}
    if data.draw(st.booleans()):
        kwargs["dtype"] = data.draw(st.sampled_from([np.int32, np.int64, np.float32, np.float64]))
    ref = getattr(np, name)
    lx = lg.asarray(x)
    check(lambda: ref(x, **kwargs), lambda: getattr(lg, name)(lx, **kwargs), REDUCE_ERRORS)
    check(lambda: ref(x, **kwargs), lambda: getattr(lx, name)(**kwargs), REDUCE_ERRORS)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [None, 0, -1, 1])
def test_scans_zero_dim(name, axis):
    x = np.array(3.5)
    check(
        lambda: getattr(np, name)(x, axis=axis),
        lambda: getattr(lg, name)(lg.asarray(x), axis=axis),
        REDUCE_ERRORS,
    )


@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize(
    ("shape", "axis"), [((0,), None), ((0,), 0), ((2, 0), 1), ((2, 0), -1), ((0, 3), 0), ((0, 3), None)]
)
def test_empty_reduction_raises_at_record(name, shape, axis):
    x = np.zeros(shape)
    before = lg.debug.evaluation_stats()["evaluations"]
    with pytest.raises(ValueError):
        getattr(np, name)(x, axis=axis)
    with pytest.raises(ValueError, match=name):
        getattr(lg, name)(lg.asarray(x), axis=axis)
    assert lg.debug.evaluation_stats()["evaluations"] == before


@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin"])
def test_empty_along_other_axis_is_fine(name):
    x = np.zeros((0, 3))
    check(lambda: getattr(np, name)(x, axis=1), lambda: getattr(lg, name)(lg.asarray(x), axis=1))


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "any", "all", "max", "min"])
@pytest.mark.parametrize("axis", [None, (), 0, -1])
def test_zero_dim_reductions(name, axis):
    x = np.array(2.5)
    check(
        lambda: NP_REDUCTIONS[name](x, axis=axis),
        lambda: getattr(lg, name)(lg.asarray(x), axis=axis),
        REDUCE_ERRORS,
    )


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std", "any", "all"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_empty_reductions_with_identity(name, axis):
    x = np.zeros((0, 2), dtype=np.float32)
    check(
        lambda: NP_REDUCTIONS[name](x, axis=axis),
        lambda: getattr(lg, name)(lg.asarray(x), axis=axis),
        REDUCE_ERRORS,
    )


@given(x=arrays(st.sampled_from([np.float64, np.int64]), shapes(min_dims=1, max_dims=3)), data=st.data())
@settings(max_examples=30)
def test_numpy_functions_on_lazy_arrays(x, data):
    """np.sum(lazy) etc. dispatch through __array_function__ and stay lazy."""
    axis = data.draw(axis_arg(x.ndim, allow_invalid=False))
    lx = lg.asarray(x)
    for fn in (np.sum, np.prod, np.mean, np.any, np.all):
        r = fn(lx, axis=axis)
        assert isinstance(r, lg.Array)
        assert_matches(r, fn(x, axis=axis))
    r = np.cumsum(lx, axis=0)
    assert isinstance(r, lg.Array)
    assert_matches(r, np.cumsum(x, axis=0))


@given(x=arrays(st.sampled_from([np.float32, np.float64]), shapes(min_dims=1, max_dims=3, min_side=1)))
@settings(max_examples=30)
def test_reductions_of_views_and_after_writes(x):
    """Reduce a transposed, strided view; then write to the base and reduce again."""
    nb, lb = x.copy(), lg.asarray(x)
    before = lg.sum(lb.T[..., ::-1], axis=0)
    expected_before = np.sum(nb.T[..., ::-1], axis=0)
    nb[...] = nb * 2 + 1
    lb[...] = lb * 2 + 1
    assert_matches(before, expected_before)
    assert_matches(lg.max(lb.T, axis=-1, keepdims=True), np.max(nb.T, axis=-1, keepdims=True))
    assert_matches(lb.T.mean(), nb.T.mean())
