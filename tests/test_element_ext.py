"""The element extension (lazygraph/element_ext.py) changes speed only, never results.

Every test of tests/test_direct_writes.py (differential against NumPy over dtypes x in-place
operators x values, views sharing the buffer, pending readers of the old value, errors at the
user's line, autograd and model state, random programs) runs here twice, once with the C
methods installed and once with the Python paths, deterministically (the suite's own run may
see the extension installed part way, when its background build finishes). The tests below
them check what only the extension does: which methods are installed, when it mutates a held
scalar, and its fallbacks.
"""

from __future__ import annotations

import operator
import os
import sysconfig
import warnings
import weakref

import numpy as np
import pytest
import test_direct_writes as tdw
from test_direct_writes import *  # noqa: F403  (their tests run here in both modes)

import lazygraph as lg
from jit import compile_c
from lazygraph import direct, element_ext
from lazygraph.array import Array, Scalar
from lazygraph.direct import _Held

_inc = sysconfig.get_paths().get("include")
#: where a compiler and Python's headers exist, the extension must build
BUILDABLE = (
    compile_c.find_compiler() is not None and bool(_inc) and os.path.isfile(os.path.join(_inc, "Python.h"))
)
MODES = ["python", "extension"] if BUILDABLE else ["python"]


@pytest.fixture(autouse=True, params=MODES)
def mode(request):
    if request.param == "extension":
        assert element_ext.prepare(), element_ext.status()
        element_ext.use_extension(True)
        assert element_ext.status() == "extension"
    else:
        element_ext.use_extension(False)
    yield request.param
    element_ext.use_extension(True)


def _evaluated(values):
    a = lg.asarray(np.asarray(values))
    a.numpy()
    return a


@pytest.mark.host_backend  # the CPU's direct writes into its buffer
def test_methods_are_the_extensions_or_pythons(mode):
    ext = mode == "extension"
    for cls, name in (
        (Array, "__getitem__"),
        (Array, "__setitem__"),
        (Scalar, "__float__"),
        (Scalar, "__iadd__"),
    ):
        # the extension's: a C method, or the slot of Array's C base (no method shadows it)
        kind = type(getattr(cls, name)).__name__
        assert (kind in ("method_descriptor", "wrapper_descriptor")) == ext, (cls, name, kind)
    if ext and Array.__bases__[0] is not object:
        assert Array.__bases__[0].__name__ == "ElementBase"
        for name in ("__getitem__", "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"):
            assert name not in Array.__dict__ and name not in Scalar.__dict__, name
    assert (type(direct._writable).__name__ == "builtin_function_or_method") == ext
    a = _evaluated(np.arange(5.0))
    s = a[-2]
    assert type(s) is Scalar and type(s._storage) is _Held
    assert type(s._storage.val) is np.float64 and s._storage.val == 3.0


IOPS = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv}
DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
VALUES = [3, -2, 1.5, True, np.float32(0.25), np.int8(5), np.uint64(7), 2 + 1j, np.complex64(1j), 10**30]


def _loop(xp, dtype, iop, v):
    """Reads, `op=`, writes and float() over every index (negative ones too); result or error type."""
    a = np.array([5, 1, 0, 3, 2, 7]).astype(dtype)
    if xp is lg:
        a = _evaluated(a)
    got = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in (0, -1, 2, -4, 5):  # (-4 and 2, -1 and 5: the same element twice)
                a[i] = iop(a[i], v)
                if np.dtype(dtype).kind != "c":
                    got.append(float(a[i]))
            a[1] = v
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e), got
    return (np.asarray(a).copy() if xp is lg else a), got


@pytest.mark.parametrize("dtype", DTYPES)
def test_element_loops_match_numpy(dtype):
    for name, iop in IOPS.items():
        for v in VALUES:
            want, want_f = _loop(np, dtype, iop, v)
            got, got_f = _loop(lg, dtype, iop, v)
            if isinstance(want, type):
                assert isinstance(got, type) and issubclass(got, Exception), (dtype, name, v, got)
                continue
            assert not isinstance(got, type), (dtype, name, v, got)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=f"{dtype} {name} {v!r}")
            assert got_f == want_f or np.allclose(got_f, want_f, equal_nan=True)


@pytest.mark.host_backend  # the CPU's direct writes into its buffer
def test_the_proof_that_a_buffer_is_dead_agrees_with_pythons(mode):
    """`direct._writable` (C or Python) against the Python proof, case by case."""
    python = element_ext.PYTHON.get("writable", direct._writable)

    def check(arr, dead):
        # (the buffer returned is a reference: each proof runs with none held)
        got = direct._writable(arr) is not None
        want = python(arr) is not None
        assert got == want == dead

    a = _evaluated(np.arange(4.0))
    check(a, True)
    check(a[1:3], True)  # a view of it: the same buffer
    b = a + 1  # a pending reader holds a's node
    check(a, False)
    del b
    check(a, True)
    held = a.numpy()  # the user holds the buffer
    check(a, False)
    del held
    check(a, True)
    other = lg.asarray(np.arange(3.0)) * 1
    other[0] = 5.0  # recorded: a write history, no buffer
    check(other, False)
    other.numpy()
    check(other, True)
    w = lg.asarray(np.arange(3.0), requires_grad=True)
    w.numpy()
    check(w, False)
    m = _evaluated(np.arange(3.0))
    lg.mark_static(m)
    check(m, False)
    check(lg.zeros(3), False)  # not evaluated


def test_a_held_scalar_changes_only_when_the_statement_alone_holds_it():
    a = _evaluated(np.arange(4.0))
    a[1] += 1.0  # the statement's scalar, updated in place
    s = a[2]
    t = s
    t += 10.0  # t is a new scalar: s keeps 2.0
    assert float(s) == 2.0 and float(t) == 12.0
    u = a[3]
    u *= 2.0  # u alone holds it, but rebinding must not change what a holds
    assert float(a[3]) == 3.0 and float(u) == 6.0
    kept = [a[0]]
    x = kept[0]
    x -= 1.0
    assert float(kept[0]) == 0.0 and float(x) == -1.0
    np.testing.assert_array_equal(a.numpy(), [0.0, 2.0, 2.0, 3.0])


def test_pending_readers_and_views_see_numpys_values():
    a = _evaluated(np.arange(6.0))
    b = a * 1  # pending: reads the value before the writes
    v = a[2:5]  # a view shares the buffer
    a[3] = 30.0
    a[-1] += 0.5
    np.testing.assert_array_equal(b.numpy(), np.arange(6.0))
    np.testing.assert_array_equal(v.numpy(), [2.0, 30.0, 4.0])
    held = a.numpy()  # a result the user holds keeps its value
    a[0] = -1.0
    assert held[0] == 0.0 and float(a[0]) == -1.0
    m = _evaluated(np.arange(12).reshape(3, 4))
    row = m[1]  # an unread view of the buffer
    m[1, 2] = 100
    m[-1, -1] += 5
    np.testing.assert_array_equal(row.numpy(), [4, 5, 100, 7])
    assert int(m[2, 3]) == 16 and m[0, np.int64(1)].item() == 1


def _rows(xp, dtype):
    """Row updates (`a[i] op= v`) with a reader of the old value; the values, or the error type."""
    a = np.arange(12).reshape(4, 3).astype(dtype)
    v = np.array([1, 2, 3]).astype(dtype)
    if xp is lg:
        a, v = _evaluated(a), _evaluated(v)
    before = a * 1
    try:
        for i in range(4):
            a[i] += v
        a[1] *= 2
        a[-1] -= v
        a[2] /= 4
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e)
    out = [before, a, a[0], a[-2]]
    return [np.asarray(x).copy() for x in out]


@pytest.mark.parametrize("dtype", ["int8", "int64", "float32", "float64", "complex128"])
def test_row_loops_with_a_reader_match_numpy(dtype):
    want = _rows(np, dtype)
    got = _rows(lg, dtype)
    if isinstance(want, type):  # `/=` of an integer array: NumPy's casting error
        assert isinstance(got, type) and issubclass(got, TypeError), got
        return
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_row_update_errors_are_numpys():
    a = _evaluated(np.ones((3, 2)))
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        a[0] /= 0.0
    i = _evaluated(np.ones((3, 2), dtype=np.int8))
    with pytest.raises(TypeError, match="same_kind"):
        i[1] += 1.5
    with pytest.raises(ValueError):
        a[0] += np.ones(3)  # shapes that do not broadcast
    np.testing.assert_array_equal(i.numpy(), np.ones((3, 2)))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int64", "complex64"])
def test_power_of_a_held_element_is_numpys_scalar_power(dtype):
    """`a[i] **= k`: NumPy's scalar power (float32's rounds unlike its array power: 1.5 ** -3)."""
    for k in (-3, 2, 0.5, np.float32(-1.5)):
        want = np.array([1.5, 2, 3]).astype(dtype)
        got = _evaluated(want.copy())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for i in (0, -1):
                    want[i] **= k
            failed = None
        except Exception as e:  # noqa: BLE001 (the error type is compared)
            failed = type(e)
        if failed is not None:  # an integer to a negative power: the recorded path raises it
            with pytest.raises(failed), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for i in (0, -1):
                    got[i] **= k
                got.numpy()
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in (0, -1):
                got[i] **= k
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{dtype} ** {k!r}")


def test_numpy_scalars_into_integer_arrays_are_checked():
    """NumPy raises for a NumPy scalar an integer array cannot hold; so must the write-back."""
    for evaluated in (True, False):
        for v in (np.int64(300), np.float64(343.0), np.float64("nan"), np.uint64(7), np.float32(2.7)):
            want = np.zeros(3, np.int8)
            got = lg.zeros(3, dtype="int8")
            if evaluated:
                got.numpy()
            try:
                want[0] = v
            except Exception as e:  # noqa: BLE001 (the error type is compared)
                with pytest.raises(type(e)):
                    got[0] = v
                continue
            got[0] = v
            np.testing.assert_array_equal(got.numpy(), want)
    a = _evaluated(np.array([49, 1], dtype=np.int8))
    with pytest.raises(OverflowError):
        a[0] *= np.uint64(7)  # int8 49 * uint64 7 is float64 343.0: NumPy raises at the store
        a[0] *= np.uint64(7)


def test_errors_come_from_the_general_path():
    a = _evaluated(np.arange(3.0))
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError):
        a[-4] = 1.0
    with pytest.raises((TypeError, ValueError)):
        a[0] = "x"
    u = _evaluated(np.arange(3, dtype=np.uint8))
    with pytest.raises(OverflowError):
        u[0] = 300
    with pytest.raises(TypeError):
        a[1] = 1 + 2j  # NumPy refuses a Python complex into a float array
    with pytest.warns(np.exceptions.ComplexWarning):
        a[2] = np.complex128(2 + 5j)  # and warns about a NumPy one (the recorded write warns)
    np.testing.assert_array_equal(a.numpy(), [0.0, 1.0, 2.0])
    with pytest.raises(TypeError):
        Array.__getitem__(a)  # a wrong call takes the Python method's error
    ro = lg.broadcast_to(lg.asarray(np.arange(3.0)), (2, 3))
    with pytest.raises(ValueError, match="read-only"):
        ro[0, 0] = 1.0


def test_autograd_writes_stay_recorded():
    w = lg.asarray(np.arange(3.0), requires_grad=True)
    y = w * 1.0
    y[0] = 5.0  # recorded: the gradient through element 0 is cut
    y[1] += 2.0
    (y * y).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 6.0, 4.0])
    np.testing.assert_array_equal(y.numpy(), [5.0, 3.0, 2.0])


def test_reused_names_stay_imported():
    assert tdw.DTYPES  # the module whose tests run here in both modes


def test_element_reads_held_stay_themselves():
    """Scalars read and kept (a local, a weak reference, a field set on them) keep their values:
    the extension refills only a Scalar nothing else holds."""
    vals = np.arange(6.0) * 1.5
    a = _evaluated(vals)
    kept = [a[i] for i in range(6)]  # each held by the list: six distinct Scalars
    assert len({id(s) for s in kept}) == 6
    s = a[2]
    w = weakref.ref(s)
    del s
    reads = [float(a[i]) for i in range(6)]  # loops of reads after it
    assert reads == list(vals)
    s2 = w()
    assert s2 is None or float(s2) == vals[2]  # weakly held: never refilled with another element
    t = a[4]
    t += 1.0  # `t` is held: a new Scalar, `a` unchanged
    assert float(t) == vals[4] + 1.0 and float(a[4]) == vals[4]
    assert [float(x) for x in kept] == list(vals)
    b = _evaluated(np.arange(4, dtype=np.int32))
    r = b[1]
    r._storage.grad = None  # a field set on its storage: not refilled with the next read
    del r
    assert [int(b[i]) for i in range(4)] == [0, 1, 2, 3]


def test_element_loops_after_kept_reads_match_numpy():
    """`a[i] += v` and reads interleaved with kept element reads give NumPy's values."""
    x = np.linspace(-2.0, 3.0, 9)
    a, n = _evaluated(x.copy()), x.copy()
    kept, nkept = [], []
    for i in range(9):
        a[i] += 0.5
        n[i] += 0.5
        if i % 3 == 0:
            kept.append(a[i])
            nkept.append(n[i])
        a[(i + 1) % 9] *= 2.0
        n[(i + 1) % 9] *= 2.0
    np.testing.assert_array_equal(a.numpy(), n)
    assert [float(s) for s in kept] == [float(v) for v in nkept]
