"""`a[idx] op= v` as one `update` step: differential tests against NumPy.

lazygraph records `a[i] += v` (an element or a region, through ints, slices and tuples of
them) as one `update` node that combines the region with `v` in the base's buffer when the
old value is dead (lazygraph/writes.py, ops/views.py, engine/program.py). These tests run
the same loops with NumPy and lazygraph and compare values, dtypes and errors: casting rules,
0-d and empty arrays, broadcast values, negative strides, views of views, operands that
overlap the region, reads recorded before and after the writes, and gradients.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazygraph as lg
from lazygraph import writes
from ops.base import REGISTRY

UPDATE = REGISTRY["update"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DTYPES = ["int8", "int32", "int64", "uint8", "float32", "float64", "bool", "complex128"]
#: the in-place operators and the ones a bool array accepts (NumPy refuses the others)
OPS = ["+=", "-=", "*=", "/=", "//=", "%=", "**=", "&=", "|=", "^=", "<<=", ">>="]
INPLACE = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
}
#: the binary operator each statement falls back to on an immutable NumPy scalar
BINARY = {k: getattr(operator, f"__{v.__name__[1:]}__") for k, v in INPLACE.items()}


def category(e: BaseException) -> type:
    """The exception class the user would catch (NumPy's UFuncTypeError is a TypeError)."""
    for cls in (IndexError, OverflowError, ZeroDivisionError, TypeError, ValueError):
        if isinstance(e, cls):
            return cls
    return type(e)


def base_array(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Small nonzero values of `dtype` (no int division by zero unless a value brings it)."""
    n = int(np.prod(shape))
    vals = (np.arange(n) % 5 + 1).reshape(shape)
    if dtype == "bool":
        return (vals % 2 == 1).astype(bool)
    if dtype.startswith("complex"):
        return (vals + 0.5j).astype(dtype)
    return vals.astype(dtype)


def apply(xp, a, key, op: str, value) -> None:
    """`a[key] op= value` exactly as Python runs the statement (`operator.iadd`, then setitem)."""
    view = a[key]
    a[key] = INPLACE[op](view, value)


def run(xp, dtype: str, shape: tuple, steps: list, every: int):
    """Apply the steps to a fresh array; returns (final array, reads, index of the failing step or None)."""
    a = xp.asarray(base_array(dtype, shape))
    reads = []
    failed = None
    for k, (key, op, value) in enumerate(steps):
        v = value(xp, a) if callable(value) else value
        try:
            apply(xp, a, key, op, v)
        except Exception as e:  # the same step must fail on both sides, with the same class
            failed = (k, category(e))
            break
        reads.append(a[key] * 1)  # a copy recorded after the write: the new value
        if every and k % every == every - 1:
            np.asarray(a)  # an evaluation in the middle of the loop (a no-op for NumPy)
    return a, reads, failed


def compare(dtype: str, shape: tuple, steps: list, every: int = 0) -> None:
    """Run with NumPy and lazygraph; same failure step and class, same values and dtypes.

    One known difference is left out: NumPy raises when an element write stores a NaN or an
    infinity into an integer array (`a[i] += nan`, `a[i] /= 0`), a value lazygraph only knows
    at evaluation; it stores what NumPy's array cast gives, and the comparison stops there.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        e_a, e_reads, e_failed = run(np, dtype, shape, steps, every)
        if e_failed is not None and _non_finite_store(dtype, shape, steps[: e_failed[0] + 1]):
            steps = steps[: e_failed[0]]
            e_a, e_reads, e_failed = run(np, dtype, shape, steps, every)
        g_a, g_reads, g_failed = run(lg, dtype, shape, steps, every)
        g_val = g_a.numpy()
        g_reads = [np.asarray(r) for r in g_reads]
    assert g_failed == e_failed
    assert g_val.dtype == e_a.dtype
    np.testing.assert_array_equal(g_val, e_a)
    for e, g in zip(e_reads, g_reads):
        assert np.asarray(g).dtype == np.asarray(e).dtype
        np.testing.assert_array_equal(g, e)


def _non_finite_store(dtype: str, shape: tuple, steps: list) -> bool:
    """Whether NumPy's last step failed storing a non-finite float into an integer element."""
    if np.dtype(dtype).kind not in "iub":
        return False
    a, _, _ = run(np, dtype, shape, steps[:-1], 0)
    key, op, value = steps[-1]
    v = value(np, a) if callable(value) else value
    if np.ndim(a[key]) != 0:
        return False
    try:
        r = BINARY[op](a[key], v)
    except Exception:
        return False
    return np.asarray(r).dtype.kind in "fc" and not np.isfinite(r)


# -- strategies ---------------------------------------------------------------------------


def py_values(dtype: str):
    """Python scalars of every kind (small ints: shifts and powers stay defined)."""
    return st.one_of(
        st.integers(-3, 3),
        st.sampled_from([0.5, -1.5, 2.0, float("nan")]),
        st.booleans(),
        st.just(1 + 2j) if dtype.startswith("complex") else st.integers(0, 2),
    )


def array_values(shape: tuple):
    """NumPy arrays of another dtype, the region's shape or one it broadcasts from."""
    shapes = [shape, shape[1:], (1,) * len(shape), ()] if shape else [()]
    return st.builds(
        lambda s, dt: base_array(dt, s),
        st.sampled_from(shapes),
        st.sampled_from(["int8", "int64", "float32", "float64", "bool"]),
    )


@st.composite
def element_programs(draw):
    """A loop of `a[i] op= scalar` over a 1-d or 2-d array, integer keys (negative too)."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.sampled_from([(1,), (5,), (3, 4)]))
    n = draw(st.integers(1, 8))
    steps = []
    for _ in range(n):
        key = tuple(draw(st.integers(-d, d - 1)) for d in shape)
        key = key[0] if len(key) == 1 and draw(st.booleans()) else key
        steps.append((key, draw(st.sampled_from(OPS)), draw(py_values(dtype))))
    return dtype, shape, steps, draw(st.sampled_from([0, 1, 3]))


def slices(n: int):
    """Slices of Python ints, negative steps and empty ones included."""
    bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
    return st.builds(slice, bound, bound, st.one_of(st.none(), st.sampled_from([1, 2, -1, -2])))


@st.composite
def region_programs(draw):
    """A loop of `a[key] op= v`, key a tuple of ints and slices, v a scalar or a broadcast array."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.sampled_from([(6,), (4, 5), (0, 3), (3, 1)]))
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        key = tuple(draw(st.one_of(slices(d), st.integers(-d, d - 1)) if d else slices(d)) for d in shape)
        region = np.empty(shape)[key].shape
        value = draw(st.one_of(py_values(dtype), array_values(region)))
        steps.append((key, draw(st.sampled_from(OPS)), value))
    return dtype, shape, steps, draw(st.sampled_from([0, 2]))


# -- differential tests -------------------------------------------------------------------


@SETTINGS
@given(element_programs())
def test_element_loops_match_numpy(prog):
    dtype, shape, steps, every = prog
    compare(dtype, shape, steps, every)


@SETTINGS
@given(region_programs())
def test_region_loops_match_numpy(prog):
    dtype, shape, steps, every = prog
    compare(dtype, shape, steps, every)


@pytest.mark.parametrize("dtype", ["int64", "float32", "bool"])
@pytest.mark.parametrize("every", [0, 1])
def test_overlapping_operands(dtype, every):
    steps = [
        (slice(1, None), "+=", lambda xp, a: a[:-1]),
        (slice(None, None, -1), "+=", lambda xp, a: a),
        (slice(None, -1), "*=", lambda xp, a: a[1:]),
        (slice(None, None, 2), "-=" if dtype != "bool" else "^=", lambda xp, a: a[::-2]),
        (3, "+=", lambda xp, a: a[2]),
        (-1, "|=" if dtype != "float32" else "+=", lambda xp, a: a[0]),
    ]
    compare(dtype, (8,), steps, every)


def test_two_d_overlap_and_views_of_views():
    def prog(xp):
        u = xp.asarray(np.arange(30.0).reshape(5, 6))
        for _ in range(3):
            u[1:, :] += u[:-1, :]
            w = u[::-1][1:4][:, ::-2]  # a view of a view of a view, negative strides
            w[0] += 1.5
            w[1:] *= w[:1]
            w[2, 1] -= 0.25
        return u

    np.testing.assert_array_equal(prog(lg).numpy(), prog(np))


def test_zero_d_and_empty():
    def prog(xp):
        z = xp.asarray(np.float32(2.5))
        z[()] += 1.0
        z[...] *= 3
        e = xp.zeros((0, 3), dtype=np.int64)
        e[1:] += 5
        e[:, 1] -= 1
        r = xp.arange(4)
        r[2:2] += 7
        return z, e, r

    for got, want in zip(prog(lg), prog(np)):
        assert got.numpy().dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)


def test_casting_errors_like_numpy():
    for dtype, key, value in [("int64", slice(0, 2), 1.5), ("bool", slice(None), 2)]:
        for xp in (np, lg):
            a = xp.asarray(base_array(dtype, (4,)))
            with pytest.raises(TypeError, match="same_kind"):
                view = a[key]
                view += value
    for xp in (np, lg):  # an element: a complex scalar, its real part stored with a warning
        c = xp.asarray(base_array("uint8", (4,)))
        with pytest.warns(np.exceptions.ComplexWarning):
            c[1] += 2.5 + 1j
        np.testing.assert_array_equal(np.asarray(c), [1, 4, 3, 4])  # int(2 + 2.5)
    a = lg.arange(4)
    a[1] += 1.7  # an element: NumPy stores int(a[1] + 1.7), no error
    b = np.arange(4)
    b[1] += 1.7
    np.testing.assert_array_equal(a.numpy(), b)


def test_reads_before_and_after_the_writes():
    def prog(xp):
        a = xp.asarray(np.arange(6.0))
        before = a[2]  # an element read: a copy
        row = a[1:4]  # a live view
        snap = a * 1  # a copy recorded before the writes
        for i in range(6):
            a[i] += 10
        after = a[2] + 0
        a[1:4] -= 1
        return before, row, snap, after, a

    for got, want in zip(prog(lg), prog(np)):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_one_update_node_per_write():
    a = lg.zeros(16)
    a.numpy()
    for k in range(2):  # the first pass learns the signatures (general path), the second is lean
        a += 0.0  # a pending value: writes into it are recorded (an evaluated one is written in place)
        for i in range(16):
            a[i] += 1.5
        node = a._storage.node
        for _ in range(16):  # the whole loop is a chain of updates: no view, add or assign left
            assert node.op is UPDATE and node.attrs["ufunc"] == "add"
            node = node.inputs[0]
        assert node.op.name == "add" and node.inputs[0].buffer is not None
        a.numpy()
    rows = lg.zeros((5, 3))
    v = lg.asarray(np.arange(3.0))
    for i in range(5):
        rows[i] *= v
    assert rows._storage.node.op is UPDATE
    np.testing.assert_array_equal(a.numpy(), np.full(16, 3.0))


def test_not_fused_where_the_three_nodes_are_needed():
    a = lg.arange(5)
    a[2] **= 2  # integer power can fail on data: it keeps its own step
    assert a._storage.node.op.name == "assign"
    b = lg.asarray(np.arange(5.0))
    b[2] = lg.tanh(b[2])  # not a binary ufunc of the region
    assert b._storage.node.op.name == "assign"
    c = lg.asarray(np.arange(5.0))
    s = c[1]
    c[2] = s + 10  # the region read is another element's: an assign of a computed value
    assert c._storage.node.op.name == "assign"
    np.testing.assert_array_equal(c.numpy(), [0, 1, 11, 3, 4])
    np.testing.assert_array_equal(a.numpy(), [0, 1, 4, 3, 4])
    w = lg.mark_static(lg.asarray(np.arange(4.0)))
    w[1] += 1.0  # model state: passes that memoize static values must see an `assign`
    assert w._storage.node.op.name == "assign"
    np.testing.assert_array_equal(w.numpy(), [0, 2, 2, 3])


def test_update_copies_when_the_old_value_is_still_held():
    a = lg.asarray(np.arange(4.0))
    a.numpy()
    old = a[0:4]  # a live view: it follows the writes, as in NumPy
    snap = a * 1  # recorded before the write: the old values
    a[0] += 5
    a[1:3] *= 2
    b = a * 1
    np.testing.assert_array_equal(b.numpy(), [5, 2, 4, 3])
    np.testing.assert_array_equal(snap.numpy(), [0, 1, 2, 3])
    np.testing.assert_array_equal(old.numpy(), [5, 2, 4, 3])
    assert writes.PASSED  # the signatures were learnt


# -- gradients ----------------------------------------------------------------------------


def test_gradients_through_element_and_region_updates():
    x0 = np.array([0.5, -1.0, 2.0, 3.0])
    x = lg.asarray(x0, requires_grad=True)
    y = x * 2.0
    y[1] += x[0] * 3.0  # y[1] = 2 x1 + 3 x0
    y[2:] *= x[:2]  # y[2] = 2 x2 x0, y[3] = 2 x3 x1
    loss = y.sum()
    (g,) = lg.grad(loss, [x])
    want = np.array([2 + 3 + 2 * x0[2], 2 + 2 * x0[3], 2 * x0[0], 2 * x0[1]])
    np.testing.assert_allclose(g.numpy(), want)
    assert y._storage.node.op.name == "assign"  # autograd sees the three-node form

    with lg.no_grad():
        z = x * 2.0
        z[1] += 1.0
        assert z._storage.node.op is UPDATE
        np.testing.assert_array_equal(z.numpy(), x0 * 2 + [0, 1, 0, 0])


# -- writes into an evaluated array's buffer (the stencil: no whole-buffer copy) -----------


def _stencil(xp, u):
    """A stencil over rows 1-3 only: a region under half the buffer, written into it in place
    (a larger box is copied around instead: `test_a_stencil_over_most_of_u_copies_its_border`)."""
    lap = u[2:5, 1:-1] + u[:3, 1:-1] + u[1:4, 2:] + u[1:4, :-2] - 4 * u[1:4, 1:-1]
    u[1:4, 1:-1] = u[1:4, 1:-1] + 0.1 * lap


def _full_stencil(xp, u):
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
    u[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.1 * lap


@pytest.fixture
def leaf_writes(monkeypatch):
    """Every buffer size takes the no-copy write; returns the list of buffers written so."""
    from lazygraph import txn

    seen = []
    overwrite = txn.overwrite

    def spy(node, buf, view, log):
        seen.append(buf)
        overwrite(node, buf, view, log)

    monkeypatch.setattr(txn, "LEAF_WRITE_MIN", 0)
    monkeypatch.setattr(txn, "overwrite", spy)
    return seen


@pytest.mark.host_backend  # the CPU's in-place write into an evaluated buffer
def test_stencil_writes_into_the_evaluated_buffer(leaf_writes):
    x0 = np.random.default_rng(3).random((12, 12))
    u, ref = lg.asarray(x0.copy()), x0.copy()
    u.numpy()
    for step in range(6):
        for xp, a in ((lg, u), (np, ref)):
            a[0, :] = 1.0
            a[:, 0] = a[:, 1]
            _stencil(xp, a)
        assert float(u.sum()) == pytest.approx(float(ref.sum()), rel=1e-12)
    np.testing.assert_array_equal(u.numpy(), ref)
    assert leaf_writes  # the loop's evaluations wrote into u's buffer


@pytest.mark.host_backend  # the CPU's assign kernel
def test_a_stencil_over_most_of_u_copies_its_border(leaf_writes, monkeypatch):
    from ops import movement

    copied = []
    outside = movement._copy_outside

    def spy(out, base, starts, sizes):
        copied.append((starts, sizes))
        outside(out, base, starts, sizes)

    monkeypatch.setattr(movement, "_copy_outside", spy)
    x0 = np.random.default_rng(4).random((12, 12))
    u, ref = lg.asarray(x0.copy()), x0.copy()
    u.numpy()
    for _ in range(4):
        for xp, a in ((lg, u), (np, ref)):
            _full_stencil(xp, a)
        np.testing.assert_array_equal(u.numpy(), ref)
    assert copied and copied[-1] == ((1, 1), (10, 10))
    assert not leaf_writes  # no region saved for undo: the old buffer is never written

    # a failure after the write: the old buffer is intact, so u keeps what the write gave
    _full_stencil(lg, u)
    _full_stencil(np, ref)
    bad = u.reshape(-1)[lg.asarray(np.array([3, 10**6]))]
    with pytest.raises(IndexError):
        float(bad.sum())
    np.testing.assert_array_equal(u.numpy(), ref)


@pytest.mark.parametrize(
    "shape, box",
    [
        ((8, 9), (slice(1, -1), slice(1, -1))),
        ((6, 7), (slice(0, 5), slice(None))),  # the whole width: no column slabs
        ((6, 7), (slice(None), slice(2, 7))),
        ((4, 5, 6), (slice(0, 4), slice(1, 5), slice(1, 6))),
        ((1, 9), (slice(None), slice(1, 8))),
        ((8,), (slice(2, 8),)),
    ],
)
def test_assign_over_most_of_a_base_equals_numpys_setitem(shape, box):
    from ops.movement import Assign
    from ops.views import box_of, contiguous, slice_view

    base = np.arange(float(np.prod(shape))).reshape(shape)
    keep = base.copy()
    view = slice_view(contiguous(shape), box)
    assert box_of(view, shape) is not None and 2 * view.size > base.size
    value = -np.ones(view.shape)
    out = Assign().kernel(base, value, view=view)
    ref = base.copy()
    ref[box] = value
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(base, keep)  # the base is read only
    assert box_of(slice_view(contiguous(shape), tuple(slice(None, None, 2) for _ in shape)), shape) is None


@pytest.mark.host_backend  # the CPU's in-place write into an evaluated buffer
def test_stencil_write_keeps_values_others_still_read(leaf_writes):
    x0 = np.arange(100.0).reshape(10, 10)
    u = lg.asarray(x0.copy())
    held = u.numpy()  # the user holds the buffer itself
    s = u[4, 4]  # an element read: a copy
    snap = u[1:-1, 1:-1] * 1  # recorded before the write, evaluated after
    _stencil(lg, u)
    ref = x0.copy()
    _stencil(np, ref)
    np.testing.assert_array_equal(u.numpy(), ref)
    np.testing.assert_array_equal(held, x0)
    assert float(s) == 44.0
    np.testing.assert_array_equal(snap.numpy(), x0[1:-1, 1:-1])
    assert not leaf_writes  # each of them kept the old buffer alive: the write copied

    v = lg.asarray(x0.copy())
    v.numpy()
    twice = v * 2  # a pending reader of the old node itself, outside the evaluated graph
    _stencil(lg, v)
    np.testing.assert_array_equal(v.numpy(), ref)
    np.testing.assert_array_equal(twice.numpy(), x0 * 2)
    assert not leaf_writes
    _stencil(lg, v)  # nothing holds the old value now: this write goes into v's buffer
    _stencil(np, ref)
    np.testing.assert_array_equal(v.numpy(), ref)
    assert leaf_writes


@pytest.mark.host_backend  # the CPU's in-place write into an evaluated buffer
def test_failed_evaluation_after_an_in_place_stencil_write_leaves_u_unchanged(leaf_writes, monkeypatch):
    x0 = np.random.default_rng(5).random((10, 10))
    u = lg.asarray(x0.copy())
    u.numpy()
    _stencil(lg, u)
    # a lazy index out of range, read after the write: the run fails after writing u's buffer
    bad = u.reshape(-1)[lg.asarray(np.array([3, 10**6]))]
    with pytest.raises(IndexError):
        float(bad.sum())
    assert leaf_writes
    ref = x0.copy()
    _stencil(np, ref)
    np.testing.assert_array_equal(u.numpy(), ref)  # the write does not depend on the failure: kept

    # an interrupt (no failing step known): every pending write is dropped, u keeps its value
    v = lg.asarray(x0.copy())
    v.numpy()
    _stencil(lg, v)
    gather = REGISTRY["gather"]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    n = len(leaf_writes)
    monkeypatch.setattr(type(gather), "kernel", interrupted)
    with pytest.raises(KeyboardInterrupt):  # a structure of its own: compiled with the patched kernel
        float((v.reshape(-1)[lg.asarray(np.array([1, 2]))] - 7.0).max())
    monkeypatch.undo()
    assert len(leaf_writes) > n
    np.testing.assert_array_equal(v.numpy(), x0)


@st.composite
def _box_writes(draw):
    """An evaluated base, a box over most or part of it, a value and a dtype, for `u[box] = f(u)`."""
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    box = []
    for n in shape:
        lo = draw(st.integers(0, n - 1))
        box.append(slice(lo, draw(st.integers(lo + 1, n))))
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int32]))
    return shape, tuple(box), dtype, draw(st.integers(1, 3))


@SETTINGS
@given(_box_writes(), st.booleans())
def test_box_writes_into_evaluated_arrays_match_numpy(case, any_size):
    from unittest import mock

    from lazygraph import txn

    # any_size: every buffer may take the in-place write (boxes under half of the base)
    with mock.patch.object(txn, "LEAF_WRITE_MIN", 0 if any_size else txn.LEAF_WRITE_MIN):
        _box_write_steps(*case)


def _box_write_steps(shape, box, dtype, steps):
    x0 = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    u, ref = lg.asarray(x0.copy()), x0.copy()
    u.numpy()  # evaluated: the write reads u's buffer as a leaf (a fresh buffer or an in-place one)
    for _ in range(steps):
        for a in (u, ref):
            a[box] = a[box] * 2 + 1
        held = u.numpy()
        np.testing.assert_array_equal(held, ref)
    u[box] = u[box] - 1  # the array handed out above keeps its values
    ref2 = ref.copy()
    ref2[box] = ref2[box] - 1
    np.testing.assert_array_equal(u.numpy(), ref2)
    np.testing.assert_array_equal(held, ref)
