"""Writes that run in place keep NumPy's semantics: differential tests against NumPy.

The engine writes `assign` steps into their base when the old value is dead, and a written
value that is a view of that base is copied first (ops/views.py, engine/program.py). These
programs check the cases where that could go wrong: overlapping reads and writes, values
read after the write, views kept across writes, loops evaluated now and then.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from lazygraph.engine.program import _assign_in_place
from lazygraph.indexing import parse_index
from ops.views import View, basic_index, contiguous, materialize, slice_view


def both(program, *args):
    """Run `program` with NumPy and with lazygraph; compare every returned array exactly."""
    expected = program(np, *args)
    got = program(lg, *args)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(np.asarray(g), e)


def _grid(xp, n=8):
    return xp.asarray(np.arange(n * n, dtype=np.float64).reshape(n, n))


def test_stencil_loop_reads_old_values():
    def prog(xp):
        u = _grid(xp)
        sums = []
        for step in range(12):
            u[:, 0] = u[:, 1]
            u[:, -1] = u[:, -2]
            lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
            u[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.1 * lap
            if step % 4 == 0:
                sums.append(float(u.sum()))
        return u, np.array(sums)

    both(prog)


@pytest.mark.parametrize(
    "write",
    [
        lambda a: a.__setitem__(slice(1, None), a[:-1]),
        lambda a: a.__setitem__(slice(None, -1), a[1:]),
        lambda a: a.__setitem__(slice(None, None, -1), a),
        lambda a: a.__setitem__(slice(None, None, 2), a[1::2]),
        lambda a: a.__setitem__((slice(None, 4)), a[::-1][:4]),
    ],
)
def test_overlapping_self_writes(write):
    def prog_plain(xp):
        a = xp.asarray(np.arange(10.0))
        for _ in range(3):
            write(a)
        return (a,)

    both(prog_plain)


def test_reversed_inplace_add():
    def prog(xp):
        a = xp.asarray(np.arange(7.0))
        a[::-1] += a
        b = xp.asarray(np.arange(12.0).reshape(3, 4))
        b[:, ::-1] += b
        b[1:] -= b[:-1]
        return a, b

    both(prog)


def test_value_view_read_after_the_write():
    def prog(xp):
        a = xp.asarray(np.arange(6.0))
        v = a[1:3]  # the same storage: sees the write
        c = a[1:3] * 1  # a value computed before the write: keeps the old values
        a[0:2] = a[1:3]
        d = a[:2] + c
        return a, v, c, d

    both(prog)


def test_copy_taken_before_write_keeps_old_values():
    def prog(xp):
        a = xp.asarray(np.arange(8.0))
        old = a[2:6].copy()
        s = a.sum()
        a[2:6] = a[0:4]
        a[::3] = -1.0
        return a, old, xp.asarray(s)

    both(prog)


def test_row_increments_in_a_loop():
    def prog(xp):
        a = xp.zeros((5, 4))
        c = xp.zeros(5)
        v = xp.asarray(np.arange(4.0))
        for i in range(23):
            a[i % 5] += v
            c[i % 5] += 1.0
            a[i % 5, i % 4] *= 1.5
            if i % 7 == 0:
                c.sum().item()  # evaluate now and then: the loop goes on from a leaf
        return a, c

    both(prog)


def test_aliasing_views_of_one_base():
    def prog(xp):
        a = xp.asarray(np.arange(16.0).reshape(4, 4))
        t = a.T
        r = a[1]
        a[1] = t[1]  # a column written into a row: the two overlap at a[1, 1]
        r2 = r * 2
        a[:, 2] = r2[:4]
        return a, t, r, r2

    both(prog)


def test_int_writes_and_fancy_index_in_a_loop():
    def prog(xp):
        a = xp.asarray(np.arange(10))
        for i in range(4):
            a[i : i + 3] += a[i + 1 : i + 4]
            a[[0, 2]] = a[[2, 0]]
        return (a,)

    both(prog)


def test_index_errors_keep_their_messages():
    a = lg.zeros((3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        a[3]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 1, 2]
    with pytest.raises(IndexError, match="slice indices must be integers"):
        a[0.5:]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        a[::0]
    with pytest.raises(IndexError, match="index -5 is out of bounds for axis 1 with size 4"):
        a[0, -5] = 1.0


def test_fast_index_path_matches_the_general_one():
    a = lg.zeros((4, 5, 6))
    for key in [
        1,
        -1,
        slice(1, 3),
        (1, slice(None, None, -2)),
        (slice(None), 2, slice(1, -1, 2)),
        (-4, -5, -6),
    ]:
        view, template, ops_ = parse_index(a, key, "getitem", lg.Array)
        assert template is None and ops_ == []
        # the general path sees the same key through NumPy integers
        slow = tuple(
            np.int64(k) if type(k) is int else k for k in (key if isinstance(key, tuple) else (key,))
        )
        assert parse_index(a, slow, "getitem", lg.Array)[0] == view
        np.testing.assert_array_equal(a[key].numpy(), np.zeros((4, 5, 6))[key])


@pytest.mark.parametrize(
    "shape,items",
    [
        ((5, 6), (slice(1, -1), slice(1, -1))),
        ((5, 6), (2,)),
        ((5, 6), (slice(None, None, -2), 3)),
        ((5, 6), (None, slice(2, 3), None)),
        ((2, 3, 4), (1, 2, 3)),
        ((7,), (slice(6, None, -3),)),
    ],
)
def test_basic_views_are_numpy_slices(shape, items):
    base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    view = slice_view(contiguous(shape), items)
    assert basic_index(view, shape) is not None
    out = materialize(base, view)
    np.testing.assert_array_equal(out, base[items])
    assert np.shares_memory(out, base) and not out.flags.writeable  # a view, read-only
    w = materialize(base, view, writeable=True)
    w[...] = -1.0
    expected = np.arange(base.size, dtype=np.float64).reshape(shape)
    expected[items] = -1.0
    np.testing.assert_array_equal(base, expected)


def test_strided_views_without_a_basic_index():
    base = np.arange(6.0).reshape(2, 3)
    bcast = View((4, 2, 3), (0, 3, 1), 0)
    transposed = View((3, 2), (1, 3), 0)
    merged = View((3,), (2,), 0)  # every other element across rows
    assert basic_index(bcast, (2, 3)) is None and basic_index(transposed, (2, 3)) is None
    np.testing.assert_array_equal(materialize(base, bcast), np.broadcast_to(base, (4, 2, 3)))
    np.testing.assert_array_equal(materialize(base, transposed), base.T)
    np.testing.assert_array_equal(materialize(base, merged), base.reshape(-1)[::2])
    np.testing.assert_array_equal(materialize(np.asfortranarray(base), merged), base.reshape(-1)[::2])


def test_a_written_view_of_the_base_keeps_old_values_for_later_readers():
    # the engine's in-place write: a later step may still read the value, a view of the base
    vals = [np.arange(8.0), None]
    vals[1] = materialize(vals[0], slice_view(contiguous((8,)), (slice(1, 5),)))
    attrs = {"view": slice_view(contiguous((8,)), (slice(0, 4),)), "index": None}
    out = _assign_in_place(vals, (0, 1), np.dtype(np.float64), attrs)
    assert out is vals[0]  # written in place, no copy of the base
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 4, 5, 6, 7])
    np.testing.assert_array_equal(vals[1], [1, 2, 3, 4])
    # another holder of the base (a view someone kept): a copy, the old base untouched
    base = np.arange(8.0)
    vals = [base, materialize(base, slice_view(contiguous((8,)), (slice(1, 5),)))]
    assert _assign_in_place(vals, (0, 1), np.dtype(np.float64), attrs) is None
    np.testing.assert_array_equal(base, np.arange(8.0))


# -- the lean recording path of writes (lazygraph/writes.py): a signature's second write on ----


def _twice(fn):
    """Run `fn` twice: the first takes the general path, the second the lean one once it passed."""
    return fn(), fn()


def test_lean_writes_match_numpy_in_loops():
    def prog(xp):
        a = xp.zeros(6)
        ai = xp.asarray(np.arange(6, dtype=np.int16))
        b = xp.asarray(np.arange(12.0).reshape(3, 4))
        f32 = xp.zeros((3, 4), dtype=np.float32)
        flags = xp.zeros(4, dtype=bool)
        row = xp.asarray(np.arange(4.0))
        for i in range(9):
            a[i % 6] += 1.5
            a[(i + 1) % 6] -= a[i % 6]  # one element read then written
            ai[i % 6] += 1.5  # NumPy: int(a[i] + 1.5), a scalar's in-place op rebinds
            ai[i % 6] += 3
            ai[-1] = -7
            b[i % 3] += row  # a row view: written through the view, then stored onto itself
            b[i % 3, 1:3] *= 2.0
            b[:, i % 4] = b[:, (i + 1) % 4]  # a column from another column of the same base
            f32[i % 3] = row  # float64 values into a float32 row
            f32[i % 3, 0] = 0.25
            flags[i % 4] = i % 2
            flags[(i + 1) % 4] = True
            v = b[1]
            v += 1.0  # a view kept across writes sees them, and its writes reach the base
            if i % 4 == 3:
                a.sum().item()
        return a, ai, b, f32, flags, v

    both(prog)


def test_lean_writes_keep_aliasing_and_old_values():
    def prog(xp):
        a = xp.asarray(np.arange(12.0).reshape(3, 4))
        r = a[1]
        s = a[1, 2]  # a scalar: a copy, later writes miss it
        before = a[1] * 1
        for _ in range(3):
            a[1] += 1.0
            a[1, 2] = 5.0
            r[0] = r[3]
        a[2] = a[2]  # onto itself: nothing changes
        r[:] = r
        return a, r, s, before

    both(prog)


def test_lean_setitem_errors_come_every_time():
    a = lg.zeros((3, 4))
    a[0] = lg.ones(4)
    a[0] = lg.ones(4)  # the signature passed: lean from now on
    for _ in range(2):
        with pytest.raises(ValueError, match="could not broadcast input array from shape"):
            a[1] = lg.ones(3)
        with pytest.raises(ValueError, match="setting an array element with a sequence"):
            a[1, 2] = lg.ones(2)
    i8 = lg.zeros(3, dtype=np.int8)
    u8 = lg.zeros(3, dtype=np.uint8)
    _twice(lambda: i8.__setitem__(0, 100))
    _twice(lambda: u8.__setitem__(0, 5))
    for _ in range(2):
        with pytest.raises(OverflowError, match="setitem"):
            i8[1] = 300
        with pytest.raises(OverflowError, match="setitem"):
            u8[1] = -1
        with pytest.raises(ValueError, match="setitem"):
            i8[1] = float("nan")
    np.testing.assert_array_equal(i8.numpy(), [100, 0, 0])
    np.testing.assert_array_equal(u8.numpy(), [5, 0, 0])


def test_lean_inplace_errors_come_every_time():
    x = lg.zeros(4, dtype=np.int32)
    v = x[1:3]
    _twice(lambda: v.__iadd__(2))
    for _ in range(2):
        with pytest.raises(TypeError, match="cannot cast output from float64 to int32"):
            v += 1.5
        with pytest.raises(ValueError, match="non-broadcastable output operand"):
            v += lg.ones((2, 2), dtype=np.int32)
    b = lg.broadcast_to(lg.zeros(3), (2, 3))
    for _ in range(2):
        with pytest.raises(ValueError, match="read-only"):
            b += 1.0
        with pytest.raises(ValueError, match="read-only"):
            b[0] = 1.0
    np.testing.assert_array_equal(x.numpy(), [0, 4, 4, 0])


def test_lean_writes_warn_and_guard_like_the_general_path():
    from numpy.exceptions import ComplexWarning

    a = lg.zeros(3)
    z = lg.asarray(np.array([1 + 2j, 3 + 4j]))
    for _ in range(2):
        with pytest.warns(ComplexWarning):
            a[:2] = z
    np.testing.assert_array_equal(a.numpy(), [1.0, 3.0, 0.0])
    for dt in (np.float32, np.complex64):
        small = lg.zeros(2, dtype=dt)
        small[1] = 1.0e3
        for _ in range(2):  # a value too large for float32: NumPy warns at the write
            with pytest.warns(RuntimeWarning, match="overflow"):
                small[0] = 1e300
    w = lg.zeros(3)
    w.requires_grad = True
    for _ in range(2):
        with pytest.raises(RuntimeError, match="requires grad"):
            w[0] = 1.0
    with lg.no_grad():
        for _ in range(2):
            w[0] += 2.0
    np.testing.assert_array_equal(w.numpy(), [4.0, 0.0, 0.0])


def test_lean_writes_record_what_the_general_path_records():
    from cache.key import hint_of, kid_of
    from lazygraph import writes

    def prog():
        a = lg.zeros((7, 13)) + 0.0
        a[3] += lg.ones(13)
        a[2, 5] = 1.5
        a[4, 1:5] = a[5, 2:6]
        a[6, 0] += 2
        return a

    general = prog()  # a shape no other test writes: every write takes the general path
    before = len(writes.PASSED)
    lean = prog()
    assert len(writes.PASSED) == before  # nothing new to learn: every write was lean
    g, n = general._storage.node, lean._storage.node
    while g.op.name == "assign":
        assert n.op is g.op and n.attrs == g.attrs and n.kid == kid_of(g)
        assert n.inputs[1].op is g.inputs[1].op and n.inputs[1].shape == g.inputs[1].shape
        g, n = g.inputs[0], n.inputs[0]
    assert n.op is g.op
    # the structural key's hint as recorded equals the one a walk derives
    assert lean._storage.node.h == hint_of(general._storage.node)
    np.testing.assert_array_equal(general.numpy(), lean.numpy())


def test_plain_view_composes_integer_keys_like_slice_view():
    from lazygraph.indexing import plain_view

    base = np.arange(4 * 5 * 6.0).reshape(4, 5, 6)
    a = lg.asarray(base)
    for arr, ref in [(a, base), (a.T, base.T), (a[::2, 1:, ::-3], base[::2, 1:, ::-3])]:
        for key in [0, -1, (1, 2), (-1, -2, -3), (1, slice(None, None, -1)), (), slice(1, None)]:
            try:
                expected = ref[key]
            except IndexError:
                assert plain_view(arr, arr.view_of(), key) is None
                continue
            view = plain_view(arr, arr.view_of(), key)
            assert view == parse_index(arr, key, "getitem", lg.Array)[0]
            np.testing.assert_array_equal(np.asarray(arr[key]), expected)
    for bad in [4, -5, (0, 5), (0, 0, 0, 0), 1.0, np.int64(1), (0, np.int64(1))]:
        assert plain_view(a, a.view_of(), bad) is None


def test_write_into_matches_numpy_assignment():
    from ops.views import write_into

    for shape, items in [((5, 6), (2,)), ((5, 6), (1, 3)), ((5, 6), (slice(1, -1), slice(None, None, -2)))]:
        base, ref = np.zeros(shape), np.zeros(shape)
        view = slice_view(contiguous(shape), items)
        value = np.arange(int(np.prod(view.shape)), dtype=np.int64).reshape(view.shape) + 1
        write_into(base, view, value)  # the recipe is worked out here, then reused
        write_into(base, view, value * 2)
        ref[items] = value * 2
        np.testing.assert_array_equal(base, ref)
    base = np.zeros((2, 3))
    write_into(base, View((3,), (2,), 0), np.array([1.0, 2.0, 3.0]))  # no basic index: strided
    np.testing.assert_array_equal(base.reshape(-1)[::2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="could not broadcast"):
        write_into(np.zeros((5, 6)), slice_view(contiguous((5, 6)), (2,)), np.ones(4))
