"""Index tricks, selection and set functions (lazygraph/numlib_tricks.py) against NumPy.

The lazy ones must record without evaluating; the evaluation points (extract, the *1d set
functions, trim_zeros, place with a lazy mask, vectorize) are compared by value.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import evaluations
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import any_arrays, arrays, assert_matches, check, nonempty_shapes, numeric_dtypes, shapes

import lazygraph as lg

FEW = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize(
    "key",
    [
        (slice(0, 3),),
        (slice(-1, 1, 0.5),),
        (slice(0, 1, 5j),),
        (slice(2, 5), slice(0, 1, 3j)),
        (slice(0, 3), slice(1, 4, 2), slice(0.5, 2.0)),
        (slice(0, 0), slice(3)),
        (slice(0, 1, 1j),),
    ],
)
def test_mgrid_and_ogrid_match_numpy(key):
    """Dense and open grids from slice syntax, complex step = number of points."""
    k = key[0] if len(key) == 1 else key
    before = evaluations()
    dense, sparse = lg.mgrid[k], lg.ogrid[k]
    assert evaluations() == before
    assert_matches(dense, np.mgrid[k])
    if isinstance(sparse, tuple):
        assert len(sparse) == len(np.ogrid[k])
        for s, w in zip(sparse, np.ogrid[k]):
            assert_matches(s, w)
    else:
        assert_matches(sparse, np.ogrid[k])


def test_r_and_c_concatenate_like_numpy():
    """r_ and c_ over lazy arrays, NumPy arrays, scalars, slices and directives."""
    x = np.arange(6.0).reshape(2, 3)
    a = lg.asarray(x)
    v = np.array([1, 2, 3])
    assert_matches(lg.r_[lg.asarray(v), 0, 4:7], np.r_[v, 0, 4:7])
    assert_matches(lg.r_[-1:1:5j, lg.asarray(v)], np.r_[-1:1:5j, v])
    assert_matches(lg.r_["0,2", lg.asarray(v), v], np.r_["0,2", v, v])
    assert_matches(lg.r_["0,2,0", lg.asarray(v), v], np.r_["0,2,0", v, v])
    assert_matches(lg.r_["1", a, x], np.r_["1", x, x])
    assert_matches(lg.r_[a, x], np.r_[x, x])
    assert_matches(lg.c_[lg.asarray(v), v * 2], np.c_[v, v * 2])
    assert_matches(lg.c_[a, x], np.c_[x, x])
    assert_matches(lg.c_[lg.asarray(np.float32(1.5)), np.int8(3)], np.c_[np.float32(1.5), np.int8(3)])
    with pytest.raises(ValueError, match="first"):
        lg.r_[v, "0"]
    with pytest.raises(TypeError, match="matrix"):
        lg.r_["r", v]


def test_ix_builds_open_meshes():
    """ix_ from lists, lazy arrays and boolean masks (a lazy mask evaluates)."""
    x = np.arange(20).reshape(4, 5)
    a = lg.asarray(x)
    rows, cols = lg.ix_([0, 2], lg.asarray([1, 3, 4]))
    assert_matches(a[rows, cols], x[np.ix_([0, 2], [1, 3, 4])])
    mask = np.array([True, False, True, True, False])
    r2, c2 = lg.ix_(lg.asarray([3, 1]), lg.asarray(mask))
    assert_matches(a[r2, c2], x[np.ix_([3, 1], mask)])
    e = lg.ix_([])
    assert e[0].dtype == np.ix_([])[0].dtype and e[0].shape == (0,)
    with pytest.raises(ValueError, match="1 dimensional"):
        lg.ix_(np.ones((2, 2)))


def test_block_assembles_nested_lists():
    """block of nested lists of lazy and NumPy blocks; errors name the malformed part."""
    A, B = np.eye(2), np.arange(6.0).reshape(2, 3)
    C, D = np.ones((1, 2)), np.zeros((1, 3))
    la = lg.asarray(A)
    assert_matches(lg.block([[la, B], [C, lg.asarray(D)]]), np.block([[A, B], [C, D]]))
    assert_matches(
        lg.block([lg.asarray([1, 2]), 3, np.array([4])]), np.block([np.array([1, 2]), 3, np.array([4])])
    )
    assert_matches(lg.block([[1, 2], [3, 4]]), np.block([[1, 2], [3, 4]]))
    assert_matches(lg.block(lg.asarray(5.0)), np.block(np.array(5.0)))
    assert_matches(lg.block([[[la]], [[A]]]), np.block([[[A]], [[A]]]))
    for bad, err in (([], ValueError), ([[la], la], ValueError), ((la, la), TypeError)):
        with pytest.raises(err):
            lg.block(bad)


def test_apply_along_axis_records_per_slice():
    """apply_along_axis over lazy slices: scalar, vector and matrix results, any axis."""
    x = np.arange(24.0).reshape(2, 3, 4)
    a = lg.asarray(x)
    before = evaluations()
    r1 = lg.apply_along_axis(lambda v: (v * v).sum(), 1, a)
    r2 = lg.apply_along_axis(lambda v: v[::-1] + 1, -1, a)
    r3 = lg.apply_along_axis(lambda v, k: lg.outer(v, v)[:k], 0, a, 1)
    assert evaluations() == before
    assert_matches(r1, np.apply_along_axis(lambda v: (v * v).sum(), 1, x))
    assert_matches(r2, np.apply_along_axis(lambda v: v[::-1] + 1, -1, x))
    assert_matches(r3, np.apply_along_axis(lambda v, k: np.outer(v, v)[:k], 0, x, 1))
    with pytest.raises(ValueError, match="iteration"):
        lg.apply_along_axis(np.sum, 0, lg.zeros((3, 0)))


def test_vectorize_runs_the_python_function_on_values():
    """vectorize evaluates its arguments and runs the function element by element."""
    f = lg.vectorize(lambda a, b: a - b if a > b else a + b)
    x, y = np.array([1.0, 4.0, 2.0]), np.array([[2.0], [1.0]])
    want = np.vectorize(lambda a, b: a - b if a > b else a + b)(x, y)
    assert_matches(f(lg.asarray(x), y), want)


@FEW
@given(arrays(np.float64, shapes(max_dims=2), special=True), st.booleans())
def test_piecewise_and_select(x, otherwise):
    """piecewise (functions and constants, optional otherwise) and select match NumPy's."""
    a = lg.asarray(x)
    conds_np = [x < 0, x > 1]
    conds = [a < 0, a > 1]
    funcs = [lambda v: v * 2, 7.0] + ([lambda v: -v] if otherwise else [])
    check(lambda: np.piecewise(x, conds_np, funcs), lambda: lg.piecewise(a, conds, funcs))
    if x.size and x.ndim <= 1:  # NumPy reads condlist[0] of a bare array condition (rows of a 2-d one)
        check(lambda: np.piecewise(x, x > 0, [1, 0]), lambda: lg.piecewise(a, a > 0, [1, 0]))
    choice = [x, x * 10]
    check(lambda: np.select(conds_np, choice, -1), lambda: lg.select(conds, [a, a * 10], -1))
    check(
        lambda: np.select([x > 0], [x.astype(np.float32)], default=2),
        lambda: lg.select([a > 0], [a.astype(np.float32)], default=2),
    )
    with pytest.raises(TypeError, match="boolean"):
        lg.select([lg.asarray((x > 0).astype(np.int64))], [a])


@FEW
@given(any_arrays(numeric_dtypes, nonempty_shapes(min_dims=1, max_dims=3)), st.booleans())
def test_extract_compress_choose_place(x, flip):
    """extract, compress, choose (every mode) and place against NumPy, views included."""
    a = lg.asarray(x)
    if flip:
        x, a = x[::-1], a[::-1]
    cond = np.arange(x.size).reshape(x.shape) % 2 == 0
    assert_matches(lg.extract(lg.asarray(cond), a), np.extract(cond, x))
    c1 = np.arange(x.shape[0]) % 3 != 1
    check(lambda: np.compress(c1, x, axis=0), lambda: lg.compress(c1, a, axis=0))
    check(lambda: np.compress(c1[:1], x), lambda: lg.compress(lg.asarray(c1[:1]), a))
    idx = (np.arange(x.size).reshape(x.shape) % 4) - 1
    for mode in ("wrap", "clip"):
        check(
            lambda m=mode: np.choose(idx, [x, x * 2, 0], mode=m),
            lambda m=mode: lg.choose(idx, [a, a * 2, 0], mode=m),
        )
    check(lambda: np.choose(idx, [x, x]), lambda: lg.choose(idx, [a, a]))
    ok = np.abs(idx) % 2  # lazy indices: in range (mode='raise' cannot check them while recording)
    check(lambda: np.choose(ok, [x, x * 2]), lambda: lg.choose(lg.asarray(ok), [a, a * 2]))
    want, lazy = x.copy(), lg.asarray(x)
    np.place(want, cond, [7, 5])
    lg.place(lazy, lg.asarray(cond), [7, 5])
    assert_matches(lazy, want)


@FEW
@given(any_arrays(numeric_dtypes, shapes(max_dims=2)), st.booleans(), st.booleans())
def test_ediff1d_and_trim_zeros(x, begin, end):
    """ediff1d with to_begin/to_end (lazy), trim_zeros with every trim (an evaluation point)."""
    a = lg.asarray(x)
    kw = {"to_begin": [-1, 0] if begin else None, "to_end": 3 if end else None}
    if x.dtype != np.bool_:
        check(lambda: np.ediff1d(x, **kw), lambda: lg.ediff1d(a, **kw))
    for trim in ("fb", "f", "b"):
        if x.ndim == 1:
            assert_matches(lg.trim_zeros(a, trim), np.trim_zeros(x, trim))
        assert_matches(lg.trim_zeros(a, trim, axis=None), np.trim_zeros(x, trim, axis=None))


@FEW
@given(
    arrays(st.sampled_from([np.int64, np.float64]), shapes(max_dims=2), special=True),
    arrays(np.int64, shapes(max_dims=1)),
    st.booleans(),
)
def test_isin_and_sets(x, y, assume):
    """isin is lazy; intersect1d, union1d, setdiff1d, setxor1d match NumPy's values."""
    a, b = lg.asarray(x), lg.asarray(y)
    before = evaluations()
    hit, miss = lg.isin(a, b), lg.isin(a, y, invert=True)
    assert evaluations() == before
    assert_matches(hit, np.isin(x, y))
    assert_matches(miss, np.isin(x, y, invert=True))
    assert_matches(lg.intersect1d(a, b), np.intersect1d(x, y))
    assert_matches(lg.union1d(a, b), np.union1d(x, y))
    assert_matches(lg.setdiff1d(a, b), np.setdiff1d(x, y))
    assert_matches(lg.setxor1d(a, b), np.setxor1d(x, y))
    ux, uy = np.unique(x), np.unique(y)
    if assume:
        assert_matches(lg.setdiff1d(lg.asarray(ux[::-1]), uy, True), np.setdiff1d(ux[::-1], uy, True))
        assert_matches(lg.intersect1d(ux, lg.asarray(uy), True), np.intersect1d(ux, uy, True))
    got = lg.intersect1d(a, b, return_indices=True)
    want = np.intersect1d(x, y, return_indices=True)
    for g, w in zip(got, want):
        assert_matches(g, w)


@FEW
@given(st.integers(1, 3), st.data())
def test_lexsort_is_lazy_and_matches(nkeys, data):
    """lexsort of 1-d and 2-d keys (along either axis), NaN included, recorded lazily."""
    shape = data.draw(nonempty_shapes(min_dims=1, max_dims=2))
    keys = [
        data.draw(arrays(st.sampled_from([np.int8, np.float64]), shape, special=True)) for _ in range(nkeys)
    ]
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    before = evaluations()
    got = lg.lexsort([lg.asarray(k) for k in keys], axis=axis)
    assert evaluations() == before
    assert_matches(got, np.lexsort(keys, axis=axis))
    stacked = np.stack([k.astype(np.float64) for k in keys])
    assert_matches(lg.lexsort(lg.asarray(stacked), axis=axis), np.lexsort(stacked, axis=axis))


def test_numpy_calls_route_to_lazygraph():
    """np.isin / np.lexsort / np.select on lazy arrays record lazily, without the fallback warning."""
    import warnings

    x = lg.asarray([3, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", lg.LazygraphFallbackWarning)
        assert_matches(np.isin(x, [1, 2]), np.array([False, True, True]))
        assert_matches(np.lexsort((x,)), np.array([1, 2, 0]))  # a tuple: NumPy dispatches on its items
        assert_matches(np.select([x > 1], [x]), np.array([3, 0, 2]))


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_mask_indices_with_lazy_and_numpy_mask_functions(k):
    """mask_indices with lg.triu, np.tril (routed to lazygraph) and a lambda."""
    for lg_fn, np_fn in ((lg.triu, np.triu), (np.tril, np.tril), (lambda m, k: m * (m.sum() > k), None)):
        got = lg.mask_indices(4, lg_fn, k)
        want = np.mask_indices(4, np_fn or lg_fn, k)
        assert len(got) == 2
        for g, w in zip(got, want):
            assert_matches(g, w)
