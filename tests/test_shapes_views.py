"""Shape functions and views against NumPy doing the same reads and writes (indexing: test_indexing.py).

Aliasing is checked by behaviour: after writing through a derived array, the base array
(and the derived one) must hold exactly what NumPy's base holds after the same write, so a
lazygraph view where NumPy copies (or a copy where NumPy views) is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support_views import distinct, reshape_target, run_views, view_program
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    RECORD_ERRORS,
    arrays,
    assert_matches,
    broadcast_shapes,
    check,
    dtypes,
    reference,
    shapes,
)

import lazygraph as lg

# -- view chains and aliasing --------------------------------------------------------------------


@given(prog=view_program(), data=st.data())
def test_view_chain_values_and_write_aliasing(prog, data):
    base_shape, steps = prog
    base = distinct(base_shape)
    nb, lb = base.copy(), lg.asarray(base)
    nv, lv = run_views(steps, nb, lb)
    assert_matches(lv, nv)
    if nv.size == 0:
        return
    how = data.draw(st.sampled_from(["first", "all", "add"]))
    if how == "first":
        first = (0,) * nv.ndim
        nv[first] = -99
        lv[first] = -99
    elif how == "all":
        nv[...] = -1
        lv[...] = -1
    else:
        nv += 1000
        lv += 1000
    assert_matches(lb, nb)  # base changed exactly when NumPy's view aliased it
    assert_matches(lv, nv)


@given(prog=view_program(max_steps=3), data=st.data())
def test_reshape_view_or_copy_like_numpy(prog, data):
    """`r = x.reshape(s); r[0] = 99` changes x exactly when NumPy's reshape returned a view."""
    base_shape, steps = prog
    base = distinct(base_shape)
    nb, lb = base.copy(), lg.asarray(base)
    nx, lx = run_views(steps, nb, lb)
    target = data.draw(reshape_target(nx.size))
    check(lambda: nx.reshape(target), lambda: lx.reshape(target))
    nr, lr = nx.reshape(target), lx.reshape(target)
    if nr.size == 0:
        return
    if nr.ndim:
        nr[0] = 99
        lr[0] = 99
    else:
        nr[()] = 99
        lr[()] = 99
    assert_matches(lx, nx)
    assert_matches(lb, nb)
    assert_matches(lr, nr)
    # the functional form agrees
    nb2, lb2 = base.copy(), lg.asarray(base)
    nx2, lx2 = run_views(steps, nb2, lb2)
    assert_matches(lg.reshape(lx2, target), np.reshape(nx2, target))


def test_reshape_copy_false_raises_when_a_copy_is_needed():
    x = lg.asarray(np.arange(12).reshape(3, 4)).T
    with pytest.raises(ValueError):
        np.arange(12).reshape(3, 4).T.reshape((12,), copy=False)
    with pytest.raises(ValueError):
        x.reshape((12,), copy=False)
    y = lg.asarray(np.arange(12)).reshape((3, 4), copy=True)
    y[0, 0] = 5
    assert lg.asarray(np.arange(12)).numpy()[0] == 0


@pytest.mark.parametrize(
    ("shape", "target"),
    [((2, 3), (4, 2)), ((2, 3), (-1, 4)), ((2, 3), (-1, -1)), ((0, 3), (-1, 0)), ((2, 3), (5, -1))],
)
def test_reshape_errors_at_record(shape, target):
    x = np.zeros(shape)
    check(lambda: x.reshape(target), lambda: lg.asarray(x).reshape(target))


@given(prog=view_program(max_steps=3))
def test_flatten_never_aliases_and_ravel_like_numpy(prog):
    base_shape, steps = prog
    base = distinct(base_shape)
    nb, lb = base.copy(), lg.asarray(base)
    nx, lx = run_views(steps, nb, lb)
    nf, lf = nx.flatten(), lx.flatten()
    nr, lr = np.ravel(nx), lg.ravel(lx)
    assert_matches(lf, nf)
    assert_matches(lr, nr)
    assert_matches(lx.ravel(), nx.ravel())
    if nf.size:
        nf[0] = -5
        lf[0] = -5
        assert_matches(lb, nb)
        assert_matches(lg.flatten(lx), nx.flatten())
        nr[-1] = -7
        lr[-1] = -7
        assert_matches(lb, nb)  # ravel is a view only for C-contiguous input, as in NumPy
        assert_matches(lr, nr)


@given(x=arrays(dtypes, shapes(min_dims=2, max_dims=4)), data=st.data())
def test_transpose_family(x, data):
    lx = lg.asarray(x)
    axes = tuple(data.draw(st.permutations(range(x.ndim))))
    neg = tuple(a - x.ndim for a in axes)
    assert_matches(lx.T, x.T)
    assert_matches(lx.mT, x.mT)
    assert_matches(lg.matrix_transpose(lx), np.matrix_transpose(x))
    assert_matches(lg.transpose(lx), np.transpose(x))
    assert_matches(lg.transpose(lx, axes), np.transpose(x, axes))
    assert_matches(lg.permute_dims(lx, neg), np.permute_dims(x, neg))
    assert_matches(lx.transpose(*axes), x.transpose(*axes))
    assert_matches(lx.transpose(axes), x.transpose(axes))
    assert_matches(lx.transpose(), x.transpose())
    a, b = data.draw(st.integers(-x.ndim, x.ndim - 1)), data.draw(st.integers(-x.ndim, x.ndim - 1))
    assert_matches(lx.swapaxes(a, b), x.swapaxes(a, b))
    src = data.draw(st.lists(st.integers(0, x.ndim - 1), unique=True, min_size=1, max_size=x.ndim))
    dst = data.draw(st.permutations(range(x.ndim)))[: len(src)]
    assert_matches(lg.moveaxis(lx, src, dst), np.moveaxis(x, src, dst))


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        ("transpose", ((0, 0),)),
        ("transpose", ((0, 1, 2),)),
        ("swapaxes", (0, 2)),
        ("moveaxis", (0, 3)),
        ("moveaxis", ([0, 1], [0])),
        ("moveaxis", ([0, 0], [0, 1])),
        ("expand_dims", (3,)),
        ("expand_dims", ((0, 0),)),
        ("squeeze", (0,)),
        ("flip", (2,)),
    ],
)
def test_view_function_errors_at_record(fn, args):
    x = np.zeros((2, 3))
    check(lambda: getattr(np, fn)(x, *args), lambda: getattr(lg, fn)(lg.asarray(x), *args), RECORD_ERRORS)


@given(x=arrays(dtypes, shapes(max_dims=3)), data=st.data())
def test_expand_dims_squeeze_flip(x, data):
    lx = lg.asarray(x)
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    assert_matches(lg.expand_dims(lx, axis), np.expand_dims(x, axis))
    axes = tuple(data.draw(st.lists(st.integers(-x.ndim - 2, x.ndim + 1), min_size=1, max_size=2)))
    check(lambda: np.expand_dims(x, axes), lambda: lg.expand_dims(lx, axes), RECORD_ERRORS)
    assert_matches(lg.squeeze(lx), np.squeeze(x))
    assert_matches(lx.squeeze(), x.squeeze())
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if ones:
        ax = data.draw(st.sampled_from(ones))
        assert_matches(lg.squeeze(lx, ax), np.squeeze(x, ax))
        assert_matches(lg.squeeze(lx, tuple(ones)), np.squeeze(x, tuple(ones)))
    assert_matches(lg.flip(lx), np.flip(x))
    assert_matches(lx.flip(), np.flip(x))
    if x.ndim:
        fa = data.draw(st.integers(-x.ndim, x.ndim - 1))
        assert_matches(lg.flip(lx, fa), np.flip(x, fa))
        assert_matches(
            lg.flip(lx, (0, fa % x.ndim) if fa % x.ndim else 0),
            np.flip(x, (0, fa % x.ndim) if fa % x.ndim else 0),
        )


# -- broadcasting views -----------------------------------------------------------------------------


@given(shapes_=broadcast_shapes(2), data=st.data())
def test_broadcast_to_is_read_only(shapes_, data):
    src_shape, _ = shapes_
    target = np.broadcast_shapes(*shapes_)
    x = data.draw(arrays(dtypes, src_shape))
    lx = lg.asarray(x)
    lb = lg.broadcast_to(lx, target)
    assert_matches(lb, np.broadcast_to(x, target))
    with pytest.raises(ValueError):
        np.broadcast_to(x, target)[...] = 0
    with pytest.raises(ValueError):
        lb[...] = 0
    with pytest.raises((ValueError, TypeError)):  # read-only, or bool += int
        lb += 1
    if lb.ndim and lb.size:
        with pytest.raises(ValueError):
            lb[0] = 1
        with pytest.raises(ValueError):
            lb.T[...] = 1  # views of a read-only view stay read-only
    assert_matches(lx, x)
    # a copy of the broadcast view is writable
    c = lg.copy(lb)
    c[...] = 0
    assert_matches(c, np.zeros(target, x.dtype))


@pytest.mark.parametrize(("src", "target"), [((3,), (4,)), ((2, 1), (2,)), ((3,), (-1, 3)), ((2,), (2, 0))])
def test_broadcast_to_errors_at_record(src, target):
    x = np.zeros(src)
    check(lambda: np.broadcast_to(x, target), lambda: lg.broadcast_to(lg.asarray(x), target))


@given(shapes_=broadcast_shapes(3), data=st.data())
def test_broadcast_arrays(shapes_, data):
    xs = [data.draw(arrays(dtypes, s)) for s in shapes_]
    got = lg.broadcast_arrays(*[lg.asarray(x) for x in xs])
    expected = np.broadcast_arrays(*xs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_matches(g, e)
        if g.size:  # NumPy warns that writing to these is going away; lazygraph forbids it
            with pytest.raises(ValueError):
                g[...] = 0


def test_broadcast_arrays_mismatch_raises():
    with pytest.raises(ValueError):
        np.broadcast_arrays(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="broadcast"):
        lg.broadcast_arrays(lg.zeros(3), lg.zeros(4))


# -- joins, splits, pad, copy -------------------------------------------------------------------------


@st.composite
def concat_case(draw):
    shape = list(draw(shapes(min_dims=1, max_dims=3)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    n = draw(st.integers(1, 3))
    arrs = []
    for _ in range(n):
        s = list(shape)
        s[axis] = draw(st.integers(0, 3))
        arrs.append(draw(arrays(dtypes, tuple(s))))
    return arrs, axis


@given(case=concat_case(), data=st.data())
def test_concat(case, data):
    arrs, axis = case
    larrs = [lg.asarray(a) if data.draw(st.booleans()) else a for a in arrs]
    check(lambda: np.concatenate(arrs, axis=axis), lambda: lg.concat(larrs, axis=axis))
    check(lambda: np.concatenate(arrs, axis=axis), lambda: lg.concatenate(larrs, axis=axis))
    check(lambda: np.concatenate(arrs, axis=None), lambda: lg.concat(larrs, axis=None))


@pytest.mark.parametrize(
    ("shapes_", "axis"),
    [([(2, 3), (2, 4)], 0), ([(2, 3), (3,)], 0), ([(), ()], 0), ([(2,)], 1), ([(2, 2), (2, 2)], -3)],
)
def test_concat_errors_at_record(shapes_, axis):
    arrs = [np.zeros(s) for s in shapes_]
    check(
        lambda: np.concatenate(arrs, axis=axis), lambda: lg.concat([lg.asarray(a) for a in arrs], axis=axis)
    )


@given(data=st.data())
def test_stack(data):
    shape = data.draw(shapes(max_dims=3))
    n = data.draw(st.integers(1, 3))
    arrs = [data.draw(arrays(dtypes, shape)) for _ in range(n)]
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check(lambda: np.stack(arrs, axis=axis), lambda: lg.stack([lg.asarray(a) for a in arrs], axis=axis))


def test_stack_errors_at_record():
    for arrs, axis in [([np.zeros(2), np.zeros(3)], 0), ([np.zeros(2)], 2), ([np.zeros(2)], -3)]:
        check(lambda: np.stack(arrs, axis=axis), lambda: lg.stack([lg.asarray(a) for a in arrs], axis=axis))


@given(x=arrays(dtypes, shapes(min_dims=1, max_dims=3)), data=st.data())
def test_split(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    if data.draw(st.booleans()):
        spec = data.draw(st.integers(1, max(n, 1) + 1))
    else:
        spec = data.draw(st.lists(st.integers(-1, n + 1), max_size=3))
    expected, err = reference(lambda: np.split(x, spec, axis=axis))
    lx = lg.asarray(x)
    if err is not None:
        with pytest.raises(ValueError):
            lg.split(lx, spec, axis=axis)
        return
    got = lg.split(lx, spec, axis=axis)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_matches(g, e)


def test_split_pieces_are_views():
    base = np.arange(12).reshape(3, 4)
    nb, lb = base.copy(), lg.asarray(base)
    np_pieces, lg_pieces = np.split(nb, [1, 3], axis=1), lg.split(lb, [1, 3], axis=1)
    np_pieces[1][...] = -1
    lg_pieces[1][...] = -1
    np_pieces[2] *= 10
    lg_pieces[2] *= 10
    assert_matches(lb, nb)


PAD_MODES = ["constant", "edge", "reflect", "wrap"]


@given(x=arrays(dtypes, shapes(max_dims=3)), mode=st.sampled_from(PAD_MODES), data=st.data())
def test_pad(x, mode, data):
    form = data.draw(st.sampled_from(["int", "pair", "per_axis"]))
    if form == "int":
        width = data.draw(st.integers(0, 3))
    elif form == "pair":
        width = (data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)))
    else:
        width = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in range(x.ndim))
    kwargs = {}
    if mode == "constant" and data.draw(st.booleans()):
        kwargs["constant_values"] = data.draw(st.integers(-3, 3))
    check(
        lambda: np.pad(x, width, mode=mode, **kwargs),
        lambda: lg.pad(lg.asarray(x), width, mode=mode, **kwargs),
    )


@given(prog=view_program(max_steps=2))
@settings(max_examples=30)
def test_copy_is_independent(prog):
    base_shape, steps = prog
    base = distinct(base_shape)
    nb, lb = base.copy(), lg.asarray(base)
    nv, lv = run_views(steps, nb, lb)
    for lc in (lg.copy(lv), lv.copy()):
        nc = nv.copy()
        assert_matches(lc, nc)
        if nc.size:
            lc[...] = 0
            assert_matches(lv, nv)  # the original is untouched
            assert_matches(lb, nb)
    if nv.size:
        lc, before = lg.copy(lv), nv.copy()
        nv[...] = -3
        lv[...] = -3  # writing the original leaves the copy alone
        assert_matches(lc, before)
        assert_matches(lb, nb)


def test_asarray_of_lazy_list_stacks():
    a, b = lg.asarray(np.arange(3)), lg.asarray(np.arange(3) * 2.0)
    assert_matches(lg.asarray([a, b]), np.asarray([np.arange(3), np.arange(3) * 2.0]))
