"""`a[i] op= v` over rows and columns of a float64 buffer gives NumPy's bits, warnings and errors.

The element extension updates a 1-d view of a C-contiguous float64 buffer as C doubles when
the other operand is a float64 vector of the row's length or a float64-convertible scalar
(lazygraph/element_source_region.py: `f64_row`), and leaves every row where an element would
raise a floating-point flag to NumPy's in-place ufunc. Each test runs with the extension and
with the Python paths (the imported autouse fixture) and compares with NumPy bit for bit.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest

import lazygraph as lg
from tests.test_element_ext import _evaluated, mode  # noqa: F401 (mode: the autouse fixture)
from tests.test_element_ext_f64 import LEFT, _bits

# the CPU's direct writes into its buffer (a device array never takes them)
pytestmark = pytest.mark.host_backend

IOPS = [operator.iadd, operator.isub, operator.imul, operator.itruediv]
TINY = np.finfo(np.float64).tiny
#: right operands of a row update: vectors (finite, with zeros, overflowing, non-finite, of
#: another dtype), scalars of each kind; all of the row's length 5 or broadcastable
ROW = np.array([1.5, -0.0, 0.5, 2.0, 1 / 3])
RIGHT = [
    ROW,
    np.array([1e300, TINY, 0.0, -2.0, 3.0]),
    np.array([np.inf, np.nan, 1e-300, 1.0, -1.0]),
    ROW.astype(np.float32),
    np.arange(5),
    ROW[::-1],  # a negative stride
    np.array([2.5]),  # broadcast
    1.5,
    0.0,
    3,
    2**53 + 1,
    np.float64(0.1),
    np.float32(0.1),
]


def _rows(xp, op, v, columns=False, err="ignore"):
    """Every row (or column) of a 3 x 5 (5 x 3) array updated with `op= v`; the array or the error type."""
    left = np.array(LEFT, dtype=np.float64)[:15].reshape(3, 5)
    if columns:
        left = np.ascontiguousarray(left.T)
    a = _evaluated(left) if xp is lg else left.copy()
    n = a.shape[1] if columns else a.shape[0]
    try:
        with np.errstate(all=err):
            for i in range(n):
                if columns:
                    a[:, i] = op(a[:, i], v)
                else:
                    a[i] = op(a[i], v)
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e), np.array(a.numpy() if xp is lg else a)
    return None, np.array(a.numpy() if xp is lg else a)


@pytest.mark.parametrize("op", IOPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
@pytest.mark.parametrize("err", ["ignore", "warn", "raise"])
def test_row_updates_are_numpys_bit_for_bit(op, columns, err):
    for v in RIGHT:
        with warnings.catch_warnings(record=True) as w_np:
            warnings.simplefilter("always")
            want_err, want = _rows(np, op, v, columns, err)
        with warnings.catch_warnings(record=True) as w_lg:
            warnings.simplefilter("always")
            got_err, got = _rows(lg, op, v, columns, err)
        label = f"{op.__name__} {v!r} {err}"
        assert got_err is want_err, label
        if want_err is None or err == "raise":  # a raise leaves what NumPy's loop wrote before it
            np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=label)
        assert sorted({str(x.message) for x in w_lg}) == sorted({str(x.message) for x in w_np}), label


def test_rows_of_a_loop_run_in_c_and_leave_no_history(mode):  # noqa: F811 (the imported fixture)
    """A row loop's values; with the extension it writes the buffer itself (no recorded node)."""
    a = _evaluated(np.zeros((50, 8)))
    v = lg.asarray(np.arange(8.0))
    for i in range(50):  # the first update after the buffer was handed out is recorded
        a[i] += v
        a[i] *= 1.5
    a.numpy()
    # (a reference held here would keep the buffer from being written in place: its identity only)
    buf = id(a._storage.node.buffer)
    for _ in range(2):
        for i in range(50):
            a[i] += v
            a[i] *= 1.5
    if mode == "extension":
        node = a._storage.node
        assert node.op.name == "buffer" and id(node.buffer) == buf
    want = np.zeros((50, 8))
    for _ in range(3):
        want += np.arange(8.0)
        want *= 1.5
    np.testing.assert_array_equal(a.numpy(), want)


def test_rows_read_elsewhere_are_not_written_in_place():
    """A row whose buffer a NumPy view or another lazy value holds takes the recorded path."""
    a = _evaluated(np.ones((4, 3)))
    held = a.numpy()  # a read-only view of the buffer, handed out
    a[1] += 2.0
    assert held[1, 0] == 1.0 and a.numpy()[1, 0] == 3.0
    b = _evaluated(np.ones((4, 3)))
    c = b * 1.0  # a lazy reader of b's current value
    b[2] -= np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(c.numpy(), np.ones((4, 3)))
    np.testing.assert_array_equal(b.numpy()[2], [0.0, -1.0, -2.0])
