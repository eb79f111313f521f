"""Sorting, searching, counting, set functions and quantiles (lazygraph.numlib_sort) against NumPy.

Lazy functions must record without evaluating; evaluation points (unique, nonzero, ...) must
evaluate exactly once. Inputs are sometimes views with negative strides or steps.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _support import evaluations, lazy_inputs
from gradcheck import check_grad
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import RECORD_ERRORS, arrays, assert_values, dtypes, reference, shapes

import lazygraph as lg

FEW = settings(max_examples=25, deadline=None)
SOME = settings(max_examples=40, deadline=None)
real_dtypes = st.sampled_from(
    [np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64)]
)


def same(np_fn, lg_fn, evals: int = 0, loose_dtype: bool = False, **kw) -> None:
    """lg_fn records (`evals` evaluations: 0 for lazy functions) what np_fn computes; both raise alike.

    loose_dtype: NumPy's float dtype depends on values there (see numlib_quantile): any float passes.
    """
    expected, err = reference(np_fn)
    before = evaluations()
    if err is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RECORD_ERRORS):
                lg_fn()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = lg_fn()
    assert evaluations() - before == evals, f"{evaluations() - before} evaluations, expected {evals}"
    many = isinstance(expected, tuple)
    acts = list(actual) if many else [actual]
    exps = [np.asarray(e) for e in expected] if many else [np.asarray(expected)]
    assert len(acts) == len(exps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = lg.eval(*acts) if acts else ()
    for act, val, exp in zip(acts, values, exps):
        assert isinstance(act, lg.Array), type(act)
        assert act.shape == exp.shape, (act.shape, exp.shape)
        if loose_dtype and act.dtype != exp.dtype:
            assert act.dtype.kind == exp.dtype.kind == "f", (act.dtype, exp.dtype)
            val, exp = np.asarray(val, np.float64), exp.astype(np.float64)
        assert act.dtype == exp.dtype or loose_dtype, (act.dtype, exp.dtype)
        assert_values(np.asarray(val), exp, **kw)


def any_array(dtype_st=dtypes, shape_st=None, special=True):
    return st.tuples(dtype_st, shapes() if shape_st is None else shape_st).flatmap(
        lambda t: arrays(t[0], t[1], special=special)
    )


def axis_for(data, a: np.ndarray, none: bool = True):
    choices = st.integers(-a.ndim, a.ndim - 1) if a.ndim else st.just(-1)
    return data.draw(st.none() | choices if none else choices, label="axis")


def descending_ref(fn, a, axis):
    """The Array API's stable descending order (equal elements keep their order; NaN first)."""
    if axis is None or (a.ndim == 0 and fn is np.argsort):  # NumPy's argsort reads 0-d as 1-d
        np.empty((1,))[..., None].sum(axis=axis) if axis is not None else None  # the axis must fit 1-d
        a, axis = a.reshape(-1), 0
    if fn is np.sort:
        return np.flip(np.sort(np.flip(a, axis), axis=axis, kind="stable"), axis)
    return (a.shape[axis] - 1) - np.flip(np.argsort(np.flip(a, axis), axis=axis, kind="stable"), axis)


# -- sort, argsort, partition ------------------------------------------------------------------------


@SOME
@given(st.data(), any_array())
def test_sort_argsort(data, a):
    axis = axis_for(data, a)
    x = data.draw(lazy_inputs(a))
    desc = data.draw(st.booleans(), label="descending")
    for fn, lfn in ((np.sort, lg.sort), (np.argsort, lg.argsort)):
        if desc:
            same(lambda: descending_ref(fn, a, axis), lambda: lfn(x, axis=axis, descending=True))
        else:
            same(lambda: fn(a, axis=axis, kind="stable"), lambda: lfn(x, axis=axis))
            same(lambda: fn(a, axis=axis, kind="stable"), lambda: getattr(np, fn.__name__)(x, axis=axis))


@SOME
@given(st.data(), any_array(shape_st=shapes(min_dims=1)))
def test_partition_contract(data, a):
    axis = axis_for(data, a, none=False)
    n = a.shape[axis]
    kth = data.draw(st.integers(-n, n - 1) if n else st.just(0), label="kth")
    x = data.draw(lazy_inputs(a))
    p, err = reference(lambda: np.partition(a, kth, axis=axis))
    if err is not None:
        with pytest.raises(RECORD_ERRORS):
            lg.partition(x, kth, axis=axis)
        return
    before = evaluations()
    part, ipart = lg.partition(x, kth, axis=axis), lg.argpartition(x, kth, axis=axis)
    assert evaluations() == before
    got, idx = lg.eval(part, ipart)
    assert got.shape == a.shape and got.dtype == a.dtype and idx.dtype == np.intp
    if a.size == 0:
        return
    k = kth % n
    ref = np.sort(a, axis=axis)
    kk = np.take(got, [k], axis=axis)
    assert_values(kk, np.take(ref, [k], axis=axis), exact_float=True)
    before_k = np.take(got, range(k), axis=axis)
    after_k = np.take(got, range(k + 1, n), axis=axis)
    if a.dtype.kind != "f":  # NaN-free: the order relations of the contract
        assert (before_k <= kk).all() and (after_k >= kk).all()
    assert_values(np.take_along_axis(a, idx, axis=axis), got, exact_float=True)
    assert_values(
        np.sort(idx, axis=axis),
        np.broadcast_to(
            np.arange(n).reshape([-1 if d == axis % a.ndim else 1 for d in range(a.ndim)]), a.shape
        ),
        exact_float=True,
    )


def test_sort_is_stable_and_nan_last():
    a = np.array([2.0, np.nan, 1.0, 2.0, -0.0, 0.0, np.nan, -np.inf])
    i = lg.argsort(lg.asarray(a)).numpy()
    np.testing.assert_array_equal(i, np.argsort(a, kind="stable"))
    d = lg.argsort(lg.asarray(a), descending=True).numpy()
    np.testing.assert_array_equal(d, [1, 6, 0, 3, 2, 4, 5, 7])


@pytest.mark.parametrize("kth", [5, -6, True, 1.5, [[1]]])
def test_partition_errors_at_record_time(kth):
    x = lg.asarray(np.arange(5))
    with pytest.raises((ValueError, TypeError)):
        np.partition(np.arange(5), kth)
    with pytest.raises((ValueError, TypeError)):
        lg.partition(x, kth)


def test_sort_errors():
    with pytest.raises(np.exceptions.AxisError):
        lg.sort(lg.asarray(np.array(1.0)))
    assert lg.argsort(lg.asarray(np.array(1.0))).shape == (1,)
    with pytest.raises(ValueError, match="sort kind"):
        lg.sort(lg.asarray(np.arange(3)), kind="bogus")


# -- searching -----------------------------------------------------------------------------------------


@SOME
@given(st.data(), any_array(real_dtypes, shapes(1, 1)), any_array(real_dtypes, shapes(0, 2)))
def test_searchsorted(data, a, v):
    side = data.draw(st.sampled_from(["left", "right"]))
    use_sorter = data.draw(st.booleans())
    if use_sorter:
        sorter = np.argsort(a, kind="stable")
        same(
            lambda: np.searchsorted(a, v, side, sorter),
            lambda: lg.searchsorted(lg.asarray(a), lg.asarray(v), side, sorter),
        )
    else:
        s = np.sort(a)
        x = data.draw(lazy_inputs(s))
        same(lambda: np.searchsorted(s, v, side), lambda: lg.searchsorted(x, v, side))
        same(lambda: s.searchsorted(v, side), lambda: x.searchsorted(v, side))


@FEW
@given(st.data(), any_array(real_dtypes, shapes(0, 2)), any_array(real_dtypes, shapes(1, 1, 1)))
def test_digitize(data, x, bins):
    bins = np.sort(bins) if data.draw(st.booleans()) else np.sort(bins)[::-1]
    right = data.draw(st.booleans())
    same(lambda: np.digitize(x, bins, right), lambda: lg.digitize(lg.asarray(x), bins, right))
    # lazy bins: their monotonicity is evaluated (one evaluation)
    same(
        lambda: np.digitize(x, bins, right),
        lambda: lg.digitize(lg.asarray(x), unevaluated(lg.asarray(bins)), right),
        evals=1,
    )


def test_digitize_rejects_unsorted_bins():
    with pytest.raises(ValueError, match="monotonically"):
        lg.digitize(lg.asarray(np.arange(3.0)), np.array([1.0, 3.0, 2.0]))


# -- quantiles -----------------------------------------------------------------------------------------

QS = st.sampled_from([50, 0, 100, 37.5, [5, 50, 95], [[10.0, 90.0]], np.array([25.0, 75.0], np.float32)])
METHODS = st.sampled_from(["linear", "linear", "lower", "higher", "nearest", "midpoint"])


@st.composite
def reduce_axes(draw, a: np.ndarray):
    if a.ndim == 0 or draw(st.booleans()):
        return None
    axes = draw(st.lists(st.integers(0, a.ndim - 1), min_size=1, max_size=a.ndim, unique=True))
    return axes[0] - a.ndim if len(axes) == 1 else tuple(axes)


@SOME
@given(
    st.data(),
    any_array(st.sampled_from([np.dtype(t) for t in (np.int8, np.int64, np.float32, np.float64, np.bool_)])),
    QS,
    METHODS,
)
def test_percentile_quantile(data, a, q, method):
    axis = data.draw(reduce_axes(a), label="axis")
    # NumPy's axis-tuple path cannot reshape empty arrays (reshape(..., -1)); lazygraph can
    assume(not (a.size == 0 and isinstance(axis, tuple)))
    keepdims = data.draw(st.booleans())
    x = data.draw(lazy_inputs(a))
    kw = {"axis": axis, "method": method, "keepdims": keepdims}
    same(lambda: np.percentile(a, q, **kw), lambda: lg.percentile(x, q, **kw))
    qq = np.asarray(q) / 100 if not isinstance(q, (int, float)) else q / 100
    same(lambda: np.quantile(a, qq, **kw), lambda: lg.quantile(x, qq, **kw))
    if np.ndim(q) > 1:  # NumPy's nan-functions misplace the axes of a 2-d q (moveaxis of axis -1)
        return
    # an all-NaN slice makes NumPy's nanpercentile dtype a's own (value-dependent)
    same(lambda: np.nanpercentile(a, q, **kw), lambda: lg.nanpercentile(x, q, **kw), loose_dtype=True)


@SOME
@given(
    st.data(),
    any_array(
        st.sampled_from(
            [np.dtype(t) for t in (np.int8, np.uint8, np.int64, np.float32, np.float64, np.bool_)]
        )
    ),
)
def test_median(data, a):
    axis = data.draw(reduce_axes(a), label="axis")
    assume(not (a.size == 0 and isinstance(axis, tuple)))
    keepdims = data.draw(st.booleans())
    x = data.draw(lazy_inputs(a))
    same(
        lambda: np.median(a, axis=axis, keepdims=keepdims), lambda: lg.median(x, axis=axis, keepdims=keepdims)
    )
    same(
        lambda: np.nanmedian(a, axis=axis, keepdims=keepdims),
        lambda: lg.nanmedian(x, axis=axis, keepdims=keepdims),
    )


def test_quantile_integer_q_takes_without_interpolation():
    a = np.arange(7, dtype=np.int32)[::-1]
    same(lambda: np.quantile(a, [0, 1]), lambda: lg.quantile(lg.asarray(a), [0, 1]))
    same(lambda: np.quantile(a, 1), lambda: lg.quantile(lg.asarray(a), 1))


def test_quantile_errors():
    x = lg.asarray(np.arange(4.0))
    with pytest.raises(ValueError, match="range"):
        lg.percentile(x, 101)
    with pytest.raises(ValueError, match="range"):
        lg.quantile(x, [-0.1])
    with pytest.raises(IndexError):
        lg.percentile(lg.zeros((0, 3)), 50, axis=0)
    with pytest.raises(ValueError):
        lg.median(x, out=x)  # shape () result into a (4,) array
    out = lg.zeros((2,), dtype=np.float32)
    assert lg.percentile(x, [10, 90], out=out) is out
    np.testing.assert_array_equal(out.numpy(), np.percentile(np.arange(4.0), [10, 90]).astype(np.float32))


def test_nanquantile_mixed_slices():
    a = np.array([[np.nan, 1.0, 3.0, np.nan, 2.0], [np.nan] * 5, [4.0, 0.5, -1.0, 7.0, 2.0]], np.float32)
    for q in (0.3, [0.0, 0.5, 1.0], np.float64(0.75)):
        # the first slice is all NaN: NumPy's dtype is then a's own (value-dependent), values agree
        same(
            lambda: np.nanquantile(a[1:], q, axis=1),
            lambda: lg.nanquantile(lg.asarray(a[1:]), q, axis=1),
            loose_dtype=True,
        )
        b = a[::-1].astype(np.float64)
        same(lambda: np.nanquantile(b, q, axis=1), lambda: lg.nanquantile(lg.asarray(b), q, axis=1))
    same(lambda: np.nanmedian(a, axis=1), lambda: lg.nanmedian(lg.asarray(a), axis=1))
    same(lambda: np.nanmedian(a), lambda: lg.nanmedian(lg.asarray(a)))


# -- counting: bincount, histogram ------------------------------------------------------------------


@SOME
@given(
    st.data(),
    any_array(
        st.sampled_from([np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int32, np.int64)]),
        shapes(1, 1),
        special=False,
    ),
)
def test_bincount(data, a):
    a = np.abs(a.astype(np.int64)).astype(a.dtype) if a.dtype.kind == "i" else a
    minlength = data.draw(st.sampled_from([0, 3, 300]))
    weighted = data.draw(st.booleans())
    w = np.linspace(-1.0, 2.0, a.size)
    static = (
        a.size == 0
        or (a.dtype.kind in "bu" and np.iinfo(np.uint8 if a.dtype.kind == "u" else np.int8).max < minlength)
        or (a.dtype == np.bool_ and minlength > 1)
    )
    evals = 0 if static else 1
    if weighted:
        same(
            lambda: np.bincount(a, w, minlength),
            lambda: lg.bincount(lg.asarray(a), lg.asarray(w), minlength),
            evals=evals,
        )
    else:
        same(
            lambda: np.bincount(a, minlength=minlength),
            lambda: lg.bincount(lg.asarray(a), minlength=minlength),
            evals=evals,
        )


def test_bincount_errors():
    with pytest.raises(ValueError, match="negative"):
        lg.bincount(lg.asarray(np.array([1, -1])))
    with pytest.raises(TypeError):
        lg.bincount(lg.asarray(np.array([1.0])))
    with pytest.raises(ValueError):
        lg.bincount(lg.asarray(np.array([[1]])))
    with pytest.raises(ValueError):
        lg.bincount(lg.asarray(np.array([1])), minlength=-1)


@SOME
@given(
    st.data(), any_array(st.sampled_from([np.dtype(t) for t in (np.uint8, np.int32, np.float32, np.float64)]))
)
def test_histogram(data, a):
    kind = data.draw(st.sampled_from(["range", "array", "auto_range"]))
    weights = np.linspace(0.5, 3.0, a.size).reshape(a.shape) if data.draw(st.booleans()) else None
    density = data.draw(st.booleans())
    if kind == "range":
        bins, rng, evals = (
            data.draw(st.integers(1, 6)),
            data.draw(st.sampled_from([(0, 10), (-3.5, 2.0), (1, 1)])),
            0,
        )
    elif kind == "array":
        bins, rng, evals = np.array([-5, -1.0, 0.0, 0.0, 2.5, 9.0]), None, 0
    else:
        bins, rng, evals = 4, None, 0 if a.size == 0 else 1
    x = data.draw(lazy_inputs(a))
    lw = None if weights is None else lg.asarray(weights)
    same(
        lambda: np.histogram(a, bins, rng, density, weights),
        lambda: lg.histogram(x, bins, rng, density, lw),
        evals=evals,
        rtol=1e-12 if a.dtype != np.float32 else 1e-6,
    )
    same(
        lambda: np.histogram_bin_edges(a, bins, rng),
        lambda: lg.histogram_bin_edges(x, bins, rng),
        evals=evals,
    )


def test_histogram_lazy_bins():
    a = np.array([0.5, 1.0, 2.0, 3.0, 3.0, 9.0])
    bins = np.array([0.0, 1.0, 3.0])
    same(lambda: np.histogram(a, bins), lambda: lg.histogram(lg.asarray(a), lg.asarray(bins)))


# -- set functions and nonzero: evaluation points -------------------------------------------------


def unevaluated(x):
    """An unevaluated lazy array equal to x (so an evaluation point has something to evaluate)."""
    return lg.logical_not(lg.logical_not(x)) if x.dtype == np.bool_ else x * 1


@SOME
@given(st.data(), any_array())
def test_unique(data, a):
    x = data.draw(lazy_inputs(a))
    flags = data.draw(st.tuples(st.booleans(), st.booleans(), st.booleans()))
    equal_nan = data.draw(st.booleans())
    same(
        lambda: np.unique(a, *flags, equal_nan=equal_nan),
        lambda: lg.unique(unevaluated(x), *flags, equal_nan=equal_nan),
        evals=1,
    )
    for name in ("unique_all", "unique_counts", "unique_inverse", "unique_values"):
        same(lambda: getattr(np, name)(a), lambda: getattr(lg, name)(unevaluated(x)), evals=1)


def test_unique_namedtuples_and_axis():
    a = np.array([[1, 2], [1, 2], [0, 5]])
    r = lg.unique_all(lg.asarray(a))
    assert r._fields == ("values", "indices", "inverse_indices", "counts")
    assert r.inverse_indices.shape == a.shape
    assert lg.unique_counts(lg.asarray(a))._fields == ("values", "counts")
    assert lg.unique_inverse(lg.asarray(a))._fields == ("values", "inverse_indices")
    same(
        lambda: np.unique(a, axis=0, return_counts=True),
        lambda: lg.unique(unevaluated(lg.asarray(a)), axis=0, return_counts=True),
        evals=1,
    )


@SOME
@given(st.data(), any_array(shape_st=shapes(min_dims=0)))
def test_nonzero_family(data, a):
    x = data.draw(lazy_inputs(a))
    same(lambda: np.nonzero(a), lambda: lg.nonzero(unevaluated(x)), evals=1)
    same(lambda: np.argwhere(a), lambda: lg.argwhere(unevaluated(x)), evals=1)
    same(lambda: np.flatnonzero(a), lambda: lg.flatnonzero(unevaluated(x)), evals=1)
    same(lambda: np.where(a), lambda: lg.where(unevaluated(x)), evals=1)
    if a.ndim:
        same(lambda: a.nonzero(), lambda: x.nonzero())


def test_where_three_arguments_stays_lazy():
    c = lg.asarray(np.array([True, False]))
    before = evaluations()
    r = lg.where(c, 1.0, 2.0)
    assert evaluations() == before
    np.testing.assert_array_equal(r.numpy(), [1.0, 2.0])
    with pytest.raises(ValueError, match="both or neither"):
        lg.where(c, 1.0)


# -- methods and in-place sort ------------------------------------------------------------------------


def test_sort_method_writes_in_place_through_views():
    base = np.array([[3.0, 1.0, 2.0], [9.0, 8.0, 7.0]])
    a = lg.asarray(base)
    old = a + 0
    v = a[:, ::-1]
    before = evaluations()
    v.sort(axis=1)
    assert evaluations() == before
    want = base.copy()
    want[:, ::-1].sort(axis=1)
    np.testing.assert_array_equal(a.numpy(), want)
    np.testing.assert_array_equal(old.numpy(), base)  # reads recorded before the write see the old value
    p = lg.asarray(base[0])
    p.partition(1)
    assert p.numpy()[1] == 2.0
    np.testing.assert_array_equal(
        lg.asarray(base).argsort(axis=0).numpy(), base.argsort(axis=0, kind="stable")
    )
    np.testing.assert_array_equal(lg.asarray(base).argpartition(0, axis=None).numpy()[0], 1)
    np.testing.assert_array_equal(lg.asarray(base).take([0, 2], axis=1).numpy(), base.take([0, 2], axis=1))


# -- gradients ------------------------------------------------------------------------------------------


def _distinct(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.permutation(np.prod(shape, dtype=int)).reshape(shape) * 0.37 + rng.uniform(0, 0.1, shape)


@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_gradient(axis, descending):
    check_grad(lambda x: lg.sort(x, axis=axis, descending=descending), _distinct((3, 4)))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: lg.median(x, axis=0),
        lambda x: lg.median(x),
        lambda x: lg.percentile(x, [5, 50, 95], axis=1),
        lambda x: lg.quantile(x, 0.3, axis=(0, 1), keepdims=True),
        lambda x: lg.nanmedian(x, axis=1),
        lambda x: lg.nanpercentile(x, [10, 80], axis=0),
    ],
)
def test_order_statistic_gradients(fn):
    check_grad(fn, _distinct((4, 5)))


def test_sort_gradient_ties_go_to_the_chosen_element():
    x = lg.asarray(np.array([1.0, 1.0, 0.0]), requires_grad=True)
    (g,) = lg.grad((lg.sort(x) * lg.asarray(np.array([1.0, 2.0, 3.0]))).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [2.0, 3.0, 1.0])  # the stable sort keeps x[0] before x[1]
    (g,) = lg.grad(lg.median(x), [x])
    np.testing.assert_array_equal(g.numpy(), [1.0, 0.0, 0.0])


def test_bincount_weights_gradient():
    idx = np.array([0, 2, 2, 1, 0])
    check_grad(lambda w: lg.bincount(lg.asarray(idx), w, minlength=4), np.linspace(0.1, 0.9, 5))


def test_recording_evaluates_nothing():
    x = lg.asarray(np.random.default_rng(0).normal(size=(6, 5)))
    y = x * 2
    before = evaluations()
    out = [
        lg.sort(y),
        lg.argsort(y, axis=0),
        lg.partition(y, 2),
        lg.argpartition(y, 1, axis=0),
        lg.searchsorted(lg.sort(y[0]), y[1]),
        lg.median(y, axis=1),
        lg.percentile(y, [1, 99]),
        lg.quantile(y, 0.5, axis=0),
        lg.nanmedian(y),
        lg.nanpercentile(y, 50, axis=1),
        lg.nanquantile(y, [0.2], axis=0),
        lg.digitize(y, np.array([0.0, 1.0])),
        lg.histogram(y, bins=5, range=(-3, 3))[0],
        lg.bincount(lg.asarray(np.array([1, 2], np.uint8)), minlength=256),
    ]
    assert evaluations() == before
    lg.eval(*out)
