"""Shape functions, views and indexing against NumPy doing the same reads and writes.

Aliasing is checked by behaviour: after writing through a derived array, the base array
(and the derived one) must hold exactly what NumPy's base holds after the same write, so a
lazygraph view where NumPy copies (or a copy where NumPy views) is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
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


def distinct(shape, dtype=np.int64) -> np.ndarray:
    """Distinct values, so that any misplaced element shows."""
    size = int(np.prod(shape, dtype=np.int64))
    return (np.arange(size) + 1).astype(dtype).reshape(shape)


# -- strategies for view programs ---------------------------------------------------------------


@st.composite
def reshape_target(draw, size: int, allow_minus_one: bool = True):
    """A random shape with `size` elements (sometimes with one -1)."""
    if size == 0:
        dims = list(draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)))
        dims[draw(st.integers(0, len(dims) - 1))] = 0
    else:
        ndim = draw(st.integers(0 if size == 1 else 1, 4))
        dims, rest = [], size
        for _ in range(max(ndim - 1, 0)):
            d = draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
            dims.append(d)
            rest //= d
        if ndim:
            dims.append(rest)
        dims = draw(st.permutations(dims)) if dims else dims
    if allow_minus_one and dims and size and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


@st.composite
def view_step(draw, shape: tuple[int, ...]):
    """One NumPy view operation valid for `shape`, as data: (name, *args)."""
    ndim = len(shape)
    names = ["index", "reshape", "expand_dims", "ravel"]
    if ndim:
        names += ["T", "transpose", "swapaxes", "moveaxis", "flip", "flip_all", "split"]
    if ndim >= 2:
        names.append("mT")
    if 1 in shape:
        names.append("squeeze")
    name = draw(st.sampled_from(names))
    if name == "index":
        # NumPy returns a scalar, not a view, for full integer indices: keep to views here
        probe = np.empty(shape)
        if ndim >= 2:
            idx = draw(
                hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True).filter(
                    lambda i: isinstance(probe[i], np.ndarray)
                )
            )
        elif ndim == 1:
            idx = draw(st.slices(shape[0]) | st.just(Ellipsis) | st.just((None, slice(None, None, -1))))
        else:
            idx = draw(st.sampled_from([Ellipsis, None, (None, None)]))
        return ("index", idx)
    if name == "reshape":
        return ("reshape", draw(reshape_target(int(np.prod(shape, dtype=np.int64)))))
    if name == "expand_dims":
        return ("expand_dims", draw(st.integers(-ndim - 1, ndim)))
    if name == "transpose":
        return ("transpose", tuple(draw(st.permutations(range(ndim)))))
    if name == "swapaxes":
        return ("swapaxes", draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))
    if name == "moveaxis":
        return ("moveaxis", draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))
    if name == "flip":
        return ("flip", draw(st.integers(-ndim, ndim - 1)))
    if name == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        return ("squeeze", draw(st.none() | st.sampled_from(ones)))
    if name == "split":
        axis = draw(st.integers(0, ndim - 1))
        n = shape[axis]
        divisors = [k for k in range(1, n + 1) if n % k == 0] or [1]
        k = draw(st.sampled_from(divisors))
        return ("split", k, axis, draw(st.integers(0, k - 1)))
    return (name,)


def apply_step(mod, x, step):
    """Apply a view step with module `mod` (np or lg) to x."""
    name, *args = step
    if name == "index":
        return x[args[0]]
    if name == "reshape":
        return x.reshape(args[0])
    if name == "ravel":
        return mod.ravel(x)
    if name == "T":
        return x.T
    if name == "mT":
        return x.mT
    if name == "transpose":
        return mod.permute_dims(x, args[0]) if mod is lg else mod.transpose(x, args[0])
    if name == "swapaxes":
        return mod.swapaxes(x, *args)
    if name == "moveaxis":
        return mod.moveaxis(x, *args)
    if name == "expand_dims":
        return mod.expand_dims(x, args[0])
    if name == "squeeze":
        return mod.squeeze(x, args[0])
    if name == "flip":
        return mod.flip(x, args[0])
    if name == "flip_all":
        return mod.flip(x)
    if name == "split":
        k, axis, piece = args
        return mod.split(x, k, axis=axis)[piece]
    raise AssertionError(step)


@st.composite
def view_program(draw, max_steps: int = 4):
    base_shape = draw(shapes(max_dims=4, min_side=0, max_side=4))
    steps = []
    shape = base_shape
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(view_step(shape))
        shape = apply_step(np, np.empty(shape), step).shape
        steps.append(step)
    return base_shape, steps


def run_views(steps, nb, lb):
    nv, lv = nb, lb
    for step in steps:
        nv, lv = apply_step(np, nv, step), apply_step(lg, lv, step)
        assert lv.shape == nv.shape, step
    return nv, lv


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


# -- basic indexing --------------------------------------------------------------------------------


@st.composite
def basic_index_case(draw):
    shape = draw(shapes(min_dims=0, max_dims=4))
    if len(shape) >= 2:
        idx = draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    elif len(shape) == 1:
        idx = draw(
            st.slices(shape[0])
            | st.integers(-shape[0], shape[0] - 1 if shape[0] else 0).filter(lambda i: shape[0] > 0)
            | st.sampled_from([Ellipsis, None, (None, Ellipsis), (Ellipsis, None)])
        )
    else:
        idx = draw(st.sampled_from([(), Ellipsis, None, (None, Ellipsis, None)]))
    return shape, idx


@given(case=basic_index_case(), dt=dtypes, data=st.data())
def test_basic_indexing(case, dt, data):
    shape, idx = case
    x = distinct(shape, dt) if dt != np.bool_ else data.draw(arrays(dt, shape))
    lx = lg.asarray(x)
    check(lambda: x[idx], lambda: lx[idx])


@pytest.mark.parametrize(
    "idx",
    [
        (0, 0, 0),
        5,
        -6,
        (slice(None), 4),
        (slice(None, None, 0),),
        (Ellipsis, Ellipsis),
        (0.5,),
        (slice(0.5, 2),),
        "a",
    ],
)
def test_basic_index_errors_at_record(idx):
    x = np.zeros((5, 4))
    check(lambda: x[idx], lambda: lg.asarray(x)[idx], (IndexError, TypeError, ValueError))


@given(case=basic_index_case(), data=st.data())
def test_basic_setitem_writes_base(case, data):
    shape, idx = case
    base = distinct(shape)
    nb, lb = base.copy(), lg.asarray(base)
    target_shape = nb[idx].shape
    value = data.draw(value_for(target_shape, np.int64))
    lvalue = lg.asarray(value) if isinstance(value, np.ndarray) and data.draw(st.booleans()) else value
    expected, err = reference(lambda: nb.__setitem__(idx, value))
    if err is not None:
        with pytest.raises(RECORD_ERRORS):
            lb[idx] = lvalue
        return
    lb[idx] = lvalue
    assert_matches(lb, nb)


@st.composite
def value_for(draw, target_shape: tuple[int, ...], base_dtype):
    """A value that broadcasts to target_shape: Python scalar or array (sometimes with leading 1s)."""
    kind = draw(st.sampled_from(["scalar", "array", "array", "list"]))
    if kind == "scalar":
        return draw(st.integers(-50, 50) | st.booleans() | st.floats(-50, 50))
    k = draw(st.integers(0, len(target_shape)))
    vshape = list(target_shape[k:])
    vshape = [1 if draw(st.integers(0, 3)) == 0 else d for d in vshape]
    if draw(st.integers(0, 4)) == 0:
        vshape = [1, *vshape]
    dt = draw(
        st.sampled_from([np.dtype(base_dtype), np.dtype(np.int64), np.dtype(np.bool_), np.dtype(np.int8)])
    )
    value = draw(arrays(dt, tuple(vshape), lo=-50, hi=50))
    return value.tolist() if kind == "list" else value


# -- advanced indexing --------------------------------------------------------------------------


@st.composite
def advanced_index(draw, shape: tuple[int, ...]):
    """Index mixing integer arrays/lists, boolean masks, slices, ints, None and Ellipsis."""
    ndim = len(shape)
    bshape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    items = []
    d = 0
    used_ellipsis = False
    n_items = draw(st.integers(1, max(ndim, 1)))
    while d < ndim and len(items) < n_items + 2:
        kind = draw(st.sampled_from(["slice", "int", "array", "array", "list", "mask", "none", "ellipsis"]))
        n = shape[d]
        if kind == "none":
            items.append(None)
            continue
        if kind == "ellipsis":
            if used_ellipsis:
                continue
            used_ellipsis = True
            items.append(Ellipsis)
            rest = draw(st.integers(0, ndim - d))
            d = ndim - rest  # the items after the Ellipsis index the last `rest` dims
            continue
        if kind == "slice":
            items.append(draw(st.slices(n)))
            d += 1
        elif kind == "int":
            if n == 0:
                continue
            items.append(draw(st.integers(-n, n - 1)))
            d += 1
        elif kind in ("array", "list"):
            if n == 0:
                continue
            ishape = draw(hnp.broadcastable_shapes(bshape, min_dims=0, max_dims=len(bshape), min_side=1))
            idt = draw(st.sampled_from([np.int64, np.int32, np.int8, np.uint8]))
            arr = draw(
                hnp.arrays(np.int64, ishape, elements=st.integers(0 if idt == np.uint8 else -n, n - 1))
            )
            arr = arr.astype(idt)
            items.append(arr.tolist() if kind == "list" and arr.ndim else arr)
            d += 1
        else:
            k = draw(st.integers(1, min(2, ndim - d)))
            mask = draw(hnp.arrays(np.bool_, shape[d : d + k]))
            items.append(mask)
            d += k
        if len(items) >= n_items and draw(st.booleans()):
            break
    if not any(isinstance(it, (np.ndarray, list)) for it in items) and ndim:
        # make sure there is an advanced index somewhere
        n = shape[0]
        items = [np.array([0, -1]) if n else np.zeros(0, np.int64)] + items[1:] if items else [np.array([0])]
        if n == 0:
            items[0] = np.zeros((0,), dtype=np.int64)
    return tuple(items)


def lazify_index(idx, data):
    """Turn some NumPy index arrays (integer or boolean) into lazy arrays."""
    out = []
    for it in idx:
        if isinstance(it, np.ndarray) and data.draw(st.booleans()):
            out.append(lg.asarray(it))
        else:
            out.append(it)
    return tuple(out)


@given(shape=shapes(min_dims=1, max_dims=4), dt=dtypes, data=st.data())
def test_advanced_indexing(shape, dt, data):
    x = distinct(shape, dt) if dt != np.bool_ else data.draw(arrays(dt, shape))
    idx = data.draw(advanced_index(shape))
    lidx = lazify_index(idx, data)
    lx = lg.asarray(x)
    expected, err = reference(lambda: x[idx])
    if err is not None:
        # lazy index values are only known when evaluated: their bounds are checked then
        lazy = any(isinstance(it, lg.Array) for it in lidx)
        with pytest.raises(RECORD_ERRORS):
            r = lx[lidx]
            if lazy:
                r.numpy()
        return
    assert_matches(lx[lidx], expected)


@pytest.mark.parametrize(
    "idx",
    [
        (np.array([0, 2]), slice(None), np.array([1, 0])),  # non-adjacent: broadcast dims go first
        (slice(None), np.array([0, 2]), np.array([1, 0])),  # adjacent: replaced in place
        (slice(None), np.array([[0], [2]]), 1),
        (1, slice(None), np.array([0, 1, 3])),  # int + array separated by a slice
        (np.array([True, False, True]), slice(1, 3)),
        (Ellipsis, np.array([-1, -4])),
        (None, np.array([2, -3]), None, slice(None, None, -1)),
        ([0, 2, 1],),
        ([[0, 1], [2, 2]], [[3], [0]]),
        (np.ones((3, 4), dtype=bool),),
        (np.zeros((3, 4), dtype=bool), 0),
        (np.array([], dtype=np.int64),),
        (np.array([0, 1]), np.array([0, 1, 2])),  # shape mismatch: IndexError
        (np.array([3]),),  # out of bounds
        (np.array([0.5]),),  # float index
        (np.array([True, False]),),  # mask too short
    ],
)
def test_advanced_indexing_cases(idx):
    x = distinct((3, 4, 5)) if not isinstance(idx[0], np.ndarray) or idx[0].ndim < 2 else distinct((3, 4))
    check(lambda: x[idx], lambda: lg.asarray(x)[idx], RECORD_ERRORS)


def test_zero_d_integer_array_index():
    """0-d integer index arrays give integer-index shapes but, as in NumPy, a copy."""
    base = distinct((3, 4))
    nb, lb = base.copy(), lg.asarray(base)
    i = np.array(1)
    nr, lr = nb[i], lb[i]
    assert_matches(lr, nr)
    nr[0] = -1
    lr[0] = -1
    assert_matches(lb, nb)
    assert_matches(lr, nr)
    li = lg.asarray(i)
    assert_matches(lb[li], nb[i])
    assert_matches(lb[li, 2], nb[i, 2])
    assert_matches(lb[:, li], nb[:, i])
    nb[i, 3] = -7
    lb[li, 3] = -7
    assert_matches(lb, nb)


def test_lazy_boolean_mask_and_lazy_integer_index():
    x = np.arange(12.0).reshape(3, 4)
    lx = lg.asarray(x)
    assert_matches(lx[lx > 4], x[x > 4])
    assert_matches(lx[:, lx[0] > 1], x[:, x[0] > 1])
    order = lg.argmax(lx, axis=1)
    assert_matches(lx[lg.asarray(np.arange(3)), order], x[np.arange(3), np.argmax(x, axis=1)])
    with pytest.raises(IndexError):
        x[x[0] > 1]
    with pytest.raises(IndexError):
        lx[lx[0] > 1]


@given(shape=shapes(min_dims=1, max_dims=3), data=st.data())
def test_advanced_setitem(shape, data):
    base = distinct(shape)
    idx = data.draw(advanced_index(shape))
    got, err = reference(lambda: base[idx])
    assume(err is None)
    value = data.draw(value_for(got.shape, np.int64))
    lidx = lazify_index(idx, data)
    nb, lb = base.copy(), lg.asarray(base)
    lvalue = lg.asarray(value) if isinstance(value, np.ndarray) and data.draw(st.booleans()) else value
    _, err = reference(lambda: nb.__setitem__(idx, value))
    if err is not None:
        with pytest.raises(RECORD_ERRORS):
            lb[lidx] = lvalue
        return
    lb[lidx] = lvalue
    assert_matches(lb, nb)


@given(prog=view_program(max_steps=3), data=st.data())
def test_setitem_through_views_of_views(prog, data):
    """Basic or advanced writes through a chain of views land in the base like NumPy's."""
    base_shape, steps = prog
    base = distinct(base_shape)
    nb, lb = base.copy(), lg.asarray(base)
    nv, lv = run_views(steps, nb, lb)
    assume(nv.ndim >= 1)
    if data.draw(st.booleans()):
        idx = data.draw(advanced_index(nv.shape))
        lidx = lazify_index(idx, data)
    else:
        idx = data.draw(
            hnp.basic_indices(nv.shape, allow_newaxis=True) if nv.ndim >= 2 else st.slices(nv.shape[0])
        )
        lidx = idx
    got, err = reference(lambda: nv[idx])
    assume(err is None)
    value = data.draw(value_for(got.shape, np.int64))
    _, err = reference(lambda: nv.__setitem__(idx, value))
    if err is not None:
        with pytest.raises(RECORD_ERRORS):
            lv[lidx] = value
        return
    lv[lidx] = value
    assert_matches(lb, nb)
    assert_matches(lv, nv)


def test_setitem_python_scalar_errors_at_record():
    for dt, value in [
        (np.int8, 300),
        (np.uint8, -1),
        (np.int64, float("nan")),
        (np.int32, float("inf")),
        (np.int64, 2**70),
    ]:
        x = np.zeros(3, dt)
        with pytest.raises((OverflowError, ValueError)):
            x[0] = value
        lx = lg.asarray(x)
        before = lg.debug.evaluation_stats()["evaluations"]
        with pytest.raises((OverflowError, ValueError)):
            lx[0] = value
        with pytest.raises((OverflowError, ValueError)):
            lx[:] = value
        assert lg.debug.evaluation_stats()["evaluations"] == before
        assert_matches(lx, x)


@pytest.mark.parametrize("dt", [np.bool_, np.int64, np.float32])
@pytest.mark.parametrize(
    "value",
    [
        [1],
        [0],
        [1, 2],
        [],
        (3,),
        np.array([5]),
        np.array([[0.5]]),
        np.array([1, 2]),
        np.array([]),
        np.array(7),
        2.5,
    ],
    ids=repr,
)
@pytest.mark.parametrize("key", [(), (0,), (0, 1), Ellipsis], ids=repr)
def test_single_element_assignment_like_numpy(dt, value, key):
    """A full integer index stores one element: NumPy's rules for sequences (and bool's truthiness)."""
    shape = {(): (), (0,): (3,), (0, 1): (2, 2), Ellipsis: ()}[key]
    base = np.zeros(shape, dt)
    nb, lb = base.copy(), lg.asarray(base)
    _, err = reference(lambda: nb.__setitem__(key, value))
    if err is not None:
        with pytest.raises(type(err)):
            lb[key] = value
        return
    lb[key] = value
    assert_matches(lb, nb)


def test_setitem_shape_mismatch_raises_at_record():
    x = np.zeros((3, 4))
    lx = lg.asarray(x)
    for idx, value in [(slice(None), np.ones(3)), (0, np.ones((2, 4))), ([0, 1], np.ones((3, 4)))]:
        with pytest.raises(ValueError):
            x[idx] = value
        with pytest.raises(ValueError):
            lx[idx] = value


def test_reads_before_write_keep_old_values():
    base = np.arange(6).reshape(2, 3)
    lb = lg.asarray(base)
    row = lb[0]
    snapshot = row * 1
    row[1] = 100
    assert_matches(snapshot, base[0])
    expected = base.copy()
    expected[0, 1] = 100
    assert_matches(lb, expected)


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
