"""Graph memory is released: long programs run in flat memory, long chains are safe.

Memory is measured with tracemalloc (Python allocations, NumPy buffers included) after a
garbage collection, at an early and a late point of the same loop; the late figure may
exceed the early one by at most a small bound. Tracing starts at the early point (it
slows Python down several times), so the late figure counts what the loop allocated since
and still holds.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import tracemalloc
import weakref

import numpy as np
import pytest

import lazygraph as lg

BOUND = 1 << 20  # 1 MB


def kernels() -> int:
    return lg.debug.evaluation_stats()["kernels"]


@pytest.fixture
def traced():
    """Yields mark(): the first call starts tracemalloc, each returns current traced bytes."""

    def mark() -> int:
        gc.collect()
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        return tracemalloc.get_traced_memory()[0]

    try:
        yield mark
    finally:
        tracemalloc.stop()


def test_long_loop_of_recorded_ops_keeps_memory_flat(traced):
    a = lg.asarray(np.zeros(16))
    marks = {}
    for i in range(1, 100_001):
        a = a + 1
        if i % 1000 == 0:
            a.numpy()
            if i in (10_000, 100_000):
                marks[i] = traced()
    np.testing.assert_array_equal(a.numpy(), np.full(16, 100_000.0))
    growth = marks[100_000] - marks[10_000]
    assert growth < BOUND, f"memory grew by {growth} bytes between step 10k and step 100k"


def test_training_loop_keeps_memory_flat_and_time_per_step_constant(traced):
    # The loss is evaluated from the residual recorded BEFORE `w -=`: the new `w` is never
    # evaluated itself, so its history must be cut at the values the loss evaluation computed.
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((32, 8))
    true_w = rng.standard_normal(8)
    x, y = lg.asarray(xn), lg.asarray(xn @ true_w)
    w = lg.zeros(8)
    wn = np.zeros(8)
    marks = {}
    for step in range(1, 20_001):
        r = x @ w - y
        w -= 0.1 * (x.T @ r) / 32
        k = kernels()
        loss = float((r * r).mean())
        # each evaluation runs the step's few new kernels, not the whole history again
        assert kernels() - k <= 8, f"step {step}: the loss evaluation ran {kernels() - k} kernels"
        if step <= 50:  # the same updates in NumPy
            rn = xn @ wn - xn @ true_w
            assert loss == pytest.approx(float((rn * rn).mean()), rel=1e-9, abs=1e-12)
            wn -= 0.1 * (xn.T @ rn) / 32
        if step in (2_000, 20_000):
            marks[step] = traced()
    np.testing.assert_allclose(w.numpy(), true_w, rtol=1e-6)
    assert loss < 1e-20
    growth = marks[20_000] - marks[2_000]
    assert growth < BOUND, f"memory grew by {growth} bytes between step 2k and step 20k"


def test_training_loop_evaluating_the_weights_keeps_memory_flat(traced):
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((16, 4))
    x, y = lg.asarray(xn), lg.asarray(xn @ np.arange(4.0))
    w = lg.zeros(4)
    marks = {}
    for step in range(1, 5_001):
        grad = x.T @ (x @ w - y) / 16
        w -= 0.1 * grad
        w.numpy()
        if step in (500, 5_000):
            marks[step] = traced()
    np.testing.assert_allclose(w.numpy(), np.arange(4.0), rtol=1e-6, atol=1e-9)
    assert marks[5_000] - marks[500] < BOUND


def test_long_unevaluated_chain_evaluates_without_recursion_error():
    x = lg.asarray(np.arange(4.0))
    a = x
    for _ in range(100_000):
        a = a + 1
    np.testing.assert_array_equal(a.numpy(), np.arange(4.0) + 100_000)
    # and a long chain through views and writes as well
    b = lg.zeros((2, 3))
    for i in range(20_000):
        b[i % 2, i % 3] += 1
    expected = np.zeros((2, 3))
    for i in range(20_000):
        expected[i % 2, i % 3] += 1
    np.testing.assert_array_equal(b.numpy(), expected)


def test_long_unevaluated_chain_can_be_dropped():
    # A crash in deallocation would kill the interpreter: run it in a child process.
    code = textwrap.dedent(
        """
        import gc, weakref
        import numpy as np
        import lazygraph as lg

        a = lg.asarray(np.ones(3))
        first = weakref.ref(a.node)
        for _ in range(100_000):
            a = a * 1.0 + 0.0
        v = a[1:]
        del a, v
        gc.collect()
        assert first() is None, "the chain's first node outlived the chain"
        b = lg.asarray(np.ones(3))
        for _ in range(100_000):
            b = lg.exp(b) * 0.0  # never evaluated
        del b
        gc.collect()
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_evaluated_values_are_memoized():
    x = lg.asarray(np.arange(6.0).reshape(2, 3))
    y = lg.tanh(x @ x.T) * 2
    first = y.numpy()
    k = kernels()
    second = y.numpy()
    assert kernels() == k, "a second .numpy() ran kernels again"
    np.testing.assert_array_equal(first, second)
    # derived arrays reuse the memoized value: only their own op runs
    z = y + 1
    z.numpy()
    assert kernels() == k + 1
    # an intermediate a live array holds was memoized by the evaluation that computed it
    t = x * 3
    u = t.sum()
    float(u)
    k = kernels()
    t.numpy()
    assert kernels() == k


def test_dropped_intermediates_are_freed():
    x = lg.asarray(np.ones((64, 64)))
    t = x * 2
    r = weakref.ref(t.node)
    y = t + 1
    del t
    y.numpy()  # evaluated: y is now a leaf, nothing keeps t's node
    gc.collect()
    assert r() is None

    # never evaluated: deleting every array frees the recorded nodes
    a = x * 3
    b = a @ a
    ra, rb = weakref.ref(a.node), weakref.ref(b.node)
    del a, b
    gc.collect()
    assert ra() is None and rb() is None

    # an in-place write releases the old value once nothing refers to it
    w = lg.asarray(np.zeros(8))
    w.numpy()
    old = weakref.ref(w.node)
    w += 1
    w.numpy()
    gc.collect()
    assert old() is None

    # a view keeps its base's current value alive, and nothing older (a pending base: an
    # evaluated one held by nothing else is written in place, keeping its node)
    base = lg.asarray(np.arange(10.0)) + 0.0
    view = base[::2]
    old = weakref.ref(base.node)
    base[0] = 5.0
    view.numpy()
    gc.collect()
    assert old() is None
    np.testing.assert_array_equal(view.numpy(), [5.0, 2.0, 4.0, 6.0, 8.0])
