"""Element reads and writes of an evaluated array go to its buffer directly, with NumPy's semantics.

`s = a[i]` of an evaluated host array is the element at once (a NumPy scalar), `s op= v` is
NumPy's scalar arithmetic, and `a[i] = v` writes into the buffer itself when nothing recorded
but not evaluated, no view, no `numpy()` result and no other array can still read the old
value (lazygraph/array.py `_direct_set`). Otherwise the write is recorded as before. Every
result is checked against NumPy running the same program.
"""

from __future__ import annotations

import operator
import warnings
import weakref

import numpy as np
import pytest

import lazygraph as lg

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
IOPS = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
}
VALUES = [3, -2, 1.5, True, np.float32(0.25), np.int8(5), 2 + 1j]


def _evaluated(xp, dtype):
    values = np.array([5, 1, 0, 3, 2, 7], dtype=np.int64).astype(dtype)
    if xp is np:
        return values.copy()
    a = lg.asarray(values)
    a.numpy()
    return a


def _program(xp, dtype, iop, v):
    """`a[i] op= v` over every element, negative indices included; the result or the error type."""
    a = _evaluated(xp, dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in (0, 2, -1, -3, 1):
                idx = i
                a[idx] = iop(a[idx], v)
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e)
    return np.asarray(a).copy() if xp is not np else a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(IOPS))
def test_element_update_matches_numpy(dtype, name):
    iop = IOPS[name]
    for v in VALUES:
        want = _program(np, dtype, iop, v)
        got = _program(lg, dtype, iop, v)
        if isinstance(want, type):
            # NumPy raised; lazygraph must too (the recorded path's checks, at the user's line)
            assert isinstance(got, type) and issubclass(got, Exception), (dtype, name, v, got)
            continue
        assert not isinstance(got, type), (dtype, name, v, got)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=f"{dtype} {name} {v!r}")


def _node_ref(a):
    return weakref.ref(a._storage.node)  # weak: a strong reference would hold the old value


@pytest.mark.host_backend  # the CPU's direct writes into its buffer
def test_writes_go_into_the_buffer_and_keep_the_node():
    a = lg.zeros(6)
    a.numpy()
    r = _node_ref(a)
    for i in range(6):
        a[i] += 1.5
    a[-1] = 7
    a[2:4] = -1.0
    assert a._storage.node is r()  # no node recorded: the writes went into the buffer
    np.testing.assert_array_equal(a.numpy(), [1.5, 1.5, -1.0, -1.0, 1.5, 7.0])
    assert not a.numpy().flags.writeable  # handed out read-only, as every evaluated value

    m = lg.asarray(np.arange(12).reshape(3, 4))
    r = _node_ref(m)
    m[1, 2] = 100
    m[-1, -1] *= 3
    m[np.int64(0), 1] -= 5
    m[2] = 9  # a row filled by a scalar
    assert m._storage.node is r()
    want = np.arange(12).reshape(3, 4)
    want[1, 2] = 100
    want[-1, -1] *= 3
    want[0, 1] -= 5
    want[2] = 9
    np.testing.assert_array_equal(m.numpy(), want)


def test_pending_readers_see_the_old_value():
    a = lg.asarray(np.arange(4.0))
    b = a * 2  # recorded, not evaluated: it reads the value before the write
    a[0] = 100.0
    a[1] += 1.0
    np.testing.assert_array_equal(b.numpy(), [0.0, 2.0, 4.0, 6.0])
    np.testing.assert_array_equal(a.numpy(), [100.0, 2.0, 2.0, 3.0])

    s = a[2]  # an element read is a copy (NumPy's scalar)
    a[2] = -5.0
    assert float(s) == 2.0 and float(a[2]) == -5.0
    t = s
    t += 10.0  # rebinds t: s keeps its value
    assert float(s) == 2.0 and float(t) == 12.0
    a[3] = t
    assert float(t) == 12.0 and float(a[3]) == 12.0

    held = a.numpy()  # a result the user holds is a snapshot: the write is recorded instead
    a[0] = 1.0
    assert held[0] == 100.0 and a.numpy()[0] == 1.0

    c = lg.asarray(np.ones(3))
    d = c + 0  # a pending reader of the old value, then evaluated later
    c[0] = 50.0
    e = c * 1
    c[1] = 60.0
    np.testing.assert_array_equal(d.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(e.numpy(), [50.0, 1.0, 1.0])
    np.testing.assert_array_equal(c.numpy(), [50.0, 60.0, 1.0])


def test_views_sharing_the_buffer_see_the_write():
    n = np.arange(10.0)
    a = lg.asarray(n)
    v = a[::2]  # a view: shares a's buffer, as NumPy's does
    a[4] = 40.0
    n[4] = 40.0
    np.testing.assert_array_equal(v.numpy(), n[::2])
    w = a[1:4]
    w.numpy()  # read: its value is held, so the next write is recorded, and w still follows it
    a[2] = -2.0
    n[2] = -2.0
    np.testing.assert_array_equal(w.numpy(), n[1:4])
    a.numpy()
    v[1] = 99.0  # a write through the view (recorded) is seen by the base
    n[::2][1] = 99.0
    np.testing.assert_array_equal(a.numpy(), n)
    a[2] += 1.0
    n[2] += 1.0
    np.testing.assert_array_equal(v.numpy(), n[::2])
    np.testing.assert_array_equal(a.numpy(), n)


def test_arrays_sharing_a_node_are_not_written_through():
    a = lg.asarray(np.zeros(3))
    b = lg.zeros(3)
    b[...] = a  # b holds a's node: a write into a must not change b
    a.numpy()
    a[0] = 1.0
    np.testing.assert_array_equal(b.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(a.numpy(), [1.0, 0.0, 0.0])


def test_errors_come_at_the_users_line():
    a = lg.asarray(np.zeros(4, dtype=np.int8))
    with pytest.raises(IndexError):
        a[4] = 1
    with pytest.raises(IndexError):
        a[-5] += 1
    with pytest.raises(OverflowError):
        a[0] = 300
    with pytest.raises(ValueError):
        a[0] = float("nan")
    with pytest.raises(OverflowError):
        a[0] += 300  # NumPy: a Python int out of bounds for int8
    with pytest.raises(TypeError):
        a[0] = "x"
    np.testing.assert_array_equal(a.numpy(), [0, 0, 0, 0])  # nothing written by the failures
    a[1] = 127
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a[1] += 1  # wraps, as NumPy's
    assert int(a[1]) == -128
    f = lg.asarray(np.zeros(2))
    with pytest.warns(np.exceptions.ComplexWarning):
        f[0] = np.complex128(1 + 2j)  # the imaginary part dropped, with NumPy's warning
    assert float(f[0]) == 1.0
    ro = lg.broadcast_to(lg.asarray(np.zeros(1)), (3,))
    ro.numpy()
    with pytest.raises(ValueError, match="read-only"):
        ro[0] = 1.0


def test_autograd_and_model_state_keep_recorded_writes():
    w = lg.asarray(np.arange(3.0), requires_grad=True)
    with lg.no_grad():
        r = _node_ref(w)
        w[0] = 10.0  # a parameter's write stays recorded (backward must see its value change)
    assert w._storage.node is not r()
    np.testing.assert_array_equal(w.numpy(), [10.0, 1.0, 2.0])
    s = w[1]  # an element of an array that requires grad stays a recorded view
    (g,) = lg.grad(s * 3.0, [w])
    np.testing.assert_array_equal(g.numpy(), [0.0, 3.0, 0.0])

    x = lg.asarray(np.arange(3.0))
    y = x * 2
    y.numpy()  # y's history is released: grad through its element must still refuse
    e = y[1]
    with pytest.raises(RuntimeError, match="requires_grad"):
        lg.grad(e * e, [x])

    st = lg.mark_static(lg.asarray(np.arange(4.0)))
    r = _node_ref(st)
    st[1] = 5.0  # model state: passes memoize on its value, so the write is recorded
    assert st._storage.node is not r()
    np.testing.assert_array_equal(st.numpy(), [0.0, 5.0, 2.0, 3.0])


def test_held_scalars_mix_with_lazy_arrays():
    a = lg.asarray(np.arange(4.0, dtype=np.float32))
    s = a[1]
    s *= 3  # float32 stays float32, as NumPy's scalar
    assert s.dtype == np.float32
    t = s + lg.ones(2, dtype=np.float32)  # the held element becomes a 0-d constant
    np.testing.assert_array_equal(t.numpy(), np.float32(3.0) + np.ones(2, np.float32))
    b = lg.zeros(3)
    b[0] = a[2]  # an element of one array into another
    b[1] += a[3]
    np.testing.assert_array_equal(b.numpy(), [2.0, 3.0, 0.0])
    assert s.item() == 3.0 and int(s) == 3 and bool(s)


def _rows_program(xp, dtype, iop, other_kind):
    """`a[i] op= v` over rows, columns and slices of an evaluated 2-D array; the result or the error type."""
    base = (np.arange(12).reshape(3, 4) % 5 + 1).astype(dtype)
    a = base.copy() if xp is np else lg.asarray(base)
    v = (np.arange(4) % 3 + 1).astype(dtype)
    if other_kind == "array":
        v = v if xp is np else lg.asarray(v)
    elif other_kind == "numpy":
        pass
    else:
        v = 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in (0, -1, 1):
                a[i] = iop(a[i], v)
            a[1:] = iop(a[1:], v)
            if other_kind == "scalar":
                a[:, 2] = iop(a[:, 2], v)
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e)
    return np.asarray(a).copy() if xp is not np else a


@pytest.mark.parametrize("dtype", ["bool", "int32", "uint8", "float32", "float64", "complex128"])
@pytest.mark.parametrize("name", ["+=", "-=", "*=", "/=", "//=", "|="])
@pytest.mark.parametrize("other_kind", ["array", "numpy", "scalar"])
def test_row_updates_match_numpy(dtype, name, other_kind):
    want = _rows_program(np, dtype, IOPS[name], other_kind)
    got = _rows_program(lg, dtype, IOPS[name], other_kind)
    if isinstance(want, type):
        assert isinstance(got, type) and issubclass(got, Exception), (dtype, name, other_kind, got)
        return
    assert not isinstance(got, type), (dtype, name, other_kind, got)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.host_backend  # the CPU's direct writes into its buffer
def test_row_updates_in_place_and_where_they_must_be_recorded():
    n = np.zeros((4, 3))
    a = lg.asarray(n)
    v = lg.asarray(np.arange(3.0))
    r = _node_ref(a)
    for i in range(4):
        a[i] += v
        n[i] += np.arange(3.0)
    a[:, 1] *= 3.0
    n[:, 1] *= 3.0
    assert a._storage.node is r()  # every write went into the buffer
    b = a * 1  # a pending reader: the next row write is recorded, b keeps the old rows
    a[0] += v
    old = n.copy()
    n[0] += np.arange(3.0)
    np.testing.assert_array_equal(b.numpy(), old)
    np.testing.assert_array_equal(a.numpy(), n)
    a[1:] += a[:-1]  # overlapping operands of one buffer: NumPy's result
    n[1:] += n[:-1]
    np.testing.assert_array_equal(a.numpy(), n)
    t = lg.asarray(np.arange(6.0).reshape(2, 3)).T * 1  # evaluated in some layout
    t.numpy()
    t[0] += 1.0
    nt = np.arange(6.0).reshape(2, 3).T * 1
    nt[0] += 1.0
    np.testing.assert_array_equal(t.numpy(), nt)
    with pytest.raises(TypeError):
        lg.asarray(np.zeros((2, 2), dtype=np.int32))[0] += 1.5  # same_kind casting, as NumPy's
    with pytest.raises(ValueError):
        lg.asarray(np.zeros((2, 2)))[0] += lg.asarray(np.ones(3))  # shapes, as NumPy's


def test_a_scalar_updated_in_place_only_when_nothing_else_holds_it():
    a = lg.asarray(np.array([1.0, 2.0]))
    s = a[0]
    kept = [s]
    s += 1.0  # another reference holds the scalar: a new one, the kept one unchanged
    assert float(kept[0]) == 1.0 and float(s) == 2.0

    def bump(x):
        x += 10.0
        return x

    e = a[1]
    assert float(bump(e)) == 12.0 and float(e) == 2.0
    a[0] += 5.0  # the statement alone holds the element: updated in place, written back
    assert float(a[0]) == 6.0 and float(kept[0]) == 1.0


@pytest.mark.host_backend  # the CPU's direct writes into its buffer
def test_writes_through_unread_views_go_into_the_buffer():
    n = np.arange(12.0).reshape(3, 4)
    a = lg.asarray(n)
    n = n.copy()
    r = _node_ref(a)
    row = a[1]
    row[2] = -1.0
    n[1][2] = -1.0
    b = a[:, 1:3]
    b[0, 1] = 50.0
    n[:, 1:3][0, 1] = 50.0
    b[2] = 7  # a row of the view filled
    n[:, 1:3][2] = 7
    t = a.T
    t[3, 0] = 99.0
    n.T[3, 0] = 99.0
    assert a._storage.node is r()
    np.testing.assert_array_equal(a.numpy(), n)
    np.testing.assert_array_equal(b.numpy(), n[:, 1:3])
    c = lg.asarray(np.zeros(3))
    pending = c * 1  # a pending reader of the old value: the write through the view is recorded
    c[1:][0] = 4.0
    np.testing.assert_array_equal(pending.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(c.numpy(), [0.0, 4.0, 0.0])
    ro = lg.broadcast_to(lg.asarray(np.zeros(3)), (2, 3))
    with pytest.raises(ValueError, match="read-only"):
        ro[0][1] = 1.0


def _random_program(seed: int, steps: int) -> None:
    """Random writes, reads, pending readers, held results and views, checked against NumPy."""
    rng = np.random.default_rng(seed)
    n = np.arange(20.0).reshape(4, 5)
    a = lg.asarray(n)
    n = n.copy()
    readers: list = []  # (lazy value recorded then, NumPy's value then)
    views: list = []  # (view array, its index): they follow the array's current value
    for _ in range(steps):
        op = int(rng.integers(11))
        i, j = int(rng.integers(-4, 4)), int(rng.integers(-5, 5))
        v = float(rng.integers(-3, 4))
        if op == 0:
            a[i, j] += v
            n[i, j] += v
        elif op == 1:
            a[i, j] = v
            n[i, j] = v
        elif op == 2:
            w = rng.integers(-2, 3, size=5).astype(float)
            a[i] *= lg.asarray(w) if rng.integers(2) else w
            n[i] *= w
        elif op == 3:
            readers.append((a * 1, n.copy()))
        elif op == 4:
            readers.append((a[i, j], n[i, j].copy()))
        elif op == 5:
            readers.append((a.numpy(), n.copy()))
        elif op == 6:
            key = (slice(1, 3), slice(None, None, 2)) if rng.integers(2) else (i,)
            views.append((a[key], key))
        elif op == 7:
            a.numpy()
        elif op == 8 and views:
            view, key = views[int(rng.integers(len(views)))]
            np.testing.assert_array_equal(view.numpy(), n[key])
        elif op == 9 and (readers or views):
            (readers if readers and rng.integers(2) else views or readers).pop(0)
        elif op == 10 and views:
            view, key = views[int(rng.integers(len(views)))]
            view[(0,) * view.ndim] = v
            n[key][(0,) * view.ndim] = v
    for value, want in readers:
        np.testing.assert_array_equal(np.asarray(value), want)
    for view, key in views:
        np.testing.assert_array_equal(view.numpy(), n[key])
    np.testing.assert_array_equal(a.numpy(), n)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_numpy(seed):
    _random_program(seed, 60)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12, 212))
def test_random_programs_match_numpy_long(seed):
    _random_program(seed, 300)
