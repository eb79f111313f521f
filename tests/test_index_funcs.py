"""Lazy index functions (fill_diagonal, put, put_along_axis, insert, delete, *_indices, unravel/ravel) vs NumPy."""

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

FAST = settings(max_examples=25, deadline=None)


@pytest.fixture(autouse=True)
def _no_fallback():
    fallback.reset_warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("error", fallback.LazygraphFallbackWarning)
        yield


@FAST
@given(dtype=st.sampled_from(MAIN_DTYPES), data=st.data(), wrap=st.booleans())
def test_fill_diagonal(dtype: np.dtype, data: st.DataObject, wrap: bool) -> None:
    shape = data.draw(st.sampled_from([(3, 3), (5, 2), (2, 5), (7, 3), (2, 2, 2), (0, 3), (1, 1)]))
    x = data.draw(arrays(dtype, shape))
    val = data.draw(st.sampled_from([0, 1, [1, 2], np.arange(4)]))
    want = x.copy()
    np.fill_diagonal(want, val, wrap=wrap)
    got = lg.asarray(x)
    np.fill_diagonal(got, val, wrap=wrap)
    assert_matches(got, want)


def test_fill_diagonal_view_and_errors() -> None:
    x = np.arange(16.0).reshape(4, 4)
    base = lg.asarray(x)
    lg.fill_diagonal(base[:, ::-1], lg.asarray([-1.0, -2.0]))
    want = x.copy()
    np.fill_diagonal(want[:, ::-1], [-1.0, -2.0])
    assert_matches(base, want)
    with pytest.raises(ValueError, match="2-d"):
        lg.fill_diagonal(lg.zeros(3), 1.0)


@FAST
@given(data=st.data(), mode=st.sampled_from(["raise", "wrap", "clip"]), lazy_idx=st.booleans())
def test_put(data: st.DataObject, mode: str, lazy_idx: bool) -> None:
    dtype = data.draw(st.sampled_from(MAIN_DTYPES))
    x = data.draw(arrays(dtype, data.draw(shapes(max_dims=3, min_side=1))))
    span = 2 * x.size + 2 if mode != "raise" else x.size
    ind = np.array(data.draw(st.lists(st.integers(-span, span - 1), max_size=6)), dtype=np.intp)
    v = data.draw(arrays(dtype, data.draw(st.sampled_from([(), (1,), (3,)]))))
    want = x.copy()
    try:
        np.put(want, ind, v, mode=mode)
    except IndexError:
        with pytest.raises(IndexError):
            lg.put(lg.asarray(x), ind, v, mode=mode)
        return
    got = lg.asarray(x)
    lg.put(got, lg.asarray(ind) if lazy_idx else ind, v, mode=mode)
    assert_matches(got, want)


@FAST
@given(data=st.data(), lazy_idx=st.booleans())
def test_put_along_axis(data: st.DataObject, lazy_idx: bool) -> None:
    x = data.draw(arrays(np.dtype(np.float64), (3, 4)))
    axis = data.draw(st.sampled_from([0, 1, -1, None]))
    n = x.size if axis is None else x.shape[axis]
    ishape = (5,) if axis is None else tuple(2 if d == axis % 2 else x.shape[d] for d in range(2))
    idx = data.draw(arrays(np.dtype(np.int64), ishape, lo=-n, hi=n - 1))
    vals = data.draw(st.sampled_from([7.0, np.arange(ishape[-1], dtype=np.float64)]))
    want = x.copy()
    np.put_along_axis(want, idx, vals, axis)
    got = lg.asarray(x)
    np.put_along_axis(got, lg.asarray(idx) if lazy_idx else idx, vals, axis)
    assert_matches(got, want)


@FAST
@given(data=st.data())
def test_insert(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(MAIN_DTYPES))
    x = data.draw(arrays(dtype, data.draw(shapes(min_dims=1, max_dims=3))))
    axis = data.draw(st.sampled_from([None, 0, -1]))
    n = x.size if axis is None else x.shape[axis]
    obj = data.draw(
        st.one_of(
            st.integers(-n - 1, n + 1),
            st.lists(st.integers(-n, n), max_size=4),
            st.just(slice(0, n, 2)),
        )
    )
    values = data.draw(st.sampled_from([5, [1, 2], np.zeros((1,), dtype)]))
    lazy_values = lg.asarray(values) if isinstance(values, np.ndarray) else values
    check(
        lambda: np.insert(x, obj, values, axis=axis),
        lambda: lg.insert(lg.asarray(x)[...], obj, lazy_values, axis=axis),
    )


def test_insert_lazy_values_and_grad() -> None:
    x = np.arange(6.0).reshape(2, 3)
    v = np.array([10.0, 20.0])
    assert_matches(lg.insert(lg.asarray(x), 1, lg.asarray(v), axis=1), np.insert(x, 1, v, axis=1))
    assert_matches(
        lg.insert(lg.asarray(x), [0, 2], lg.asarray(v[:, None]), axis=0)[::-1],
        np.insert(x, [0, 2], v[:, None], axis=0)[::-1],
    )
    check_grad(lambda a, b: lg.insert(a, [2, 0], b, axis=1), x, np.array([[1.0], [2.0]]))
    with pytest.raises(TypeError, match="static"):
        lg.insert(lg.asarray(x), lg.asarray(1), 0.0)


@FAST
@given(data=st.data())
def test_delete(data: st.DataObject) -> None:
    x = data.draw(arrays(np.dtype(np.int32), data.draw(shapes(min_dims=1, max_dims=3))))
    axis = data.draw(st.sampled_from([None, 0, -1]))
    n = x.size if axis is None else x.shape[axis]
    obj = data.draw(
        st.one_of(
            st.integers(-n - 1, n),
            st.lists(st.integers(-n, max(n - 1, -n)), max_size=4),
            st.just(slice(1, None, 2)),
            st.lists(st.booleans(), min_size=n, max_size=n),
        )
    )
    check(lambda: np.delete(x, obj, axis=axis), lambda: lg.delete(lg.asarray(x)[::-1][::-1], obj, axis=axis))


@pytest.mark.parametrize("n,k,m", [(4, 0, None), (4, 1, None), (3, -1, 5), (0, 0, None), (1, 0, 1)])
def test_triangle_and_diag_indices(n: int, k: int, m: int | None) -> None:
    for lfn, nfn in ((lg.triu_indices, np.triu_indices), (lg.tril_indices, np.tril_indices)):
        for a, b in zip(lfn(n, k, m), nfn(n, k, m)):
            assert_matches(a, b)
    a = np.zeros((n, m or n))
    for a_, b_ in zip(lg.triu_indices_from(lg.asarray(a), k), np.triu_indices_from(a, k)):
        assert_matches(a_, b_)
    for a_, b_ in zip(lg.diag_indices(n, 3), np.diag_indices(n, 3)):
        assert_matches(a_, b_)


@pytest.mark.parametrize("dims", [(2, 3), (4,), (), (0, 2), (1, 1, 3)])
@pytest.mark.parametrize("sparse", [False, True])
def test_indices(dims: tuple, sparse: bool) -> None:
    got, want = lg.indices(dims, sparse=sparse), np.indices(dims, sparse=sparse)
    if sparse:
        for a, b in zip(got, want):
            assert_matches(a, b)
    else:
        assert_matches(got, want)


@FAST
@given(data=st.data(), order=st.sampled_from(["C", "F"]), lazy_idx=st.booleans())
def test_unravel_and_ravel_multi_index(data: st.DataObject, order: str, lazy_idx: bool) -> None:
    dims = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    size = int(np.prod(dims))
    idx = data.draw(arrays(np.dtype(np.int64), data.draw(shapes(max_dims=2)), lo=0, hi=size - 1))
    got = lg.unravel_index(lg.asarray(idx) if lazy_idx else idx, dims, order=order)
    want = np.unravel_index(idx, dims, order=order)
    for a, b in zip(got, want, strict=True):
        assert_matches(a, b)
    back = lg.ravel_multi_index(tuple(got), dims, order=order)
    assert_matches(back, np.ravel_multi_index(want, dims, order=order))
    wide = tuple(w * 3 - 1 for w in want)
    for mode in ("wrap", "clip"):
        args = (tuple(lg.asarray(w) for w in wide) if lazy_idx else wide, dims)
        assert_matches(
            lg.ravel_multi_index(*args, mode=mode, order=order),
            np.ravel_multi_index(wide, dims, mode=mode, order=order),
        )


def test_static_index_errors_match_numpy() -> None:
    for np_fn, lg_fn in (
        (lambda: np.unravel_index(7, (2, 3)), lambda: lg.unravel_index(7, (2, 3))),
        (lambda: np.unravel_index(1.0, (2, 3)), lambda: lg.unravel_index(1.0, (2, 3))),
        (lambda: np.ravel_multi_index(([2], [0]), (2, 3)), lambda: lg.ravel_multi_index(([2], [0]), (2, 3))),
    ):
        check(np_fn, lg_fn)
    i, j = lg.unravel_index(lg.argmax(lg.asarray([[1.0, 5.0], [2.0, 0.0]])), (2, 2))
    assert (int(i), int(j)) == (0, 1)
