"""The C recorder (lazygraph/lean_record.c) against the Python recorder it stands in for.

Each operator's C recorder handles the memo's hit path for plain arrays, Python floats and
small ints, and calls the Python recorder for everything else. Here both record the same
operations, and every field of the nodes they build must agree (the structural hash, the
gradient marks, the device, the scalar leaf), as must the values against NumPy; what the C
recorder hands back to Python is covered too, as are references (no leak) and the user's line
of a node whose kernel can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import lean_native, recorders, txn
from lazygraph.array import Array
from ops.creation import SCALAR

pytestmark = pytest.mark.host_backend

FIELDS = ("shape", "dtype", "attrs", "users", "requires_grad", "grad_leaf", "static", "device", "kid", "h")


def test_the_c_recorder_is_built_and_installed_here():
    assert lean_native.module() is not None, "gcc and Python's headers are present: the C recorder must build"
    for op, make in [
        ("add", recorders.binary_recorder),
        ("less", recorders.binary_recorder),
        ("tanh", recorders.unary_recorder),
    ]:
        f = make(op)
        assert type(f).__name__ == "Recorder", op
        assert f.__name__ == op  # read through to the Python recorder
        assert callable(f.python) and f.python.__name__ == op
    for dunder in ("__add__", "__radd__", "__rtruediv__", "__neg__"):
        assert type(Array.__dict__[dunder]).__name__ == "Recorder", dunder
    x = lg.asarray(np.arange(3.0))
    bound = x.__add__  # binds like a function
    np.testing.assert_array_equal(bound(1.0).numpy(), np.arange(3.0) + 1.0)


def _same_node(a, b):
    """Every field of two recorded nodes agrees (inputs: the same arrays' nodes, or equal leaves)."""
    for f in FIELDS:
        va, vb = getattr(a, f), getattr(b, f)
        assert va == vb and type(va) is type(vb), (f, va, vb)
    assert a.op is b.op and len(a.inputs) == len(b.inputs)
    for ia, ib in zip(a.inputs, b.inputs):
        if ia is ib:
            continue
        # a scalar operand's private leaf: equal field by field (a NumPy scalar's 0-d buffer
        # is keyed by its identity, so only its value is compared)
        assert ia.op is ib.op and ia.buffer == ib.buffer and type(ia.buffer) is type(ib.buffer)
        same = FIELDS if ia.op is SCALAR else ("shape", "dtype", "users", "device")
        for f in same:
            assert getattr(ia, f) == getattr(ib, f), (f, ia, ib)


def _pair(op, x, y=None):
    """(C result, Python result) of one recording, the C recorder's memo warmed first."""
    f = recorders.binary_recorder(op) if y is not None else recorders.unary_recorder(op)
    args = (x,) if y is None else (x, y)
    f(*args)  # a first meeting fills the memo through `record`
    before = f.handled
    c = f(*args)
    p = f.python(*args)
    return c, p, f.handled - before


def _takes_c(x, y=None):
    """Whether the C recorder should record this itself (the rest goes to the Python one)."""

    def plain(a):
        return type(a) is Array and a._view is None

    ok = plain(x) and 0 not in x.shape
    if y is not None:
        ok = ok and 0 not in y.shape if isinstance(y, Array) else ok
        ok = ok and (plain(y) or type(y) is float or (type(y) is int and 0 <= y <= 127))
    return ok


ARRAYS = {
    "f32": lambda: lg.asarray(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)),
    "f64_row": lambda: lg.asarray(np.linspace(0.5, 3, 4)),
    "i32": lambda: lg.asarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    "u8": lambda: lg.asarray(np.arange(12, dtype=np.uint8).reshape(3, 4)),
    "c128": lambda: lg.asarray(np.arange(4) + 1j),
    "bool": lambda: lg.asarray(np.arange(12).reshape(3, 4) % 2 == 0),
    "zero_d": lambda: lg.asarray(np.float64(2.5)),
    "empty": lambda: lg.asarray(np.ones((0, 4), np.float32)),
    "lazy": lambda: lg.asarray(np.ones((3, 4))) * 2.0,
    "view": lambda: lg.asarray(np.arange(24.0).reshape(4, 6))[:3, 1:5],  # a view: the Python path
}
OTHERS = [1.5, 3, 0, 127, 128, -1, True, np.float32(2.0), np.int8(3), 2**70, 1 + 2j]


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "less", "maximum"])
@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_binary_nodes_agree_with_the_python_recorder(op, name):
    x = ARRAYS[name]()
    operands = [*OTHERS, x, ARRAYS["f64_row"](), ARRAYS["i32"]()]
    for y in operands:
        try:
            expect = getattr(np, op)(np.asarray(x.numpy()), y.numpy() if isinstance(y, Array) else y)
        except Exception as e:  # noqa: BLE001 (the same error from both recorders)
            for f in (recorders.binary_recorder(op), recorders.binary_recorder(op).python):
                with pytest.raises(type(e)):
                    f(x, y)
            continue
        c, p, handled = _pair(op, x, y)
        assert handled == _takes_c(x, y), (x, y)
        _same_node(c.node, p.node)
        for r in (c, p):
            v = r.numpy()
            assert v.dtype == expect.dtype and v.shape == expect.shape
            np.testing.assert_array_equal(v, expect)


@pytest.mark.parametrize("op", ["negative", "exp", "tanh", "sqrt", "abs", "logical_not"])
@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_unary_nodes_agree_with_the_python_recorder(op, name):
    x = ARRAYS[name]()
    xv = np.asarray(x.numpy())
    with np.errstate(all="ignore"):
        try:
            expect = getattr(np, op)(xv)
        except TypeError:
            for f in (recorders.unary_recorder(op), recorders.unary_recorder(op).python):
                with pytest.raises(TypeError):
                    f(x)
            return
    c, p, handled = _pair(op, x)
    assert handled == _takes_c(x)
    _same_node(c.node, p.node)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(c.numpy(), expect)


def test_gradient_marks_agree_with_grad_on_and_off():
    w = lg.asarray(np.linspace(-1, 1, 6)).requires_grad_()
    x = lg.asarray(np.arange(6.0))
    for y in (x, 2.0, 3):
        c, p, handled = _pair("multiply", w, y)
        assert handled
        _same_node(c.node, p.node)
        assert c.node.requires_grad
        with lg.no_grad():
            c, p, handled = _pair("multiply", w, y)
            assert handled
            _same_node(c.node, p.node)
            assert c.node.grad_leaf and not c.node.requires_grad
    loss = (lg.tanh(w * x + 1.0) * 2.0).sum()  # every op here takes the C path
    loss.backward()
    wv, xv = np.linspace(-1, 1, 6), np.arange(6.0)
    np.testing.assert_allclose(w.grad.numpy(), 2.0 * (1 - np.tanh(wv * xv + 1.0) ** 2) * xv, rtol=1e-9)


def test_a_fallible_node_remembers_the_users_line():
    x = lg.asarray(np.array([2, 3, 4]))
    y = lg.asarray(np.array([1, 2, -1]))
    f = recorders.binary_recorder("pow")
    f(x, y)
    line = sys._getframe().f_lineno + 1
    z = x**y  # the C recorder's hit
    assert txn.ORIGINS[z.node] == (__file__, line)
    with pytest.raises(ValueError, match="negative"):
        z.numpy()


def test_recording_keeps_no_references():
    x = lg.asarray(np.ones((8, 8), np.float32))
    y = lg.asarray(np.ones((8, 8), np.float32))
    nx = x.node
    for _ in range(10):  # warm every memo
        x + y, x * 2.0, x - 3, lg.tanh(x)
    parts = [nx, nx.shape, nx.dtype, y.node]
    before = [sys.getrefcount(o) for o in parts]
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for _ in range(20000):
        x + y, x * 2.0, x - 3, lg.tanh(x)
    grown = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert [sys.getrefcount(o) for o in parts] == before
    assert grown < 64 * 1024, grown  # 80,000 recordings: nothing kept
    assert nx.users == 1  # only x's storage holds it


def test_a_dropped_array_releases_its_node_in_c():
    from lazygraph.array import Storage

    assert type(Storage.__dict__["__del__"]).__name__ == "method_descriptor"
    x = lg.asarray(np.arange(6.0))
    y = x + 1.0
    node = y.node
    z = lg.asarray(np.zeros(6))
    z[...] = y  # a second storage holds y's value: two users
    assert node.users >= 1
    held = node.users
    del y
    assert node.users == held - 1
    s = Storage(node)  # a bare storage: the count goes up, then back down
    assert node.users == held
    del s
    assert node.users == held - 1
    orphan = Storage.__new__(Storage)  # no node at all (as at shutdown): dropped quietly
    del orphan
    np.testing.assert_array_equal(z.numpy(), np.arange(6.0) + 1.0)


def test_recording_without_the_c_recorder_is_the_python_one():
    code = (
        "import numpy as np, lazygraph as lg\n"
        "from lazygraph import lean_native\n"
        "from lazygraph.array import Array\n"
        "assert lean_native.module() is None\n"
        "assert type(Array.__dict__['__add__']).__name__ == 'function'\n"
        "from lazygraph.array import Storage\n"
        "assert type(Storage.__dict__['__del__']).__name__ == 'function'\n"
        "x = lg.asarray(np.arange(4.0))\n"
        "for _ in range(3): y = (x + 1.0) * x - lg.tanh(x)\n"
        "np.testing.assert_array_equal(y.numpy(), (np.arange(4.0) + 1.0) * np.arange(4.0) - np.tanh(np.arange(4.0)))\n"
    )
    env = {**os.environ, "LAZYGRAPH_NATIVE_RECORD": "0"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "pow"])
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "complex64"])
def test_reflected_operators_agree_with_the_python_recorder(op, dtype):
    x = lg.asarray((np.arange(1, 7) % 4).astype(dtype).reshape(2, 3))
    xv = x.numpy()
    f = recorders.reflected_recorder(op)
    for y in (1.5, 3, 0, 200, -2, True, np.float64(0.5)):
        with np.errstate(all="ignore"):
            try:
                expect = getattr(np, op)(y, xv)
            except Exception as e:  # noqa: BLE001 (the same error from both recorders)
                for g in (f, f.python):
                    with pytest.raises(type(e)):
                        g(x, y)
                continue
        f(x, y)  # fills the memo
        before = f.handled
        c, p = f(x, y), f.python(x, y)
        assert (f.handled - before == 1) == (type(y) is float or (type(y) is int and 0 <= y <= 127))
        _same_node(c.node, p.node)
        with np.errstate(all="ignore"):
            for r in (c, p):
                v = r.numpy()
                assert v.dtype == expect.dtype
                np.testing.assert_array_equal(v, expect)
