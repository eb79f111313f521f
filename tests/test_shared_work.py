"""Evaluations share work: a value one evaluation computed, still reachable from a live array,
is not recomputed by a later evaluation that needs it (differential against NumPy)."""

from __future__ import annotations

import numpy as np

import lazygraph as lg
from lazygraph import debug


def _kernels(fn) -> tuple[int, object]:
    """Kernels run (steps) while calling fn; its result."""
    before = debug.evaluation_stats()["kernels"]
    out = fn()
    return debug.evaluation_stats()["kernels"] - before, out


def _chain(ns, x, n: int = 30):
    t = x
    for _ in range(n):
        t = t * 1.01 + 0.5
    return t


def test_second_output_reuses_the_chain_the_first_computed() -> None:
    """Two reductions of one live chain: the second runs only its own steps."""
    data = np.random.default_rng(3).normal(size=(64, 64))
    t_np = _chain(np, data)
    t = _chain(lg, lg.asarray(data))
    u, v = t.sum(), (t * 2.0).max()
    first, fu = _kernels(lambda: float(u))
    second, fv = _kernels(lambda: float(v))
    assert fu == float(t_np.sum())
    assert fv == float((t_np * 2.0).max())
    assert first >= 1
    assert t.node.buffer is not None  # the live chain's value was kept by the first evaluation
    assert not t.node.inputs  # as a leaf: the second evaluation cannot walk the chain again
    assert second <= 2  # `* 2.0` and the max, fused or (LAZYGRAPH_JIT=0) not; the chain is 60 steps


def test_mandelbrot_outputs_share_the_iteration_chain() -> None:
    """The masked z**2 + c loop: every output after the first runs a handful of steps."""

    def mandel(ns):
        x = ns.linspace(-2.2, 0.8, 24)
        y = ns.linspace(-1.2, 1.2, 16)
        c = x[None, :] + 1j * y[:, None]
        z = ns.zeros_like(c)
        counts = ns.zeros(c.shape, dtype=np.int32)
        for _ in range(20):
            active = ns.abs(z) <= 2.0
            z[active] = z[active] ** 2 + c[active]
            counts[active] += 1
        inside = counts == 20
        return counts, ns.abs(ns.where(inside, z, 0)), z.real[inside].sum()

    ref = mandel(np)
    outs = mandel(lg)
    first, counts = _kernels(lambda: np.asarray(outs[0]))
    np.testing.assert_array_equal(counts, ref[0])
    assert first >= 1
    for out, want in zip(outs[1:], ref[1:]):
        later, got = _kernels(lambda out=out: np.asarray(out))
        np.testing.assert_array_equal(got, want)
        assert later <= 8, later


def test_unreachable_intermediate_is_not_kept() -> None:
    """Sharing keeps only what a live array reaches: a dropped chain's values are released."""
    data = np.arange(12.0).reshape(3, 4)
    t = _chain(lg, lg.asarray(data), 5)
    u = t.sum()
    del t
    assert float(u) == float(_chain(np, data, 5).sum())
    # u's history was released: it is a leaf now, so a new use of it runs one step
    n, got = _kernels(lambda: float(u * 2.0))
    assert got == float(_chain(np, data, 5).sum()) * 2.0
    assert n <= 1
