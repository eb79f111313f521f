"""The element extension's float64 paths give NumPy's bits, errors and warnings.

A native, aligned float64 buffer indexed by Python ints is read, computed on and written as C
doubles (lazygraph/element_source.py): `a[i]`, `a[i, j]`, `s op= v` with a Python float, an
int of at most 2**53 or an np.float64, `a[i] = v` and `float(s)`. Each test runs with the
extension and with the Python paths, and compares against NumPy bit for bit (`view(uint64)`:
signed zeros and NaN payloads too) and warning for warning: overflow, underflow, division by
zero and invalid are left to NumPy's own scalar arithmetic, so np.errstate decides as in NumPy.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import element_ext
from lazygraph.array import Scalar
from lazygraph.direct import _Held
from tests.test_element_ext import BUILDABLE, _evaluated, mode  # noqa: F401 (mode: the autouse fixture)

# the CPU's direct element paths (a device array never takes them)
pytestmark = pytest.mark.host_backend


def _bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).view(np.uint64)


TINY = np.finfo(np.float64).tiny  # the smallest normal double
BIG = np.finfo(np.float64).max
#: left operands: the boundaries of the C paths' "no flag" test, signed zeros, non-finite values
LEFT = [
    1.5,
    -2.25,
    0.0,
    -0.0,
    TINY,
    -TINY,
    TINY * 3.0,
    5e-324,
    BIG,
    -BIG,
    1e300,
    np.inf,
    -np.inf,
    np.nan,
    1 / 3,
]
#: right operands: Python floats, ints (exact up to 2**53; beyond, NumPy's conversion), np.float64
RIGHT = [
    1.5,
    -0.0,
    0.0,
    0.5,
    2.0,
    1e-300,
    1e300,
    TINY,
    np.inf,
    np.nan,
    3,
    -7,
    0,
    2**53,
    -(2**53),
    2**53 + 1,
    10**30,
    np.float64(0.1),
    np.float64(-0.0),
    True,
    np.float32(0.1),
]
IOPS = [operator.iadd, operator.isub, operator.imul, operator.itruediv]


def _loop(xp, op, v, left):
    """`a[i] op= v` over every element, then `a[i] = v` on one; the array, or the error type."""
    a = np.array(left, dtype=np.float64)
    if xp is lg:
        a = _evaluated(a)
    try:
        for i in range(len(left)):
            a[i] = op(a[i], v)
        a[-1] = v
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e)
    return np.array(a.numpy() if xp is lg else a)


@pytest.mark.parametrize("op", IOPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("err", ["ignore", "warn"])
def test_float64_element_arithmetic_is_numpys_bit_for_bit(op, err):
    for v in RIGHT:
        with np.errstate(all=err), warnings.catch_warnings(record=True) as w_np:
            warnings.simplefilter("always")
            want = _loop(np, op, v, LEFT)
        with np.errstate(all=err), warnings.catch_warnings(record=True) as w_lg:
            warnings.simplefilter("always")
            got = _loop(lg, op, v, LEFT)
        if isinstance(want, type):
            assert got is want or (isinstance(got, type) and issubclass(got, want)), (op, err, v, got)
            continue
        assert not isinstance(got, type), (op, err, v, got)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{op.__name__} {v!r}")
        # the same floating-point warnings, NumPy's scalar arithmetic's (the C paths report none)
        assert sorted({str(x.message) for x in w_lg}) == sorted({str(x.message) for x in w_np}), (op, v)


def test_each_operation_warns_as_numpys():
    """Overflow, underflow, division by zero and invalid are NumPy's to report, operation by operation."""
    for x in LEFT:
        for v in (TINY, 0.5, 1e-300, 2.0, 1e300, 3, 0.0, np.inf):
            for op in IOPS:
                with np.errstate(all="warn"), warnings.catch_warnings(record=True) as w_np:
                    warnings.simplefilter("always")
                    want = op(np.float64(x), v)
                a = _evaluated([x, 0.0])
                with np.errstate(all="warn"), warnings.catch_warnings(record=True) as w_lg:
                    warnings.simplefilter("always")
                    a[0] = op(a[0], v)
                got = a.numpy()[0]
                assert _bits(got) == _bits(want), (x, op.__name__, v, got, want)
                assert [str(w.message) for w in w_lg] == [str(w.message) for w in w_np], (x, op.__name__, v)


def test_errstate_raise_agrees_with_the_python_paths(mode):  # noqa: F811 (the imported fixture)
    """Under np.errstate(all='raise') the C paths defer to the same calls as the Python paths."""
    if mode != "extension":
        return
    for op in IOPS:
        for v in RIGHT:
            out = []
            for on in (False, True):
                element_ext.use_extension(on)
                with np.errstate(all="raise"):
                    out.append(_loop(lg, op, v, LEFT))
            python, ext = out
            if isinstance(python, type):
                assert ext is python, (op, v, ext)
            else:
                np.testing.assert_array_equal(_bits(ext), _bits(python), err_msg=f"{op.__name__} {v!r}")


def test_reads_and_writes_keep_every_bit():
    payload = np.array([0x7FF8_0000_0000_1234, 0xFFF0_0000_0000_0001, 0x8000_0000_0000_0000], np.uint64)
    odd = payload.view(np.float64)  # NaNs with payloads, negative zero
    a = _evaluated(np.zeros(6))
    for i, x in enumerate(odd):
        a[i] = float(x)  # a Python float
        a[i + 3] = x  # an np.float64
    got = a.numpy().view(np.uint64)
    np.testing.assert_array_equal(got, np.concatenate([payload, payload]))
    b = _evaluated(odd)
    assert [_bits(b[i]._storage.val) for i in range(3)] == list(payload)
    c = _evaluated(np.zeros(3))
    for i in range(3):
        c[i] = b[i]  # a held element written into another float64 array
    np.testing.assert_array_equal(c.numpy().view(np.uint64), payload)
    assert [np.float64(float(b[i])).view(np.uint64) for i in range(3)] == list(payload)


def test_two_dimensional_keys_negative_indices_and_strides():
    x = np.arange(24.0).reshape(4, 6) * 0.37 - 2.0
    a, n = _evaluated(x), x.copy()
    for i, j in [(0, 0), (3, 5), (-1, -1), (-4, 2), (2, -6), (1, 3)]:
        assert float(a[i, j]) == float(n[i, j])
        assert type(a[i, j]) is Scalar
        a[i, j] += 1.25
        n[i, j] += 1.25
        a[i, j] *= 3
        n[i, j] *= 3
        a[j % 4, i] = a[i, j]
        n[j % 4, i] = n[i, j]
    np.testing.assert_array_equal(a.numpy(), n)
    v = _evaluated(np.arange(7.0))
    for i in range(-7, 7):
        assert float(v[i]) == float(i % 7)


def test_other_keys_layouts_and_indices_take_numpys_path():
    a = _evaluated(np.arange(5.0))
    n = np.arange(5.0)
    for key in (np.int64(2), np.int8(-1), True):
        got, want = a[key], n[key]
        np.testing.assert_array_equal(np.asarray(got.numpy() if hasattr(got, "numpy") else got), want)
    for bad in (5, -6, 2**70, -(2**70)):
        with pytest.raises(IndexError):
            a[bad]
        with pytest.raises(IndexError):
            a[bad] = 1.0
    m = _evaluated(np.zeros((2, 3)))
    with pytest.raises(IndexError):
        m[0, 3]
    with pytest.raises(IndexError):
        m[0, 1, 2]
    m[()] = 4.5  # every element, as NumPy
    np.testing.assert_array_equal(m.numpy(), np.full((2, 3), 4.5))
    big = _evaluated(np.arange(4, dtype=">f8"))  # not native byte order
    big[1] += 0.5
    big[2] = 7.0
    assert float(big[1]) == 1.5 and big.numpy().tolist() == [0.0, 1.5, 7.0, 3.0]
    f32 = _evaluated(np.arange(3, dtype=np.float32))
    f32[0] += 0.1  # float32's own rounding
    want = np.arange(3, dtype=np.float32)
    want[0] += 0.1
    np.testing.assert_array_equal(f32.numpy(), want)


def test_held_values_are_never_overwritten():
    """An element's np.float64 is refilled only while nothing but its scalar's fields hold it."""
    a = _evaluated(np.arange(6.0) + 0.5)
    v = a[1]._storage.val  # the value object, held
    reads = [float(a[i]) for i in range(6)]
    assert v == 1.5 and reads == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    s = a[2]
    v2 = s._storage.val
    del s
    a[3] += 10.0
    a[2] -= 1.0
    assert v2 == 2.5 and float(a[3]) == 13.5 and float(a[2]) == 1.5
    kept = a[4]
    kept_val = kept._storage.val
    a[4] *= 2.0  # the statement's own scalar: `kept` and its value unchanged
    assert float(kept) == 4.5 and kept_val == 4.5 and float(a[4]) == 9.0
    t = a[5]
    u = t
    u += 1.0  # a new scalar: t keeps its value
    assert float(t) == 5.5 and float(u) == 6.5 and type(u._storage) is _Held
    np.testing.assert_array_equal(a.numpy(), [0.5, 1.5, 1.5, 13.5, 9.0, 5.5])


def test_loops_of_reads_share_one_scalar_in_the_extension(mode):  # noqa: F811 (the imported fixture)
    """The read path the C code takes: one Scalar and one np.float64 refilled (the Python paths
    make one per read); its values are each element's."""
    a = _evaluated(np.linspace(-1.0, 1.0, 8))
    ids, vals, got = set(), set(), []
    for i in range(8):
        s = a[i]
        ids.add(id(s))
        vals.add(id(s._storage.val))
        got.append(float(s))
        del s
    assert got == np.linspace(-1.0, 1.0, 8).tolist()
    if mode == "extension":
        assert len(ids) == 1 and len(vals) == 1
    for i in range(8):
        a[i] += 0.25
    np.testing.assert_array_equal(a.numpy(), np.linspace(-1.0, 1.0, 8) + 0.25)


def test_readers_views_and_gradients_keep_their_paths():
    a = _evaluated(np.arange(5.0))
    pending = a * 2.0  # reads the value before the writes
    view = a[1:4]
    for i in range(5):
        a[i] += 0.5
    np.testing.assert_array_equal(pending.numpy(), np.arange(5.0) * 2.0)
    np.testing.assert_array_equal(view.numpy(), [1.5, 2.5, 3.5])
    held = a.numpy()
    a[0] = 9.0  # the user holds the buffer: recorded, `held` keeps its value
    assert held[0] == 0.5 and float(a[0]) == 9.0
    lazy = lg.asarray(np.arange(3.0)) + 1.0  # not evaluated
    lazy[1] += 0.5
    assert float(lazy[1]) == 2.5
    w = lg.asarray(np.arange(3.0), requires_grad=True)
    y = w * 1.0
    y.numpy()
    y[1] *= 3.0
    (y * y).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 18.0, 4.0])


def test_writes_after_an_evaluation_leave_handed_out_values_read_only():
    """An evaluated value is handed out read-only; the next element write (the buffer released)
    writes in place and later results are read-only again, holding NumPy's values."""
    a = lg.zeros(4)
    first = a.numpy()
    assert not first.flags.writeable
    a[0] = 9.0  # `first` is held: recorded, first keeps its value
    del first
    for _ in range(3):
        a[1] = 2.5
        a[2] += 1.5
        got = a.numpy()
        assert not got.flags.writeable
        with pytest.raises(ValueError):
            got[3] = 1.0
        del got
    np.testing.assert_array_equal(a.numpy(), [9.0, 2.5, 4.5, 0.0])
