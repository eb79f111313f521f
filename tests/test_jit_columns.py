"""Reductions over a strided axis rendered as column blocks (jit/render_columns.py) against NumPy.

Sums keep NumPy's order (rows one after another per column), so they are compared bit for
bit; every case also checks that the column structure is the one that was built.
"""

from __future__ import annotations

import numpy as np
import pytest
from jit_check import check

import lazygraph as lg
from jit import compile_c, kernel
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule
from ops.settings import SETTINGS

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]


def built_sources(fn, *arrays: np.ndarray) -> tuple[list[np.ndarray], list[str]]:  # noqa: ANN001
    """fn's values through fused kernels, and the C source of every kernel this call built."""
    saved = kernel._kernels
    kernel._kernels = {}
    try:
        with SETTINGS.override(jit_background=False):  # compiled before the call returns
            out = fn(lg, *(lg.asarray(a) for a in arrays))
            out = out if isinstance(out, tuple) else (out,)
            roots = [o.node for o in out]
            got = run_graph(schedule(roots), roots)
        srcs = [v.source for k in kernel._kernels.values() for v in k.variants.values()]
    finally:
        kernel._kernels = saved
    return got, srcs


def columns(src: str) -> bool:
    """Whether a kernel source has the column-block loop."""
    return "lg_nc" in src


def rng_array(shape: tuple[int, ...], dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    """Standard normal values of `dtype`."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(300, 1031), (256, 10), (3, 257), (2, 5)])
def test_column_sums_are_numpys_bits(shape: tuple[int, int], dtype: type) -> None:
    x = rng_array(shape, dtype)
    (got,), srcs = built_sources(lambda F, a: F.sum(a * 2, axis=0), x)
    np.testing.assert_array_equal(got, np.sum(x * 2, axis=0))
    assert any(columns(s) for s in srcs)


def test_relu_gradient_with_bias_gradient() -> None:
    """The MLP's backward pattern: a masked gradient and its sum over the batch, one kernel."""
    a, g = rng_array((256, 1024)), rng_array((256, 1024), seed=1)

    def fn(F, a, g):  # noqa: ANN001, ANN202
        d = F.where(a > 0, g, 0.0 * g)
        return d, F.sum(d, axis=0)

    (d, b), srcs = built_sources(fn, a, g)
    want = np.where(a > 0, g, 0.0 * g)
    np.testing.assert_array_equal(d, want)
    np.testing.assert_array_equal(b, want.sum(axis=0))
    assert any(columns(s) for s in srcs)


def test_outer_kept_loop_and_column_mean_variance() -> None:
    x = rng_array((7, 50, 300), np.float64)
    (m, v), srcs = built_sources(lambda F, a: (F.mean(a, axis=1), F.var(a * 3, axis=1)), x)
    np.testing.assert_array_equal(m, x.mean(axis=1))
    np.testing.assert_allclose(v, (x * 3).var(axis=1), rtol=1e-12)
    assert any(columns(s) for s in srcs)


def test_column_max_min_propagate_nan() -> None:
    x = rng_array((64, 300))
    x[5, 7] = np.nan
    x[60, 299] = np.nan
    (hi, lo), srcs = built_sources(lambda F, a: (F.max(a + 1, axis=0), F.min(a, axis=0)), x)
    np.testing.assert_array_equal(hi, np.max(x + 1, axis=0))
    np.testing.assert_array_equal(lo, np.min(x, axis=0))
    assert any(columns(s) for s in srcs)


def test_softmax_and_centering_over_the_first_axis() -> None:
    """Outputs that vary along the reduced axis: the reduced loop runs again per block."""
    x = rng_array((100, 600))

    def softmax(F, a):  # noqa: ANN001, ANN202
        e = F.exp(a - F.max(a, axis=0, keepdims=True))
        return e / F.sum(e, axis=0, keepdims=True)

    check(softmax, x)
    check(lambda F, a: a - F.mean(a, axis=0, keepdims=True) * 2, x)
    (got,), srcs = built_sources(lambda F, a: F.softmax(a, axis=0), x)
    np.testing.assert_allclose(got, softmax(np, x), rtol=1e-6, atol=1e-12)
    assert any(columns(s) for s in srcs)


def test_contiguous_rows_keep_the_row_structure() -> None:
    x = rng_array((64, 300))
    (got,), srcs = built_sources(lambda F, a: F.sum(a * 2, axis=1), x)
    np.testing.assert_array_equal(got, np.sum(x * 2, axis=1))
    assert srcs and not any(columns(s) for s in srcs)


@pytest.mark.parametrize("shape", [(4, 8, 6, 6), (16, 64, 14, 14)])
def test_stage_stores_an_output_it_computes(shape: tuple[int, ...]) -> None:
    """A conv layer's ReLU gradient and bias gradient: the masked gradient is stored by the
    stage that sums it, with no final pass re-reading the inputs (row structure here)."""
    a, g = rng_array(shape), rng_array(shape, seed=2)

    def fn(F, a, g):  # noqa: ANN001, ANN202
        d = F.where(a > 0, g, 0.0 * g)
        return d, F.sum(d, axis=(0, 2, 3))

    (d, b), srcs = built_sources(fn, a, g)
    want = np.where(a > 0, g, 0.0 * g)
    np.testing.assert_array_equal(d, want)
    np.testing.assert_allclose(b, want.sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    (src,) = srcs
    assert "a0[" not in src[src.rindex("if (lg_sp) acc") :]  # no pass after the sum reads the inputs


@pytest.mark.parametrize("axis", [0, 1])
def test_batch_norm_with_saved_intermediates(axis: int) -> None:
    """A stored stage value (the centred input) read back by the final stage's other outputs:
    over the batch axis of a row-major array (columns) and over rows (the row structure)."""
    x = rng_array((64, 300) if axis == 0 else (300, 64))
    w, b = rng_array((300,), seed=3), rng_array((300,), seed=4)
    w, b = (w, b) if axis == 0 else (w[:, None], b[:, None])

    def fn(F, x, w, b):  # noqa: ANN001, ANN202
        d = x - F.mean(x, axis=axis, keepdims=True)
        v = F.mean(d * d, axis=axis, keepdims=True)
        s = F.sqrt(v + 1e-5)
        y = d / s
        return d, v, s, y, y * w + b

    got, srcs = built_sources(fn, x, w, b)
    for g, e in zip(got, fn(np, x, w, b)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert any(columns(s) for s in srcs) == (axis == 0)
