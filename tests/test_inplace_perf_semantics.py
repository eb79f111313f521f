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
