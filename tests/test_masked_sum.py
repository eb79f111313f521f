"""Float sums of deferred selections (`masked_sum`, ops/masked_reduce.py): NumPy's bits, no evaluation.

`x[mask].sum()` of a float or complex selection is recorded as one operator that gathers when
it runs, so the program does not evaluate there; its value is NumPy's `x[mask].sum()` bit for
bit (the pairwise order over the gathered elements), NaN and infinities included, for masks
over one or two leading axes, axis None and the masked axis, empty and full masks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from test_masked_select import both, cases, gathered

import lazygraph as lg
from lazygraph.masked import Masked

FLOATS = [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128)]


@settings(max_examples=60, deadline=None)
@given(cases(FLOATS, nan=True))
def test_float_sums_match_numpy(case: tuple) -> None:
    """Sums of selections and of deferred expressions over them, every axis and the masked one."""
    dtype, y, b, m, _ = case

    def prog(xp: Any, y: Any, b: Any, m: Any) -> tuple:
        mask = xp.asarray(m)
        sel = y[mask]
        expr = y[mask] * b[mask] + 1
        return sel.sum(), sel.sum(axis=0), expr.sum(), expr.sum(axis=(0,)), (-sel).sum(axis=-sel.ndim)

    both(prog, y, b, m)


def test_stays_lazy_and_one_evaluation() -> None:
    """The mandelbrot tail: counts, z and the float sum of a selection evaluate together, once."""
    c = lg.asarray(np.linspace(-2, 1, 35).reshape(5, 7) + 0.4j)
    z = lg.zeros_like(c)
    counts = lg.zeros(c.shape, dtype=np.int32)
    for _ in range(8):
        active = lg.abs(z) <= 2.0
        z[active] = z[active] ** 2 + c[active]
        counts[active] += 1
    inside = counts == 8
    e0 = lg.cache.stats()["evaluations"]
    sel = z.real[inside]
    assert isinstance(sel, Masked)
    total = sel.sum()
    assert isinstance(total, lg.Array) and total.node.op.name == "masked_sum"
    assert lg.cache.stats()["evaluations"] == e0
    got = lg.eval(counts, z, total)
    assert lg.cache.stats()["evaluations"] == e0 + 1

    cn = np.linspace(-2, 1, 35).reshape(5, 7) + 0.4j
    zn = np.zeros_like(cn)
    kn = np.zeros(cn.shape, np.int32)
    for _ in range(8):
        a = np.abs(zn) <= 2.0
        zn[a] = zn[a] ** 2 + cn[a]
        kn[a] += 1
    k, zv, tv = (np.asarray(v) for v in got)
    assert np.array_equal(k, kn) and np.allclose(zv, zn, rtol=1e-12, atol=1e-12)
    want = zv.real[k == 8].sum()  # NumPy's sum of the very values lazygraph computed
    assert tv.dtype == want.dtype and tv == want


def test_same_value_as_the_gathered_sum() -> None:
    """Deferred and gathered (deferral off) give the same bits on a long, cancelling sum."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 4)) * 10.0 ** rng.integers(-8, 8, (300, 4))
    m = rng.random(300) < 0.6
    x, mk = lg.asarray(a), lg.asarray(m)
    lazy = (x[mk] * 3).sum(), x[mk].sum(axis=0)
    with gathered():
        eager = (x[mk] * 3).sum(), x[mk].sum(axis=0)
    for d, g, w in zip(lazy, eager, ((a[m] * 3).sum(), a[m].sum(axis=0))):
        assert np.array_equal(d.numpy(), g.numpy()) and np.array_equal(d.numpy(), w)


def test_other_forms_materialize_as_before() -> None:
    """dtype=, keepdims and a trailing axis take the gathered path (NumPy's values and errors)."""
    a = np.arange(24.0).reshape(6, 4)
    m = np.array([True, False, True, True, False, True])
    x, mk = lg.asarray(a), lg.asarray(m)
    np.testing.assert_array_equal(x[mk].sum(axis=1).numpy(), a[m].sum(axis=1))
    np.testing.assert_array_equal(x[mk].sum(keepdims=True).numpy(), a[m].sum(keepdims=True))
    assert x[mk].sum(dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError):
        x[mk].sum(axis=2)


def test_differentiable_selections_keep_the_gather() -> None:
    """A selection combined with a tracked array sums through the gather, so its gradient exists."""
    a = np.linspace(-1.0, 1.0, 12).reshape(6, 2)
    m = np.array([True, False, True, True, False, False])
    w = lg.asarray(np.array([2.0, -3.0]))
    w.requires_grad = True
    x = lg.asarray(a)
    loss = (x[lg.asarray(m)] * w).sum()
    assert loss.node.op.name != "masked_sum"
    (g,) = lg.grad(loss, [w])
    np.testing.assert_allclose(g.numpy(), a[m].sum(axis=0))
