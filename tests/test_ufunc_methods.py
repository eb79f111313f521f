"""Lazy ufunc methods (`lg.add.reduce`, `.accumulate`, `.reduceat`, `.outer`, `.at`) against NumPy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import MAIN_DTYPES, arrays, assert_matches, check, shapes

import lazygraph as lg
from lazygraph import fallback

REDUCIBLE = [
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
]
SCATTER = ["add", "subtract", "multiply", "maximum", "minimum"]
FAST = settings(max_examples=25, deadline=None)


def _no_fallback():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", fallback.LazygraphFallbackWarning)
    fallback.reset_warnings()
    return ctx


@FAST
@given(
    name=st.sampled_from(REDUCIBLE),
    dtype=st.sampled_from(MAIN_DTYPES),
    data=st.data(),
    keepdims=st.booleans(),
)
def test_reduce_matches_numpy(name: str, dtype: np.dtype, data: st.DataObject, keepdims: bool) -> None:
    shape = data.draw(shapes(max_dims=3))
    x = data.draw(arrays(dtype, shape, special=True))
    if data.draw(st.booleans()) and x.ndim:
        x = x[::-1]  # a negative-stride view as input
    axis = data.draw(st.sampled_from([None, 0, -1]))
    uf = getattr(np, name)
    check(
        lambda: uf.reduce(x, axis=axis, keepdims=keepdims),
        lambda: getattr(lg, name).reduce(lg.asarray(x), axis=axis, keepdims=keepdims),
    )


@pytest.mark.parametrize("name", ["add", "maximum", "bitwise_or", "multiply"])
def test_reduce_initial_where_dtype(name: str) -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    mask = np.array([True, False, True, True])
    uf, f = getattr(np, name), getattr(lg, name)
    for kw in ({"initial": 7}, {"where": mask, "initial": 3}, {"dtype": np.int64}, {"axis": (0, 1)}):
        assert_matches(f.reduce(lg.asarray(x), **kw), uf.reduce(x, **kw))
    if uf.identity is not None:
        assert_matches(f.reduce(lg.asarray(x), where=mask), uf.reduce(x, where=mask))
    empty = np.zeros((0, 3), np.int32)
    check(lambda: uf.reduce(empty), lambda: f.reduce(lg.asarray(empty)))


def test_reduce_without_identity_needs_initial_for_where() -> None:
    with pytest.raises(ValueError, match="identity"):
        lg.maximum.reduce(lg.asarray([1.0, 2.0]), where=np.array([True, False]))


@FAST
@given(name=st.sampled_from(REDUCIBLE), dtype=st.sampled_from(MAIN_DTYPES), data=st.data())
def test_accumulate_matches_numpy(name: str, dtype: np.dtype, data: st.DataObject) -> None:
    shape = data.draw(shapes(max_dims=3))
    x = data.draw(arrays(dtype, shape, special=True))
    if data.draw(st.booleans()) and x.ndim:
        x = x[::-1]
    axis = data.draw(st.sampled_from([0, -1]))
    uf = getattr(np, name)
    check(
        lambda: uf.accumulate(x, axis=axis),
        lambda: getattr(lg, name).accumulate(lg.asarray(x), axis=axis),
    )


def test_maximum_accumulate_nan_and_numpy_route() -> None:
    x = np.array([1.0, 3.0, np.nan, 5.0, 2.0, -np.inf])
    ctx = _no_fallback()
    try:
        assert_matches(np.maximum.accumulate(lg.asarray(x)), np.maximum.accumulate(x))
        assert_matches(np.minimum.accumulate(lg.asarray(x)), np.minimum.accumulate(x))
        assert_matches(
            np.add.accumulate(lg.asarray(x), dtype=np.float32), np.add.accumulate(x, dtype=np.float32)
        )
    finally:
        ctx.__exit__(None, None, None)


@FAST
@given(
    name=st.sampled_from(["add", "maximum", "minimum", "multiply", "bitwise_xor"]),
    dtype=st.sampled_from([np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.float32)]),
    data=st.data(),
    lazy_idx=st.booleans(),
)
def test_reduceat_matches_numpy(name: str, dtype: np.dtype, data: st.DataObject, lazy_idx: bool) -> None:
    rows = data.draw(st.integers(1, 6))
    x = data.draw(arrays(dtype, (rows, data.draw(st.integers(0, 3)))))
    idx = np.array(data.draw(st.lists(st.integers(0, rows - 1), max_size=6)), dtype=np.intp)
    axis = data.draw(st.sampled_from([0, -2]))
    ind = lg.asarray(idx) if lazy_idx else idx
    check(
        lambda: getattr(np, name).reduceat(x, idx, axis=axis),
        lambda: getattr(lg, name).reduceat(lg.asarray(x), ind, axis=axis),
    )


def test_reduceat_static_out_of_range_raises_now() -> None:
    with pytest.raises(IndexError, match="out-of-bounds"):
        lg.add.reduceat(lg.asarray([1.0, 2.0]), [0, 2])


@FAST
@given(name=st.sampled_from(["add", "multiply", "maximum", "subtract", "bitwise_and"]), data=st.data())
def test_outer_matches_numpy(name: str, data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(MAIN_DTYPES))
    a = data.draw(arrays(dtype, data.draw(shapes(max_dims=2))))
    b = data.draw(arrays(dtype, data.draw(shapes(max_dims=2))))
    check(
        lambda: getattr(np, name).outer(a, b), lambda: getattr(lg, name).outer(lg.asarray(a), lg.asarray(b))
    )


@FAST
@given(
    name=st.sampled_from(SCATTER),
    dtype=st.sampled_from([np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float64)]),
    data=st.data(),
    lazy_idx=st.booleans(),
)
def test_at_accumulates_repeated_indices(
    name: str, dtype: np.dtype, data: st.DataObject, lazy_idx: bool
) -> None:
    n = data.draw(st.integers(1, 6))
    x = data.draw(arrays(dtype, (n, 2), lo=-50, hi=50))
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=8)), dtype=np.intp)
    vals = data.draw(arrays(dtype, data.draw(st.sampled_from([(), (2,), (len(idx), 2)])), lo=-5, hi=5))
    want = x.copy()
    getattr(np, name).at(want, idx, vals)
    got = lg.asarray(x)
    before = got + 0
    getattr(lg, name).at(got, lg.asarray(idx) if lazy_idx else idx, vals)
    assert_matches(got, want)
    assert_matches(before, x)  # reads recorded before the write keep the old value


def test_at_through_numpy_on_views_and_basic_indices() -> None:
    x = np.arange(10.0)
    base = lg.asarray(x)
    view = base[::-1]  # writes through a negative-stride view reach the base
    ctx = _no_fallback()
    try:
        np.add.at(view, np.array([0, 0, 3]), 1.5)
        np.maximum.at(view, (np.array([1, 1]),), np.array([100.0, 50.0]))
        lg.multiply.at(view, slice(5, 8), 2.0)
        lg.subtract.at(view, 9, 4.0)
    finally:
        ctx.__exit__(None, None, None)
    want = x.copy()
    wview = want[::-1]
    np.add.at(wview, np.array([0, 0, 3]), 1.5)
    np.maximum.at(wview, (np.array([1, 1]),), np.array([100.0, 50.0]))
    np.multiply.at(wview, slice(5, 8), 2.0)
    np.subtract.at(wview, 9, 4.0)
    assert_matches(base, want)
    assert_matches(view, wview)


def test_at_two_dimensional_index_tuple() -> None:
    h = np.zeros((4, 4), np.int64)
    src, dst = np.array([0, 1, 1, 3, 3, 3]), np.array([2, 2, 2, 0, 0, 1])
    lh = lg.zeros((4, 4), dtype=np.int64)
    np.add.at(h, (src, dst), 1)
    np.add.at(lh, (lg.asarray(src), lg.asarray(dst)), 1)
    assert_matches(lh, h)


def test_at_errors_at_record_time() -> None:
    x = lg.zeros(3)
    with pytest.raises(IndexError):
        lg.add.at(x, np.array([0.5]), 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        lg.add.at(x, np.array([0, 1]), np.ones(3))


def test_ufunc_attributes() -> None:
    for name in ("add", "maximum", "bitwise_xor", "logical_or", "hypot"):
        f, uf = getattr(lg, name), getattr(np, name)
        assert (f.nin, f.nout, f.identity) == (uf.nin, uf.nout, uf.identity)
        assert f.reduce.__name__ == f"{name}.reduce" and f.at.lazy
    assert lg.add.__name__ == "add"


# -- gradients -----------------------------------------------------------------------


def test_grad_maximum_minimum_accumulate() -> None:
    x = np.random.default_rng(1).permutation(12).reshape(3, 4).astype(np.float64) + 0.5
    for name in ("maximum", "minimum"):
        for axis in (0, 1):
            check_grad(lambda a, n=name, ax=axis: getattr(lg, n).accumulate(a, axis=ax), x)


def test_grad_add_reduceat_static_and_lazy() -> None:
    x = np.random.default_rng(2).standard_normal((6, 2))
    idx = np.array([0, 3, 3, 1, 4])
    check_grad(lambda a: lg.add.reduceat(a, idx), x)
    check_grad(lambda a: lg.add.reduceat(a, lg.asarray(idx), axis=0), x)


def test_grad_add_subtract_at() -> None:
    x = np.random.default_rng(3).standard_normal(5)
    v = np.random.default_rng(4).standard_normal(4)
    idx = np.array([1, 1, 4, 0])

    def f(a: lg.Array, b: lg.Array, name: str = "add") -> lg.Array:
        out = a * 1.0
        getattr(lg, name).at(out, idx, b)
        return out

    check_grad(f, x, v)
    check_grad(lambda a, b: f(a, b, "subtract"), x, v)


def test_grad_reduce_maps_to_differentiable_reductions() -> None:
    x = np.random.default_rng(5).standard_normal((3, 4))
    check_grad(lambda a: lg.add.reduce(a, axis=1), x)
    check_grad(lambda a: lg.maximum.reduce(a, axis=0), x)
    check_grad(lambda a: lg.multiply.outer(a[0], a[1]), x)
