"""The NumPy library layer (lazygraph.numlib) against NumPy: values, dtypes, errors, gradients.

Each differential check records the lazygraph call (which must not evaluate anything), then
evaluates it and compares with NumPy's result; where NumPy raises, lazygraph must raise while
recording. Inputs are sometimes lazy views with negative strides or steps, not fresh arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import evaluations, lazy_inputs
from _support_numlib import COMPLEX, FEW, SOME, any_array, dtypes_c, same
from gradcheck import check_grad
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import (
    arrays,
    broadcast_shapes,
    dtypes,
    float_dtypes,
    nonempty_shapes,
    numeric_dtypes,
    shapes,
)

import lazygraph as lg
from lazygraph import numlib as nl

# -- rearranging ---------------------------------------------------------------------------------


@SOME
@given(st.data(), any_array(dtypes_c), st.integers(-7, 7))
def test_roll(data, a, shift):
    axis = data.draw(
        st.none() | st.integers(-a.ndim, a.ndim - 1) if a.ndim else st.none() | st.just(0),
        label="axis",
    )
    if a.ndim >= 2 and data.draw(st.booleans()):
        axis, shift = (0, -1, 0), (shift, 2, 1)
    x = data.draw(lazy_inputs(a))
    same(lambda: np.roll(a, shift, axis), lambda: nl.roll(x, shift, axis))


def test_roll_is_a_copy():
    x = lg.asarray(np.arange(4.0))
    r = nl.roll(x, 0)
    r[0] = 9
    assert x.numpy()[0] == 0


@SOME
@given(st.data(), any_array(numeric_dtypes | st.just(np.dtype(bool)), shapes(1)), st.integers(-1, 4))
def test_diff(data, a, n):
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    pre = data.draw(st.sampled_from([None, 0, 2.5, "row"]))
    if pre == "row":
        shp = list(a.shape)
        shp[axis] = 2
        pre = np.ones(shp, a.dtype)
    app = data.draw(st.sampled_from([None, 1, True]))
    x = data.draw(lazy_inputs(a))
    kw = {k: v for k, v in (("prepend", pre), ("append", app)) if v is not None}
    same(lambda: np.diff(a, n, axis, **kw), lambda: nl.diff(x, n, axis, **kw))


def test_diff_errors():
    with pytest.raises(ValueError, match="diff"):
        nl.diff(lg.asarray(3.0))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3)))
def test_tile(data, a):
    reps = data.draw(st.integers(0, 3) | st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple))
    x = data.draw(lazy_inputs(a))
    same(lambda: np.tile(a, reps), lambda: nl.tile(x, reps))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3)))
def test_repeat(data, a):
    axis = data.draw(st.none() | st.integers(-a.ndim - 1, a.ndim))
    n = a.size if axis is None else (a.shape[axis] if -a.ndim <= axis < a.ndim else 1)
    reps = data.draw(
        st.integers(-1, 3)
        | st.lists(st.integers(0, 3), min_size=n, max_size=n)
        | st.lists(st.integers(0, 3), min_size=n, max_size=n).map(np.array)
        | st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)
    )
    x = data.draw(lazy_inputs(a))
    same(lambda: np.repeat(a, reps, axis), lambda: nl.repeat(x, reps, axis))


def test_repeat_lazy_repeats_are_evaluated():
    # the Array API allows array counts; the result's length is their sum, so they are evaluated
    got = nl.repeat(lg.arange(3), lg.asarray(np.array([1, 0, 3]))).numpy()
    np.testing.assert_array_equal(got, np.repeat(np.arange(3), [1, 0, 3]))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 4)))
def test_flips_and_rot90(data, a):
    x = data.draw(lazy_inputs(a))
    k = data.draw(st.integers(-5, 5))
    axes = data.draw(st.sampled_from([(0, 1), (1, 0), (-1, 0), (0, 0), (2, 1), (0, 2, 1)]))
    same(lambda: np.fliplr(a), lambda: nl.fliplr(x))
    same(lambda: np.flipud(a), lambda: nl.flipud(x))
    same(lambda: np.rot90(a, k, axes), lambda: nl.rot90(x, k, axes))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3)))
def test_existing_movement_matches(data, a):
    """Functions lazygraph already had (so numlib does not redefine them) behave as NumPy's."""
    x = data.draw(lazy_inputs(a))
    ax = data.draw(st.integers(-3, 2))
    ax2 = data.draw(st.integers(-3, 2))
    same(lambda: np.flip(a, ax), lambda: lg.flip(x, ax))
    same(lambda: np.moveaxis(a, ax, ax2), lambda: lg.moveaxis(x, ax, ax2))
    same(lambda: np.swapaxes(a, ax, ax2), lambda: lg.swapaxes(x, ax, ax2))
    if a.dtype.kind != "c":
        lo, hi = data.draw(st.sampled_from([(0, 1), (None, 0.5), (-1, None), (2, 1), (None, None)]))
        same(lambda: np.clip(a, lo, hi), lambda: lg.clip(x, lo, hi))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3)))
def test_unstack(data, a):
    axis = data.draw(st.integers(-3, 2))
    x = data.draw(lazy_inputs(a))
    same(lambda: np.unstack(a, axis=axis), lambda: nl.unstack(x, axis=axis))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(1, 3, min_side=1)))
def test_take_along_axis(data, a):
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    shape = list(a.shape)
    shape[axis] = data.draw(st.integers(0, 4))
    if data.draw(st.booleans()):
        shape[data.draw(st.integers(0, a.ndim - 1))] = 1  # broadcasting the other axes
    n = a.shape[axis]
    idx = data.draw(arrays(np.int64, tuple(shape), lo=-n, hi=n - 1))
    lazy_idx = data.draw(st.booleans())
    x = data.draw(lazy_inputs(a))
    same(
        lambda: np.take_along_axis(a, idx, axis),
        lambda: nl.take_along_axis(x, lg.asarray(idx) if lazy_idx else idx, axis),
    )
    flat = data.draw(arrays(np.int64, (3,), lo=0, hi=a.size - 1))
    same(lambda: np.take_along_axis(a, flat, None), lambda: nl.take_along_axis(x, flat, None))


def test_take_along_axis_with_argmax():
    a = np.array([[3.0, 1.0, 7.0], [2.0, 9.0, 4.0]])
    x = lg.asarray(a)
    got = nl.take_along_axis(x, lg.argmax(x, axis=1, keepdims=True), axis=1)
    np.testing.assert_array_equal(got.numpy(), [[7.0], [9.0]])


# -- joining and splitting -----------------------------------------------------------------------


@SOME
@given(st.data(), st.lists(any_array(dtypes_c, shapes(0, 3, max_side=3)), min_size=1, max_size=3))
def test_atleast(data, arrs):
    xs = [data.draw(lazy_inputs(a)) for a in arrs]
    for np_fn, lg_fn in (
        (np.atleast_1d, nl.atleast_1d),
        (np.atleast_2d, nl.atleast_2d),
        (np.atleast_3d, nl.atleast_3d),
    ):
        same(lambda np_fn=np_fn: np_fn(*arrs), lambda lg_fn=lg_fn: lg_fn(*xs))


@SOME
@given(st.data(), shapes(0, 3, max_side=3), st.integers(1, 3))
def test_stacking(data, shape, count):
    arrs = []
    for _ in range(count):
        shp = list(shape)
        if shp and data.draw(st.booleans()):
            shp[min(1, len(shp) - 1)] = data.draw(st.integers(0, 3))  # unequal along the joined axis
        arrs.append(data.draw(any_array(dtypes_c, st.just(tuple(shp)))))
    xs = [data.draw(lazy_inputs(a)) for a in arrs]
    for name in ("hstack", "vstack", "dstack", "column_stack"):
        same(lambda name=name: getattr(np, name)(arrs), lambda name=name: getattr(nl, name)(xs))


def test_stacking_errors():
    for name in ("hstack", "vstack", "dstack", "column_stack"):
        with pytest.raises(ValueError, match=name):
            getattr(nl, name)([])


@SOME
@given(st.data(), any_array(dtypes, shapes(1, 3)))
def test_splits(data, a):
    x = data.draw(lazy_inputs(a))
    ios = data.draw(st.integers(-1, 5) | st.lists(st.integers(-6, 6), max_size=3).map(sorted))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    same(lambda: np.array_split(a, ios, axis), lambda: nl.array_split(x, ios, axis))
    same(lambda: np.split(a, ios, axis), lambda: lg.split(x, ios, axis))
    for name in ("hsplit", "vsplit", "dsplit"):
        same(lambda name=name: getattr(np, name)(a, ios), lambda name=name: getattr(nl, name)(x, ios))


@SOME
@given(
    st.data(),
    st.lists(any_array(dtypes_c, shapes(0, 2, max_side=3)), min_size=0, max_size=3),
    st.sampled_from(["xy", "ij", "yx"]),
    st.booleans(),
    st.booleans(),
)
def test_meshgrid(data, arrs, indexing, sparse, copy):
    xs = [data.draw(lazy_inputs(a)) for a in arrs]
    same(
        # a list, as the Array API 2024.12 asks (NumPy 2: a tuple of the same arrays)
        lambda: list(np.meshgrid(*arrs, indexing=indexing, sparse=sparse, copy=copy)),
        lambda: nl.meshgrid(*xs, indexing=indexing, sparse=sparse, copy=copy),
    )


def test_meshgrid_copies_are_writable():
    gx, gy = nl.meshgrid(lg.arange(3), lg.arange(2))
    gx[0, 0] = 7
    assert gx.numpy()[0, 0] == 7 and gx.numpy()[1, 0] == 0


@FEW
@given(st.data(), st.lists(any_array(dtypes, shapes(0, 3)), min_size=1, max_size=3))
def test_broadcast_arrays_existing(data, arrs):
    xs = [data.draw(lazy_inputs(a)) for a in arrs]
    same(lambda: list(np.broadcast_arrays(*arrs)), lambda: list(lg.broadcast_arrays(*xs)))


# -- matrices ------------------------------------------------------------------------------------


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 3)), st.integers(-4, 4))
def test_tri_tril_triu(data, a, k):
    x = data.draw(lazy_inputs(a))
    same(lambda: np.tril(a, k), lambda: nl.tril(x, k))
    same(lambda: np.triu(a, k), lambda: nl.triu(x, k))
    n, m = data.draw(st.integers(0, 4)), data.draw(st.none() | st.integers(0, 4))
    dt = data.draw(st.sampled_from([float, int, bool, np.float32]))
    same(lambda: np.tri(n, m, k, dt), lambda: nl.tri(n, m, k, dt))


@SOME
@given(st.data(), any_array(dtypes_c, shapes(0, 4)), st.integers(-4, 4))
def test_diag_diagonal_trace(data, a, k):
    x = data.draw(lazy_inputs(a))
    ax1, ax2 = data.draw(st.integers(-3, 2)), data.draw(st.integers(-3, 2))
    same(lambda: np.diag(a, k), lambda: nl.diag(x, k))
    same(lambda: np.diagonal(a, k, ax1, ax2), lambda: nl.diagonal(x, k, ax1, ax2))
    if a.dtype.kind != "b" or data.draw(st.booleans()):
        same(lambda: np.trace(a, k, ax1, ax2), lambda: nl.trace(x, k, ax1, ax2))
    same(lambda: np.trace(a, k, dtype=np.float32), lambda: nl.trace(x, k, dtype=np.float32))


@SOME
@given(
    st.data(), any_array(dtypes_c, shapes(0, 3, max_side=3)), any_array(dtypes_c, shapes(0, 3, max_side=3))
)
def test_products(data, a, b):
    x, y = data.draw(lazy_inputs(a)), data.draw(lazy_inputs(b))
    tol = {"rtol": 1e-5, "atol": 1e-5}
    same(lambda: np.kron(a, b), lambda: nl.kron(x, y))
    if "c" in a.dtype.kind + b.dtype.kind and not (np.isfinite(a).all() and np.isfinite(b).all()):
        return  # non-finite complex products: NumPy's dot kernels give inf or nan by their own order
    same(lambda: np.vdot(a, b), lambda: nl.vdot(x, y), **tol)
    same(lambda: np.vdot(a, a), lambda: nl.vdot(x, x), **tol)
    same(lambda: np.outer(a, b), lambda: lg.outer(x, y))
    same(lambda: np.inner(a, b), lambda: lg.inner(x, y), **tol)
    same(lambda: np.tensordot(a, b, 1), lambda: lg.tensordot(x, y, 1), **tol)


@SOME
@given(
    st.data(),
    broadcast_shapes(2, min_dims=0, max_dims=2),
    st.sampled_from([(3, 3), (2, 3), (3, 2), (2, 2), (4, 3)]),
)
def test_cross(data, bshapes, ns):
    dt = data.draw(
        st.sampled_from(
            [np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64), COMPLEX[1], np.dtype(bool)]
        )
    )
    a = data.draw(any_array(st.just(dt), st.just(bshapes[0] + (ns[0],))))
    b = data.draw(any_array(st.just(dt), st.just(bshapes[1] + (ns[1],))))
    x, y = data.draw(lazy_inputs(a)), data.draw(lazy_inputs(b))
    same(lambda: np.cross(a, b), lambda: nl.cross(x, y))
    if a.ndim >= 2 and b.ndim >= 2:
        same(lambda: np.cross(a, b, axis=-1), lambda: nl.cross(x, y, axis=-1))
        at, bt = np.moveaxis(a, -1, 0), np.moveaxis(b, -1, 0)
        same(
            lambda: np.cross(at, bt, axisa=0, axisb=0, axisc=0),
            lambda: nl.cross(lg.asarray(at), lg.asarray(bt), axisa=0, axisb=0, axisc=0),
        )


# -- laziness, export, gradients -----------------------------------------------------------------


def test_everything_listed_is_defined_and_new():
    for name in nl.__all__:
        assert callable(getattr(nl, name)), name
        assert getattr(nl, name).__doc__, name


@pytest.mark.parametrize("name", nl.__all__)
def test_exported_from_lazygraph(name):
    assert getattr(lg, name, None) is getattr(nl, name)


def test_numpy_functions_dispatch_here_once_exported():
    if getattr(lg, "roll", None) is not nl.roll:
        pytest.fail("lazygraph does not export numlib yet")
    x = lg.asarray(np.arange(5.0))
    assert isinstance(np.roll(x, 2), lg.Array)


def fd(fn, *arrays, **kw):
    check_grad(fn, *arrays, **kw)


def test_gradients():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((3, 4))
    v = rng.standard_normal(4)
    fd(lambda x: nl.roll(x, (1, -2), (0, 1)), m)
    fd(lambda x: nl.diff(x, 2, axis=1, prepend=0.5), m)
    fd(lambda x: nl.tile(x, (2, 1, 2)), m)
    fd(lambda x: nl.repeat(x, [1, 0, 3], axis=0), m)
    fd(lambda x: nl.repeat(x, 2), v)
    fd(lambda x: nl.tril(x, 1) + nl.triu(x, -1), m)
    fd(lambda x: nl.diag(nl.diag(x, 1)), m)
    fd(lambda x: nl.trace(x, -1), m)
    fd(lambda x, y: nl.kron(x, y), m[:2, :2], v[:3])
    fd(lambda x, y: nl.vdot(x, y), m[0], v)
    fd(lambda x, y: nl.cross(x, y), m[:, :3], rng.standard_normal(3))
    fd(lambda p, x: nl.polyval(p, x), v, m)
    fd(lambda x, w: nl.average(x, axis=1, weights=w), m, v**2 + 1)
    fd(lambda x: nl.cov(x), m)
    fd(lambda x: nl.corrcoef(x), m)
    # one graph each: nanvar(x) + nanstd(x, axis=1).sum() is test_fused_var_plus_std
    fd(lambda x: nl.nanmean(x, axis=0) + nl.nansum(x), m)
    fd(lambda x: nl.nanvar(x, axis=0), m)
    fd(lambda x: nl.nanstd(x, axis=1), m)
    fd(lambda x: nl.nanmax(x, axis=1) + nl.nanmin(x, axis=0)[:3], m)
    fd(lambda x, y: nl.hypot(x, y) + nl.fmax(x, y) + nl.copysign(x, y), m, m[::-1] + 0.1)
    fd(lambda f: nl.interp(np.array([-1.0, 0.3, 1.5, 2.0, 9.0]), np.array([0.0, 1.0, 2.0, 4.0]), f), v)
    fd(lambda x, k: nl.convolve(x, k, "same") + nl.correlate(x, k, "same"), v, v[:3])
    fd(lambda x: nl.gradient(x, 0.5, axis=1, edge_order=2), m)
    fd(
        lambda x: (
            nl.cumulative_sum(x, axis=1, include_initial=True)
            * nl.cumulative_prod(x, axis=1, include_initial=True)
        ),
        m,
    )
    fd(lambda x: nl.take_along_axis(x, np.array([[2, 0], [1, 1], [3, -1]]), axis=1), m)
    fd(lambda x: nl.vander(x, 3), v)
    fd(
        lambda x, y: nl.hstack([x, y]) + nl.vstack([x, y]).sum() + nl.rot90(nl.column_stack([x, y]), 1).sum(),
        m[0],
        v,
    )
    fd(lambda x: nl.meshgrid(x, x[:2])[0] * nl.meshgrid(x, x[:2], indexing="ij")[1].sum(), v)
    fd(lambda x: nl.unstack(x, axis=1)[2] * nl.array_split(x, 3, axis=1)[0].sum(), m)
    fd(lambda x: nl.dstack([x, x[::-1]]) + nl.diagonal(nl.atleast_3d(x), 1, 0, 2).sum(), m)
    fd(lambda x: nl.ptp(x, axis=1) + nl.fmin(x, 0.1)[:, 0], m)
    fd(lambda x: nl.nan_to_num(x) + nl.roll(x, 5) + nl.fliplr(x), m)


@FEW
@given(st.data(), any_array(float_dtypes, nonempty_shapes(1, 2)))
def test_recording_is_lazy(data, a):
    """Nothing here evaluates while recording (the value-dependent functions excepted)."""
    assume(not np.isnan(a).all())
    x = lg.asarray(a)
    before = evaluations()
    outs = [
        nl.roll(x, 1),
        nl.nanmean(x),
        nl.interp(x, x.reshape(-1), x.reshape(-1)),
        nl.cov(x),
        nl.convolve(x.reshape(-1), x.reshape(-1)),
        nl.count_nonzero(x),
    ]
    assert evaluations() == before
    lg.eval(*outs)


# -- fusion regions whose members joined in another order than their rebuild's (fixed) -------------


def test_fused_complex_nanvar():
    a = np.array([[1 + 2j, np.nan], [3j, 4.0]])
    np.testing.assert_allclose(nl.nanvar(lg.asarray(a), axis=0).numpy(), np.nanvar(a, axis=0))


def test_fused_var_plus_std():
    a = np.random.default_rng(0).standard_normal((3, 4))
    x = lg.asarray(a)
    got = (nl.nanvar(x) + nl.nanstd(x, axis=1).sum()).numpy()
    np.testing.assert_allclose(got, np.nanvar(a) + np.nanstd(a, axis=1).sum())


@pytest.mark.parametrize(
    "name, call",
    [
        ("cross", lambda: nl.cross(lg.zeros((2, 4)), lg.zeros((2, 3)))),
        ("diagonal", lambda: nl.diagonal(lg.zeros(3))),
        ("diag", lambda: nl.diag(lg.zeros((2, 2, 2)))),
        ("vdot", lambda: nl.vdot(lg.zeros(3), lg.zeros(4))),
        ("repeat", lambda: nl.repeat(lg.zeros(3), [1, 2])),
        ("take_along_axis", lambda: nl.take_along_axis(lg.zeros((2, 3)), np.zeros(2, int), 1)),
        ("average", lambda: nl.average(lg.zeros((2, 3)), weights=lg.ones(3))),
        ("vander", lambda: nl.vander(lg.zeros((2, 2)))),
        ("interp", lambda: nl.interp(lg.zeros(2), lg.zeros((2, 2)), lg.zeros(2))),
        ("convolve", lambda: nl.convolve(lg.zeros(3), lg.zeros((2, 2)))),
        ("gradient", lambda: nl.gradient(lg.zeros(1))),
        ("cumulative_sum", lambda: nl.cumulative_sum(lg.zeros((2, 2)))),
        ("meshgrid", lambda: nl.meshgrid(lg.zeros(2), indexing="yx")),
        ("tile", lambda: nl.tile(lg.zeros(2), -1)),
    ],
)
def test_errors_name_the_function(name, call):
    with pytest.raises((ValueError, TypeError), match=name):
        call()


def test_diagonal_is_read_only_as_numpy():
    d = nl.diagonal(lg.asarray(np.eye(3)))
    with pytest.raises(ValueError, match="read-only"):
        d[0] = 5
    diag_of_matrix = nl.diag(lg.asarray(np.eye(3)))
    with pytest.raises(ValueError, match="read-only"):
        diag_of_matrix += 1


def test_numpy_ufuncs_composed_here_dispatch_here():
    a = np.array([3.0, -4.0, 0.0])
    b = np.array([4.0, 3.0, -1.0])
    la, lb = lg.asarray(a), lg.asarray(b)
    for f in (np.hypot, np.copysign, np.fmax, np.fmin, np.heaviside):
        got = f(la, lb)
        assert isinstance(got, lg.Array), f.__name__
        np.testing.assert_array_equal(got.numpy(), f(a, b))
    assert isinstance(np.signbit(la), lg.Array)
    np.testing.assert_array_equal(np.signbit(la).numpy(), np.signbit(a))
