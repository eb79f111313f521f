"""Basic and advanced indexing against NumPy doing the same reads and writes.

Aliasing is checked by behaviour, as in tests/test_shapes_views.py: after a write through an
index, the base array must hold exactly what NumPy's base holds after the same write.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support_views import distinct, run_views, view_program
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import (
    RECORD_ERRORS,
    arrays,
    assert_matches,
    check,
    dtypes,
    reference,
    shapes,
)

import lazygraph as lg

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
