"""The lean recording paths against NumPy: per-operator recorders (`a + b`) and element writes.

`a[i] op= v` keeps its element read and its operation as recipes and records one `update` at
the write-back (lazygraph/array.py, `_Element`); every other use of the scalar builds the
nodes the plain path records. These tests run the same programs on NumPy and lazygraph, with
each signature met more than once (the lean paths start at the second meeting).
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend

DTYPES = ["float64", "float32", "int64", "int32", "int8", "uint8", "bool", "complex128"]
OPS = ["+=", "-=", "*=", "/=", "//=", "%=", "**=", "&=", "|=", "^="]


def _apply(target, key, op, value):
    """`target[key] op= value` for an operator given as text."""
    if op == "+=":
        target[key] += value
    elif op == "-=":
        target[key] -= value
    elif op == "*=":
        target[key] *= value
    elif op == "/=":
        target[key] /= value
    elif op == "//=":
        target[key] //= value
    elif op == "%=":
        target[key] %= value
    elif op == "**=":
        target[key] **= value
    elif op == "&=":
        target[key] &= value
    elif op == "|=":
        target[key] |= value
    else:
        target[key] ^= value


def _both(fn):
    """Run fn on NumPy and lazygraph; the same outcome (value and dtype, or error type)."""
    outcomes = []
    for xp in (np, lg):
        try:
            out = np.asarray(fn(xp))
            outcomes.append(("ok", out))
        except Exception as e:  # noqa: BLE001 (the error type is what is compared)
            outcomes.append(("err", type(e)))
    (kn, vn), (kl, vl) = outcomes
    assert kn == kl, outcomes
    if kn == "ok":
        assert vl.dtype == vn.dtype
        np.testing.assert_array_equal(vl, vn)
    else:
        assert vl is vn or issubclass(vl, vn) or issubclass(vn, vl), outcomes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("value", [3, 2.5, True, -2])
def test_element_update_loops_match_numpy(dtype, op, value):
    def prog(xp):
        # each element written once (NumPy checks a float result stored into an integer
        # element by its value, which a lazy write cannot: values stay small), the signature
        # met eight times (the lean path from the second)
        a = xp.asarray((np.arange(8) % 4 + 1).astype(dtype))
        with np.errstate(all="ignore"):
            for k in range(4):
                for i in (k, -k - 1):
                    _apply(a, i, op, value)
        return a

    _both(prog)


@pytest.mark.parametrize("dtype", ["float64", "int32", "complex64"])
def test_element_updates_in_2d_views_and_by_arrays(dtype):
    def prog(xp):
        a = xp.asarray(np.arange(24).reshape(4, 6).astype(dtype))
        b = xp.asarray(np.arange(6).astype(dtype))
        v = a[1:, ::2]  # a view: its writes land in a
        for _ in range(3):
            for i in range(3):
                a[i, -1] += 2
                v[i, 1] *= 3
                a[i, i] -= b[i]  # a lazy element of another array
                a[-1, i] += b[1:2][0]
                a[0, 0] += xp.asarray(np.array(1, dtype=dtype))  # a 0-d array
        return xp.stack([a.reshape(-1)[:12], v.reshape(-1)[:3].astype(a.dtype).repeat(4)])

    _both(prog)


def test_element_read_is_a_copy_in_program_order():
    """The scalar holds the value at its read, whatever is written after."""
    for xp in (np, lg):
        a = xp.asarray(np.arange(5.0))
        for _ in range(3):
            s = a[2]
            t = s  # another name for the element read
            s += 1.0
            a[2] = 7.0  # a write between the operation and its write-back
            assert float(s) == 3.0 and float(t) == 2.0
            a[2] = s  # the write-back of an older read: a plain assign
            assert float(a[2]) == 3.0
            u = a[1]
            u *= 10.0
            a[3] = u  # another element: not an update of a[1]
            assert float(a[1]) == 1.0 and float(a[3]) == 10.0
            a[1] = 1.0
            w = a[4]
            w += 1.0
            b = a[:]  # another array over the same buffer
            b[4] = w
            assert float(a[4]) == 5.0
            a[4] = 4.0
            a[3] = 3.0
            a[2] = 2.0


def test_element_scalar_used_otherwise_builds_the_plain_nodes():
    a = lg.asarray(np.arange(4.0))
    for _ in range(3):
        s = a[1]
        s += 0.5
        assert s.dtype == np.float64 and s.shape == ()
        assert float(s * 2) == 3.0
        assert np.asarray(s).item() == 1.5
    x = lg.asarray(np.arange(3, dtype=np.int32))
    for _ in range(3):
        t = x[0]
        t += 1.5  # NumPy: an int32 scalar plus a float is a float64 scalar
        assert t.dtype == np.float64 and float(t) == 1.5


def test_element_update_errors_at_the_users_line():
    for _ in range(3):  # a signature that failed is never remembered: it fails again
        for xp in (np, lg):
            a = xp.zeros(3, dtype=np.int8)
            with pytest.raises(OverflowError):
                a[0] += 300
            with pytest.raises(IndexError):
                a[3] += 1
            with pytest.raises(TypeError):
                a[0] += "x"
            a = xp.zeros(3, dtype=np.int64)
            a[0] += 1
            a[0] += 1
            with pytest.raises(ValueError):
                a[1] = xp.ones(2)


def test_element_update_chain_evaluates_once_and_stays_right():
    a = lg.zeros(50)
    ref = np.zeros(50)
    for k in range(4):
        for i in range(50):
            a[i] += 1.5 * (k + 1)
            ref[i] += 1.5 * (k + 1)
            if i % 7 == 0:
                assert float(a[i]) == ref[i]
    np.testing.assert_array_equal(a.numpy(), ref)


def test_parameter_writes_still_refused_while_grad_is_on():
    p = lg.asarray(np.zeros(3), requires_grad=True)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            p[0] += 1.0
    with lg.no_grad():
        for _ in range(3):
            p[0] += 1.0
    np.testing.assert_array_equal(p.numpy(), [3.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64", "uint16", "bool", "complex64"])
def test_operator_recorders_match_numpy_dtypes_and_values(dtype):
    base = np.arange(1, 7).reshape(2, 3).astype(dtype)
    row = np.arange(1, 4).astype(dtype)

    def prog(xp):
        a = xp.asarray(base)
        r = xp.asarray(row)
        outs = []
        with np.errstate(all="ignore"):
            for _ in range(2):
                neg = 2 if dtype[0] in "ub" else -3  # (NumPy refuses -3 for unsigned: tested below)
                for other in (r, 2, 1.5, True, neg, xp.asarray(np.array(2, dtype=dtype)), row):
                    outs.append((a + other).astype(np.complex128))
                    outs.append((other * a).astype(np.complex128))
                    outs.append((a - other).astype(np.complex128))
                outs.append((-a).astype(np.complex128) if dtype != "bool" else (~a).astype(np.complex128))
                outs.append(abs(a).astype(np.complex128))
        return xp.stack(outs)

    _both(prog)


def test_operator_recorders_raise_like_numpy():
    for _ in range(3):
        a = lg.ones((2, 3))
        with pytest.raises(ValueError):
            a + lg.ones(4)
        with pytest.raises(TypeError):
            a + "x"
        with pytest.raises(TypeError):
            a + None
        assert (a + a).shape == (2, 3)
        assert (1 + lg.ones(3, dtype=np.int8)).dtype == np.int8
        assert (1000 + lg.ones(3, dtype=np.int16)).dtype == np.int16
        with pytest.raises(OverflowError):
            1000 + lg.ones(3, dtype=np.int8)
        with pytest.raises(OverflowError):
            lg.ones(3, dtype=np.uint16) - -3


def test_element_update_takes_the_lean_path_and_records_one_update():
    from lazygraph.elements import _Update

    a = lg.zeros(10)
    a[0] += 1.0  # the first meeting: the general path checks and remembers
    for i in range(1, 10):
        s = a[i]
        s += 1.0
        assert type(s._storage) is _Update  # no node built yet
        before = a._storage.node
        a[i] = s
        node = a._storage.node
        assert node.op.name == "update" and node.inputs[0] is before
    np.testing.assert_array_equal(a.numpy(), np.ones(10))


def test_scalar_writes_check_each_signature_whatever_came_before():
    """`a[i] = v` remembers the last signature that passed; another dtype or value class is checked."""
    for _ in range(3):
        for xp in (np, lg):
            wide = xp.zeros(4, dtype=np.int16)
            narrow = xp.zeros(4, dtype=np.int8)
            flt = xp.zeros(4, dtype=np.float16)
            for i in range(4):
                wide[i] = 300  # passes for int16
                with pytest.raises(OverflowError):
                    narrow[i] = 300  # the same value class, another dtype: checked, fails
                narrow[i] = -5
                flt[i] = 1.5
                with pytest.raises(TypeError):
                    narrow[i] = 1j
                wide[-i - 1] = True
            np.testing.assert_array_equal(np.asarray(wide), [1, 1, 300, 300])
            np.testing.assert_array_equal(np.asarray(narrow), [-5, -5, -5, -5])
            np.testing.assert_array_equal(np.asarray(flt), [1.5] * 4)


def test_python_scalar_operands_record_numpy_results():
    for _ in range(3):
        for dtype in ("float32", "int16", "uint8", "complex64", "bool"):
            x = np.arange(1, 5).astype(dtype)
            y = lg.asarray(x)
            for v in (2, 2.5, True, 3j):
                with np.errstate(all="ignore"):
                    want = [x * v, v * x, x - v, v - x] if dtype != "bool" else [x * v, v * x]
                got = [y * v, v * y, y - v, v - y] if dtype != "bool" else [y * v, v * y]
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype
                    np.testing.assert_array_equal(g.numpy(), w)


def test_element_read_survives_evaluations_that_write_in_place():
    """A read kept as a recipe holds the value it read even when later writes run in place."""
    for evaluated in (False, True):
        for _ in range(3):
            a = lg.zeros(6) + 1.0
            if evaluated:
                a.numpy()
            s = a[1]
            t = a[2]
            t += 5.0  # a recipe of an operation on a read
            for i in range(6):
                a[i] += 10.0
            a[1] = 7.0
            a.numpy()  # the writes may run in place into the dying buffer
            a[2] *= 3.0
            a.numpy()
            assert float(s) == 1.0 and float(t) == 6.0
            np.testing.assert_array_equal(a.numpy(), [11.0, 7.0, 33.0, 11.0, 11.0, 11.0])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint64", "bool", "complex64"])
def test_element_conversions_of_evaluated_arrays_match_numpy(dtype):
    """`float(a[i, j])` of an evaluated array reads the buffer directly: views, negative indices."""
    x = (np.arange(12).reshape(3, 4) * 1.7).astype(dtype)
    a = lg.asarray(x)
    a.numpy()
    for arr, ref in ((a, x), (a.T, x.T), (a[1:, ::-2], x[1:, ::-2])):
        for i, j in ((1, 1), (-1, -1), (0, 1)):
            if dtype != "complex64":
                assert float(arr[i, j]) == float(ref[i, j])
                assert int(arr[i, j]) == int(ref[i, j])
            assert bool(arr[i, j]) == bool(ref[i, j])
            got, want = arr[i, j].item(), ref[i, j].item()
            assert got == want and type(got) is type(want)
    b = lg.asarray(x) + x  # not evaluated: the general conversion evaluates it
    assert b[1, 2].item() == (x + x)[1, 2].item()
